// The nondeterministic stack over symbols (NS, NS+S, NS+U, NS+S+U; full stack) one step per call,
// forward and exact backward, on CPU. ``symbol_stack.py`` states the recurrences in the paper's
// notation; this file follows its names.
//
// Every op runs on groups of LANE_COUNT batch elements (lanes.h), the batch's last few in a group of
// 2 or 4 lanes (``group_width``), one lane per element, every table stored [position][lane], so each
// operation of the DP is one vector operation over the group. A group of fewer elements repeats its
// last element in the spare lanes and drops what they give. One group per task (at::parallel_for).
//
// Per element, the entries [i][a][c] of columns t = 1 … n (rows i < t) lie in one flat table by
// row (i, a), each row's columns k = i+1 … capacity side by side (``Sizes::entry``), so the pop
// of a row at step t reads its columns i+1 … t−2 in one contiguous run:
//   shares:   Ŝ_t[i][a][c] = α[i][a] γ[i→t][a,c] / α[t][c] ∈ [0, 1]
//   adjoint:  H_t[i][a][c] = (∂L/∂ log γ[i→t][a,c]) / Ŝ_t[i][a][c], accumulated by the backward
// and per step: alpha  α̂[t] = α[t] / max_c α[t][c];  scales g[c], f[c], the factors of target c's
// push-and-replace and pop terms at step t (``step_products``, ``forward_group``); totals T_t[c],
// the terms' sum over (i, a) at that scale; grad_alpha e_t[c] = ∂L/∂ log α[t][c].

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
#include <limits>
#include <vector>

#include "lanes.h"

// glibc's vector math library (libmvec) has SIMD exp and log; declared here so that the `omp simd`
// loops of ``lanes_exp`` and ``lanes_log`` call them (glibc declares them only under -ffast-math,
// which this file does not use).
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) double exp(double);
__attribute__((simd("notinbranch"))) float logf(float);
__attribute__((simd("notinbranch"))) double log(double);
}

namespace {

using stacklm_lanes::LANE_COUNT;

// L lanes of T: LANE_COUNT in a batch's full groups, 2 or 4 in a group of its last few elements (``group_width``).
template <typename T, int L>
struct VectorOf {
  typedef T type __attribute__((vector_size(L * sizeof(T)), aligned(sizeof(T))));
};

template <typename T, int L>
using Vec = typename VectorOf<T, L>::type;

template <typename T, int L>
Vec<T, L> splat(T value) {
  Vec<T, L> result;
  for (int64_t lane = 0; lane < L; ++lane) result[lane] = value;
  return result;
}

template <typename T, int L>
Vec<T, L> maximum(Vec<T, L> left, Vec<T, L> right) {
  return left > right ? left : right;
}

// 1 / x where x > 0, else 0.
template <typename T, int L>
Vec<T, L> inverse_or_zero(Vec<T, L> value) {
  const Vec<T, L> zero = splat<T, L>(0);
  return value > zero ? splat<T, L>(1) / value : zero;
}

struct Sizes {
  int64_t states, symbols, configs, capacity;

  // Where the N entries [i][a][·] of column k (i < k ≤ capacity) start: the rows (i', a') before
  // (i, a) hold capacity − i' columns each.
  int64_t entry(int64_t i, int64_t a, int64_t k) const {
    return configs * (configs * (i * capacity - i * (i - 1) / 2) + a * (capacity - i) + (k - i - 1));
  }
  int64_t table() const { return configs * configs * capacity * (capacity + 1) / 2; }
  int64_t columns() const { return (capacity + 1) * configs; }  // α̂[0 … capacity][c], or T_t[c]
};

// exp and log of each lane, through libmvec's vector functions where the loop vectorizes (the DP's
// few per step, about 2N² + NQ exps per group; the products are vector operations).
template <typename T, int L>
Vec<T, L> lanes_exp(Vec<T, L> value) {
  T lanes[L];
  std::memcpy(lanes, &value, sizeof lanes);
#pragma omp simd
  for (int lane = 0; lane < L; ++lane) lanes[lane] = std::exp(lanes[lane]);
  std::memcpy(&value, lanes, sizeof lanes);
  return value;
}

template <typename T, int L>
Vec<T, L> lanes_log(Vec<T, L> value) {
  T lanes[L];
  std::memcpy(lanes, &value, sizeof lanes);
#pragma omp simd
  for (int lane = 0; lane < L; ++lane) lanes[lane] = std::log(lanes[lane]);
  std::memcpy(&value, lanes, sizeof lanes);
  return value;
}

// −∞ (no term) as 0, so that subtracting it never gives NaN.
template <typename T, int L>
Vec<T, L> finite_or_zero(Vec<T, L> value) {
  const Vec<T, L> limit = splat<T, L>(std::numeric_limits<T>::max());
  return value >= -limit ? value : splat<T, L>(0);
}

// Step t's log transition weights in lanes: push log Δ⁺[a][c], replace log Δ^R[b][c], pop log Δ⁻[b][r].
template <typename T, int L>
struct LogWeights {
  std::vector<Vec<T, L>> push, replace, pop;
};

// Row b of element e's logits holds [log Δ⁺[b,·] ; log Δ^R[b,·] ; log Δ⁻[b,·]] (2N + Q columns, the
// layout of NondeterministicActions.from_logits), less its log-sum-exp where ``normalize`` (eq. 1's softmax
// per (q, x)). Lanes past the batch repeat its last element.
template <typename T, int L>
LogWeights<T, L> load_weights(const Sizes& sizes, const at::Tensor& logits, bool normalize, int64_t first) {
  const int64_t N = sizes.configs, Q = sizes.states, width = 2 * N + Q, batch = logits.size(0);
  LogWeights<T, L> weights{std::vector<Vec<T, L>>(N * N), std::vector<Vec<T, L>>(N * N), std::vector<Vec<T, L>>(N * Q)};
  std::vector<Vec<T, L>> row(width);
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t lane = 0; lane < L; ++lane) {
      const T* element = logits.data_ptr<T>() + std::min(first + lane, batch - 1) * logits.stride(0) + b * width;
      for (int64_t j = 0; j < width; ++j) row[j][lane] = element[j];
    }
    Vec<T, L> offset = splat<T, L>(0);
    if (normalize) {
      Vec<T, L> largest = row[0], sum = splat<T, L>(0);
      for (int64_t j = 1; j < width; ++j) largest = maximum<T, L>(largest, row[j]);
      for (int64_t j = 0; j < width; ++j) sum += lanes_exp<T, L>(row[j] - largest);
      offset = largest + lanes_log<T, L>(sum);
    }
    for (int64_t c = 0; c < N; ++c) {
      weights.push[b * N + c] = row[c] - offset;
      weights.replace[b * N + c] = row[N + c] - offset;
    }
    for (int64_t r = 0; r < Q; ++r) weights.pop[b * Q + r] = row[2 * N + r] - offset;
  }
  return weights;
}

