// Dropout on CPU with masks from a counter-based generator, fused with the 1 / (1 − p) scaling.
//
// The generator is Philox4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011): a key (k0, k1) and a counter (c0, c1, c2, c3) of 32-bit words go
// through 10 rounds of
//   (c0, c1, c2, c3) ← (hi(M1·c2) ⊕ c1 ⊕ k0, lo(M1·c2), hi(M0·c0) ⊕ c3 ⊕ k1, lo(M0·c0)),
// the key bumped by (W0, W1) between rounds. Word j of the output for counter (g, 0) is word
// 4g + j of the stream; the key is the 64-bit seed (k0 its low half). This is the stream of
// ATen's Philox4_32(seed, 0, 0).
//
// Element i of a contiguous tensor is kept iff stream word i ≥ T, T = round(p · 2³²), so
// P(keep) = 1 − T / 2³² (within 2⁻³³ of 1 − p), every element independent. A kept element is
// multiplied by 1 / (1 − p), a dropped one by 0 (so a NaN stays NaN, as in PyTorch's dropout).
// The same seed gives the same mask: the backward multiplies the gradient by it again.
// Dropout of ReLU(x) (relu_dropout) needs no mask in its backward: its output is > 0 exactly
// where the gradient passes, scaled.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <type_traits>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "lanes.h"

