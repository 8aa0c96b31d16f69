// The nondeterministic stack over symbols (NS, NS+S, NS+U, NS+S+U; full stack) one step per call,
// forward and exact backward, on CPU. ``symbol_stack.py`` states the recurrences in the paper's
// notation; this file follows its names.
//
// Every op runs on groups of LANE_COUNT batch elements, one lane per element (lanes.h), every
// table stored [position][lane], so each operation of the DP is one vector operation over the
// group. A group of fewer elements repeats its last element in the spare lanes and drops what
// they give. One group per task (at::parallel_for).
//
// Per element, the entries [i][a][c] of columns t = 1 … n (rows i < t) lie in one flat table by
// row (i, a), each row's columns k = i+1 … capacity side by side (``Sizes::entry``), so the pop
// of a row at step t reads its columns i+1 … t−2 in one contiguous run:
//   shares:   Ŝ_t[i][a][c] = α[i][a] γ[i→t][a,c] / α[t][c] ∈ [0, 1]
//   adjoint:  H_t[i][a][c] = (∂L/∂ log γ[i→t][a,c]) / Ŝ_t[i][a][c], accumulated by the backward
// and per step: alpha  α̂[t] = α[t] / max_c α[t][c];  totals T_t[c], the sum over (i, a) of the
// terms of column t at step t's scale (ε_t = max_c α[t−1][c] · exp(max of step t's log weights));
// grad_alpha e_t[c] = ∂L/∂ log α[t][c].

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
#include <limits>
#include <vector>

#include "lanes.h"

namespace {

using stacklm_lanes::LANE_COUNT;

template <typename T>
struct VectorOf {
  typedef T type __attribute__((vector_size(LANE_COUNT * sizeof(T)), aligned(sizeof(T))));
};

template <typename T>
using Vec = typename VectorOf<T>::type;

template <typename T>
Vec<T> splat(T value) {
  Vec<T> result;
  for (int64_t lane = 0; lane < LANE_COUNT; ++lane) result[lane] = value;
  return result;
}

template <typename T>
Vec<T> maximum(Vec<T> left, Vec<T> right) {
  return left > right ? left : right;
}

// 1 / x where x > 0, else 0.
template <typename T>
Vec<T> inverse_or_zero(Vec<T> value) {
  const Vec<T> zero = splat<T>(0);
  return value > zero ? splat<T>(1) / value : zero;
}

struct Sizes {
  int64_t states, symbols, configs, capacity;