// The step-t products shared by forward and backward, each target's own scale:
//   κ[c] = max_b (log α̂[t−1][b] + max(log Δ⁺[b,c], log Δ^R[b,c])),  λ[r] = max_b (log α̂[t−1][b] + log Δ⁻[b,r]);
//   wD[a][c] = α̂[t−1][a] Δ⁺[a,c] / e^κ[c],  wR[b][c] = α̂[t−1][b] Δ^R[b,c] / e^κ[c],  wP[b][r] = α̂[t−1][b] Δ⁻[b,r] / e^λ[r]
// (each at most 1, the largest 1), and W[k][d][r] = Σ_b Ŝ_{t−1}[k][d][b] wP[b][r] for k ≤ t−2. Since the
// shares of column t−1 into b sum to 1 wherever α[t−1][b] > 0, the push and replace terms of target c
// sum to at least 1 at the scale e^κ[c] (t ≥ 2; at t = 1 κ takes the push alone): they never all underflow.
template <typename T, int L>
struct StepProducts {
  std::vector<Vec<T, L>> push_offset, pop_offset, push, replace, pop, flow;
};

template <typename T, int L, int QC, int SC>
StepProducts<T, L> step_products(const Sizes& sizes, const LogWeights<T, L>& weights, const Vec<T, L>* previous_alpha,
                              const Vec<T, L>* shares, int64_t t) {
  const int64_t Q = QC ? QC : sizes.states, S = SC ? SC : sizes.symbols, N = Q * S;
  const Vec<T, L> none = splat<T, L>(-std::numeric_limits<T>::infinity());
  StepProducts<T, L> products{std::vector<Vec<T, L>>(N, none), std::vector<Vec<T, L>>(Q, none), std::vector<Vec<T, L>>(N * N),
                           std::vector<Vec<T, L>>(N * N), std::vector<Vec<T, L>>(N * Q),
                           std::vector<Vec<T, L>>(std::max<int64_t>(t - 1, 0) * N * Q)};
  std::vector<Vec<T, L>> log_alpha(N);
  for (int64_t b = 0; b < N; ++b) log_alpha[b] = lanes_log<T, L>(previous_alpha[b]);
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t c = 0; c < N; ++c) {
      // At t = 1 column 0 has no rows to replace in: only the push reaches column 1.
      const Vec<T, L> largest = t >= 2 ? maximum<T, L>(weights.push[b * N + c], weights.replace[b * N + c]) : weights.push[b * N + c];
      products.push_offset[c] = maximum<T, L>(products.push_offset[c], log_alpha[b] + largest);
    }
    for (int64_t r = 0; r < Q; ++r) products.pop_offset[r] = maximum<T, L>(products.pop_offset[r], log_alpha[b] + weights.pop[b * Q + r]);
  }
  for (int64_t c = 0; c < N; ++c) products.push_offset[c] = finite_or_zero<T, L>(products.push_offset[c]);
  for (int64_t r = 0; r < Q; ++r) products.pop_offset[r] = finite_or_zero<T, L>(products.pop_offset[r]);
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t c = 0; c < N; ++c) {
      products.push[b * N + c] = lanes_exp<T, L>(log_alpha[b] + weights.push[b * N + c] - products.push_offset[c]);
      products.replace[b * N + c] = lanes_exp<T, L>(log_alpha[b] + weights.replace[b * N + c] - products.push_offset[c]);
    }
    for (int64_t r = 0; r < Q; ++r) products.pop[b * Q + r] = lanes_exp<T, L>(log_alpha[b] + weights.pop[b * Q + r] - products.pop_offset[r]);
  }
  for (int64_t kd = 0; kd < (t - 1) * N; ++kd) {
    const Vec<T, L>* previous = shares + sizes.entry(kd / N, kd % N, t - 1);
    Vec<T, L> sums[QC ? QC : 16] = {};
    for (int64_t b = 0; b < N; ++b) {
      const Vec<T, L> share = previous[b];
      for (int64_t r = 0; r < Q; ++r) sums[r] += share * products.pop[b * Q + r];
    }
    for (int64_t r = 0; r < Q; ++r) products.flow[kd * Q + r] = sums[r];
  }
  return products;
}