namespace {

constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // key increments (golden ratio, √3 − 1)
constexpr int64_t LANES = 32;                          // counters per block of dropout, computed side by side
constexpr int64_t BLOCK = 4 * LANES;                   // elements per block
constexpr int64_t TILE_LANES = 16;                     // counters per block of stream_words: one tile of attention.cpp's masks
constexpr uint32_t SIGN = 0x80000000u;

// Stream words 4·first … 4·first + 4·COUNTERS − 1 (counters first … first + COUNTERS − 1), in
// stream order: words[4·l + j] is word j of counter first + l. More counters side by side hide
// more of each round's latency (32: dropout 1.15x as fast as 16 on AVX-512; 64 spill registers).
#ifdef __AVX512F__
// Eight counters per register, one per 64-bit lane holding a 32-bit word in its low half, as in
// the AVX2 version below: half the instructions.
template <int64_t COUNTERS>
void philox_block(uint64_t first, uint64_t seed, uint32_t* __restrict words) {
  constexpr int64_t REGISTERS = COUNTERS / 8;
  __m512i c0[REGISTERS], c1[REGISTERS], c2[REGISTERS], c3[REGISTERS];
  for (int64_t r = 0; r < REGISTERS; ++r) {
    const __m512i counters = _mm512_add_epi64(_mm512_set1_epi64(first + 8 * r), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
    c0[r] = counters;
    c1[r] = _mm512_srli_epi64(counters, 32);
    c2[r] = _mm512_setzero_si512();
    c3[r] = _mm512_setzero_si512();
  }
  const __m512i multiplier0 = _mm512_set1_epi64(M0), multiplier1 = _mm512_set1_epi64(M1);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi64(k0), key1 = _mm512_set1_epi64(k1);
    for (int64_t r = 0; r < REGISTERS; ++r) {
      const __m512i product0 = _mm512_mul_epu32(c0[r], multiplier0);
      const __m512i product1 = _mm512_mul_epu32(c2[r], multiplier1);
      c0[r] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(product1, 32), c1[r], key0, 0x96);  // a ⊕ b ⊕ c
      c1[r] = product1;
      c2[r] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(product0, 32), c3[r], key1, 0x96);
      c3[r] = product0;
    }
    k0 += W0;
    k1 += W1;
  }
  // Within each 128-bit lane, words (w0, w1, w2, w3) of its two counters; then the lanes in counter order.
  const __m512i first_half = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), second_half = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int64_t r = 0; r < REGISTERS; ++r) {
    const __m512i low = _mm512_mask_blend_epi32(0xAAAA, c0[r], _mm512_slli_epi64(c1[r], 32));   // (w0, w1) of each counter
    const __m512i high = _mm512_mask_blend_epi32(0xAAAA, c2[r], _mm512_slli_epi64(c3[r], 32));  // (w2, w3)
    const __m512i even = _mm512_unpacklo_epi64(low, high);  // counters 0, 2, 4, 6
    const __m512i odd = _mm512_unpackhi_epi64(low, high);   // counters 1, 3, 5, 7
    uint32_t* out = words + 32 * r;
    _mm512_storeu_si512(out, _mm512_permutex2var_epi64(even, first_half, odd));
    _mm512_storeu_si512(out + 16, _mm512_permutex2var_epi64(even, second_half, odd));
  }
}
#elif defined(__AVX2__)
// Four counters per register, one per 64-bit lane holding a 32-bit word in its low half; M·c
// is then one widening multiply (vpmuludq), which reads only the low halves, so the high halves
// may hold anything until the words are stored.
template <int64_t COUNTERS>
void philox_block(uint64_t first, uint64_t seed, uint32_t* __restrict words) {
  constexpr int64_t REGISTERS = COUNTERS / 4;
  __m256i c0[REGISTERS], c1[REGISTERS], c2[REGISTERS], c3[REGISTERS];
  for (int64_t r = 0; r < REGISTERS; ++r) {
    const uint64_t g = first + 4 * r;
    const __m256i counters = _mm256_set_epi64x(g + 3, g + 2, g + 1, g);
    c0[r] = counters;
    c1[r] = _mm256_srli_epi64(counters, 32);
    c2[r] = _mm256_setzero_si256();
    c3[r] = _mm256_setzero_si256();
  }
  const __m256i multiplier0 = _mm256_set1_epi64x(M0), multiplier1 = _mm256_set1_epi64x(M1);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m256i key0 = _mm256_set1_epi64x(k0), key1 = _mm256_set1_epi64x(k1);
    for (int64_t r = 0; r < REGISTERS; ++r) {
      const __m256i product0 = _mm256_mul_epu32(c0[r], multiplier0);
      const __m256i product1 = _mm256_mul_epu32(c2[r], multiplier1);
      c0[r] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(product1, 32), c1[r]), key0);
      c1[r] = product1;
      c2[r] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(product0, 32), c3[r]), key1);
      c3[r] = product0;
    }
    k0 += W0;
    k1 += W1;
  }
  for (int64_t r = 0; r < REGISTERS; ++r) {
    // Lanes (w0, w1) and (w2, w3) of each counter side by side, then the counters in order.
    const __m256i low = _mm256_or_si256(_mm256_and_si256(c0[r], _mm256_set1_epi64x(0xFFFFFFFF)), _mm256_slli_epi64(c1[r], 32));
    const __m256i high = _mm256_or_si256(_mm256_and_si256(c2[r], _mm256_set1_epi64x(0xFFFFFFFF)), _mm256_slli_epi64(c3[r], 32));
    const __m256i first_two = _mm256_unpacklo_epi64(low, high);   // counters 0, 2
    const __m256i second_two = _mm256_unpackhi_epi64(low, high);  // counters 1, 3
    uint32_t* out = words + 16 * r;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute2x128_si256(first_two, second_two, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), _mm256_permute2x128_si256(first_two, second_two, 0x31));
  }
}
#else
template <int64_t COUNTERS>
void philox_block(uint64_t first, uint64_t seed, uint32_t* __restrict words) {
  for (int64_t l = 0; l < COUNTERS; ++l) {
    uint32_t c0 = static_cast<uint32_t>(first + l), c1 = static_cast<uint32_t>((first + l) >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const uint64_t product0 = static_cast<uint64_t>(M0) * c0, product1 = static_cast<uint64_t>(M1) * c2;
      c0 = static_cast<uint32_t>(product1 >> 32) ^ c1 ^ k0;
      c1 = static_cast<uint32_t>(product1);
      c2 = static_cast<uint32_t>(product0 >> 32) ^ c3 ^ k1;
      c3 = static_cast<uint32_t>(product0);
      k0 += W0;
      k1 += W1;
    }
    words[4 * l] = c0;
    words[4 * l + 1] = c1;
    words[4 * l + 2] = c2;
    words[4 * l + 3] = c3;
  }
}
#endif


}  // namespace

namespace stacklm_dropout {

// round(p · 2³²), saturated: a word is kept iff it is ≥ this.
uint32_t threshold(double p) {
  const double scaled = std::nearbyint(p * 4294967296.0);
  return static_cast<uint32_t>(std::min(scaled, 4294967295.0));
}

// Words first_word … first_word + count − 1 of the stream keyed by seed (also used by attention.cpp):
// whole blocks of LANES counters, then of TILE_LANES, straight into words where they start on a
// counter, the rest through a block of its own.
void stream_words(int64_t first_word, int64_t count, uint64_t seed, uint32_t* words) {
  constexpr int64_t tile_words = 4 * TILE_LANES;
  uint32_t block_words[tile_words];
  for (int64_t written = 0; written < count;) {
    const int64_t word = first_word + written, counter = word / 4, skip = word - 4 * counter, left = count - written;
    if (skip == 0 && left >= BLOCK) {
      philox_block<LANES>(static_cast<uint64_t>(counter), seed, words + written);
      written += BLOCK;
    } else if (skip == 0 && left >= tile_words) {
      philox_block<TILE_LANES>(static_cast<uint64_t>(counter), seed, words + written);
      written += tile_words;
    } else {
      philox_block<TILE_LANES>(static_cast<uint64_t>(counter), seed, block_words);
      const int64_t taken = std::min(tile_words - skip, left);
      std::copy(block_words + skip, block_words + skip + taken, words + written);
      written += taken;
    }
  }
}

}  // namespace stacklm_dropout

