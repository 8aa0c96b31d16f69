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
// One (b, h) pair per task, each task's buffers allocated once (Workspace). Every product is one
// shape: rows of a small matrix times W lanes (W queries, or for dk and dv W keys), R rows at a
// time in registers (rows_times_lanes). Scores and probabilities are held key-major, [j][i] with
// i in lanes, so the softmax over j is lane-wise; the backward also writes P' and s·dS
// query-major for dk and dv. Queries past n (padding to whole lanes) are zero and never written
// out; masked keys get probability 0.

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

// glibc's vector math library has SIMD exp; declared here so that `omp simd` loops call it
// (glibc declares it only under -ffast-math, which would also assume no −∞, and masked scores are −∞).
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) double exp(double);
}

namespace stacklm_dropout {
// dropout.cpp: round(p · 2³²), and words first_word … first_word + count − 1 of the Philox stream keyed by seed.
uint32_t threshold(double p);
void stream_words(int64_t first_word, int64_t count, uint64_t seed, uint32_t* words);
}  // namespace stacklm_dropout

namespace {

constexpr int64_t W = 8;  // lanes: one AVX2 register of floats
constexpr int R = 8;      // rows per block of rows_times_lanes: independent accumulators

template <typename scalar_t>
struct Lanes {
  typedef scalar_t type __attribute__((vector_size(W * sizeof(scalar_t))));
};

template <typename scalar_t>
typename Lanes<scalar_t>::type load(const scalar_t* from) {
  typename Lanes<scalar_t>::type lanes;
  std::memcpy(&lanes, from, sizeof lanes);
  return lanes;
}

template <typename scalar_t>
void store(scalar_t* to, typename Lanes<scalar_t>::type lanes) {
  std::memcpy(to, &lanes, sizeof lanes);
}

// out[r · W + l] = Σ_k rows[r · row_stride + k · inner_stride] · lanes[k · lane_stride + l] for
// r < ROWS, l < W.
template <int ROWS, typename scalar_t>
void block_times_lanes(
    const scalar_t* rows, int64_t row_stride, int64_t inner_stride, int64_t inner, const scalar_t* lanes, int64_t lane_stride,
    scalar_t* out) {
  using Vector = typename Lanes<scalar_t>::type;
  Vector sums[ROWS];
  for (int r = 0; r < ROWS; ++r) sums[r] = Vector{};
  for (int64_t k = 0; k < inner; ++k) {
    const Vector lane = load(lanes + k * lane_stride);
    const scalar_t* column = rows + k * inner_stride;
    for (int r = 0; r < ROWS; ++r) sums[r] += column[r * row_stride] * lane;
  }
  for (int r = 0; r < ROWS; ++r) store(out + r * W, sums[r]);
}

// block_times_lanes for rows 0 … count − 1, R at a time.
template <typename scalar_t>
void rows_times_lanes(
    int64_t count, const scalar_t* rows, int64_t row_stride, int64_t inner_stride, int64_t inner, const scalar_t* lanes,
    int64_t lane_stride, scalar_t* out) {
  int64_t row = 0;
  for (; row + R <= count; row += R) {
    block_times_lanes<R>(rows + row * row_stride, row_stride, inner_stride, inner, lanes, lane_stride, out + row * W);
  }
  for (; row < count; ++row) {
    block_times_lanes<1>(rows + row * row_stride, row_stride, inner_stride, inner, lanes, lane_stride, out + row * W);
  }
}

// exp of each lane. float: Cody–Waite reduction x = k·ln 2 + r, |r| ≤ ln 2 / 2, and Cephes' degree-6
// polynomial for exp(r) (within 2 ulp of exp), inline so that a lane of −∞ (a masked score)
// does not send the whole vector to glibc's scalar fallback; exp(x) = 0 below −87.33 (where it
// leaves the normal floats). double: glibc's exp lane by lane.
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
  int64_t padded() const { return tiles() * W; }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(head_width)); }  // of the scores q·k
};

