// The stratification stack (Grefenstette et al. 2015, RNS-RNN App. 7.1) one step per call, forward and
// exact backward, on CPU. ``stratification.py`` states the recurrences in the papers' notation; this
// file follows its names.
//
// Per batch element, element i = 1 … t of the stack lies at index i − 1 (bottom first, so a push
// appends and no row moves):
//   values     (B, capacity, m): V[i] = v_i = tanh of the step's pushed logits, written by step i;
//   strengths  (B, capacity (capacity + 1) / 2): s_t[1 … t] of every step t, side by side from
//              offset t (t − 1) / 2, written by step t and read by its backward;
// and for the backward, zeros until the run's last step runs backward:
//   grad_values     (B, capacity, m): ∂L/∂V[i], summed over the readings r_i … r_n;
//   grad_strengths  (B, capacity): ∂L/∂s_t[1 … t] of the step t whose backward runs next.
// The logits of a step are the action layer's output as it is, (B, 2 + m): u_t = σ(column 0),
// d_t = σ(column 1), v_t = tanh(columns 2 …). Each sum over the stack runs from the top down, in the
// order of the PyTorch code's cumulative sums; every max, min and their gradients at ties follow
// PyTorch's relu (gradient 0 at 0) and minimum (half to each side at a tie). One batch element after
// another: a step's work is O(t m) per element, smaller than a task.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Offset of s_t[1] in an element's part of the strengths table.
int64_t strengths_offset(int64_t t) { return t * (t - 1) / 2; }

// The tables' sizes for a batch of the logits' (B, 2 + m), checked.
struct Sizes {
  int64_t batch, vector_size, capacity;
};

Sizes check_step(int64_t t, const at::Tensor& logits, const at::Tensor& values, const at::Tensor& strengths) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) >= 3 && logits.is_contiguous(), "the logits must be (B, 2 + m), contiguous");
  const Sizes sizes{logits.size(0), logits.size(1) - 2, values.size(1)};
  TORCH_CHECK(values.dim() == 3 && values.size(0) == sizes.batch && values.size(2) == sizes.vector_size && values.is_contiguous(),
              "the values must be (B, capacity, m), contiguous");
  TORCH_CHECK(strengths.dim() == 2 && strengths.size(0) == sizes.batch &&
                  strengths.size(1) == strengths_offset(sizes.capacity + 1) && strengths.is_contiguous(),
              "the strengths must be (B, capacity (capacity + 1) / 2), contiguous");
  TORCH_CHECK(1 <= t && t <= sizes.capacity, "step ", t, " outside the tables' 1 … ", sizes.capacity);
  TORCH_CHECK(values.scalar_type() == logits.scalar_type() && strengths.scalar_type() == logits.scalar_type(),
              "the tables must have the logits' dtype");
  return sizes;
}

// Step t: pop u_t, then push (v_t, d_t); r_t into ``reading`` (B, m).
template <typename T>
void step_typed(int64_t t, const Sizes& sizes, const T* logits, T* values, T* strengths, T* reading) {
  const int64_t m = sizes.vector_size, width = m + 2;
  const int64_t strengths_size = strengths_offset(sizes.capacity + 1);
  for (int64_t b = 0; b < sizes.batch; ++b) {
    const T* x = logits + b * width;
    T* value = values + b * sizes.capacity * m;  // V[1 …] (capacity, m)
    T* current = strengths + b * strengths_size + strengths_offset(t);  // s_t[1 … t]
    const T* previous = strengths + b * strengths_size + strengths_offset(t - 1);  // s_{t−1}[1 … t − 1]
    const T pop_strength = sigmoid(x[0]);
    // s_t[i] = max(0, s_{t−1}[i] − max(0, u_t − Σ_{j above i} s_{t−1}[j]))
    T above = 0;
    for (int64_t i = t - 2; i >= 0; --i) {
      const T removed = std::max(pop_strength - above, T(0));
      current[i] = std::max(previous[i] - removed, T(0));
      above += previous[i];
    }
    current[t - 1] = sigmoid(x[1]);  // s_t[t] = d_t
    T* pushed = value + (t - 1) * m;  // V[t] = v_t
    for (int64_t k = 0; k < m; ++k) pushed[k] = std::tanh(x[2 + k]);
    // r_t = Σ_i min(s_t[i], max(0, 1 − Σ_{j above i} s_t[j])) V[i]
    T* r = reading + b * m;
    std::fill(r, r + m, T(0));
    above = 0;
    for (int64_t i = t - 1; i >= 0; --i) {
      const T weight = std::min(current[i], std::max(T(1) - above, T(0)));
      above += current[i];
      const T* row = value + i * m;
      for (int64_t k = 0; k < m; ++k) r[k] += weight * row[k];
    }
  }
}