namespace {

using stacklm_dropout::threshold;

// What is dropped: input, residual + input, or ReLU(input).
enum class Mode { plain, add, relu };

// input · factor, plus residual (add), or with max(input, 0) (relu).
template <Mode mode, typename scalar_t>
scalar_t dropped(scalar_t input, scalar_t residual, scalar_t factor) {
  if constexpr (mode == Mode::add) {
    return residual + input * factor;
  } else if constexpr (mode == Mode::relu) {
    return std::max(input, scalar_t(0)) * factor;
  } else {
    return input * factor;
  }
}

// out[j] = dropped(input[j], residual[j], factors[j]) for j < count; residual is read only by add.
template <Mode mode, typename scalar_t>
void drop_into(
    const scalar_t* __restrict input, const scalar_t* __restrict residual, const scalar_t* __restrict factors, scalar_t* __restrict out, int64_t count) {
  for (int64_t j = 0; j < count; ++j) out[j] = dropped<mode>(input[j], mode == Mode::add ? residual[j] : scalar_t(0), factors[j]);
}

// values[j] = dropped(values[j], residual[j], factors[j]): drop_into over its input (a loop of its
// own: with out and input maybe one array, GCC runs drop_into's loop a scalar at a time).
template <Mode mode, typename scalar_t>
void drop_over(scalar_t* __restrict values, const scalar_t* __restrict residual, const scalar_t* __restrict factors, int64_t count) {
  for (int64_t j = 0; j < count; ++j) values[j] = dropped<mode>(values[j], mode == Mode::add ? residual[j] : scalar_t(0), factors[j]);
}

// out[i] = input[i] · mask_i / (1 − p), plus residual[i] (add), or with max(input[i], 0) (relu),
// for the elements of one block; out may be input; keep (mask_i as 0 or 1) written where it is given.
template <Mode mode, typename scalar_t>
void apply_block(
    int64_t block, uint64_t seed, int32_t signed_cut, scalar_t scale, const scalar_t* input, const scalar_t* residual, scalar_t* out,
    uint8_t* __restrict keep, int64_t count) {
  uint32_t words[BLOCK];
  scalar_t factors[BLOCK];
  philox_block<LANES>(static_cast<uint64_t>(block) * LANES, seed, words);
  // word ≥ T as a signed comparison (AVX2 compares signed 32-bit integers only).
  for (int64_t j = 0; j < BLOCK; ++j) factors[j] = static_cast<int32_t>(words[j] ^ SIGN) >= signed_cut ? scale : scalar_t(0);
  if (out == input) {
    drop_over<mode>(out, residual, factors, count);
  } else {
    drop_into<mode>(input, residual, factors, out, count);
  }
  if (keep != nullptr) {
    for (int64_t j = 0; j < count; ++j) keep[j] = factors[j] != scalar_t(0);
  }
}

template <Mode mode, typename scalar_t>
void apply(const scalar_t* input, const scalar_t* residual, scalar_t* out, int64_t size, double p, uint64_t seed, uint8_t* keep) {
  const int32_t signed_cut = static_cast<int32_t>(threshold(p) ^ SIGN);
  const scalar_t scale = static_cast<scalar_t>(1.0 / (1.0 - p));
  at::parallel_for(0, (size + BLOCK - 1) / BLOCK, 256, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t start = block * BLOCK;
      apply_block<mode, scalar_t>(
          block, seed, signed_cut, scale, input + start, residual == nullptr ? nullptr : residual + start, out + start,
          keep == nullptr ? nullptr : keep + start, std::min(BLOCK, size - start));
    }
  });
}

