// Causal multi-head self-attention with dropout on its probabilities, forward and backward, on
// the CPU, for a transformer's small heads (d/heads = 17 at the paper's sizes).
//
// For one batch element b and head h, with q_i, k_j, v_j ∈ ℝ^{d/heads} read from the packed
// projection [q ; k ; v] of position i (layout (B, n, 3, heads, d/heads)) and s = (d/heads)^{−1/2}:
//   P_ij = softmax_{j ≤ i}(s · q_i · k_j),   P'_ij = P_ij · mask_ij / (1 − p),   o_i = Σ_{j ≤ i} P'_ij v_j,
// written to the output's columns h·d/heads … of position i (layout (B, n, heads, d/heads)).
// Dropout: with T = ⌈n / W⌉ tiles of W positions, element (i, j) of pair g = b·heads + h is kept
// iff word W·(j mod W) + (i mod W) of tile ((g·T + ⌊j/W⌋)·T + ⌊i/W⌋) of the Philox stream keyed
// by the seed (``dropout.cpp``; tile t = words 64t … 64t + 63) is ≥ round(p · 2³²): each tile of
// W keys × W queries is one block of the generator, and tiles above the diagonal are never drawn.
// P is kept for the backward with the mask in its sign (−P where dropped), so the backward draws
// no mask. The backward:
//   dP'_ij = dO_i · v_j,   dP_ij = dP'_ij · mask_ij / (1 − p),   dS_ij = P_ij (dP_ij − Σ_l P_il dP_il),
//   dq_i = s Σ_j dS_ij k_j,   dk_j = s Σ_i dS_ij q_i,   dv_j = Σ_i P'_ij dO_i,
// into the gradient of the packed projection, so no head layout is ever copied.
//
// W (b, h) pairs per group, one per SIMD lane, each task's buffers allocated once (GroupWork):
// every product, the softmax and the masks run on full lanes whatever n and d/heads are (no
// padding of positions to whole lanes, no tail columns, no transposed scores), and only the
// triangle j ≤ i is computed and kept.
//
// layer_forward and layer_backward run a whole pre-norm transformer layer around this attention:
// the packed q, k, v projection, the output projection, the two residual adds with their dropout
// and layer norms (dropout.cpp's dropout_add_norm) and the FFN (relu_dropout), the same ATen
// products and kernel calls in the order the modules make them; layers_forward and
// layers_backward run several layers in a row that way, one call from Python each way
// (``stacklm.kernels.attention.attention_layers``).

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "lanes.h"

// glibc's vector math library has SIMD exp; declared here so that `omp simd` loops call it (exp_lanes
// of doubles; glibc declares it only under -ffast-math, which would also assume no −∞ and no NaN).
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) double exp(double);
}

namespace stacklm_dropout {
// dropout.cpp: round(p · 2³²), and words first_word … first_word + count − 1 of the Philox stream keyed by seed.
uint32_t threshold(double p);
void stream_words(int64_t first_word, int64_t count, uint64_t seed, uint32_t* words);
// dropout.cpp's kernels of the ops dropout_add_norm, its backward, relu_dropout and its backward,
// writing where they are told (the sum s into total, the gradients into grad_sum and grad_input;
// the last two over their input).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> dropout_add_norm_into(
    const at::Tensor* residual, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps, double p, int64_t seed,
    const at::Tensor& total);
std::tuple<at::Tensor, at::Tensor> dropout_add_norm_backward_into(
    const at::Tensor* grad_total, const at::Tensor& grad_normed, const at::Tensor& total, const at::Tensor& weight, const at::Tensor& mean,
    const at::Tensor& rstd, const at::Tensor& keep, double p, const at::Tensor& grad_sum, const at::Tensor& grad_input);
void relu_dropout_(const at::Tensor& input, double p, int64_t seed);
void relu_dropout_backward_(const at::Tensor& grad, const at::Tensor& output, double p);
}  // namespace stacklm_dropout

namespace {

using stacklm_lanes::Lanes;
using stacklm_lanes::load;
using stacklm_lanes::store;

constexpr int64_t W = stacklm_lanes::LANE_COUNT;  // lanes: one AVX2 register of floats, and the side of a dropout tile

// exp of each lane. float: Cody–Waite reduction x = k·ln 2 + r, |r| ≤ ln 2 / 2, and Cephes' degree-6
// polynomial for exp(r) (within 2 ulp of exp), inline (glibc's vector expf sends a whole vector to
// its scalar fallback when one lane is out of range); exp(x) = 0 below −87.33 (where it leaves the
// normal floats). double: glibc's exp lane by lane.
template <typename scalar_t>
typename Lanes<scalar_t>::type exp_lanes(typename Lanes<scalar_t>::type x) {
  using Vector = typename Lanes<scalar_t>::type;
  if constexpr (std::is_same_v<scalar_t, float>) {
    typedef int32_t Integers __attribute__((vector_size(W * sizeof(int32_t))));
    const Vector clamped = x < -88.0f ? Vector{} - 88.0f : x > 88.0f ? Vector{} + 88.0f : x;
    const Vector rounder = Vector{} + 12582912.0f;  // 1.5 · 2²³: adding it rounds to an integer
    const Vector k = (clamped * 1.44269504088896341f + rounder) - rounder;
    const Vector r = clamped - k * 0.693359375f - k * -2.12194440e-4f;
    Vector y = 1.9875691500e-4f * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    const Integers exponent = (__builtin_convertvector(k, Integers) + 127) << 23;
    Vector power;
    std::memcpy(&power, &exponent, sizeof power);
    return x < -87.33f ? Vector{} : y * power;
  } else {
    scalar_t lanes[W];
    store(lanes, x);
#pragma omp simd
    for (int64_t l = 0; l < W; ++l) lanes[l] = std::exp(lanes[l]);
    return load(lanes);
  }
}

struct Shape {
  int64_t batch, length, heads, head_width;
  int64_t width() const { return heads * head_width; }
  int64_t tiles() const { return (length + W - 1) / W; }  // T: positions in tiles of W
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(head_width)); }  // of the scores q·k
};