// One (b, h) pair's rows in the packed projection (or its gradient): q_i at queries + i · stride,
// k_i and v_i d and 2d further; its head's columns of the outputs (B, n, d) (or their gradient):
// row i at output + i · width.
struct Pair {
  int64_t offset, stride, width, output;
  Pair(const Shape& shape, int64_t pair)
      : offset(pair / shape.heads * shape.length * 3 * shape.width() + pair % shape.heads * shape.head_width),
        stride(3 * shape.width()),
        width(shape.width()),
        output(pair / shape.heads * shape.length * shape.width() + pair % shape.heads * shape.head_width) {}
  template <typename T> T* queries(T* packed) const { return packed + offset; }
  template <typename T> T* keys(T* packed) const { return packed + offset + width; }
  template <typename T> T* values(T* packed) const { return packed + offset + 2 * width; }
};

// The factors mask_ij / (1 − p) (0 or the scale) of keys j < rows in tile row W·tile_key …
// and queries i in the W lanes of tile column tile_query, key-major: factors[(j − W·tile_key) · W + l].
template <typename scalar_t>
void tile_factors(const Shape& shape, int64_t pair, int64_t tile_key, int64_t tile_query, double p, uint64_t seed, scalar_t* factors) {
  if (p == 0) {
    std::fill(factors, factors + W * W, scalar_t(1));
    return;
  }
  uint32_t words[W * W];
  const int64_t tiles = shape.tiles();
  stacklm_dropout::stream_words(((pair * tiles + tile_key) * tiles + tile_query) * W * W, W * W, seed, words);
  const uint32_t cut = stacklm_dropout::threshold(p);
  const scalar_t scale = static_cast<scalar_t>(1.0 / (1.0 - p));
#pragma omp simd
  for (int64_t e = 0; e < W * W; ++e) factors[e] = words[e] >= cut ? scale : scalar_t(0);
}

// The factors of keys 0 … W·(tile_query + 1) − 1 and the lanes of tile column tile_query.
template <typename scalar_t>
void chunk_factors(const Shape& shape, int64_t pair, int64_t tile_query, double p, uint64_t seed, scalar_t* factors) {
  for (int64_t tile_key = 0; tile_key <= tile_query; ++tile_key) {
    tile_factors(shape, pair, tile_key, tile_query, p, seed, factors + tile_key * W * W);
  }
}