// Column t's terms at their target's scale e^μ[c]: the push and replace terms scaled by
// g[c] = e^(κ[c] − μ[c]), the pop terms by f[c] = e^(λ[r] − μ[c]) (0 where step t has no pop term
// into c), μ[c] the larger of the two parts' log sums, so neither part underflows where the other
// is large. The forward stores g and f (``scales``: [0][c] g, [1][c] f) for the backward.
template <typename T, int L>
Vec<T, L> bounded_exp(Vec<T, L> value) {
  const Vec<T, L> limit = splat<T, L>(std::log(std::numeric_limits<T>::max()) - 1);
  return lanes_exp<T, L>(value < limit ? value : limit);
}

// The direction of a step's pass over the triangle (rows i, groups), alternating from step to step
// and from the last forward step to the first backward one, so that a pass starts where the one
// before it ended, on what is still in the cache: the triangle of a group of 8 lanes outgrows this
// CPU's L2 (2 MB) from n ≈ 60 (|Q| = 2, |Γ| = 3, float32), and a pass in one direction evicts
// every line before the next pass reads it again.
bool forward_descending(int64_t t) { return t % 2 == 1; }
bool backward_descending(int64_t t) { return t % 2 == 0; }

// Rows (i, a) taken together by the forward's pop of a group of L lanes: 3 in a full group, whose
// loads of W[k] (N·|Q| vectors per column k against the row's N shares, from L2 once the rows'
// shares have pushed them out of L1) cost more than the shares' own; one in a group of 2 or 4
// lanes, where taking rows together did not pay (its W stays in L1).
constexpr int64_t pop_rows_of(int L) { return L == LANE_COUNT ? 3 : 1; }