  // Where the N entries [i][a][·] of column k (i < k ≤ capacity) start: the rows (i', a') before
  // (i, a) hold capacity − i' columns each.
  int64_t entry(int64_t i, int64_t a, int64_t k) const {
    return configs * (configs * (i * capacity - i * (i - 1) / 2) + a * (capacity - i) + (k - i - 1));
  }
  int64_t table() const { return configs * configs * capacity * (capacity + 1) / 2; }
};

// Step t's transition weights in lanes, exp(log Δ − μ) with μ the largest log weight of the step
// (per lane): push D̂[a][c], replace R̂[b][c], pop P̂[b][r].
template <typename T>
struct Weights {
  std::vector<Vec<T>> push, replace, pop;
};

template <typename T>
Weights<T> load_weights(const Sizes& sizes, const at::Tensor& push, const at::Tensor& replace, const at::Tensor& pop,
                        int64_t group, int64_t batch) {
  const int64_t N = sizes.configs, Q = sizes.states;
  Weights<T> weights{std::vector<Vec<T>>(N * N), std::vector<Vec<T>>(N * N), std::vector<Vec<T>>(N * Q)};
  for (int64_t lane = 0; lane < LANE_COUNT; ++lane) {
    const int64_t element = std::min(group * LANE_COUNT + lane, batch - 1);
    const T* element_push = push.data_ptr<T>() + element * push.stride(0);
    const T* element_replace = replace.data_ptr<T>() + element * replace.stride(0);
    const T* element_pop = pop.data_ptr<T>() + element * pop.stride(0);
    T largest = -std::numeric_limits<T>::infinity();
    for (int64_t b = 0; b < N; ++b) {
      for (int64_t c = 0; c < N; ++c) {
        largest = std::max({largest, element_push[b * push.stride(1) + c], element_replace[b * replace.stride(1) + c]});
      }
      for (int64_t r = 0; r < Q; ++r) largest = std::max(largest, element_pop[b * pop.stride(1) + r]);
    }
    if (!std::isfinite(largest)) largest = 0;
    for (int64_t b = 0; b < N; ++b) {
      for (int64_t c = 0; c < N; ++c) {
        weights.push[b * N + c][lane] = std::exp(element_push[b * push.stride(1) + c] - largest);
        weights.replace[b * N + c][lane] = std::exp(element_replace[b * replace.stride(1) + c] - largest);
      }
      for (int64_t r = 0; r < Q; ++r) weights.pop[b * Q + r][lane] = std::exp(element_pop[b * pop.stride(1) + r] - largest);
    }
  }
  return weights;
}

// The step-t products shared by forward and backward: wR[b][c] = α̂[t−1][b] R̂[b][c],
// wP[b][r] = α̂[t−1][b] P̂[b][r], and W[k][d][r] = Σ_b Ŝ_{t−1}[k][d][b] wP[b][r] for k ≤ t−2.
template <typename T>
struct StepProducts {
  std::vector<Vec<T>> replace, pop, flow;
};

template <typename T, int QC, int SC>
StepProducts<T> step_products(const Sizes& sizes, const Weights<T>& weights, const Vec<T>* previous_alpha,
                              const Vec<T>* shares, int64_t t) {
  const int64_t Q = QC ? QC : sizes.states, S = SC ? SC : sizes.symbols, N = Q * S;
  StepProducts<T> products{std::vector<Vec<T>>(N * N), std::vector<Vec<T>>(N * Q),
                           std::vector<Vec<T>>(std::max<int64_t>(t - 1, 0) * N * Q)};
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t c = 0; c < N; ++c) products.replace[b * N + c] = previous_alpha[b] * weights.replace[b * N + c];
    for (int64_t r = 0; r < Q; ++r) products.pop[b * Q + r] = previous_alpha[b] * weights.pop[b * Q + r];
  }
  if (t >= 2) {
    for (int64_t kd = 0; kd < (t - 1) * N; ++kd) {
      const Vec<T>* previous = shares + sizes.entry(kd / N, kd % N, t - 1);
      Vec<T> sums[QC ? QC : 16] = {};
      for (int64_t b = 0; b < N; ++b) {
        const Vec<T> share = previous[b];
        for (int64_t r = 0; r < Q; ++r) sums[r] += share * products.pop[b * Q + r];
      }
      for (int64_t r = 0; r < Q; ++r) products.flow[kd * Q + r] = sums[r];
    }
  }
  return products;
}

template <typename T, int QC, int SC>
void forward_group(const Sizes& sizes, int64_t t, const Weights<T>& weights, Vec<T>* shares, Vec<T>* alpha,
                   Vec<T>* totals) {
  const int64_t Q = QC ? QC : sizes.states, S = SC ? SC : sizes.symbols, N = Q * S;
  const Vec<T>* previous_alpha = alpha + (t - 1) * N;
  const StepProducts<T> products = step_products<T, QC, SC>(sizes, weights, previous_alpha, shares, t);
  std::vector<Vec<T>> total(N, splat<T>(0));
  // Rows i ≤ t−2: replace Σ_b Ŝ_{t−1}[i][a][b] wR[b][c], pop Σ_k Σ_u Ŝ_k[i][a][(u,y)] W[k][(u,y)][r].
  for (int64_t i = 0; i + 2 <= t; ++i) {
    for (int64_t a = 0; a < N; ++a) {
      Vec<T> sums[QC && SC ? QC * SC : 64] = {};
      const Vec<T>* previous = shares + sizes.entry(i, a, t - 1);
      for (int64_t b = 0; b < N; ++b) {
        const Vec<T> share = previous[b];
        for (int64_t c = 0; c < N; ++c) sums[c] += share * products.replace[b * N + c];
      }
      const Vec<T>* below = shares + sizes.entry(i, a, i + 1);
      for (int64_t k = i + 1; k + 2 <= t; ++k, below += N) {
        const Vec<T>* flow = products.flow.data() + k * N * Q;
        for (int64_t u = 0; u < Q; ++u) {
          for (int64_t y = 0; y < S; ++y) {
            const Vec<T> share = below[u * S + y];
            for (int64_t r = 0; r < Q; ++r) sums[r * S + y] += share * flow[(u * S + y) * Q + r];
          }
        }
      }
      Vec<T>* column = shares + sizes.entry(i, a, t);
      for (int64_t c = 0; c < N; ++c) {
        column[c] = sums[c];
        total[c] += sums[c];
      }
    }
  }
  // Row t−1: the push, α̂[t−1][a] D̂[a][c].
  for (int64_t a = 0; a < N; ++a) {
    Vec<T>* column = shares + sizes.entry(t - 1, a, t);
    for (int64_t c = 0; c < N; ++c) {
      const Vec<T> term = previous_alpha[a] * weights.push[a * N + c];
      column[c] = term;
      total[c] += term;
    }
  }
  std::vector<Vec<T>> inverse(N);
  Vec<T> largest = splat<T>(0);
  for (int64_t c = 0; c < N; ++c) {
    inverse[c] = inverse_or_zero<T>(total[c]);
    largest = maximum<T>(largest, total[c]);
    totals[t * N + c] = total[c];
  }
  for (int64_t row = 0; row < t * N; ++row) {
    Vec<T>* column = shares + sizes.entry(row / N, row % N, t);
    for (int64_t c = 0; c < N; ++c) column[c] *= inverse[c];
  }
  const Vec<T> scale = inverse_or_zero<T>(largest);
  for (int64_t c = 0; c < N; ++c) alpha[t * N + c] = total[c] * scale;
}