// The W × W tile rows[r · W + l] written transposed: columns[l · column_stride + r], in three
// rounds of shuffles (pairs of lanes, then pairs of pairs, then halves).
template <typename scalar_t>
void transpose_tile(const scalar_t* rows, scalar_t* columns, int64_t column_stride) {
  static_assert(W == 8, "transpose_tile shuffles 8 lanes");
  using Vector = typename Lanes<scalar_t>::type;
  Vector r[W], t[W], u[W];
  for (int64_t k = 0; k < W; ++k) r[k] = load(rows + k * W);
  for (int64_t k = 0; k < W; k += 2) {
    t[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 2, 10, 4, 12, 6, 14);
    t[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int64_t k = 0; k < W; k += 4) {
    u[k] = __builtin_shufflevector(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);      // lanes 0, 4
    u[k + 1] = __builtin_shufflevector(t[k + 1], t[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);  // lanes 1, 5
    u[k + 2] = __builtin_shufflevector(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);    // lanes 2, 6
    u[k + 3] = __builtin_shufflevector(t[k + 1], t[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);  // lanes 3, 7
  }
  for (int64_t k = 0; k < 4; ++k) {
    store(columns + k * column_stride, __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11));
    store(columns + (k + 4) * column_stride, __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15));
  }
}

// out[l · out_stride + c] = lanes[c · W + l] for rows l < count and columns c < dh: whole tiles
// where all W rows are written, the rest one by one.
template <typename scalar_t>
void lanes_to_rows(const scalar_t* lanes, int64_t dh, int64_t count, scalar_t* out, int64_t out_stride) {
  int64_t c = 0;
  if (count == W) {
    for (; c + W <= dh; c += W) transpose_tile(lanes + c * W, out + c, out_stride);
  }
  for (; c < dh; ++c) {
    for (int64_t l = 0; l < count; ++l) out[l * out_stride + c] = lanes[c * W + l];
  }
}

// The d/heads columns of n rows (at rows + i · stride) as lanes, times factor: result[c · n_pad + i];
// lanes i ≥ n are left as they are (zero in a fresh workspace, and never written).
template <typename scalar_t>
void transpose_into(const scalar_t* rows, int64_t stride, int64_t n, int64_t padded, int64_t dh, scalar_t factor, scalar_t* result) {
  for (int64_t c = 0; c < dh; ++c) {
    for (int64_t i = 0; i < n; ++i) result[c * padded + i] = factor * rows[i * stride + c];
  }
}

// One task's buffers, allocated once for all its pairs. Lanes past n of the transposed rows are
// never written, so they stay zero.
template <typename scalar_t>
struct Workspace {
  std::vector<scalar_t> transposed;  // (d/heads, n_pad): s·q (forward) or dO (backward), queries in lanes
  std::vector<scalar_t> scores, factors;  // (n_pad, W): key-major, this chunk's queries in lanes
  std::vector<scalar_t> lanes, value_lanes;  // (d/heads, W): o (forward) or dq, then dk and dv (backward)
  std::vector<scalar_t> kept_by_query, grad_scores_by_query;  // (n_pad, n_pad): query-major P' and s·dS (backward)
  Workspace(const Shape& shape, bool backward)
      : transposed(shape.head_width * shape.padded(), scalar_t(0)),
        scores(shape.padded() * W),
        factors(shape.padded() * W),
        lanes(shape.head_width * W),
        value_lanes(shape.head_width * W),
        kept_by_query(backward ? shape.padded() * shape.padded() : 0, scalar_t(0)),
        grad_scores_by_query(backward ? shape.padded() * shape.padded() : 0, scalar_t(0)) {}
};

// The forward of one pair. P is stored key-major with the mask in its sign: P_ij where kept, −P_ij
// where dropped (P ≥ 0, and where P = 0 the mask changes nothing in the backward), so the backward
// draws no mask.
template <typename scalar_t>
void forward_pair(
    const Shape& shape, int64_t pair, const scalar_t* projected, scalar_t* out, scalar_t* probabilities, double p, uint64_t seed,
    Workspace<scalar_t>& work) {
  using Vector = typename Lanes<scalar_t>::type;
  const int64_t n = shape.length, dh = shape.head_width, padded = shape.padded();
  const Pair heads(shape, pair);
  const scalar_t* queries = heads.queries(projected);
  const scalar_t* keys = heads.keys(projected);
  const scalar_t* values = heads.values(projected);
  const scalar_t scale = static_cast<scalar_t>(shape.scale());
  transpose_into(queries, heads.stride, n, padded, dh, scale, work.transposed.data());
  scalar_t* scores = work.scores.data();
  scalar_t* factors = work.factors.data();
  scalar_t* attended = work.lanes.data();
  scalar_t* pair_probabilities = probabilities + pair * n * padded;
  const scalar_t minus_infinity = -std::numeric_limits<scalar_t>::infinity();
  for (int64_t first = 0; first < n; first += W) {
    const int64_t keys_seen = std::min(n, first + W);  // keys j ≤ the lanes' last query
    rows_times_lanes(keys_seen, keys, heads.stride, int64_t(1), dh, work.transposed.data() + first, padded, scores);
    for (int64_t j = first; j < keys_seen; ++j) {
      for (int64_t l = 0; l < j - first; ++l) scores[j * W + l] = minus_infinity;  // i = first + l < j
    }
    Vector maximum = load(scores);
    for (int64_t j = 1; j < keys_seen; ++j) {
      const Vector score = load(scores + j * W);
      maximum = score > maximum ? score : maximum;
    }
    Vector total{};
    for (int64_t j = 0; j < keys_seen; ++j) {
      const Vector probability = exp_lanes<scalar_t>(load(scores + j * W) - maximum);
      store(scores + j * W, probability);
      total += probability;
    }
    chunk_factors(shape, pair, first / W, p, seed, factors);
    for (int64_t j = 0; j < keys_seen; ++j) {
      const Vector probability = load(scores + j * W) / total, factor = load(factors + j * W);
      store(pair_probabilities + j * padded + first, factor > 0 ? probability : -probability);
      store(scores + j * W, probability * factor);  // P'
    }
    rows_times_lanes(dh, values, int64_t(1), heads.stride, keys_seen, scores, W, attended);
    lanes_to_rows(attended, dh, std::min(W, n - first), out + heads.output + first * heads.width, heads.width);
  }
}

// The backward of one pair: per chunk of W queries (in lanes) dP', dS and dq; then per chunk of W
// keys (in lanes) dk and dv, summing over the queries that see them, from query-major copies of
// P' and s·dS. Entries of those copies that no query writes (keys j > i in a diagonal tile, where
// P' and dS are 0, or keys past n, whose lanes are never written out) are not read for results.
template <typename scalar_t>
void backward_pair(
    const Shape& shape, int64_t pair, const scalar_t* grad_out, const scalar_t* projected, const scalar_t* probabilities,
    scalar_t* grad_projected, double p, Workspace<scalar_t>& work) {
  using Vector = typename Lanes<scalar_t>::type;
  const int64_t n = shape.length, dh = shape.head_width, padded = shape.padded();
  const Pair heads(shape, pair);
  const scalar_t* queries = heads.queries(projected);
  const scalar_t* keys = heads.keys(projected);
  const scalar_t* values = heads.values(projected);
  const scalar_t* grad_outs = grad_out + heads.output;  // dO_i at i · d
  const scalar_t scale = static_cast<scalar_t>(shape.scale());
  const scalar_t keep_scale = static_cast<scalar_t>(1.0 / (1.0 - p));
  transpose_into(grad_outs, heads.width, n, padded, dh, scalar_t(1), work.transposed.data());
  scalar_t* grads = work.scores.data();
  scalar_t* kept = work.factors.data();
  scalar_t* lanes = work.lanes.data();
  scalar_t* value_lanes = work.value_lanes.data();
  scalar_t* kept_by_query = work.kept_by_query.data();
  scalar_t* grad_scores_by_query = work.grad_scores_by_query.data();
  const scalar_t* pair_probabilities = probabilities + pair * n * padded;
  scalar_t* grad_queries = heads.queries(grad_projected);
  for (int64_t first = 0; first < n; first += W) {
    const int64_t keys_seen = std::min(n, first + W);
    rows_times_lanes(keys_seen, values, heads.stride, int64_t(1), dh, work.transposed.data() + first, padded, grads);  // dP'
    Vector dot{};
    for (int64_t j = 0; j < keys_seen; ++j) {
      const Vector stored = load(pair_probabilities + j * padded + first);  // P, negated where dropped
      const Vector probability = stored < 0 ? -stored : stored;
      const Vector factor = stored < 0 ? Vector{} : Vector{} + keep_scale;
      const Vector grad = load(grads + j * W) * factor;  // dP
      dot += probability * grad;
      store(grads + j * W, grad);
      store(kept + j * W, probability * factor);  // P'
    }
    for (int64_t j = 0; j < keys_seen; ++j) {
      const Vector stored = load(pair_probabilities + j * padded + first);
      const Vector probability = stored < 0 ? -stored : stored;
      store(grads + j * W, scale * probability * (load(grads + j * W) - dot));  // s · dS
    }
    for (int64_t tile = 0; tile < keys_seen; tile += W) {  // keys past keys_seen land in lanes never written out
      transpose_tile(kept + tile * W, kept_by_query + first * padded + tile, padded);
      transpose_tile(grads + tile * W, grad_scores_by_query + first * padded + tile, padded);
    }
    rows_times_lanes(dh, keys, int64_t(1), heads.stride, keys_seen, grads, W, lanes);  // dq
    lanes_to_rows(lanes, dh, std::min(W, n - first), grad_queries + first * heads.stride, heads.stride);
  }
  // Keys j in lanes, summing over the queries i ≥ j that see them.
  scalar_t* grad_keys = heads.keys(grad_projected);
  scalar_t* grad_values = heads.values(grad_projected);
  for (int64_t first = 0; first < n; first += W) {
    const int64_t seen_by = n - first;
    const scalar_t* grad_scores = grad_scores_by_query + first * padded + first;
    rows_times_lanes(dh, queries + first * heads.stride, int64_t(1), heads.stride, seen_by, grad_scores, padded, lanes);
    const scalar_t* kept_here = kept_by_query + first * padded + first;
    rows_times_lanes(dh, grad_outs + first * heads.width, int64_t(1), heads.width, seen_by, kept_here, padded, value_lanes);
    lanes_to_rows(lanes, dh, std::min(W, n - first), grad_keys + first * heads.stride, heads.stride);
    lanes_to_rows(value_lanes, dh, std::min(W, n - first), grad_values + first * heads.stride, heads.stride);
  }
}

// Fetch count elements from start into the cache ahead of use: a batch element's rows are read
// head by head, 17 of every 204 floats at a time, a stride the hardware does not fetch ahead.
template <typename scalar_t>
void prefetch(const scalar_t* start, int64_t count) {
  const char* bytes = reinterpret_cast<const char*>(start);
  for (int64_t byte = 0; byte < count * int64_t(sizeof(scalar_t)); byte += 64) __builtin_prefetch(bytes + byte);
}

Shape check_projected(const at::Tensor& projected, int64_t heads, double p) {
  TORCH_CHECK(projected.is_cpu() && projected.is_contiguous() && projected.dim() == 3, "attention: a contiguous (B, n, 3d) CPU tensor");
  TORCH_CHECK(heads > 0 && projected.size(2) % (3 * heads) == 0, "attention: 3d must be divisible by 3 · heads");
  TORCH_CHECK(p >= 0 && p < 1, "attention: p must lie in [0, 1)");
  return Shape{projected.size(0), projected.size(1), heads, projected.size(2) / (3 * heads)};
}

// (out (B, n, d), P (B·heads, n, n_pad) key-major with the mask in its sign, lanes of masked i < j or padded i ≥ n holding 0 or values never read) of the packed projection (B, n, 3d).
std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& projected, int64_t heads, double p, int64_t seed) {
  const Shape shape = check_projected(projected, heads, p);
  at::Tensor out = at::empty({shape.batch, shape.length, shape.width()}, projected.options());
  at::Tensor probabilities = at::empty({shape.batch * heads, shape.length, shape.padded()}, projected.options());
  if (shape.length == 0) return {out, probabilities};
  AT_DISPATCH_FLOATING_TYPES(projected.scalar_type(), "attention_forward", [&] {
    const scalar_t* projected_data = projected.data_ptr<scalar_t>();
    scalar_t* out_data = out.data_ptr<scalar_t>();
    scalar_t* probability_data = probabilities.data_ptr<scalar_t>();
    at::parallel_for(0, shape.batch * heads, 1, [&](int64_t begin, int64_t end) {
      Workspace<scalar_t> work(shape, false);
      for (int64_t pair = begin; pair < end; ++pair) {
        if (pair % heads == 0 && pair / heads + 1 < shape.batch) {
          const int64_t next = pair / heads + 1, block = shape.length * 3 * shape.width();
          prefetch(projected_data + next * block, block);
        }
        forward_pair<scalar_t>(shape, pair, projected_data, out_data, probability_data, p, static_cast<uint64_t>(seed), work);
      }
    });
  });
  return {out, probabilities};
}