template <typename T, int L, int QC, int SC>
void forward_group(const Sizes& sizes, int64_t t, const LogWeights<T, L>& weights, Vec<T, L>* shares, Vec<T, L>* alpha,
                   Vec<T, L>* totals, Vec<T, L>* scales) {
  const int64_t Q = QC ? QC : sizes.states, S = SC ? SC : sizes.symbols, N = Q * S;
  const StepProducts<T, L> products = step_products<T, L, QC, SC>(sizes, weights, alpha + (t - 1) * N, shares, t);
  std::vector<Vec<T, L>> push_total(N, splat<T, L>(0)), pop_total(N, splat<T, L>(0));
  std::vector<Vec<T, L>> popped(t * N * N, splat<T, L>(0));  // the pop terms of each row, until μ is known
  // Rows i ≤ t−2: replace Σ_b Ŝ_{t−1}[i][a][b] wR[b][c], pop Σ_k Σ_u Ŝ_k[i][a][(u,y)] W[k][(u,y)][r],
  // in the direction of ``forward_descending`` (the rows that step t − 1 read last first).
  for (int64_t step = 0; step + 2 <= t; ++step) {
    const int64_t i = forward_descending(t) ? t - 2 - step : step;
    for (int64_t a = 0; a < N; ++a) {
      Vec<T, L> sums[QC && SC ? QC * SC : 64] = {};
      const Vec<T, L>* previous = shares + sizes.entry(i, a, t - 1);
      for (int64_t b = 0; b < N; ++b) {
        const Vec<T, L> share = previous[b];
        for (int64_t c = 0; c < N; ++c) sums[c] += share * products.replace[b * N + c];
      }
      Vec<T, L>* column = shares + sizes.entry(i, a, t);
      for (int64_t c = 0; c < N; ++c) {
        column[c] = sums[c];
        push_total[c] += sums[c];
      }
    }
    // The pop of rows (i, a) … (i, a + R − 1) together: each load of W[k] serves R rows.
    for (int64_t a = 0; a < N; a += pop_rows_of(L)) {
      auto pop_rows = [&](auto count) {
        constexpr int R = decltype(count)::value;
        Vec<T, L> sums[R][QC && SC ? QC * SC : 64] = {};
        const Vec<T, L>* below[R];
        for (int row = 0; row < R; ++row) below[row] = shares + sizes.entry(i, a + row, i + 1);
        for (int64_t k = i + 1; k + 2 <= t; ++k) {
          const Vec<T, L>* flow = products.flow.data() + k * N * Q;
          for (int64_t u = 0; u < Q; ++u) {
            for (int64_t y = 0; y < S; ++y) {
              for (int row = 0; row < R; ++row) {
                const Vec<T, L> share = below[row][u * S + y];
                for (int64_t r = 0; r < Q; ++r) sums[row][r * S + y] += share * flow[(u * S + y) * Q + r];
              }
            }
          }
          for (int row = 0; row < R; ++row) below[row] += N;
        }
        for (int row = 0; row < R; ++row) {
          for (int64_t c = 0; c < N; ++c) {
            popped[(i * N + a + row) * N + c] = sums[row][c];
            pop_total[c] += sums[row][c];
          }
        }
      };
      const int64_t rows = std::min<int64_t>(pop_rows_of(L), N - a);
      if (rows == 3) {
        pop_rows(std::integral_constant<int, 3>());
      } else if (rows == 2) {
        pop_rows(std::integral_constant<int, 2>());
      } else {
        pop_rows(std::integral_constant<int, 1>());
      }
    }
  }
  // Row t−1: the push, wD[a][c].
  for (int64_t a = 0; a < N; ++a) {
    Vec<T, L>* column = shares + sizes.entry(t - 1, a, t);
    for (int64_t c = 0; c < N; ++c) {
      column[c] = products.push[a * N + c];
      push_total[c] += products.push[a * N + c];
    }
  }
  // μ[c], g, f, T_t[c] at that scale, and log α[t][c] − (the scale of α[t−1]) = μ[c] + log T_t[c].
  std::vector<Vec<T, L>> log_alpha(N), inverse(N);
  Vec<T, L>* push_scale = scales + t * 2 * N;
  Vec<T, L>* pop_scale = push_scale + N;
  Vec<T, L> largest = splat<T, L>(-std::numeric_limits<T>::infinity());
  const Vec<T, L> zero = splat<T, L>(0);
  for (int64_t c = 0; c < N; ++c) {
    const Vec<T, L> push_log = products.push_offset[c] + lanes_log<T, L>(push_total[c]);
    const Vec<T, L> pop_log = products.pop_offset[c / S] + lanes_log<T, L>(pop_total[c]);
    const Vec<T, L> offset = finite_or_zero<T, L>(maximum<T, L>(push_log, pop_log));
    push_scale[c] = bounded_exp<T, L>(products.push_offset[c] - offset);
    pop_scale[c] = pop_total[c] > zero ? bounded_exp<T, L>(products.pop_offset[c / S] - offset) : zero;
    const Vec<T, L> total = push_total[c] * push_scale[c] + pop_total[c] * pop_scale[c];
    totals[t * N + c] = total;
    inverse[c] = inverse_or_zero<T, L>(total);
    log_alpha[c] = offset + lanes_log<T, L>(total);
    largest = maximum<T, L>(largest, log_alpha[c]);
  }
  largest = finite_or_zero<T, L>(largest);
  for (int64_t row = 0; row < t * N; ++row) {
    Vec<T, L>* column = shares + sizes.entry(row / N, row % N, t);
    for (int64_t c = 0; c < N; ++c) column[c] = (column[c] * push_scale[c] + popped[row * N + c] * pop_scale[c]) * inverse[c];
  }
  for (int64_t c = 0; c < N; ++c) alpha[t * N + c] = lanes_exp<T, L>(log_alpha[c] - largest);
}