// The mode's dropout of input (plain, residual + Dropout(input), Dropout(ReLU(input))) into out,
// a contiguous tensor of input's shape and dtype (input itself to write over it), the mask as 0/1
// bytes into keep where it is given: the checks and the kernel of every op below that draws a mask.
template <Mode mode>
void drop(const char* name, const at::Tensor& input, const at::Tensor* residual, double p, int64_t seed, const at::Tensor& out, uint8_t* keep) {
  TORCH_CHECK(input.is_cpu() && input.is_contiguous(), name, ": a contiguous CPU tensor");
  TORCH_CHECK(residual == nullptr || (residual->is_contiguous() && residual->sizes() == input.sizes() && residual->scalar_type() == input.scalar_type()),
              name, ": the residual must be contiguous, of the input's shape and dtype");
  TORCH_CHECK(p >= 0 && p < 1, name, ": p must lie in [0, 1)");
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "dropout", [&] {
    apply<mode, scalar_t>(
        input.data_ptr<scalar_t>(), residual == nullptr ? nullptr : residual->data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), input.numel(), p,
        static_cast<uint64_t>(seed), keep);
  });
}

at::Tensor dropout(const at::Tensor& input, double p, int64_t seed) {
  at::Tensor out = at::empty_like(input);
  drop<Mode::plain>("dropout", input, nullptr, p, seed, out, nullptr);
  return out;
}

at::Tensor dropout_add(const at::Tensor& residual, const at::Tensor& input, double p, int64_t seed) {
  at::Tensor out = at::empty_like(input);
  drop<Mode::add>("dropout_add", input, &residual, p, seed, out, nullptr);
  return out;
}

// Dropout(ReLU(input)), the mask of dropout(input, p, seed).
at::Tensor relu_dropout(const at::Tensor& input, double p, int64_t seed) {
  at::Tensor out = at::empty_like(input);
  drop<Mode::relu>("relu_dropout", input, nullptr, p, seed, out, nullptr);
  return out;
}

// gi[i] = g[i] · scale where o[i] > 0, else 0, for i < size (gi may be g).
template <typename scalar_t>
void pass_positive(const scalar_t* g, const scalar_t* o, scalar_t* gi, int64_t size, scalar_t scale) {
  at::parallel_for(0, size, 16384, [=](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) gi[i] = g[i] * (o[i] > scalar_t(0) ? scale : scalar_t(0));
  });
}

// The gradient of relu_dropout's input from its output into grad_input (grad itself to write over
// it): grad / (1 − p) where the output is > 0 (input > 0 and kept), else 0; no mask to draw again.
void pass_positive(const at::Tensor& grad, const at::Tensor& output, double p, const at::Tensor& grad_input) {
  TORCH_CHECK(grad.is_contiguous() && output.is_contiguous() && grad.sizes() == output.sizes(), "relu_dropout_backward: contiguous tensors of one shape");
  AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "relu_dropout_backward", [&] {
    pass_positive<scalar_t>(
        grad.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), grad_input.data_ptr<scalar_t>(), grad.numel(), static_cast<scalar_t>(1.0 / (1.0 - p)));
  });
}

at::Tensor relu_dropout_backward(const at::Tensor& grad, const at::Tensor& output, double p) {
  at::Tensor grad_input = at::empty_like(grad);
  pass_positive(grad, output, p, grad_input);
  return grad_input;
}

// The layer norm below runs on explicit vectors of V elements, V rows at a time: a row's mean,
// variance and their gradients are each a chain of dependent sums (and a square root) that one
// row alone leaves waiting on latency; V rows' chains run side by side and are summed across
// lanes together, into one vector of V rows.
using stacklm_lanes::Lanes;
using stacklm_lanes::load;
using stacklm_lanes::store;

constexpr int64_t V = stacklm_lanes::LANE_COUNT;

template <typename scalar_t>
scalar_t lane_sum(typename Lanes<scalar_t>::type lanes) {
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// The lane sums of V vectors: lane r of the result is Σ_l rows[r][l].
template <typename scalar_t>
typename Lanes<scalar_t>::type transpose_sum(const typename Lanes<scalar_t>::type* rows) {
  static_assert(V == 8, "transpose_sum adds 8 lanes");
  using Vector = typename Lanes<scalar_t>::type;
  auto pairs = [](Vector a, Vector b) {  // lanes (a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7)
    return __builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14) + __builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15);
  };
  const Vector low = pairs(pairs(rows[0], rows[1]), pairs(rows[2], rows[3]));   // rows 0-3: halves 0-3, then 4-7
  const Vector high = pairs(pairs(rows[4], rows[5]), pairs(rows[6], rows[7]));  // rows 4-7
  return __builtin_shufflevector(low, high, 0, 1, 2, 3, 8, 9, 10, 11) + __builtin_shufflevector(low, high, 4, 5, 6, 7, 12, 13, 14, 15);
}