// Where one (b, h) pair starts: q_0 at offset in the packed projection (or its gradient; row i
// at offset + i · 3d, k_i and v_i d and 2d further), its head's columns of the output (B, n, d)
// (or its gradient) at output (row i at output + i · d).
struct Pair {
  int64_t offset, output;
  Pair(const Shape& shape, int64_t pair)
      : offset(pair / shape.heads * shape.length * 3 * shape.width() + pair % shape.heads * shape.head_width),
        output(pair / shape.heads * shape.length * shape.width() + pair % shape.heads * shape.head_width) {}
};

// Lane l of group G holds pair W·G + l. Each pair's q, k, v (and dO) are gathered once into an
// interleaved copy, element (i, c) of the W pairs at [(i · d/heads + c) · W + l], by W × W
// transposes of the lanes' rows; the results go back the same way. Probabilities are kept for
// j ≤ i only, in rows of the triangle: (i, j) at [(i(i + 1)/2 + j) · W + l].

// The W pairs of group `group` (pairs past the last repeat it; their results are not written).
struct Group {
  int64_t pairs[W];
  bool real[W];
  Group(const Shape& shape, int64_t group) {
    const int64_t count = shape.batch * shape.heads;
    for (int64_t l = 0; l < W; ++l) {
      real[l] = group * W + l < count;
      pairs[l] = real[l] ? group * W + l : count - 1;
    }
  }
};

