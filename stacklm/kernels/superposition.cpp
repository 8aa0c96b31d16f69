// The superposition stack (Joulin & Mikolov 2015; Bearing Syntactic Fruit §3.1, RNS-RNN App. 7.2) one
// step per call, forward and exact backward, on CPU. ``superposition.py`` states the recurrence in the
// papers' notation; this file follows its names.
//
// Per batch element, the stacks V_1 … V_N of a run lie side by side in one table, row 0 of each on
// top: ``elements`` (B, Σ_t h_t, m), V_t from row ``offset`` (its h_t rows), V_{t−1} from row
// ``previous_offset`` (h_{t−1} rows; none at t = 1), the heights and offsets chosen by the caller
// (depth limit, length hint). The backward keeps ∂L/∂V_t in ``grad_elements``, the same layout, zeros
// until the run's last step runs backward; step t's backward adds ∂L/∂r_t to its row 0 and writes
// ∂L/∂V_{t−1}. The logits of a step are the action layer's output as it is, (B, 3 + m):
// a_t = softmax(columns 0 … 2) in the order (push, pop, no-op), v_t = σ(columns 3 …), or the columns
// themselves with ``raw_pushed``. Each row of V_t sums its three terms in the order of the PyTorch
// code (push + no-op, then pop). One batch element after another: a step's work is O(h_t m) per
// element, smaller than a task.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

constexpr int64_t PUSH = 0, POP = 1, NOOP = 2;  // the actions' columns (superposition.py)

// One step's heights and offsets, and the tables' sizes, checked.
struct Sizes {
  int64_t batch, vector_size, rows;  // rows: Σ_t h_t
  int64_t previous_offset, previous_depth, offset, depth;
};

Sizes check_step(int64_t previous_offset, int64_t previous_depth, int64_t offset, int64_t depth, const at::Tensor& logits,
                 const at::Tensor& elements) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) >= 4 && logits.is_contiguous(), "the logits must be (B, 3 + m), contiguous");
  const Sizes sizes{logits.size(0), logits.size(1) - 3, elements.size(1), previous_offset, previous_depth, offset, depth};
  TORCH_CHECK(elements.dim() == 3 && elements.size(0) == sizes.batch && elements.size(2) == sizes.vector_size &&
                  elements.is_contiguous() && elements.scalar_type() == logits.scalar_type(),
              "the elements must be (B, Σ_t h_t, m), contiguous, of the logits' dtype");
  TORCH_CHECK(1 <= depth && depth <= previous_depth + 1 && 0 <= previous_offset && previous_offset + previous_depth <= offset &&
                  offset + depth <= sizes.rows,
              "the heights and offsets must hold V_{t−1} before V_t in the table, h_t ≤ h_{t−1} + 1");
  return sizes;
}

// a_t (push, pop, no-op) = softmax of the first three logits.
template <typename T>
void action_probabilities(const T* x, T* probabilities) {
  const T largest = std::max({x[PUSH], x[POP], x[NOOP]});
  T total = 0;
  for (int64_t a = 0; a < 3; ++a) total += probabilities[a] = std::exp(x[a] - largest);
  for (int64_t a = 0; a < 3; ++a) probabilities[a] /= total;
}

template <typename T>
T pushed_value(T x, bool raw_pushed) {
  return raw_pushed ? x : T(1) / (T(1) + std::exp(-x));
}