// The mask bytes keep[0 … V − 1] as 0 or scale.
template <typename scalar_t>
typename Lanes<scalar_t>::type kept_factors(const uint8_t* keep, scalar_t scale) {
#ifdef __AVX2__
  if constexpr (std::is_same_v<scalar_t, float>) {  // one widening load and one conversion (GCC converts vectors of bytes a lane at a time)
    const __m256 ones = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(keep))));
    typename Lanes<scalar_t>::type lanes;
    std::memcpy(&lanes, &ones, sizeof lanes);
    return lanes * scale;
  }
#endif
  scalar_t lanes[V];
  for (int64_t l = 0; l < V; ++l) lanes[l] = keep[l] ? scale : scalar_t(0);
  return load(lanes);
}

// Layer norm of each row of x (rows × width): normed = (x − μ)·ρ·weight + bias, ρ = 1/√(σ² + eps), μ
// and σ² the row's mean and (biased) variance, kept for the backward.
template <typename scalar_t>
void normalize_rows(
    const scalar_t* __restrict x, const scalar_t* __restrict weight, const scalar_t* __restrict bias, scalar_t* __restrict normed,
    scalar_t* __restrict mean, scalar_t* __restrict rstd, int64_t rows, int64_t width, double eps) {
  using Vector = typename Lanes<scalar_t>::type;
  const int64_t whole = width / V * V;  // columns in whole vectors; the rest one by one
  at::parallel_for(0, rows, 64, [=](int64_t begin, int64_t end) {
    int64_t row = begin;
    for (; row + V <= end; row += V) {
      const scalar_t* in = x + row * width;
      scalar_t* out = normed + row * width;
      Vector lanes[V];
      for (int64_t r = 0; r < V; ++r) lanes[r] = Vector{};
      for (int64_t j = 0; j < whole; j += V) {
        for (int64_t r = 0; r < V; ++r) lanes[r] += load(in + r * width + j);
      }
      scalar_t tails[V] = {};  // the columns past the whole vectors
      for (int64_t r = 0; r < V; ++r) {
        for (int64_t j = whole; j < width; ++j) tails[r] += in[r * width + j];
      }
      const Vector mu = (transpose_sum<scalar_t>(lanes) + load(tails)) / static_cast<scalar_t>(width);
      for (int64_t r = 0; r < V; ++r) lanes[r] = Vector{};
      for (int64_t j = 0; j < whole; j += V) {
        for (int64_t r = 0; r < V; ++r) {
          const Vector deviation = load(in + r * width + j) - mu[r];
          lanes[r] += deviation * deviation;
        }
      }
      for (int64_t r = 0; r < V; ++r) {
        tails[r] = 0;
        for (int64_t j = whole; j < width; ++j) tails[r] += (in[r * width + j] - mu[r]) * (in[r * width + j] - mu[r]);
      }
      const Vector squares = transpose_sum<scalar_t>(lanes) + load(tails);
      double inverse_roots[V];
#pragma omp simd
      for (int64_t r = 0; r < V; ++r) inverse_roots[r] = 1.0 / std::sqrt(static_cast<double>(squares[r]) / static_cast<double>(width) + eps);
      for (int64_t r = 0; r < V; ++r) {
        const scalar_t rho = static_cast<scalar_t>(inverse_roots[r]);
        mean[row + r] = mu[r];
        rstd[row + r] = rho;
        const scalar_t* in_r = in + r * width;
        scalar_t* out_r = out + r * width;
        for (int64_t j = 0; j < whole; j += V) store(out_r + j, (load(in_r + j) - mu[r]) * rho * load(weight + j) + load(bias + j));
        for (int64_t j = whole; j < width; ++j) out_r[j] = (in_r[j] - mu[r]) * rho * weight[j] + bias[j];
      }
    }
    for (; row < end; ++row) {  // the last rows one at a time
      const scalar_t* in = x + row * width;
      scalar_t* out = normed + row * width;
      Vector sums{};
      for (int64_t j = 0; j < whole; j += V) sums += load(in + j);
      scalar_t total = lane_sum<scalar_t>(sums);
      for (int64_t j = whole; j < width; ++j) total += in[j];
      const scalar_t mu = total / static_cast<scalar_t>(width);
      Vector squared{};
      for (int64_t j = 0; j < whole; j += V) {
        const Vector deviation = load(in + j) - mu;
        squared += deviation * deviation;
      }
      scalar_t squares = lane_sum<scalar_t>(squared);
      for (int64_t j = whole; j < width; ++j) squares += (in[j] - mu) * (in[j] - mu);
      const scalar_t rho = static_cast<scalar_t>(1.0 / std::sqrt(static_cast<double>(squares) / static_cast<double>(width) + eps));
      mean[row] = mu;
      rstd[row] = rho;
      for (int64_t j = 0; j < whole; j += V) store(out + j, (load(in + j) - mu) * rho * load(weight + j) + load(bias + j));
      for (int64_t j = whole; j < width; ++j) out[j] = (in[j] - mu) * rho * weight[j] + bias[j];
    }
  });
}