template <typename T, int L, int QC, int SC>
void backward_group(const Sizes& sizes, int64_t t, const LogWeights<T, L>& weights, const Vec<T, L>* shares,
                    const Vec<T, L>* alpha, const Vec<T, L>* totals, const Vec<T, L>* scales, Vec<T, L>* adjoint,
                    Vec<T, L>* grad_alpha, std::vector<Vec<T, L>>& grad_push, std::vector<Vec<T, L>>& grad_replace,
                    std::vector<Vec<T, L>>& grad_pop) {
  const int64_t Q = QC ? QC : sizes.states, S = SC ? SC : sizes.symbols, N = Q * S;
  const Vec<T, L>* step_grad_alpha = grad_alpha + t * N;
  // α[t][c] = Σ_{i,a} α[i][a] γ[i→t][a,c]: each term's share of e_t[c].
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t a = 0; a < N; ++a) {
      const Vec<T, L>* column = shares + sizes.entry(i, a, t);
      Vec<T, L>* column_adjoint = adjoint + sizes.entry(i, a, t);
      Vec<T, L> to_alpha = splat<T, L>(0);
      for (int64_t c = 0; c < N; ++c) {
        column_adjoint[c] += step_grad_alpha[c];
        to_alpha += step_grad_alpha[c] * column[c];
      }
      if (i > 0) grad_alpha[i * N + a] += to_alpha;
    }
  }
  for (int64_t a = 0; a < N; ++a) {
    const int64_t position = sizes.entry(t - 1, a, t);
    for (int64_t c = 0; c < N; ++c) grad_push[a * N + c] = adjoint[position + c] * shares[position + c];
  }
  if (t < 2) return;
  const StepProducts<T, L> products = step_products<T, L, QC, SC>(sizes, weights, alpha + (t - 1) * N, shares, t);
  std::vector<Vec<T, L>> replace_scale(N), pop_scale(N);  // g[c] / T_t[c], f[c] / T_t[c]
  for (int64_t c = 0; c < N; ++c) {
    const Vec<T, L> inverse = inverse_or_zero<T, L>(totals[t * N + c]);
    replace_scale[c] = scales[t * 2 * N + c] * inverse;
    pop_scale[c] = scales[t * 2 * N + N + c] * inverse;
  }
  std::vector<Vec<T, L>> replace_sums(N * N, splat<T, L>(0)), pop_sums(N * Q, splat<T, L>(0));
  std::vector<Vec<T, L>> flow_adjoint((t - 1) * N * Q, splat<T, L>(0));  // Z[k][d][r]
  constexpr int64_t most = QC && SC ? QC * SC : 64;
  for (int64_t step = 0; step + 2 <= t; ++step) {
    const int64_t i = backward_descending(t) ? t - 2 - step : step;  // as the forward's rows
    // Rows (i, a) and (i, a + 1) together: each W[k] and Z[k] access of the pop serves both.
    for (int64_t a = 0; a < N; a += 2) {
      const int64_t rows = std::min<int64_t>(2, N - a);
      Vec<T, L> pop_ratio[2][most];
      for (int64_t row = 0; row < rows; ++row) {
        // ρ[c] = H_t[i][a][c] / T_t[c], times the part's scale g[c] (replace) or f[c] (pop)
        Vec<T, L> replace_ratio[most];
        const Vec<T, L>* column_adjoint = adjoint + sizes.entry(i, a + row, t);
        for (int64_t c = 0; c < N; ++c) {
          replace_ratio[c] = column_adjoint[c] * replace_scale[c];
          pop_ratio[row][c] = column_adjoint[c] * pop_scale[c];
        }
        const Vec<T, L>* previous = shares + sizes.entry(i, a + row, t - 1);
        Vec<T, L>* previous_adjoint = adjoint + sizes.entry(i, a + row, t - 1);
        for (int64_t b = 0; b < N; ++b) {
          Vec<T, L> sum = splat<T, L>(0);
          const Vec<T, L> share = previous[b];
          for (int64_t c = 0; c < N; ++c) {
            sum += replace_ratio[c] * products.replace[b * N + c];
            replace_sums[b * N + c] += replace_ratio[c] * share;
          }
          previous_adjoint[b] += sum;
        }
      }
      auto pop_rows = [&](auto count) {
        constexpr int R = decltype(count)::value;
        const Vec<T, L>* below[R];
        Vec<T, L>* below_adjoint[R];
        for (int row = 0; row < R; ++row) {
          below[row] = shares + sizes.entry(i, a + row, i + 1);
          below_adjoint[row] = adjoint + sizes.entry(i, a + row, i + 1);
        }
        for (int64_t k = i + 1; k + 2 <= t; ++k) {
          const Vec<T, L>* flow = products.flow.data() + k * N * Q;
          Vec<T, L>* flow_sums = flow_adjoint.data() + k * N * Q;
          for (int64_t u = 0; u < Q; ++u) {
            for (int64_t y = 0; y < S; ++y) {
              const int64_t d = u * S + y;
              Vec<T, L> flow_sum[QC ? QC : 16] = {};
              for (int row = 0; row < R; ++row) {
                const Vec<T, L> share = below[row][d];
                Vec<T, L> sum = splat<T, L>(0);
                for (int64_t r = 0; r < Q; ++r) {
                  sum += pop_ratio[row][r * S + y] * flow[d * Q + r];
                  flow_sum[r] += pop_ratio[row][r * S + y] * share;
                }
                below_adjoint[row][d] += sum;
              }
              for (int64_t r = 0; r < Q; ++r) flow_sums[d * Q + r] += flow_sum[r];
            }
          }
          for (int row = 0; row < R; ++row) {
            below[row] += N;
            below_adjoint[row] += N;
          }
        }
      };
      if (rows == 2) {
        pop_rows(std::integral_constant<int, 2>());
      } else {
        pop_rows(std::integral_constant<int, 1>());
      }
    }
  }
  // γ'_t[k][d][r] = Σ_b γ[k→t−1][d,b] Δ⁻_t[b,r]: Z[k][d][r] is its ∂L/∂ log γ' over W[k][d][r].
  for (int64_t kd = 0; kd < (t - 1) * N; ++kd) {
    const Vec<T, L>* previous = shares + sizes.entry(kd / N, kd % N, t - 1);
    Vec<T, L>* previous_adjoint = adjoint + sizes.entry(kd / N, kd % N, t - 1);
    for (int64_t b = 0; b < N; ++b) {
      const Vec<T, L> share = previous[b];
      Vec<T, L> sum = splat<T, L>(0);
      for (int64_t r = 0; r < Q; ++r) {
        sum += flow_adjoint[kd * Q + r] * products.pop[b * Q + r];
        pop_sums[b * Q + r] += flow_adjoint[kd * Q + r] * share;
      }
      previous_adjoint[b] += sum;
    }
  }
  for (int64_t j = 0; j < N * N; ++j) grad_replace[j] = replace_sums[j] * products.replace[j];
  for (int64_t j = 0; j < N * Q; ++j) grad_pop[j] = pop_sums[j] * products.pop[j];
}