// The backward of step t: ∂L/∂logits (B, 2 + m) from ∂L/∂r_t, the step's logits and the tables;
// adds the reading's part to ∂L/∂V[1 … t] and turns ∂L/∂s_t in ``grad_strengths`` into ∂L/∂s_{t−1}.
template <typename T>
void step_backward_typed(int64_t t, const Sizes& sizes, const T* grad_reading, const T* logits, const T* values,
                         const T* strengths, T* grad_values, T* grad_strengths, T* grad_logits) {
  const int64_t m = sizes.vector_size, width = m + 2;
  const int64_t strengths_size = strengths_offset(sizes.capacity + 1);
  std::vector<T> grad_above(t);  // ∂L/∂(Σ_{j above i} s[j]) per row i
  for (int64_t b = 0; b < sizes.batch; ++b) {
    const T* x = logits + b * width;
    const T* value = values + b * sizes.capacity * m;
    T* grad_value = grad_values + b * sizes.capacity * m;
    const T* current = strengths + b * strengths_size + strengths_offset(t);
    const T* previous = strengths + b * strengths_size + strengths_offset(t - 1);
    T* grad_strength = grad_strengths + b * sizes.capacity;  // ∂L/∂s_t[1 … t], then ∂L/∂s_{t−1}[1 … t − 1]
    const T* g = grad_reading + b * m;
    // The reading: weight_i = min(s_t[i], c_i), c_i = max(0, 1 − A_i), A_i = Σ_{j above i} s_t[j].
    T above = 0;
    for (int64_t i = t - 1; i >= 0; --i) {
      const T budget = T(1) - above, capacity = std::max(budget, T(0)), strength = current[i];
      const T* row = value + i * m;
      T* grad_row = grad_value + i * m;
      const T weight = std::min(strength, capacity);
      T grad_weight = 0;
      for (int64_t k = 0; k < m; ++k) {
        grad_weight += g[k] * row[k];
        grad_row[k] += weight * g[k];
      }
      const T to_strength = strength < capacity ? grad_weight : strength == capacity ? grad_weight / 2 : T(0);
      const T to_capacity = grad_weight - to_strength;
      grad_strength[i] += to_strength;
      grad_above[i] = budget > 0 ? -to_capacity : T(0);
      above += strength;
    }
    T running = 0;  // ∂L/∂s_t[j] += Σ_{i below j} ∂L/∂A_i
    for (int64_t j = 0; j < t; ++j) {
      grad_strength[j] += running;
      running += grad_above[j];
    }
    // The push: s_t[t] = d_t, V[t] = v_t, whose gradients are complete (readings r_t … r_n added).
    const T push_strength = current[t - 1];
    T* grad_x = grad_logits + b * width;
    grad_x[1] = grad_strength[t - 1] * (T(1) - push_strength) * push_strength;
    grad_strength[t - 1] = 0;
    const T* pushed = value + (t - 1) * m;
    const T* grad_pushed = grad_value + (t - 1) * m;
    for (int64_t k = 0; k < m; ++k) grad_x[2 + k] = grad_pushed[k] * (T(1) - pushed[k] * pushed[k]);
    // The pop: s_t[i] = max(0, s_{t−1}[i] − q_i), q_i = max(0, u_t − A'_i), A'_i = Σ_{j above i} s_{t−1}[j].
    const T pop_strength = sigmoid(x[0]);
    T grad_pop = 0;
    above = 0;
    for (int64_t i = t - 2; i >= 0; --i) {
      const T excess = pop_strength - above;
      const T grad_difference = current[i] > 0 ? grad_strength[i] : T(0);
      const T grad_excess = excess > 0 ? -grad_difference : T(0);
      grad_strength[i] = grad_difference;  // now ∂L/∂s_{t−1}[i], before the sums above it
      grad_pop += grad_excess;
      grad_above[i] = -grad_excess;
      above += previous[i];
    }
    running = 0;
    for (int64_t j = 0; j < t - 1; ++j) {
      grad_strength[j] += running;
      running += grad_above[j];
    }
    grad_x[0] = grad_pop * (T(1) - pop_strength) * pop_strength;
  }
}

at::Tensor step(int64_t t, const at::Tensor& logits, const at::Tensor& values, const at::Tensor& strengths) {
  const Sizes sizes = check_step(t, logits, values, strengths);
  at::Tensor reading = at::empty({sizes.batch, sizes.vector_size}, logits.options());
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "stratification_step", [&] {
    step_typed<scalar_t>(t, sizes, logits.data_ptr<scalar_t>(), values.data_ptr<scalar_t>(), strengths.data_ptr<scalar_t>(),
                         reading.data_ptr<scalar_t>());
  });
  return reading;
}

at::Tensor step_backward(int64_t t, const at::Tensor& grad_reading, const at::Tensor& logits, const at::Tensor& values,
                         const at::Tensor& strengths, const at::Tensor& grad_values, const at::Tensor& grad_strengths) {
  const Sizes sizes = check_step(t, logits, values, strengths);
  TORCH_CHECK(grad_reading.sizes() == at::IntArrayRef({sizes.batch, sizes.vector_size}) && grad_reading.is_contiguous(),
              "the reading's gradient must be (B, m), contiguous");
  TORCH_CHECK(grad_values.sizes() == values.sizes() && grad_values.is_contiguous() &&
                  grad_strengths.sizes() == at::IntArrayRef({sizes.batch, sizes.capacity}) && grad_strengths.is_contiguous(),
              "the gradient tables must be (B, capacity, m) and (B, capacity), contiguous");
  at::Tensor grad_logits = at::empty_like(logits);
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "stratification_step_backward", [&] {
    step_backward_typed<scalar_t>(t, sizes, grad_reading.data_ptr<scalar_t>(), logits.data_ptr<scalar_t>(),
                                  values.data_ptr<scalar_t>(), strengths.data_ptr<scalar_t>(),
                                  grad_values.data_ptr<scalar_t>(), grad_strengths.data_ptr<scalar_t>(),
                                  grad_logits.data_ptr<scalar_t>());
  });
  return grad_logits;
}

}  // namespace

TORCH_LIBRARY(stacklm_stratification, library) {
  library.def("step(int t, Tensor logits, Tensor(a!) values, Tensor(b!) strengths) -> Tensor");
  library.def(
      "step_backward(int t, Tensor grad_reading, Tensor logits, Tensor values, Tensor strengths, Tensor(a!) grad_values, "
      "Tensor(b!) grad_strengths) -> Tensor");
}

TORCH_LIBRARY_IMPL(stacklm_stratification, CompositeExplicitAutograd, library) {
  library.impl("step", &step);
  library.impl("step_backward", &step_backward);
}