// The backward of dropout_add_norm for rows begin … end − 1, adding Σ dLN · x̂ and Σ dLN into grad_weight and grad_bias:
//   dx̂ = dLN · weight,   ds = ρ (dx̂ − mean(dx̂) − x̂ · mean(dx̂ · x̂)) + (the gradient of s),   x̂ = (s − μ) ρ,
//   d residual = ds,   d input = ds · mask / (1 − p),   d weight = Σ_rows dLN · x̂,   d bias = Σ_rows dLN.
// grad_sum may be grad_total and grad_input grad_normed: a row's elements are all read before it writes any.
template <typename scalar_t>
void norm_backward_rows(
    int64_t begin, int64_t end, int64_t width, const scalar_t* grad_total, const scalar_t* grad_normed, const scalar_t* total,
    const scalar_t* __restrict weight, const scalar_t* mean, const scalar_t* rstd, const uint8_t* keep, scalar_t scale,
    scalar_t* grad_sum, scalar_t* grad_input, scalar_t* __restrict grad_weight, scalar_t* __restrict grad_bias) {
  using Vector = typename Lanes<scalar_t>::type;
  const int64_t whole = width / V * V;  // columns in whole vectors; the rest one by one
  const scalar_t inverse_width = scalar_t(1) / static_cast<scalar_t>(width);
  int64_t row = begin;
  for (; row + V <= end; row += V) {
    const int64_t offset = row * width;
    const scalar_t* __restrict s = total + offset;
    const scalar_t* g = grad_normed + offset;
    const Vector mu = load(mean + row), rho = load(rstd + row);
    Vector grad_means[V], grad_dots[V];
    for (int64_t r = 0; r < V; ++r) grad_means[r] = grad_dots[r] = Vector{};
    for (int64_t j = 0; j < whole; j += V) {
      const Vector w = load(weight + j);
      Vector weight_sum{}, bias_sum{};
      for (int64_t r = 0; r < V; ++r) {
        const Vector normalized = (load(s + r * width + j) - mu[r]) * rho[r], grad = load(g + r * width + j), grad_normalized = grad * w;
        grad_means[r] += grad_normalized;
        grad_dots[r] += grad_normalized * normalized;
        weight_sum += grad * normalized;
        bias_sum += grad;
      }
      store(grad_weight + j, load(grad_weight + j) + weight_sum);
      store(grad_bias + j, load(grad_bias + j) + bias_sum);
    }
    scalar_t tail_means[V] = {}, tail_dots[V] = {};  // the columns past the whole vectors
    for (int64_t r = 0; r < V; ++r) {
      for (int64_t j = whole; j < width; ++j) {
        const scalar_t normalized = (s[r * width + j] - mu[r]) * rho[r], grad = g[r * width + j], grad_normalized = grad * weight[j];
        tail_means[r] += grad_normalized;
        tail_dots[r] += grad_normalized * normalized;
        grad_weight[j] += grad * normalized;
        grad_bias[j] += grad;
      }
    }
    const Vector grad_mean = (transpose_sum<scalar_t>(grad_means) + load(tail_means)) * inverse_width;
    const Vector grad_dot = (transpose_sum<scalar_t>(grad_dots) + load(tail_dots)) * inverse_width;
    for (int64_t r = 0; r < V; ++r) {
      const int64_t at = offset + r * width;
      const scalar_t* __restrict s_r = total + at;
      const scalar_t* g_r = grad_normed + at;
      scalar_t* out_sum = grad_sum + at;
      scalar_t* out_input = grad_input + at;
      const uint8_t* __restrict kept = keep + at;
      const scalar_t* incoming = grad_total == nullptr ? nullptr : grad_total + at;
      const scalar_t mu_r = mu[r], rho_r = rho[r], mean_r = grad_mean[r], dot_r = grad_dot[r];
      for (int64_t j = 0; j < whole; j += V) {
        Vector value = rho_r * (load(g_r + j) * load(weight + j) - mean_r - (load(s_r + j) - mu_r) * rho_r * dot_r);
        if (incoming != nullptr) value += load(incoming + j);
        store(out_sum + j, value);
        store(out_input + j, value * kept_factors(kept + j, scale));
      }
      for (int64_t j = whole; j < width; ++j) {
        const scalar_t value = rho_r * (g_r[j] * weight[j] - mean_r - (s_r[j] - mu_r) * rho_r * dot_r) + (incoming == nullptr ? scalar_t(0) : incoming[j]);
        out_sum[j] = value;
        out_input[j] = value * (kept[j] ? scale : scalar_t(0));
      }
    }
  }
  for (; row < end; ++row) {  // the last rows one at a time
    const int64_t offset = row * width;
    const scalar_t* __restrict s = total + offset;
    const scalar_t* g = grad_normed + offset;
    const scalar_t mu = mean[row], rho = rstd[row];
    Vector grad_means{}, grad_dots{};
    for (int64_t j = 0; j < whole; j += V) {
      const Vector normalized = (load(s + j) - mu) * rho, grad = load(g + j), grad_normalized = grad * load(weight + j);
      grad_means += grad_normalized;
      grad_dots += grad_normalized * normalized;
      store(grad_weight + j, load(grad_weight + j) + grad * normalized);
      store(grad_bias + j, load(grad_bias + j) + grad);
    }
    scalar_t grad_mean = lane_sum<scalar_t>(grad_means), grad_dot = lane_sum<scalar_t>(grad_dots);
    for (int64_t j = whole; j < width; ++j) {
      const scalar_t normalized = (s[j] - mu) * rho, grad_normalized = g[j] * weight[j];
      grad_mean += grad_normalized;
      grad_dot += grad_normalized * normalized;
      grad_weight[j] += g[j] * normalized;
      grad_bias[j] += g[j];
    }
    grad_mean *= inverse_width;
    grad_dot *= inverse_width;
    scalar_t* out_sum = grad_sum + offset;
    scalar_t* out_input = grad_input + offset;
    const uint8_t* __restrict kept = keep + offset;
    const scalar_t* incoming = grad_total == nullptr ? nullptr : grad_total + offset;
    for (int64_t j = 0; j < whole; j += V) {
      Vector value = rho * (load(g + j) * load(weight + j) - grad_mean - (load(s + j) - mu) * rho * grad_dot);
      if (incoming != nullptr) value += load(incoming + j);
      store(out_sum + j, value);
      store(out_input + j, value * kept_factors(kept + j, scale));
    }
    for (int64_t j = whole; j < width; ++j) {
      const scalar_t value = rho * (g[j] * weight[j] - grad_mean - (s[j] - mu) * rho * grad_dot) + (incoming == nullptr ? scalar_t(0) : incoming[j]);
      out_sum[j] = value;
      out_input[j] = value * (kept[j] ? scale : scalar_t(0));
    }
  }
}

}  // namespace