template <typename T, int QC, int SC>
void backward_group(const Sizes& sizes, int64_t t, const Weights<T>& weights, const Vec<T>* shares,
                    const Vec<T>* alpha, const Vec<T>* totals, Vec<T>* adjoint, Vec<T>* grad_alpha,
                    std::vector<Vec<T>>& grad_push, std::vector<Vec<T>>& grad_replace, std::vector<Vec<T>>& grad_pop) {
  const int64_t Q = QC ? QC : sizes.states, S = SC ? SC : sizes.symbols, N = Q * S;
  const Vec<T>* step_grad_alpha = grad_alpha + t * N;
  // α[t][c] = Σ_{i,a} α[i][a] γ[i→t][a,c]: each term's share of e_t[c].
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t a = 0; a < N; ++a) {
      const Vec<T>* column = shares + sizes.entry(i, a, t);
      Vec<T>* column_adjoint = adjoint + sizes.entry(i, a, t);
      Vec<T> to_alpha = splat<T>(0);
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
  const StepProducts<T> products = step_products<T, QC, SC>(sizes, weights, alpha + (t - 1) * N, shares, t);
  std::vector<Vec<T>> inverse_total(N);
  for (int64_t c = 0; c < N; ++c) inverse_total[c] = inverse_or_zero<T>(totals[t * N + c]);
  std::vector<Vec<T>> replace_sums(N * N, splat<T>(0)), pop_sums(N * Q, splat<T>(0));
  std::vector<Vec<T>> flow_adjoint((t - 1) * N * Q, splat<T>(0));  // Z[k][d][r]
  for (int64_t i = 0; i + 2 <= t; ++i) {
    for (int64_t a = 0; a < N; ++a) {
      Vec<T> ratio[QC && SC ? QC * SC : 64];  // ρ[c] = H_t[i][a][c] / T_t[c]
      const Vec<T>* column_adjoint = adjoint + sizes.entry(i, a, t);
      for (int64_t c = 0; c < N; ++c) ratio[c] = column_adjoint[c] * inverse_total[c];
      const Vec<T>* previous = shares + sizes.entry(i, a, t - 1);
      Vec<T>* previous_adjoint = adjoint + sizes.entry(i, a, t - 1);
      for (int64_t b = 0; b < N; ++b) {
        Vec<T> sum = splat<T>(0);
        const Vec<T> share = previous[b];
        for (int64_t c = 0; c < N; ++c) {
          sum += ratio[c] * products.replace[b * N + c];
          replace_sums[b * N + c] += ratio[c] * share;
        }
        previous_adjoint[b] += sum;
      }
      const Vec<T>* below = shares + sizes.entry(i, a, i + 1);
      Vec<T>* below_adjoint = adjoint + sizes.entry(i, a, i + 1);
      for (int64_t k = i + 1; k + 2 <= t; ++k, below += N, below_adjoint += N) {
        const Vec<T>* flow = products.flow.data() + k * N * Q;
        Vec<T>* flow_sums = flow_adjoint.data() + k * N * Q;
        for (int64_t u = 0; u < Q; ++u) {
          for (int64_t y = 0; y < S; ++y) {
            const int64_t d = u * S + y;
            const Vec<T> share = below[d];
            Vec<T> sum = splat<T>(0);
            for (int64_t r = 0; r < Q; ++r) {
              sum += ratio[r * S + y] * flow[d * Q + r];
              flow_sums[d * Q + r] += ratio[r * S + y] * share;
            }
            below_adjoint[d] += sum;
          }
        }
      }
    }
  }
  // γ'_t[k][d][r] = Σ_b γ[k→t−1][d,b] Δ⁻_t[b,r]: Z[k][d][r] is its ∂L/∂ log γ' over W[k][d][r].
  for (int64_t kd = 0; kd < (t - 1) * N; ++kd) {
    const Vec<T>* previous = shares + sizes.entry(kd / N, kd % N, t - 1);
    Vec<T>* previous_adjoint = adjoint + sizes.entry(kd / N, kd % N, t - 1);
    for (int64_t b = 0; b < N; ++b) {
      const Vec<T> share = previous[b];
      Vec<T> sum = splat<T>(0);
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

template <typename T>
T* lanes_at(const at::Tensor& table, int64_t group) {
  return table.data_ptr<T>() + group * table.stride(0);
}

template <typename T, int QC, int SC>
at::Tensor step_typed(const Sizes& sizes, int64_t t, const at::Tensor& push, const at::Tensor& replace,
                      const at::Tensor& pop, const at::Tensor& shares, const at::Tensor& alpha,
                      const at::Tensor& totals, bool states_in_reading) {
  const int64_t batch = push.size(0), groups = shares.size(0), N = sizes.configs, S = sizes.symbols;
  const int64_t reading_size = states_in_reading ? N : S;
  at::Tensor reading = at::empty({batch, reading_size}, push.options());
  T* reading_data = reading.data_ptr<T>();
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t group = begin; group < end; ++group) {
      const Weights<T> weights = load_weights<T>(sizes, push, replace, pop, group, batch);
      auto* group_alpha = reinterpret_cast<Vec<T>*>(lanes_at<T>(alpha, group));
      forward_group<T, QC, SC>(sizes, t, weights, reinterpret_cast<Vec<T>*>(lanes_at<T>(shares, group)), group_alpha,
                               reinterpret_cast<Vec<T>*>(lanes_at<T>(totals, group)));
      const Vec<T>* current = group_alpha + t * N;
      Vec<T> sum = splat<T>(0);
      for (int64_t c = 0; c < N; ++c) sum += current[c];
      const Vec<T> inverse = splat<T>(1) / sum;
      for (int64_t lane = 0; lane < LANE_COUNT && group * LANE_COUNT + lane < batch; ++lane) {
        T* row = reading_data + (group * LANE_COUNT + lane) * reading_size;
        for (int64_t j = 0; j < reading_size; ++j) row[j] = 0;
        for (int64_t c = 0; c < N; ++c) row[states_in_reading ? c : c % S] += current[c][lane] * inverse[lane];
      }
    }
  });
  return reading;
}