// A batch in groups of LANE_COUNT elements, but for its last batch mod LANE_COUNT elements, which
// take the narrowest of 2, 4 and LANE_COUNT lanes that holds them (a batch of 10: 8 + 2 lanes, not 16).
// Each table is one flat tensor, group g's part at g · LANE_COUNT times its size per lane, [position][lane].
int64_t group_count(int64_t batch) { return (batch + LANE_COUNT - 1) / LANE_COUNT; }

int64_t group_width(int64_t batch, int64_t group) {
  const int64_t elements = batch - group * LANE_COUNT;
  return elements >= LANE_COUNT ? LANE_COUNT : elements <= 2 ? 2 : elements <= 4 ? 4 : LANE_COUNT;
}

int64_t lane_total(int64_t batch) {
  const int64_t groups = group_count(batch);
  return groups == 0 ? 0 : (groups - 1) * LANE_COUNT + group_width(batch, groups - 1);
}

template <typename Function>
void with_width(int64_t width, Function function) {
  if (width == 2) return function(std::integral_constant<int, 2>());
  if (width == 4) return function(std::integral_constant<int, 4>());
  return function(std::integral_constant<int, LANE_COUNT>());
}

template <typename T, int L>
Vec<T, L>* lanes_at(const at::Tensor& table, int64_t per_lane, int64_t group) {
  return reinterpret_cast<Vec<T, L>*>(table.data_ptr<T>() + group * LANE_COUNT * per_lane);
}

template <typename T, int L, int QC, int SC>
void step_group(const Sizes& sizes, int64_t t, int64_t group, const at::Tensor& logits, bool normalize,
                const at::Tensor& shares, const at::Tensor& alpha, const at::Tensor& totals, const at::Tensor& scales,
                bool states_in_reading, at::Tensor& reading) {
  const int64_t batch = logits.size(0), first = group * LANE_COUNT, N = sizes.configs, S = sizes.symbols;
  const int64_t reading_size = reading.size(1);
  const LogWeights<T, L> weights = load_weights<T, L>(sizes, logits, normalize, first);
  Vec<T, L>* group_alpha = lanes_at<T, L>(alpha, sizes.columns(), group);
  forward_group<T, L, QC, SC>(sizes, t, weights, lanes_at<T, L>(shares, sizes.table(), group), group_alpha,
                              lanes_at<T, L>(totals, sizes.columns(), group), lanes_at<T, L>(scales, 2 * sizes.columns(), group));
  const Vec<T, L>* current = group_alpha + t * N;
  Vec<T, L> sum = splat<T, L>(0);
  for (int64_t c = 0; c < N; ++c) sum += current[c];
  const Vec<T, L> inverse = splat<T, L>(1) / sum;
  for (int64_t lane = 0; lane < L && first + lane < batch; ++lane) {
    T* row = reading.data_ptr<T>() + (first + lane) * reading_size;
    for (int64_t j = 0; j < reading_size; ++j) row[j] = 0;
    for (int64_t c = 0; c < N; ++c) row[states_in_reading ? c : c % S] += current[c][lane] * inverse[lane];
  }
}

template <typename T, int QC, int SC>
at::Tensor step_typed(const Sizes& sizes, int64_t t, const at::Tensor& logits, bool normalize, const at::Tensor& shares,
                      const at::Tensor& alpha, const at::Tensor& totals, const at::Tensor& scales, bool states_in_reading) {
  const int64_t batch = logits.size(0);
  at::Tensor reading = at::empty({batch, states_in_reading ? sizes.configs : sizes.symbols}, logits.options());
  at::parallel_for(0, group_count(batch), 1, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      const int64_t group = forward_descending(t) ? begin + end - 1 - index : index;
      with_width(group_width(batch, group), [&](auto lanes) {
        step_group<T, decltype(lanes)::value, QC, SC>(sizes, t, group, logits, normalize, shares, alpha, totals, scales,
                                                       states_in_reading, reading);
      });
    }
  });
  return reading;
}