// The gradient of the packed projection (B, n, 3d) from that of the output (B, n, d).
at::Tensor backward(const at::Tensor& grad_out, const at::Tensor& projected, const at::Tensor& probabilities, int64_t heads, double p) {
  const Shape shape = check_projected(projected, heads, p);
  TORCH_CHECK(grad_out.is_contiguous() && grad_out.size(2) == shape.width(), "attention_backward: a contiguous (B, n, d) gradient");
  at::Tensor grad_projected = at::empty_like(projected);
  if (shape.length == 0) return grad_projected;
  AT_DISPATCH_FLOATING_TYPES(projected.scalar_type(), "attention_backward", [&] {
    const scalar_t* grad_out_data = grad_out.data_ptr<scalar_t>();
    const scalar_t* projected_data = projected.data_ptr<scalar_t>();
    const scalar_t* probability_data = probabilities.data_ptr<scalar_t>();
    scalar_t* grad_data = grad_projected.data_ptr<scalar_t>();
    at::parallel_for(0, shape.batch * heads, 1, [&](int64_t begin, int64_t end) {
      Workspace<scalar_t> work(shape, true);
      for (int64_t pair = begin; pair < end; ++pair) {
        if (pair % heads == 0 && pair / heads + 1 < shape.batch) {
          const int64_t next = pair / heads + 1, block = shape.length * 3 * shape.width(), rows = shape.length * shape.width();
          const int64_t kept = heads * shape.length * shape.padded();
          prefetch(projected_data + next * block, block);
          prefetch(grad_out_data + next * rows, rows);
          prefetch(probability_data + next * kept, kept);
          prefetch(grad_data + next * block, block);
        }
        backward_pair<scalar_t>(shape, pair, grad_out_data, projected_data, probability_data, grad_data, p, work);
      }
    });
  });
  return grad_projected;
}

}  // namespace

TORCH_LIBRARY(stacklm_attention, library) {
  library.def("forward", &forward);
  library.def("backward", &backward);
}