// The W × W transpose of the vectors r: out[k][l] = r[l][k], in three rounds of shuffles (pairs
// of lanes, then pairs of pairs, then halves).
template <typename Vector>
void transpose_lanes(const Vector* r, Vector* out) {
  static_assert(W == 8, "transpose_lanes shuffles 8 lanes");
  Vector t[W], u[W];
  for (int64_t k = 0; k < W; k += 2) {
    t[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 2, 10, 4, 12, 6, 14);
    t[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int64_t k = 0; k < W; k += 4) {
    u[k] = __builtin_shufflevector(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 1] = __builtin_shufflevector(t[k + 1], t[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 2] = __builtin_shufflevector(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[k + 3] = __builtin_shufflevector(t[k + 1], t[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int64_t k = 0; k < 4; ++k) {
    out[k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    out[k + 4] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// columns[k · column_stride + l] = factor · rows[l][k] for k, l < W.
template <typename scalar_t>
void transpose_gather(const scalar_t* const* rows, scalar_t factor, scalar_t* columns, int64_t column_stride) {
  using Vector = typename Lanes<scalar_t>::type;
  Vector r[W], out[W];
  for (int64_t l = 0; l < W; ++l) r[l] = load(rows[l]) * factor;
  transpose_lanes(r, out);
  for (int64_t k = 0; k < W; ++k) store(columns + k * column_stride, out[k]);
}

// dst[(i · dh + c) · W + l] = factor · data[base[l] + i · stride + c] for i < n, c < dh.
template <typename scalar_t>
void gather(const scalar_t* data, const int64_t* base, int64_t stride, int64_t n, int64_t dh, scalar_t factor, scalar_t* dst) {
  const int64_t whole = dh / W * W;
  for (int64_t i = 0; i < n; ++i) {
    const scalar_t* rows[W];
    for (int64_t l = 0; l < W; ++l) rows[l] = data + base[l] + i * stride;
    scalar_t* row = dst + i * dh * W;
    for (int64_t c = 0; c < whole; c += W) {
      const scalar_t* tile[W];
      for (int64_t l = 0; l < W; ++l) tile[l] = rows[l] + c;
      transpose_gather(tile, factor, row + c * W, W);
    }
    for (int64_t c = whole; c < dh; ++c) {
      for (int64_t l = 0; l < W; ++l) row[c * W + l] = factor * rows[l][c];
    }
  }
}

// data[base[l] + row_offset + c] = src[c · W + l] for c < dh, the lanes of real pairs: W × W
// transposes whose rows go straight to their lanes' rows (a lane of no real pair to a scratch row).
template <typename scalar_t>
void scatter_row(const scalar_t* src, int64_t dh, scalar_t* data, const int64_t* base, const bool* real, int64_t row_offset) {
  using Vector = typename Lanes<scalar_t>::type;
  const int64_t whole = dh / W * W;
  scalar_t scratch[W];
  for (int64_t c = 0; c < whole; c += W) {
    Vector r[W], lanes[W];
    for (int64_t k = 0; k < W; ++k) r[k] = load(src + (c + k) * W);
    transpose_lanes(r, lanes);  // lanes[l]: lane l's columns c … c + W − 1
    for (int64_t l = 0; l < W; ++l) store(real[l] ? data + base[l] + row_offset + c : scratch, lanes[l]);
  }
  for (int64_t c = whole; c < dh; ++c) {
    for (int64_t l = 0; l < W; ++l) {
      if (real[l]) data[base[l] + row_offset + c] = src[c * W + l];
    }
  }
}

// The dropout factors mask_ij / (1 − p) (0 or the scale) of each lane's pair in the layout of
// its tiles: (i, j) at [(tile · W² + W·(j mod W) + (i mod W)) · W + l], tile = t(t + 1)/2 + u for
// query tile t = ⌊i/W⌋ and key tile u = ⌊j/W⌋ ≤ t (the Philox words of the mapping above,
// compared lane by lane, then W × W transposes into the lanes).
template <typename scalar_t>
void group_factors(const Shape& shape, const Group& group, double p, uint64_t seed, scalar_t* factors) {
  const int64_t tiles = shape.tiles();
  if (p == 0) {
    std::fill(factors, factors + tiles * (tiles + 1) / 2 * W * W * W, scalar_t(1));
    return;
  }
  const uint32_t cut = stacklm_dropout::threshold(p);
  const scalar_t scale = static_cast<scalar_t>(1.0 / (1.0 - p));
  // Tiles (key tile u, query tiles t, t + 1) are consecutive in the stream: two drawn in one call.
  constexpr int64_t TILES_PER_DRAW = 2;
  uint32_t words[TILES_PER_DRAW * W * W];
  scalar_t lanes[W][TILES_PER_DRAW * W * W];
  for (int64_t tile_key = 0; tile_key < tiles; ++tile_key) {
    for (int64_t first_query = tile_key; first_query < tiles; first_query += TILES_PER_DRAW) {
      const int64_t drawn = std::min(TILES_PER_DRAW, tiles - first_query);
      for (int64_t l = 0; l < W; ++l) {
        stacklm_dropout::stream_words(((group.pairs[l] * tiles + tile_key) * tiles + first_query) * W * W, drawn * W * W, seed, words);
#pragma omp simd
        for (int64_t e = 0; e < drawn * W * W; ++e) lanes[l][e] = words[e] >= cut ? scale : scalar_t(0);
      }
      for (int64_t tile_query = first_query; tile_query < first_query + drawn; ++tile_query) {
        scalar_t* tile = factors + (tile_query * (tile_query + 1) / 2 + tile_key) * W * W * W;
        for (int64_t block = 0; block < W * W; block += W) {
          const scalar_t* rows[W];
          for (int64_t l = 0; l < W; ++l) rows[l] = lanes[l] + (tile_query - first_query) * W * W + block;
          transpose_gather(rows, scalar_t(1), tile + block * W, W);
        }
      }
    }
  }
}

// acc[r] = Σ_c a[c] · b_r[c] for R rows b_r = b + r · dh · W (interleaved vectors), c < dh.
template <int R, typename scalar_t>
void dots(const scalar_t* a, const scalar_t* b, int64_t dh, typename Lanes<scalar_t>::type* acc) {
  using Vector = typename Lanes<scalar_t>::type;
  Vector even[R], odd[R];  // two sums per row: chains of dh/2 dependent adds
  for (int r = 0; r < R; ++r) even[r] = odd[r] = Vector{};
  int64_t c = 0;
  for (; c + 2 <= dh; c += 2) {
    const Vector x = load(a + c * W), y = load(a + (c + 1) * W);
    for (int r = 0; r < R; ++r) {
      even[r] += x * load(b + (r * dh + c) * W);
      odd[r] += y * load(b + (r * dh + c + 1) * W);
    }
  }
  if (c < dh) {
    const Vector x = load(a + c * W);
    for (int r = 0; r < R; ++r) even[r] += x * load(b + (r * dh + c) * W);
  }
  for (int r = 0; r < R; ++r) acc[r] = even[r] + odd[r];
}

// out[j] = a_i · b_j for j < count (rows of dh interleaved vectors), R at a time.
template <typename scalar_t>
void row_dots(const scalar_t* a, const scalar_t* b, int64_t dh, int64_t count, typename Lanes<scalar_t>::type* out) {
  constexpr int R = 6;
  int64_t j = 0;
  for (; j + R <= count; j += R) dots<R>(a, b + j * dh * W, dh, out + j);
  switch (count - j) {  // the last rows side by side too
    case 5: dots<5>(a, b + j * dh * W, dh, out + j); break;
    case 4: dots<4>(a, b + j * dh * W, dh, out + j); break;
    case 3: dots<3>(a, b + j * dh * W, dh, out + j); break;
    case 2: dots<2>(a, b + j * dh * W, dh, out + j); break;
    case 1: dots<1>(a, b + j * dh * W, dh, out + j); break;
    default: break;
  }
}

// out[c] = Σ_{j < count} weights[j · weight_stride] · rows[(j · dh + c) · W] for CW columns c
// of rows of dh (interleaved vectors), the sums in registers.
template <int CW, typename scalar_t>
void weighted_columns(const scalar_t* weights, int64_t weight_stride, const scalar_t* rows, int64_t dh, int64_t count, scalar_t* out) {
  using Vector = typename Lanes<scalar_t>::type;
  Vector sums[CW];
  for (int c = 0; c < CW; ++c) sums[c] = Vector{};
  for (int64_t j = 0; j < count; ++j) {
    const Vector weight = load(weights + j * weight_stride);
    const scalar_t* row = rows + j * dh * W;
    for (int c = 0; c < CW; ++c) sums[c] += weight * load(row + c * W);
  }
  for (int c = 0; c < CW; ++c) store(out + c * W, sums[c]);
}

// out[c] = Σ_{j < count} weights[j · weight_stride] · rows[(j · dh + c) · W] for c < dh, in
// passes of at most 12 columns of about equal width (17: 9 and 8).
template <typename scalar_t>
void weighted_rows(const scalar_t* weights, int64_t weight_stride, const scalar_t* rows, int64_t dh, int64_t count, scalar_t* out) {
  const int64_t passes = (dh + 11) / 12, per_pass = (dh + passes - 1) / passes;
  for (int64_t c0 = 0; c0 < dh; c0 += per_pass) {
    const scalar_t* from = rows + c0 * W;
    scalar_t* to = out + c0 * W;
    switch (std::min(per_pass, dh - c0)) {
      case 12: weighted_columns<12>(weights, weight_stride, from, dh, count, to); break;
      case 11: weighted_columns<11>(weights, weight_stride, from, dh, count, to); break;
      case 10: weighted_columns<10>(weights, weight_stride, from, dh, count, to); break;
      case 9: weighted_columns<9>(weights, weight_stride, from, dh, count, to); break;
      case 8: weighted_columns<8>(weights, weight_stride, from, dh, count, to); break;
      case 7: weighted_columns<7>(weights, weight_stride, from, dh, count, to); break;
      case 6: weighted_columns<6>(weights, weight_stride, from, dh, count, to); break;
      case 5: weighted_columns<5>(weights, weight_stride, from, dh, count, to); break;
      case 4: weighted_columns<4>(weights, weight_stride, from, dh, count, to); break;
      case 3: weighted_columns<3>(weights, weight_stride, from, dh, count, to); break;
      case 2: weighted_columns<2>(weights, weight_stride, from, dh, count, to); break;
      default: weighted_columns<1>(weights, weight_stride, from, dh, count, to); break;
    }
  }
}

// One task's interleaved buffers.
template <typename scalar_t>
struct GroupWork {
  std::vector<scalar_t> queries, keys, values, grads;  // (n, d/heads, W)
  std::vector<scalar_t> factors, grad_scores, kept;     // (n(n + 1)/2, W)
  std::vector<typename Lanes<scalar_t>::type> row;     // (n): vectors, aligned as such
  std::vector<scalar_t> out;                           // (d/heads, W)
  GroupWork(const Shape& shape, bool backward)
      : queries(shape.length * shape.head_width * W),
        keys(shape.length * shape.head_width * W),
        values(shape.length * shape.head_width * W),
        grads(backward ? shape.length * shape.head_width * W : 0),
        factors(shape.tiles() * (shape.tiles() + 1) / 2 * W * W * W),
        grad_scores(backward ? shape.length * (shape.length + 1) / 2 * W : 0),
        kept(backward ? shape.length * (shape.length + 1) / 2 * W : 0),
        row(shape.length),
        out(shape.head_width * W) {}
};

// The storage of group `group`'s batch elements in a tensor of `per_batch` elements per batch element,
// as cache lines, fetched ahead in parts: a group reads its rows 17 of every 204 floats per lane
// and its batch elements' rows only, strides the hardware does not fetch ahead, so each group
// fetches the next group's while it computes (its rows were written or last read far back).
struct NextRows {
  const char* begin = nullptr;
  int64_t lines = 0;
  template <typename scalar_t>
  NextRows(const Shape& shape, int64_t group, const scalar_t* data, int64_t per_batch) {
    const int64_t count = shape.batch * shape.heads, first_pair = group * W;
    if (first_pair >= count) return;
    const int64_t first = first_pair / shape.heads, last = std::min(first_pair + W, count) - 1;
    begin = reinterpret_cast<const char*>(data + first * per_batch);
    lines = ((last / shape.heads + 1 - first) * per_batch * static_cast<int64_t>(sizeof(scalar_t)) + 63) / 64;
  }
  template <typename scalar_t>
  NextRows(const scalar_t* data, int64_t size) : begin(reinterpret_cast<const char*>(data)), lines((size * static_cast<int64_t>(sizeof(scalar_t)) + 63) / 64) {}
  // Lines part · lines / parts … of the rows, to be read (or, `written`, overwritten) soon.
  void fetch(int64_t part, int64_t parts, bool written) const {
    const int64_t first = lines * part / parts, last = lines * (part + 1) / parts;
    for (int64_t line = first; line < last; ++line) {
      if (written) {
        __builtin_prefetch(begin + line * 64, 1, 2);
      } else {
        __builtin_prefetch(begin + line * 64, 0, 2);
      }
    }
  }
};

// The forward of one group. P is kept (groups, n(n + 1)/2, W) with the mask in its sign: P_ij
// where kept, −P_ij where dropped (P ≥ 0, and where P = 0 the mask changes nothing in the
// backward), so the backward draws no mask.
template <typename scalar_t>
void forward_group(
    const Shape& shape, int64_t index, const scalar_t* projected, scalar_t* out, scalar_t* probabilities, double p, uint64_t seed,
    GroupWork<scalar_t>& work) {
  using Vector = typename Lanes<scalar_t>::type;
  const int64_t n = shape.length, dh = shape.head_width, d = shape.width();
  const Group group(shape, index);
  int64_t base[W], out_base[W];
  for (int64_t l = 0; l < W; ++l) {
    const Pair pair(shape, group.pairs[l]);
    base[l] = pair.offset;
    out_base[l] = pair.output;
  }
  const scalar_t scale = static_cast<scalar_t>(shape.scale());
  gather(projected, base, 3 * d, n, dh, scale, work.queries.data());
  int64_t key_base[W], value_base[W];
  for (int64_t l = 0; l < W; ++l) key_base[l] = base[l] + d, value_base[l] = base[l] + 2 * d;
  gather(projected, key_base, 3 * d, n, dh, scalar_t(1), work.keys.data());
  gather(projected, value_base, 3 * d, n, dh, scalar_t(1), work.values.data());
  group_factors(shape, group, p, seed, work.factors.data());
  Vector* scores = work.row.data();
  scalar_t* kept = probabilities + index * n * (n + 1) / 2 * W;
  const NextRows next_projected(shape, index + 1, projected, n * 3 * d), next_out(shape, index + 1, out, n * d);
  for (int64_t i = 0; i < n; ++i) {
    next_projected.fetch(i, n, false);
    next_out.fetch(i, n, true);
    row_dots(work.queries.data() + i * dh * W, work.keys.data(), dh, i + 1, scores);
    Vector maximum = scores[0];
    for (int64_t j = 1; j <= i; ++j) maximum = scores[j] > maximum ? scores[j] : maximum;
    Vector totals[2] = {};
    for (int64_t j = 0; j <= i; ++j) {
      scores[j] = exp_lanes<scalar_t>(scores[j] - maximum);
      totals[j % 2] += scores[j];
    }
    const Vector inverse = scalar_t(1) / (totals[0] + totals[1]);
    const int64_t first = i * (i + 1) / 2;
    for (int64_t j = 0; j <= i; ++j) {
      const int64_t tile = i / W * (i / W + 1) / 2 + j / W, word = W * (j % W) + i % W;
      const Vector probability = scores[j] * inverse, factor = load(work.factors.data() + (tile * W * W + word) * W);
      store(kept + (first + j) * W, factor > 0 ? probability : -probability);
      scores[j] = probability * factor;  // P'
    }
    weighted_rows(reinterpret_cast<const scalar_t*>(scores), W, work.values.data(), dh, i + 1, work.out.data());
    scatter_row(work.out.data(), dh, out, out_base, group.real, i * d);
  }
}

// The backward of one group: per query i, dP', dS and dq; then per key j, dk and dv over the
// queries i ≥ j that see it.
template <typename scalar_t>
void backward_group(
    const Shape& shape, int64_t index, const scalar_t* grad_out, const scalar_t* projected, const scalar_t* probabilities,
    scalar_t* grad_projected, double p, GroupWork<scalar_t>& work) {
  using Vector = typename Lanes<scalar_t>::type;
  const int64_t n = shape.length, dh = shape.head_width, d = shape.width();
  const Group group(shape, index);
  int64_t base[W], out_base[W], key_base[W], value_base[W];
  for (int64_t l = 0; l < W; ++l) {
    const Pair pair(shape, group.pairs[l]);
    base[l] = pair.offset;
    out_base[l] = pair.output;
    key_base[l] = base[l] + d;
    value_base[l] = base[l] + 2 * d;
  }
  const scalar_t scale = static_cast<scalar_t>(shape.scale());
  const scalar_t keep_scale = static_cast<scalar_t>(1.0 / (1.0 - p));
  gather(projected, base, 3 * d, n, dh, scalar_t(1), work.queries.data());
  gather(projected, key_base, 3 * d, n, dh, scalar_t(1), work.keys.data());
  gather(projected, value_base, 3 * d, n, dh, scalar_t(1), work.values.data());
  gather(grad_out, out_base, d, n, dh, scalar_t(1), work.grads.data());
  const scalar_t* stored = probabilities + index * n * (n + 1) / 2 * W;
  Vector* grads = work.row.data();
  scalar_t* grad_scores = work.grad_scores.data();
  scalar_t* kept = work.kept.data();
  const int64_t groups = (shape.batch * shape.heads + W - 1) / W, triangle = n * (n + 1) / 2 * W;
  const NextRows next_projected(shape, index + 1, projected, n * 3 * d), next_grad_out(shape, index + 1, grad_out, n * d),
      next_grad_projected(shape, index + 1, grad_projected, n * 3 * d),
      next_stored = index + 1 < groups ? NextRows(stored + triangle, triangle) : NextRows(stored, 0);
  for (int64_t i = 0; i < n; ++i) {
    next_projected.fetch(i, n, false);
    next_grad_out.fetch(i, n, false);
    next_stored.fetch(i, n, false);
    next_grad_projected.fetch(i, n, true);
    row_dots(work.grads.data() + i * dh * W, work.values.data(), dh, i + 1, grads);  // dP'
    const int64_t first = i * (i + 1) / 2;
    Vector dot{};
    for (int64_t j = 0; j <= i; ++j) {
      const Vector value = load(stored + (first + j) * W);  // P, negated where dropped
      const Vector probability = value < 0 ? -value : value;
      const Vector factor = value < 0 ? Vector{} : Vector{} + keep_scale;
      grads[j] *= factor;  // dP
      dot += probability * grads[j];
      store(kept + (first + j) * W, probability * factor);  // P'
    }
    for (int64_t j = 0; j <= i; ++j) {
      const Vector value = load(stored + (first + j) * W);
      const Vector probability = value < 0 ? -value : value;
      store(grad_scores + (first + j) * W, scale * probability * (grads[j] - dot));  // s · dS
    }
    weighted_rows(grad_scores + first * W, W, work.keys.data(), dh, i + 1, work.out.data());  // dq_i
    scatter_row(work.out.data(), dh, grad_projected, base, group.real, i * 3 * d);
  }
  for (int64_t j = 0; j < n; ++j) {  // over the queries i ≥ j: weights at (i(i + 1)/2 + j) · W
    scalar_t* column = reinterpret_cast<scalar_t*>(work.row.data());
    for (int64_t i = j; i < n; ++i) store(column + (i - j) * W, load(grad_scores + (i * (i + 1) / 2 + j) * W));
    weighted_rows(column, W, work.queries.data() + j * dh * W, dh, n - j, work.out.data());  // dk_j
    scatter_row(work.out.data(), dh, grad_projected, key_base, group.real, j * 3 * d);
    for (int64_t i = j; i < n; ++i) store(column + (i - j) * W, load(kept + (i * (i + 1) / 2 + j) * W));
    weighted_rows(column, W, work.grads.data() + j * dh * W, dh, n - j, work.out.data());  // dv_j
    scatter_row(work.out.data(), dh, grad_projected, value_base, group.real, j * 3 * d);
  }
}

Shape check_projected(const at::Tensor& projected, int64_t heads, double p) {
  TORCH_CHECK(projected.is_cpu() && projected.is_contiguous() && projected.dim() == 3, "attention: a contiguous (B, n, 3d) CPU tensor");
  TORCH_CHECK(heads > 0 && projected.size(2) % (3 * heads) == 0, "attention: 3d must be divisible by 3 · heads");
  TORCH_CHECK(p >= 0 && p < 1, "attention: p must lie in [0, 1)");
  return Shape{projected.size(0), projected.size(1), heads, projected.size(2) / (3 * heads)};
}

// (out (B, n, d), P (groups, n(n + 1)/2, W) with the mask in its sign, lanes of no pair holding values never read) of the packed projection (B, n, 3d).
std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& projected, int64_t heads, double p, int64_t seed) {
  const Shape shape = check_projected(projected, heads, p);
  const int64_t groups = (shape.batch * heads + W - 1) / W;
  at::Tensor out = at::empty({shape.batch, shape.length, shape.width()}, projected.options());
  at::Tensor probabilities = at::empty({groups, shape.length * (shape.length + 1) / 2, W}, projected.options());
  if (shape.length == 0 || shape.batch == 0) return {out, probabilities};
  AT_DISPATCH_FLOATING_TYPES(projected.scalar_type(), "attention_forward", [&] {
    const scalar_t* projected_data = projected.data_ptr<scalar_t>();
    scalar_t* out_data = out.data_ptr<scalar_t>();
    scalar_t* probability_data = probabilities.data_ptr<scalar_t>();
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      GroupWork<scalar_t> work(shape, false);
      for (int64_t group = begin; group < end; ++group) {
        forward_group<scalar_t>(shape, group, projected_data, out_data, probability_data, p, static_cast<uint64_t>(seed), work);
      }
    });
  });
  return {out, probabilities};
}

// The gradient of the packed projection (B, n, 3d) from that of the output (B, n, d).
at::Tensor backward(const at::Tensor& grad_out, const at::Tensor& projected, const at::Tensor& probabilities, int64_t heads, double p) {
  const Shape shape = check_projected(projected, heads, p);
  TORCH_CHECK(grad_out.is_contiguous() && grad_out.size(2) == shape.width(), "attention_backward: a contiguous (B, n, d) gradient");
  const int64_t groups = (shape.batch * heads + W - 1) / W;
  at::Tensor grad_projected = at::empty_like(projected);
  if (shape.length == 0 || shape.batch == 0) return grad_projected;
  AT_DISPATCH_FLOATING_TYPES(projected.scalar_type(), "attention_backward", [&] {
    const scalar_t* grad_out_data = grad_out.data_ptr<scalar_t>();
    const scalar_t* projected_data = projected.data_ptr<scalar_t>();
    const scalar_t* probability_data = probabilities.data_ptr<scalar_t>();
    scalar_t* grad_data = grad_projected.data_ptr<scalar_t>();
    at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
      GroupWork<scalar_t> work(shape, true);
      for (int64_t group = begin; group < end; ++group) {
        backward_group<scalar_t>(shape, group, grad_out_data, projected_data, probability_data, grad_data, p, work);
      }
    });
  });
  return grad_projected;
}

// The gradients of addmm(bias, inputs, weightᵀ) from grad (rows, out), as autograd computes them
// for F.linear: (grad · weight, gradᵀ · inputs, Σ_rows grad), grad · weight written into `into`
// (rows, in), storage the caller no longer reads: memory the layer wrote moments ago, still in the
// caches, where a fresh tensor is memory last used far back in the step.
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(const at::Tensor& grad, const at::Tensor& inputs, const at::Tensor& weight, at::Tensor into) {
  at::mm_out(into, grad, weight);
  return {into, grad.t().mm(inputs), grad.sum(0)};
}

// The first `rows` × `columns` elements of a contiguous tensor's storage, as a (rows, columns) matrix.
at::Tensor matrix_of(const at::Tensor& tensor, int64_t rows, int64_t columns) {
  TORCH_CHECK(tensor.is_contiguous() && tensor.numel() >= rows * columns, "matrix_of: a contiguous tensor of at least rows × columns elements");
  return tensor.view(-1).narrow(0, 0, rows * columns).view({rows, columns});
}

// The parameters of a layer, in the order layer_forward takes them.
enum Parameter {
  query_weight, key_weight, value_weight, query_bias, key_bias, value_bias, out_weight, out_bias,
  norm_weight, norm_bias, expand_weight, expand_bias, project_weight, project_bias, next_weight, next_bias, parameter_count,
};

// What layer_forward keeps for layer_backward, in this order.
enum Saved {
  saved_inputs, saved_weight, saved_projected, saved_probabilities, saved_attended, saved_out_weight, saved_middle, saved_norm_weight,
  saved_middle_mean, saved_middle_rstd, saved_middle_keep, saved_feedforward_inputs, saved_expand_weight, saved_hidden,
  saved_project_weight, saved_output, saved_next_weight, saved_output_mean, saved_output_rstd, saved_output_keep, saved_count,
};

// x (B, n, d) and LN(x) (B, n, d), the 16 parameters (Parameter) and the Philox keys of the
// attention, the first residual, the ReLU and the second residual → (x'', LN_next(x''), what
// layer_backward reads (Saved)), x' = x + Dropout(W_o Attention(W_qkv LN(x) + b) + b_o),
// x'' = x' + Dropout(W₂ Dropout(ReLU(W₁ LN(x') + b₁)) + b₂).
std::vector<at::Tensor> layer_forward(
    const at::Tensor& x, const at::Tensor& normed, at::TensorList parameters, int64_t heads, double p, double feedforward_eps, double next_eps,
    at::IntArrayRef keys) {
  TORCH_CHECK(static_cast<int64_t>(parameters.size()) == parameter_count && keys.size() == 4, "layer_forward: 16 parameters and 4 keys");
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && normed.is_contiguous() && normed.sizes() == x.sizes(), "layer_forward: contiguous x and LN(x) of one shape (B, n, d)");
  const int64_t batch = x.size(0), length = x.size(1), width = x.size(2), rows = batch * length;
  const at::Tensor weight = at::cat({parameters[query_weight], parameters[key_weight], parameters[value_weight]});  // (3d, d)
  const at::Tensor bias = at::cat({parameters[query_bias], parameters[key_bias], parameters[value_bias]});  // (3d,)
  const at::Tensor inputs = normed.view({rows, width});
  const at::Tensor projected = at::addmm(bias, inputs, weight.t()).view({batch, length, 3 * width});  // q, k, v
  const auto [attended, probabilities] = forward(projected, heads, p, keys[0]);
  const at::Tensor attended_rows = attended.view({rows, width});
  const at::Tensor sublayer = at::addmm(parameters[out_bias], attended_rows, parameters[out_weight].t()).view({batch, length, width});
  const at::Tensor middle = at::empty_like(x);
  const auto [middle_normed, middle_mean, middle_rstd, middle_keep] = stacklm_dropout::dropout_add_norm_into(
      &x, sublayer, parameters[norm_weight], parameters[norm_bias], feedforward_eps, p, keys[1], middle);
  const at::Tensor feedforward_inputs = middle_normed.view({rows, width});
  const at::Tensor hidden = at::addmm(parameters[expand_bias], feedforward_inputs, parameters[expand_weight].t());  // (rows, 2d)
  stacklm_dropout::relu_dropout_(hidden, p, keys[2]);  // over W₁ x + b₁, which nothing else reads
  at::Tensor feedforward = sublayer.view({rows, width});  // read by nothing after the first norm: W₂ h + b₂ goes there
  at::addmm_out(feedforward, parameters[project_bias], hidden, parameters[project_weight].t());
  const at::Tensor output = feedforward.view({batch, length, width});  // x'' over W₂ h + b₂, which nothing else reads
  const auto [output_normed, output_mean, output_rstd, output_keep] = stacklm_dropout::dropout_add_norm_into(
      &middle, output, parameters[next_weight], parameters[next_bias], next_eps, p, keys[3], output);
  return {output, output_normed,
          inputs, weight, projected, probabilities, attended_rows, parameters[out_weight], middle, parameters[norm_weight], middle_mean,
          middle_rstd, middle_keep, feedforward_inputs, parameters[expand_weight], hidden, parameters[project_weight], output,
          parameters[next_weight], output_mean, output_rstd, output_keep};
}

// The gradients of x, LN(x) and the 16 parameters (Parameter) from those of x'' (none where
// nothing reads it) and LN_next(x''), and what layer_forward kept; owned: whether the gradients
// of x'' and LN_next(x'') may be written over.
std::vector<at::Tensor> layer_backward(
    const std::optional<at::Tensor>& grad_output, const std::optional<at::Tensor>& grad_output_normed, at::TensorList saved, int64_t heads,
    double p, bool owned) {
  TORCH_CHECK(static_cast<int64_t>(saved.size()) == saved_count, "layer_backward: what layer_forward kept");
  const at::Tensor& middle = saved[saved_middle];
  const int64_t batch = middle.size(0), length = middle.size(1), width = middle.size(2), rows = batch * length;
  const std::optional<at::Tensor> grad_total = grad_output.has_value() ? std::optional<at::Tensor>(grad_output->contiguous()) : std::nullopt;
  const at::Tensor grad_normed = grad_output_normed.has_value() ? grad_output_normed->contiguous() : at::zeros_like(saved[saved_output]);
  // The gradients of x' and of the FFN's output over those of x'' and LN_next(x'') where the caller
  // owns them (read by nothing after), else fresh.
  const at::Tensor grad_middle = owned && grad_total.has_value() ? *grad_total : at::empty_like(middle);
  const at::Tensor grad_feedforward = owned && grad_output_normed.has_value() ? grad_normed : at::empty_like(middle);
  const auto [grad_next_weight, grad_next_bias] = stacklm_dropout::dropout_add_norm_backward_into(
      grad_total.has_value() ? &*grad_total : nullptr, grad_normed, saved[saved_output], saved[saved_next_weight], saved[saved_output_mean],
      saved[saved_output_rstd], saved[saved_output_keep], p, grad_middle, grad_feedforward);
  const auto [grad_expanded, grad_project_weight, grad_project_bias] = linear_backward(
      grad_feedforward.view({rows, width}), saved[saved_hidden], saved[saved_project_weight], at::empty({rows, 2 * width}, middle.options()));
  stacklm_dropout::relu_dropout_backward_(grad_expanded, saved[saved_hidden], p);  // over the gradient of h
  const auto [grad_middle_normed, grad_expand_weight, grad_expand_bias] =
      linear_backward(grad_expanded, saved[saved_feedforward_inputs], saved[saved_expand_weight], grad_feedforward.view({rows, width}));
  // The gradients of x and of the sublayer over those of x' and LN(x'), which nothing reads after.
  const at::Tensor grad_x = grad_middle, grad_sublayer = grad_middle_normed.view({batch, length, width});
  const auto [grad_norm_weight, grad_norm_bias] = stacklm_dropout::dropout_add_norm_backward_into(
      &grad_middle, grad_sublayer, middle, saved[saved_norm_weight], saved[saved_middle_mean], saved[saved_middle_rstd], saved[saved_middle_keep],
      p, grad_x, grad_sublayer);
  const auto [grad_attended, grad_out_weight, grad_out_bias] = linear_backward(
      grad_sublayer.view({rows, width}), saved[saved_attended], saved[saved_out_weight], matrix_of(grad_expanded, rows, width));
  const at::Tensor grad_projected = backward(grad_attended.view({batch, length, width}), saved[saved_projected], saved[saved_probabilities], heads, p);
  const auto [grad_inputs, grad_weight, grad_bias] =
      linear_backward(grad_projected.view({rows, 3 * width}), saved[saved_inputs], saved[saved_weight], grad_sublayer.view({rows, width}));
  const std::vector<at::Tensor> grad_weights = grad_weight.split(width), grad_biases = grad_bias.split(width);
  return {grad_x, grad_inputs.view({batch, length, width}),
          grad_weights[0], grad_weights[1], grad_weights[2], grad_biases[0], grad_biases[1], grad_biases[2],
          grad_out_weight, grad_out_bias, grad_norm_weight, grad_norm_bias, grad_expand_weight, grad_expand_bias,
          grad_project_weight, grad_project_bias, grad_next_weight, grad_next_bias};
}

// layer_forward over L layers in a row, each layer's x'' and LN_next(x'') the next one's x and LN(x):
// x, LN(x) of the first, 16 parameters (Parameter) per layer, two eps per layer (its FFN's norm,
// the next norm) and four keys per layer (as layer_forward's) → (the last layer's x'' and
// LN_next(x''), then what layer_backward reads (Saved), layer by layer).
std::vector<at::Tensor> layers_forward(
    const at::Tensor& x, const at::Tensor& normed, at::TensorList parameters, int64_t heads, double p, at::ArrayRef<double> eps,
    at::IntArrayRef keys) {
  const int64_t layers = static_cast<int64_t>(eps.size()) / 2;
  TORCH_CHECK(layers > 0 && static_cast<int64_t>(eps.size()) == 2 * layers && static_cast<int64_t>(parameters.size()) == parameter_count * layers &&
                  static_cast<int64_t>(keys.size()) == 4 * layers,
              "layers_forward: per layer 16 parameters, 2 eps and 4 keys");
  std::vector<at::Tensor> results{x, normed};
  results.reserve(2 + saved_count * layers);
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<at::Tensor> outputs = layer_forward(
        results[0], results[1], parameters.slice(parameter_count * layer, parameter_count), heads, p, eps[2 * layer], eps[2 * layer + 1],
        keys.slice(4 * layer, 4));
    results[0] = std::move(outputs[0]);
    results[1] = std::move(outputs[1]);
    std::move(outputs.begin() + 2, outputs.end(), std::back_inserter(results));
  }
  return results;
}

// The gradients of the first layer's x and LN(x) and of every layer's 16 parameters (Parameter,
// layer by layer) from those of the last layer's x'' (none where nothing reads it) and
// LN_next(x''), and what layers_forward kept.
std::vector<at::Tensor> layers_backward(
    const std::optional<at::Tensor>& grad_output, const std::optional<at::Tensor>& grad_output_normed, at::TensorList saved, int64_t heads,
    double p) {
  const int64_t layers = static_cast<int64_t>(saved.size()) / saved_count;
  TORCH_CHECK(layers > 0 && static_cast<int64_t>(saved.size()) == saved_count * layers, "layers_backward: what layers_forward kept");
  std::vector<at::Tensor> results(2 + parameter_count * layers);
  std::optional<at::Tensor> grad = grad_output, grad_normed = grad_output_normed;
  for (int64_t layer = layers - 1; layer >= 0; --layer) {
    // Past the last layer the incoming gradients are the previous layer_backward's, which nothing else reads.
    std::vector<at::Tensor> grads = layer_backward(grad, grad_normed, saved.slice(saved_count * layer, saved_count), heads, p, layer < layers - 1);
    grad = std::move(grads[0]);
    grad_normed = std::move(grads[1]);
    std::move(grads.begin() + 2, grads.end(), results.begin() + 2 + parameter_count * layer);
  }
  results[0] = std::move(*grad);
  results[1] = std::move(*grad_normed);
  return results;
}

}  // namespace

TORCH_LIBRARY(stacklm_attention, library) {
  library.def("forward", &forward);
  library.def("backward", &backward);
  library.def("layers_forward", &layers_forward);
  library.def("layers_backward", &layers_backward);
}