template <typename T, int L, int QC, int SC>
void step_backward_group(const Sizes& sizes, int64_t t, int64_t group, const at::Tensor& grad_reading,
                         const at::Tensor& logits, bool normalize, const at::Tensor& shares, const at::Tensor& alpha,
                         const at::Tensor& totals, const at::Tensor& scales, const at::Tensor& adjoint,
                         const at::Tensor& grad_alpha, bool states_in_reading, at::Tensor& grad_logits) {
  const int64_t batch = logits.size(0), first = group * LANE_COUNT, N = sizes.configs, S = sizes.symbols, Q = sizes.states;
  const int64_t reading_size = grad_reading.size(1);
  const T* grad_reading_data = grad_reading.data_ptr<T>();
  const Vec<T, L>* group_alpha = lanes_at<T, L>(alpha, sizes.columns(), group);
  Vec<T, L>* group_grad_alpha = lanes_at<T, L>(grad_alpha, sizes.columns(), group);
  // The reading r_t = α[t] (or its sum over states) over Σ α[t]: ∂L/∂ log α[t][c].
  const Vec<T, L>* current = group_alpha + t * N;
  Vec<T, L> sum = splat<T, L>(0);
  for (int64_t c = 0; c < N; ++c) sum += current[c];
  const Vec<T, L> inverse = splat<T, L>(1) / sum;
  std::vector<Vec<T, L>> gradient(reading_size, splat<T, L>(0)), reading(reading_size, splat<T, L>(0));
  for (int64_t lane = 0; lane < L && first + lane < batch; ++lane) {
    for (int64_t j = 0; j < reading_size; ++j) gradient[j][lane] = grad_reading_data[(first + lane) * reading_size + j];
  }
  for (int64_t c = 0; c < N; ++c) reading[states_in_reading ? c : c % S] += current[c] * inverse;
  Vec<T, L> mean = splat<T, L>(0);
  for (int64_t j = 0; j < reading_size; ++j) mean += gradient[j] * reading[j];
  for (int64_t c = 0; c < N; ++c) {
    const int64_t j = states_in_reading ? c : c % S;
    group_grad_alpha[t * N + c] += current[c] * inverse * (gradient[j] - mean);
  }
  const LogWeights<T, L> weights = load_weights<T, L>(sizes, logits, normalize, first);
  std::vector<Vec<T, L>> grad_push(N * N), grad_replace(N * N, splat<T, L>(0)), grad_pop(N * Q, splat<T, L>(0));
  backward_group<T, L, QC, SC>(sizes, t, weights, lanes_at<T, L>(shares, sizes.table(), group), group_alpha,
                               lanes_at<T, L>(totals, sizes.columns(), group), lanes_at<T, L>(scales, 2 * sizes.columns(), group),
                               lanes_at<T, L>(adjoint, sizes.table(), group), group_grad_alpha, grad_push, grad_replace,
                               grad_pop);
  // Row b of the logits is [log Δ⁺[b,·] ; log Δ^R[b,·] ; log Δ⁻[b,·]], after eq. 1's log-softmax where
  // ``normalize``: its gradient is g − softmax · Σ g, the softmax being the normalised weights' exp.
  const int64_t width = 2 * N + Q;
  for (int64_t b = 0; b < N; ++b) {
    std::vector<Vec<T, L>> row_gradient(width);
    for (int64_t c = 0; c < N; ++c) {
      row_gradient[c] = grad_push[b * N + c];
      row_gradient[N + c] = grad_replace[b * N + c];
    }
    for (int64_t r = 0; r < Q; ++r) row_gradient[2 * N + r] = grad_pop[b * Q + r];
    if (normalize) {
      Vec<T, L> total = splat<T, L>(0);
      for (int64_t j = 0; j < width; ++j) total += row_gradient[j];
      for (int64_t c = 0; c < N; ++c) {
        row_gradient[c] -= lanes_exp<T, L>(weights.push[b * N + c]) * total;
        row_gradient[N + c] -= lanes_exp<T, L>(weights.replace[b * N + c]) * total;
      }
      for (int64_t r = 0; r < Q; ++r) row_gradient[2 * N + r] -= lanes_exp<T, L>(weights.pop[b * Q + r]) * total;
    }
    for (int64_t lane = 0; lane < L && first + lane < batch; ++lane) {
      T* out = grad_logits.data_ptr<T>() + (first + lane) * N * width + b * width;
      for (int64_t j = 0; j < width; ++j) out[j] = row_gradient[j][lane];
    }
  }
}

template <typename T, int QC, int SC>
at::Tensor step_backward_typed(const Sizes& sizes, int64_t t, const at::Tensor& grad_reading, const at::Tensor& logits,
                               bool normalize, const at::Tensor& shares, const at::Tensor& alpha, const at::Tensor& totals,
                               const at::Tensor& scales, const at::Tensor& adjoint, const at::Tensor& grad_alpha,
                               bool states_in_reading) {
  const int64_t batch = logits.size(0);
  at::Tensor grad_logits = at::empty({batch, logits.size(1)}, logits.options());
  at::parallel_for(0, group_count(batch), 1, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      const int64_t group = backward_descending(t) ? begin + end - 1 - index : index;
      with_width(group_width(batch, group), [&](auto lanes) {
        step_backward_group<T, decltype(lanes)::value, QC, SC>(sizes, t, group, grad_reading, logits, normalize, shares,
                                                                alpha, totals, scales, adjoint, grad_alpha,
                                                                states_in_reading, grad_logits);
      });
    }
  });
  return grad_logits;
}

// The sizes of tables made by ``start`` for the logits' batch: the capacity from α's size.
Sizes sizes_of(int64_t states, int64_t symbols, const at::Tensor& logits, const at::Tensor& alpha) {
  const int64_t configs = states * symbols, lanes = lane_total(logits.size(0));
  return Sizes{states, symbols, configs, lanes == 0 ? 0 : alpha.numel() / (lanes * configs) - 1};
}