// What attention.cpp's layer_forward and layer_backward call directly (no dispatcher), each with
// its outputs' storage given: memory the caller wrote moments ago, still in the caches, where a
// fresh tensor is memory last used far back in the step.
namespace stacklm_dropout {

// s = residual + Dropout(input) (Dropout(input) without a residual) into total (input itself to
// write over it) and LN(s) over the last dimension: (LN(s), μ, ρ, keep), keep the mask as 0/1 bytes
// (the mask of dropout_add).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> dropout_add_norm_into(
    const at::Tensor* residual, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps, double p, int64_t seed,
    const at::Tensor& total) {
  TORCH_CHECK(input.dim() >= 1 && total.is_contiguous() && total.sizes() == input.sizes() && total.scalar_type() == input.scalar_type(),
              "dropout_add_norm: the sum's storage contiguous, of the input's shape and dtype");
  const int64_t width = input.size(-1);
  TORCH_CHECK(weight.is_contiguous() && bias.is_contiguous() && weight.numel() == width && bias.numel() == width &&
                  weight.scalar_type() == input.scalar_type() && bias.scalar_type() == input.scalar_type(),
              "dropout_add_norm: weight and bias of the last dimension's size and the input's dtype");
  at::Tensor keep = at::empty(input.sizes(), input.options().dtype(at::kByte));
  if (residual != nullptr) {
    drop<Mode::add>("dropout_add_norm", input, residual, p, seed, total, keep.data_ptr<uint8_t>());
  } else {
    drop<Mode::plain>("dropout_add_norm", input, nullptr, p, seed, total, keep.data_ptr<uint8_t>());
  }
  const int64_t rows = width == 0 ? 0 : input.numel() / width;
  at::Tensor normed = at::empty_like(input), mean = at::empty({rows}, input.options()), rstd = at::empty({rows}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "dropout_add_norm", [&] {
    normalize_rows<scalar_t>(
        total.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), normed.data_ptr<scalar_t>(), mean.data_ptr<scalar_t>(),
        rstd.data_ptr<scalar_t>(), rows, width, eps);
  });
  return {normed, mean, rstd, keep};
}