// Step t: V_t[k] = a^push V_{t−1}[k − 1] + a^noop V_{t−1}[k] + a^pop V_{t−1}[k + 1] (V_{t−1}[−1] = v_t,
// zeros below the bottom); r_t = V_t[0] into ``reading`` (B, m).
template <typename T>
void step_typed(const Sizes& sizes, const T* logits, bool raw_pushed, T* elements, T* reading) {
  const int64_t m = sizes.vector_size, width = m + 3;
  for (int64_t b = 0; b < sizes.batch; ++b) {
    const T* x = logits + b * width;
    T probabilities[3];
    action_probabilities(x, probabilities);
    const T push = probabilities[PUSH], pop = probabilities[POP], noop = probabilities[NOOP];
    const T* previous = elements + (b * sizes.rows + sizes.previous_offset) * m;  // V_{t−1} (h_{t−1}, m)
    T* current = elements + (b * sizes.rows + sizes.offset) * m;                  // V_t (h_t, m)
    for (int64_t k = 0; k < sizes.depth; ++k) {
      T* row = current + k * m;
      const T* above = k == 0 ? nullptr : previous + (k - 1) * m;  // V_{t−1}[k − 1]
      const T* same = k < sizes.previous_depth ? previous + k * m : nullptr;
      const T* below = k + 1 < sizes.previous_depth ? previous + (k + 1) * m : nullptr;
      for (int64_t j = 0; j < m; ++j) {
        const T pushed = above == nullptr ? pushed_value(x[3 + j], raw_pushed) : above[j];
        row[j] = push * pushed + noop * (same == nullptr ? T(0) : same[j]) + pop * (below == nullptr ? T(0) : below[j]);
      }
    }
    std::copy(current, current + m, reading + b * m);
  }
}

// The backward of step t: ∂L/∂logits (B, 3 + m) from ∂L/∂r_t, the step's logits and the tables;
// ∂L/∂V_t (in ``grad_elements`` at V_t's rows, plus ∂L/∂r_t at row 0) gives ∂L/∂V_{t−1} (written at
// V_{t−1}'s rows), ∂L/∂a_t and ∂L/∂v_t.
template <typename T>
void step_backward_typed(const Sizes& sizes, const T* grad_reading, const T* logits, bool raw_pushed, const T* elements,
                         T* grad_elements, T* grad_logits) {
  const int64_t m = sizes.vector_size, width = m + 3;
  for (int64_t b = 0; b < sizes.batch; ++b) {
    const T* x = logits + b * width;
    T probabilities[3];
    action_probabilities(x, probabilities);
    const T push = probabilities[PUSH], pop = probabilities[POP], noop = probabilities[NOOP];
    const T* previous = elements + (b * sizes.rows + sizes.previous_offset) * m;
    T* grad_current = grad_elements + (b * sizes.rows + sizes.offset) * m;
    T* grad_previous = grad_elements + (b * sizes.rows + sizes.previous_offset) * m;
    const T* g = grad_reading + b * m;
    for (int64_t j = 0; j < m; ++j) grad_current[j] += g[j];
    T* grad_x = grad_logits + b * width;
    // ∂L/∂a^push, ∂L/∂a^noop, ∂L/∂a^pop: Σ_k ∂L/∂V_t[k] · (the term's row k)
    T grad_push = 0, grad_noop = 0, grad_pop = 0;
    for (int64_t k = 0; k < sizes.depth; ++k) {
      const T* grad_row = grad_current + k * m;
      if (k == 0) {
        for (int64_t j = 0; j < m; ++j) {
          const T pushed = pushed_value(x[3 + j], raw_pushed);
          grad_push += grad_row[j] * pushed;
          const T grad_pushed = push * grad_row[j];  // ∂L/∂v_t
          grad_x[3 + j] = raw_pushed ? grad_pushed : grad_pushed * (T(1) - pushed) * pushed;
        }
      } else {
        const T* above = previous + (k - 1) * m;
        for (int64_t j = 0; j < m; ++j) grad_push += grad_row[j] * above[j];
      }
      if (k < sizes.previous_depth) {
        const T* same = previous + k * m;
        for (int64_t j = 0; j < m; ++j) grad_noop += grad_row[j] * same[j];
      }
      if (k + 1 < sizes.previous_depth) {
        const T* below = previous + (k + 1) * m;
        for (int64_t j = 0; j < m; ++j) grad_pop += grad_row[j] * below[j];
      }
    }
    // ∂L/∂V_{t−1}[k] = a^push ∂L/∂V_t[k + 1] + a^noop ∂L/∂V_t[k] + a^pop ∂L/∂V_t[k − 1] (rows of V_t only)
    for (int64_t k = 0; k < sizes.previous_depth; ++k) {
      T* grad_row = grad_previous + k * m;
      const T* from_push = k + 1 < sizes.depth ? grad_current + (k + 1) * m : nullptr;
      const T* from_noop = k < sizes.depth ? grad_current + k * m : nullptr;
      const T* from_pop = 1 <= k && k - 1 < sizes.depth ? grad_current + (k - 1) * m : nullptr;
      for (int64_t j = 0; j < m; ++j) {
        grad_row[j] = (from_push == nullptr ? T(0) : push * from_push[j]) + (from_noop == nullptr ? T(0) : noop * from_noop[j]) +
                      (from_pop == nullptr ? T(0) : pop * from_pop[j]);
      }
    }
    // softmax: ∂L/∂x_a = a_a (∂L/∂a_a − Σ_b a_b ∂L/∂a_b)
    T grad_probabilities[3];
    grad_probabilities[PUSH] = grad_push;
    grad_probabilities[POP] = grad_pop;
    grad_probabilities[NOOP] = grad_noop;
    const T mean = push * grad_push + pop * grad_pop + noop * grad_noop;
    for (int64_t a = 0; a < 3; ++a) grad_x[a] = probabilities[a] * (grad_probabilities[a] - mean);
  }
}