template <typename T, int QC, int SC>
std::vector<at::Tensor> step_backward_typed(const Sizes& sizes, int64_t t, const at::Tensor& grad_reading,
                                            const at::Tensor& push, const at::Tensor& replace, const at::Tensor& pop,
                                            const at::Tensor& shares, const at::Tensor& alpha,
                                            const at::Tensor& totals, const at::Tensor& adjoint,
                                            const at::Tensor& grad_alpha, bool states_in_reading) {
  const int64_t batch = push.size(0), groups = shares.size(0), N = sizes.configs, S = sizes.symbols, Q = sizes.states;
  const int64_t reading_size = states_in_reading ? N : S;
  at::Tensor grad_push = at::empty({batch, N, N}, push.options()), grad_replace = at::empty({batch, N, N}, push.options());
  at::Tensor grad_pop = at::empty({batch, N, Q}, push.options());
  const T* grad_reading_data = grad_reading.data_ptr<T>();
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t group = begin; group < end; ++group) {
      const auto* group_alpha = reinterpret_cast<const Vec<T>*>(lanes_at<T>(alpha, group));
      auto* group_grad_alpha = reinterpret_cast<Vec<T>*>(lanes_at<T>(grad_alpha, group));
      // The reading r_t = α[t] (or its sum over states) over Σ α[t]: ∂L/∂ log α[t][c].
      const Vec<T>* current = group_alpha + t * N;
      Vec<T> sum = splat<T>(0);
      for (int64_t c = 0; c < N; ++c) sum += current[c];
      const Vec<T> inverse = splat<T>(1) / sum;
      std::vector<Vec<T>> gradient(reading_size, splat<T>(0)), reading(reading_size, splat<T>(0));
      for (int64_t lane = 0; lane < LANE_COUNT; ++lane) {
        const int64_t element = std::min(group * LANE_COUNT + lane, batch - 1);
        const bool real = group * LANE_COUNT + lane < batch;
        for (int64_t j = 0; j < reading_size; ++j) gradient[j][lane] = real ? grad_reading_data[element * reading_size + j] : 0;
      }
      for (int64_t c = 0; c < N; ++c) reading[states_in_reading ? c : c % S] += current[c] * inverse;
      Vec<T> mean = splat<T>(0);
      for (int64_t j = 0; j < reading_size; ++j) mean += gradient[j] * reading[j];
      for (int64_t c = 0; c < N; ++c) {
        const int64_t j = states_in_reading ? c : c % S;
        group_grad_alpha[t * N + c] += current[c] * inverse * (gradient[j] - mean);
      }
      const Weights<T> weights = load_weights<T>(sizes, push, replace, pop, group, batch);
      std::vector<Vec<T>> group_push(N * N), group_replace(N * N, splat<T>(0)), group_pop(N * Q, splat<T>(0));
      backward_group<T, QC, SC>(sizes, t, weights, reinterpret_cast<const Vec<T>*>(lanes_at<T>(shares, group)),
                                group_alpha, reinterpret_cast<const Vec<T>*>(lanes_at<T>(totals, group)),
                                reinterpret_cast<Vec<T>*>(lanes_at<T>(adjoint, group)), group_grad_alpha, group_push,
                                group_replace, group_pop);
      for (int64_t lane = 0; lane < LANE_COUNT && group * LANE_COUNT + lane < batch; ++lane) {
        const int64_t element = group * LANE_COUNT + lane;
        T* push_out = grad_push.data_ptr<T>() + element * N * N;
        T* replace_out = grad_replace.data_ptr<T>() + element * N * N;
        T* pop_out = grad_pop.data_ptr<T>() + element * N * Q;
        for (int64_t j = 0; j < N * N; ++j) {
          push_out[j] = group_push[j][lane];
          replace_out[j] = group_replace[j][lane];
        }
        for (int64_t j = 0; j < N * Q; ++j) pop_out[j] = group_pop[j][lane];
      }
    }
  });
  return {grad_push, grad_replace, grad_pop};
}