void check_step(int64_t t, const at::Tensor& logits, const at::Tensor& shares, const at::Tensor& alpha, const Sizes& sizes) {
  const int64_t N = sizes.configs;
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) == N * (2 * N + sizes.states) && logits.stride(1) == 1,
              "the logits must be (B, Q·S·(2QS + Q)), each row contiguous");
  TORCH_CHECK(N <= 64 && sizes.states <= 16, "at most 16 states and 64 configurations");
  TORCH_CHECK(1 <= t && t <= sizes.capacity, "step ", t, " outside the tables' 1 … ", sizes.capacity);
  const int64_t lanes = lane_total(logits.size(0));
  TORCH_CHECK(alpha.numel() == lanes * sizes.columns() && shares.numel() == lanes * sizes.table(), "tables of another size");
}

// Dispatch to the sizes of the CFL experiments (|Q|, |Γ|) = (2, 3) and (3, 3) at compile time.
template <typename Function>
auto with_sizes(const Sizes& sizes, Function function) {
  if (sizes.states == 2 && sizes.symbols == 3) return function(std::integral_constant<int, 2>(), std::integral_constant<int, 3>());
  if (sizes.states == 3 && sizes.symbols == 3) return function(std::integral_constant<int, 3>(), std::integral_constant<int, 3>());
  return function(std::integral_constant<int, 0>(), std::integral_constant<int, 0>());
}

std::vector<at::Tensor> start(const at::Tensor& like, int64_t batch, int64_t capacity, int64_t states, int64_t symbols) {
  const int64_t N = states * symbols, lanes = lane_total(batch);
  const Sizes sizes{states, symbols, N, capacity};
  at::Tensor shares = at::empty({lanes * sizes.table()}, like.options());
  at::Tensor alpha = at::zeros({lanes * sizes.columns()}, like.options());
  for (int64_t group = 0; group < group_count(batch); ++group) {  // α[0] = 𝟙[q0, ⊥]: position 0 of each group's part
    alpha.narrow(0, group * LANE_COUNT * sizes.columns(), group_width(batch, group)).fill_(1);
  }
  at::Tensor totals = at::zeros({lanes * sizes.columns()}, like.options());
  at::Tensor scales = at::zeros({lanes * 2 * sizes.columns()}, like.options());
  return {shares, alpha, totals, scales};
}

at::Tensor step(int64_t t, int64_t states, int64_t symbols, const at::Tensor& logits, bool normalize, const at::Tensor& shares,
                const at::Tensor& alpha, const at::Tensor& totals, const at::Tensor& scales, bool states_in_reading) {
  const Sizes sizes = sizes_of(states, symbols, logits, alpha);
  check_step(t, logits, shares, alpha, sizes);
  return AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "symbol_stack_step", [&] {
    return with_sizes(sizes, [&](auto states, auto symbols) {
      return step_typed<scalar_t, decltype(states)::value, decltype(symbols)::value>(sizes, t, logits, normalize, shares,
                                                                                      alpha, totals, scales, states_in_reading);
    });
  });
}

at::Tensor step_backward(int64_t t, int64_t states, int64_t symbols, const at::Tensor& grad_reading, const at::Tensor& logits,
                         bool normalize, const at::Tensor& shares, const at::Tensor& alpha, const at::Tensor& totals,
                         const at::Tensor& scales, const at::Tensor& adjoint, const at::Tensor& grad_alpha,
                         bool states_in_reading) {
  const Sizes sizes = sizes_of(states, symbols, logits, alpha);
  check_step(t, logits, shares, alpha, sizes);
  TORCH_CHECK(grad_reading.is_contiguous(), "the reading's gradient must be contiguous");
  return AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "symbol_stack_step_backward", [&] {
    return with_sizes(sizes, [&](auto states, auto symbols) {
      return step_backward_typed<scalar_t, decltype(states)::value, decltype(symbols)::value>(
          sizes, t, grad_reading, logits, normalize, shares, alpha, totals, scales, adjoint, grad_alpha, states_in_reading);
    });
  });
}

}  // namespace

TORCH_LIBRARY(stacklm_symbol_stack, library) {
  library.def("start(Tensor like, int batch, int capacity, int states, int symbols) -> Tensor[]");
  library.def(
      "step(int t, int states, int symbols, Tensor logits, bool normalize, Tensor(a!) shares, Tensor(b!) alpha, "
      "Tensor(c!) totals, Tensor(d!) scales, bool states_in_reading) -> Tensor");
  library.def(
      "step_backward(int t, int states, int symbols, Tensor grad_reading, Tensor logits, bool normalize, Tensor shares, "
      "Tensor alpha, Tensor totals, Tensor scales, Tensor(a!) adjoint, Tensor(b!) grad_alpha, bool states_in_reading) -> Tensor");
}

TORCH_LIBRARY_IMPL(stacklm_symbol_stack, CompositeExplicitAutograd, library) {
  library.impl("start", &start);
  library.impl("step", &step);
  library.impl("step_backward", &step_backward);
}