at::Tensor step(int64_t previous_offset, int64_t previous_depth, int64_t offset, int64_t depth, const at::Tensor& logits,
                bool raw_pushed, const at::Tensor& elements) {
  const Sizes sizes = check_step(previous_offset, previous_depth, offset, depth, logits, elements);
  at::Tensor reading = at::empty({sizes.batch, sizes.vector_size}, logits.options());
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "superposition_step", [&] {
    step_typed<scalar_t>(sizes, logits.data_ptr<scalar_t>(), raw_pushed, elements.data_ptr<scalar_t>(), reading.data_ptr<scalar_t>());
  });
  return reading;
}

at::Tensor step_backward(int64_t previous_offset, int64_t previous_depth, int64_t offset, int64_t depth,
                         const at::Tensor& grad_reading, const at::Tensor& logits, bool raw_pushed, const at::Tensor& elements,
                         const at::Tensor& grad_elements) {
  const Sizes sizes = check_step(previous_offset, previous_depth, offset, depth, logits, elements);
  TORCH_CHECK(grad_reading.sizes() == at::IntArrayRef({sizes.batch, sizes.vector_size}) && grad_reading.is_contiguous(),
              "the reading's gradient must be (B, m), contiguous");
  TORCH_CHECK(grad_elements.sizes() == elements.sizes() && grad_elements.is_contiguous(),
              "the elements' gradient must be (B, Σ_t h_t, m), contiguous");
  at::Tensor grad_logits = at::empty_like(logits);
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "superposition_step_backward", [&] {
    step_backward_typed<scalar_t>(sizes, grad_reading.data_ptr<scalar_t>(), logits.data_ptr<scalar_t>(), raw_pushed,
                                  elements.data_ptr<scalar_t>(), grad_elements.data_ptr<scalar_t>(),
                                  grad_logits.data_ptr<scalar_t>());
  });
  return grad_logits;
}

}  // namespace

TORCH_LIBRARY(stacklm_superposition, library) {
  library.def(
      "step(int previous_offset, int previous_depth, int offset, int depth, Tensor logits, bool raw_pushed, "
      "Tensor(a!) elements) -> Tensor");
  library.def(
      "step_backward(int previous_offset, int previous_depth, int offset, int depth, Tensor grad_reading, Tensor logits, "
      "bool raw_pushed, Tensor elements, Tensor(a!) grad_elements) -> Tensor");
}

TORCH_LIBRARY_IMPL(stacklm_superposition, CompositeExplicitAutograd, library) {
  library.impl("step", &step);
  library.impl("step_backward", &step_backward);
}