Sizes sizes_of(const at::Tensor& pop, const at::Tensor& alpha) {
  const int64_t states = pop.size(2), configs = pop.size(1);
  return Sizes{states, configs / states, configs, alpha.size(1) - 1};
}

void check_step(int64_t t, const at::Tensor& push, const at::Tensor& replace, const at::Tensor& pop,
                const at::Tensor& shares, const Sizes& sizes) {
  TORCH_CHECK(push.stride(2) == 1 && replace.stride(2) == 1 && pop.stride(2) == 1, "the log weights' rows must be contiguous");
  TORCH_CHECK(push.dim() == 3 && push.size(1) == sizes.configs && push.size(2) == sizes.configs, "push must be (B, N, N)");
  TORCH_CHECK(replace.sizes() == push.sizes(), "replace must be (B, N, N)");
  TORCH_CHECK(pop.dim() == 3 && pop.size(0) == push.size(0), "pop must be (B, N, Q)");
  TORCH_CHECK(sizes.configs <= 64 && sizes.states <= 16, "at most 16 states and 64 configurations");
  TORCH_CHECK(1 <= t && t <= sizes.capacity, "step ", t, " outside the tables' 1 … ", sizes.capacity);
  TORCH_CHECK(shares.dim() == 3 && shares.size(1) == sizes.table() && shares.size(2) == LANE_COUNT, "tables of another size");
}