// The backward of dropout_add_norm from the gradients of s (none where only LN reads s) and of
// LN(s): d residual into grad_sum, d input into grad_input (either may be the storage of a
// gradient it is computed from: grad_sum grad_total's, grad_input grad_normed's), and (d weight,
// d bias), the sums over rows in per-thread partial sums.
std::tuple<at::Tensor, at::Tensor> dropout_add_norm_backward_into(
    const at::Tensor* grad_total, const at::Tensor& grad_normed, const at::Tensor& total, const at::Tensor& weight, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& keep, double p, const at::Tensor& grad_sum, const at::Tensor& grad_input) {
  TORCH_CHECK(grad_normed.is_contiguous() && total.is_contiguous() && keep.is_contiguous() && grad_sum.is_contiguous() && grad_input.is_contiguous() &&
                  grad_normed.sizes() == total.sizes() && keep.sizes() == total.sizes() && grad_sum.sizes() == total.sizes() &&
                  grad_input.sizes() == total.sizes(),
              "dropout_add_norm_backward: contiguous tensors of one shape");
  TORCH_CHECK(grad_total == nullptr || (grad_total->is_contiguous() && grad_total->sizes() == total.sizes()),
              "dropout_add_norm_backward: the gradient of the sum must be contiguous, of its shape");
  const int64_t width = total.size(-1), rows = width == 0 ? 0 : total.numel() / width;
  at::Tensor partial = at::zeros({at::get_num_threads(), 2, width}, total.options());  // per thread: Σ dLN · x̂, Σ dLN
  AT_DISPATCH_FLOATING_TYPES(total.scalar_type(), "dropout_add_norm_backward", [&] {
    const scalar_t* grad_total_data = grad_total != nullptr ? grad_total->data_ptr<scalar_t>() : nullptr;
    scalar_t* partial_data = partial.data_ptr<scalar_t>();
    const scalar_t scale = static_cast<scalar_t>(1.0 / (1.0 - p));
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      scalar_t* grad_weight = partial_data + at::get_thread_num() * 2 * width;
      norm_backward_rows<scalar_t>(
          begin, end, width, grad_total_data, grad_normed.data_ptr<scalar_t>(), total.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(),
          mean.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>(), keep.data_ptr<uint8_t>(), scale, grad_sum.data_ptr<scalar_t>(),
          grad_input.data_ptr<scalar_t>(), grad_weight, grad_weight + width);
    });
  });
  const at::Tensor sums = partial.size(0) == 1 ? partial[0] : partial.sum(0);  // (2, width)
  return {sums[0], sums[1]};
}

// Dropout(ReLU(input)) written over input.
void relu_dropout_(const at::Tensor& input, double p, int64_t seed) { drop<Mode::relu>("relu_dropout", input, nullptr, p, seed, input, nullptr); }

// relu_dropout's backward written over grad.
void relu_dropout_backward_(const at::Tensor& grad, const at::Tensor& output, double p) { pass_positive(grad, output, p, grad); }

// The ops: fresh outputs.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> dropout_add_norm(
    const std::optional<at::Tensor>& residual, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
    double p, int64_t seed) {
  at::Tensor total = at::empty_like(input);
  auto [normed, mean, rstd, keep] = dropout_add_norm_into(residual.has_value() ? &*residual : nullptr, input, weight, bias, eps, p, seed, total);
  return {total, normed, mean, rstd, keep};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> dropout_add_norm_backward(
    const std::optional<at::Tensor>& grad_total, const at::Tensor& grad_normed, const at::Tensor& total, const at::Tensor& weight,
    const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& keep, double p) {
  at::Tensor grad_sum = at::empty_like(total), grad_input = at::empty_like(total);
  auto [grad_weight, grad_bias] = dropout_add_norm_backward_into(
      grad_total.has_value() ? &*grad_total : nullptr, grad_normed, total, weight, mean, rstd, keep, p, grad_sum, grad_input);
  return {grad_sum, grad_input, grad_weight, grad_bias};
}

}  // namespace stacklm_dropout

TORCH_LIBRARY(stacklm_dropout, library) {
  library.def("dropout", &dropout);
  library.def("dropout_add", &dropout_add);
  library.def("relu_dropout", &relu_dropout);
  library.def("relu_dropout_backward", &relu_dropout_backward);
  library.def("dropout_add_norm", &stacklm_dropout::dropout_add_norm);
  library.def("dropout_add_norm_backward", &stacklm_dropout::dropout_add_norm_backward);
}