// Dispatch to the sizes of the CFL experiments (|Q|, |Γ|) = (2, 3) and (3, 3) at compile time.
template <typename Function>
auto with_sizes(const Sizes& sizes, Function function) {
  if (sizes.states == 2 && sizes.symbols == 3) return function(std::integral_constant<int, 2>(), std::integral_constant<int, 3>());
  if (sizes.states == 3 && sizes.symbols == 3) return function(std::integral_constant<int, 3>(), std::integral_constant<int, 3>());
  return function(std::integral_constant<int, 0>(), std::integral_constant<int, 0>());
}

std::vector<at::Tensor> start(const at::Tensor& like, int64_t batch, int64_t capacity, int64_t states, int64_t symbols) {
  const int64_t groups = (batch + LANE_COUNT - 1) / LANE_COUNT, N = states * symbols;
  const Sizes sizes{states, symbols, N, capacity};
  at::Tensor shares = at::empty({groups, sizes.table(), LANE_COUNT}, like.options());
  at::Tensor alpha = at::zeros({groups, capacity + 1, N, LANE_COUNT}, like.options());
  alpha.select(1, 0).select(1, 0).fill_(1);  // α[0] = 𝟙[q0, ⊥]
  at::Tensor totals = at::zeros({groups, capacity + 1, N, LANE_COUNT}, like.options());
  return {shares, alpha, totals};
}

at::Tensor step(int64_t t, const at::Tensor& push, const at::Tensor& replace, const at::Tensor& pop,
                const at::Tensor& shares, const at::Tensor& alpha, const at::Tensor& totals, bool states_in_reading) {
  const Sizes sizes = sizes_of(pop, alpha);
  check_step(t, push, replace, pop, shares, sizes);
  return AT_DISPATCH_FLOATING_TYPES(push.scalar_type(), "symbol_stack_step", [&] {
    return with_sizes(sizes, [&](auto states, auto symbols) {
      return step_typed<scalar_t, decltype(states)::value, decltype(symbols)::value>(sizes, t, push, replace, pop, shares,
                                                                                      alpha, totals, states_in_reading);
    });
  });
}

std::vector<at::Tensor> step_backward(int64_t t, const at::Tensor& grad_reading, const at::Tensor& push,
                                      const at::Tensor& replace, const at::Tensor& pop, const at::Tensor& shares,
                                      const at::Tensor& alpha, const at::Tensor& totals, const at::Tensor& adjoint,
                                      const at::Tensor& grad_alpha, bool states_in_reading) {
  const Sizes sizes = sizes_of(pop, alpha);
  check_step(t, push, replace, pop, shares, sizes);
  TORCH_CHECK(grad_reading.is_contiguous(), "the reading's gradient must be contiguous");
  return AT_DISPATCH_FLOATING_TYPES(push.scalar_type(), "symbol_stack_step_backward", [&] {
    return with_sizes(sizes, [&](auto states, auto symbols) {
      return step_backward_typed<scalar_t, decltype(states)::value, decltype(symbols)::value>(
          sizes, t, grad_reading, push, replace, pop, shares, alpha, totals, adjoint, grad_alpha, states_in_reading);
    });
  });
}

}  // namespace

TORCH_LIBRARY(stacklm_symbol_stack, library) {
  library.def("start(Tensor like, int batch, int capacity, int states, int symbols) -> Tensor[]");
  library.def(
      "step(int t, Tensor push, Tensor replace, Tensor pop, Tensor(a!) shares, Tensor(b!) alpha, Tensor(c!) totals, "
      "bool states_in_reading) -> Tensor");
  library.def(
      "step_backward(int t, Tensor grad_reading, Tensor push, Tensor replace, Tensor pop, Tensor shares, Tensor alpha, "
      "Tensor totals, Tensor(a!) adjoint, Tensor(b!) grad_alpha, bool states_in_reading) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(stacklm_symbol_stack, CompositeExplicitAutograd, library) {
  library.impl("start", &start);
  library.impl("step", &step);
  library.impl("step_backward", &step_backward);
}
