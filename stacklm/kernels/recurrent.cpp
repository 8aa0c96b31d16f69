// One step of a stack RNN's whole-sequence forward, and its backward (stacklm/models/recurrent.py,
// SequenceSteps): the layers' products and cells and the action layers' product, on the CPU, float32
// or float64, in loops over the tensors' memory, one op (``step``) whose autograd node is made here
// (StepNode): a step costs one call from Python and a few allocations, its backward none, not the
// sixty-odd ATen operations (each a dispatch of some microseconds) and the Python node that the same
// step cost written in them, at a CFL model's sizes (B = 10, d = 20) most of its time.
//
// Step t writes X^(ℓ)_t = [r_{t−1} ; h^(1)_{t−1}] (ℓ = 1) or [h̸^(ℓ−1)_t ; h^(ℓ)_{t−1}] (ℓ > 1) into row t
// of the run's tables ``inputs`` (n, B, inputs) and h^(L)_t into row t of ``action_inputs``; its
// backward writes G^(ℓ)_t, the gradient of W^(ℓ) X^(ℓ)_t + b, into row t of ``gate_gradients`` and
// the action layers' output gradient into ``action_gradients``, from which the weights' gradients
// are one product over all steps (SequenceSteps.weight_gradients). h̸^(ℓ)_t = h^(ℓ)_t ⊙ m^(ℓ)_t with
// the step's dropout masks (n, L − 1, B, d) where they are given, else h^(ℓ)_t.
//
// The action layers' output a_t = W_a h^(L)_t + b_a comes out in parts of ``action_sizes`` columns, each
// contiguous (one part: a_t itself), and with ``log_sigmoid_last`` the last part as log σ of its columns
// (the dVPDA's pushed vector, log v_t = log σ(W_v h + b_v)): the stack's step reads them as they are,
// with no operation from Python between the two steps.
//
// Cells, for gates z = W [x ; h_{t−1}] + b:
//   RNN:  h = tanh(z);
//   LSTM: i, f, g, o = σ, σ, tanh, σ of z;  c = f ⊙ c_{t−1} + i ⊙ g;  h = o ⊙ tanh(c).
// σ(x) = 1 / (1 + e^{−x}) and tanh(x) = sign(x) (1 − e^{−2|x|}) / (1 + e^{−2|x|}) over libmvec's
// vector exp: within a few units in the last place of 1 of ATen's (tanh near 0 in absolute, not
// relative, terms); their derivatives from their outputs, σ' = σ(1 − σ), tanh' = 1 − tanh², as
// ATen's backward takes them.
//
// Products (``product``): one row block of up to four rows of X against 8-lane columns of Wᵀ, the
// sums in registers, up to PRODUCT_LOOP_LIMIT multiply-adds; above it (the transformation tasks'
// stack RNNs, d ≥ 83, B ≥ 32) ATen's addmm (BLAS, and its threads). The forward reads
// W^(ℓ)ᵀ (inputs, gates · d) and W_aᵀ (d, actions), the backward W^(ℓ) and W_a, each contiguous
// (SequenceSteps keeps both layouts for a forward), so both run along rows.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "lanes.h"

// glibc's vector math library has SIMD exp; declared here so that `omp simd` loops call it (glibc
// declares it only under -ffast-math, which this file does not use).
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) double exp(double);
}

namespace {

using at::Tensor;
using stacklm_lanes::LANE_COUNT;

// Where a product's loops end and ATen's addmm takes over: rows · inputs · columns multiply-adds.
// Timed alone (one thread, both ops of a step): the loops are faster up to some 7 · 10⁴ (no dispatch,
// no packing), BLAS from about 10⁵ (its kernels twice as fast per multiply-add at 10⁶). A CFL
// model's products (B = 10, d = 20, m ≤ 40: at most 48,000) run in the loops; the transformation
// tasks' stack RNNs' (B = 32 … 64, d = 83 … 161: 10⁶ and more) in BLAS (docs/benchmarks.md).
constexpr int64_t PRODUCT_LOOP_LIMIT = 1 << 16;

// Rows of a matrix whose columns are contiguous: row r starts at data + r · stride (stride 0: one
// row repeated, as an expanded h_0 or a bias).
template <typename T>
struct Rows {
  T* data;
  int64_t stride;
  T* row(int64_t r) const { return data + r * stride; }
};

// ``tensor`` (2-D) with unit column stride: itself where it has it (no copy), else a contiguous copy.
Tensor unit_columns(const Tensor& tensor) {
  return tensor.size(1) <= 1 || tensor.stride(1) == 1 ? tensor : tensor.contiguous();
}

template <typename T>
Rows<T> rows_of(const Tensor& tensor) {
  return {tensor.data_ptr<std::remove_const_t<T>>(), tensor.size(0) <= 1 ? 0 : tensor.stride(0)};
}

template <typename T>
Tensor matrix(Rows<T> rows, int64_t count, int64_t columns, const at::TensorOptions& options) {
  return at::from_blob(const_cast<std::remove_const_t<T>*>(rows.data), {count, columns}, {rows.stride, 1}, options);
}

// ``block`` rows b0 … b0 + block − 1 (block ≤ BLOCK) of out = init + x m.
template <typename T, int64_t BLOCK>
void product_block(Rows<T> out, Rows<const T> init, Rows<const T> x, Rows<const T> m, int64_t b0, int64_t K, int64_t J) {
  using Vector = typename stacklm_lanes::Lanes<T>::type;
  int64_t j = 0;
  for (; j + LANE_COUNT <= J; j += LANE_COUNT) {
    Vector sums[BLOCK];
    for (int64_t r = 0; r < BLOCK; ++r) sums[r] = init.data ? stacklm_lanes::load(init.row(b0 + r) + j) : Vector{};
    for (int64_t k = 0; k < K; ++k) {
      const Vector column = stacklm_lanes::load(m.row(k) + j);
      for (int64_t r = 0; r < BLOCK; ++r) sums[r] += x.row(b0 + r)[k] * column;
    }
    for (int64_t r = 0; r < BLOCK; ++r) stacklm_lanes::store(out.row(b0 + r) + j, sums[r]);
  }
  for (; j < J; ++j) {
    T sums[BLOCK];
    for (int64_t r = 0; r < BLOCK; ++r) sums[r] = init.data ? init.row(b0 + r)[j] : T(0);
    for (int64_t k = 0; k < K; ++k) {
      const T weight = m.row(k)[j];
      for (int64_t r = 0; r < BLOCK; ++r) sums[r] += x.row(b0 + r)[k] * weight;
    }
    for (int64_t r = 0; r < BLOCK; ++r) out.row(b0 + r)[j] = sums[r];
  }
}

// out = init + x m: out (rows, J), init (rows, J) or none (data null: 0), x (rows, K), m (K, J); out
// may be init itself, and shares no memory with x and m.
template <typename T>
void product(
    Rows<T> out, Rows<const T> init, Rows<const T> x, Rows<const T> m, int64_t rows, int64_t K, int64_t J,
    const at::TensorOptions& options) {
  if (rows * K * J > PRODUCT_LOOP_LIMIT) {
    Tensor result = matrix(out, rows, J, options);
    if (init.data) {
      at::addmm_out(result, matrix(init, rows, J, options), matrix(x, rows, K, options), matrix(m, K, J, options));
    } else {
      at::mm_out(result, matrix(x, rows, K, options), matrix(m, K, J, options));
    }
    return;
  }
  constexpr int64_t BLOCK = 4;
  int64_t b0 = 0;
  for (; b0 + BLOCK <= rows; b0 += BLOCK) product_block<T, BLOCK>(out, init, x, m, b0, K, J);
  switch (rows - b0) {
    case 3: product_block<T, 3>(out, init, x, m, b0, K, J); break;
    case 2: product_block<T, 2>(out, init, x, m, b0, K, J); break;
    case 1: product_block<T, 1>(out, init, x, m, b0, K, J); break;
    default: break;
  }
}

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
inline T hyperbolic_tangent(T x) {
  const T e = std::exp(T(-2) * std::abs(x));
  const T y = (T(1) - e) / (T(1) + e);
  return x < 0 ? -y : y;
}

template <typename T>
void tanh_in_place(T* values, int64_t count) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) values[i] = hyperbolic_tangent(values[i]);
}

// The sizes of a step's LSTM layer's saved values: (i, f, g, o) (B, 4d), then tanh(c) (B, d).
int64_t saved_per_lstm_layer(int64_t B, int64_t d) { return 5 * B * d; }

// h^(1..L)_t, then c^(1..L)_t (LSTM), then the parts of the action layers' output (B, action_sizes[k])
// where ``action_inputs`` is given, then what the backward reads, in one flat tensor: per LSTM layer
// (i, f, g, o) (B, 4d) and tanh(c) (B, d), then (``log_sigmoid_last``, with actions) the last part
// before log σ. ``weights``: W^(ℓ)ᵀ (inputs, gates · d), ``transposed_action_weight``: W_aᵀ (d, actions),
// contiguous.
template <typename T>
std::vector<Tensor> step_values(
    int64_t t, const Tensor& projected_in, const Tensor& reading_in, at::TensorList hidden_in, at::TensorList cells_in,
    at::TensorList weights, at::TensorList biases, const std::optional<Tensor>& masks_in, at::TensorList inputs,
    const std::optional<Tensor>& action_inputs, const Tensor& transposed_action_weight, const std::optional<Tensor>& action_bias,
    at::IntArrayRef action_sizes, bool log_sigmoid_last) {
  const int64_t layers = static_cast<int64_t>(weights.size());
  const int64_t B = hidden_in[0].size(0), d = hidden_in[0].size(1);
  const bool lstm = !cells_in.empty();
  const bool has_actions = action_inputs.has_value();
  const auto options = hidden_in[0].options();
  const Tensor projected = unit_columns(projected_in), reading = unit_columns(reading_in);
  std::vector<Tensor> hidden, cells;
  for (const Tensor& h : hidden_in) hidden.push_back(unit_columns(h));
  for (const Tensor& c : cells_in) cells.push_back(unit_columns(c));
  std::optional<Tensor> masks;
  if (masks_in.has_value()) masks = masks_in->contiguous();  // (n, L − 1, B, d)
  const int64_t last_part = action_sizes.empty() ? 0 : action_sizes.back();
  const bool saves_log_sigmoid = has_actions && log_sigmoid_last;
  Tensor saved = at::empty({(lstm ? layers * saved_per_lstm_layer(B, d) : 0) + (saves_log_sigmoid ? B * last_part : 0)}, options);
  T* saved_data = saved.data_ptr<T>();
  std::vector<Tensor> new_hidden, new_cells;
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor& weight = weights[l];
    TORCH_CHECK(weight.is_contiguous() && inputs[l].is_contiguous(), "step: W^(ℓ)ᵀ and X^(ℓ) must be contiguous");
    const int64_t K = weight.size(0), G = weight.size(1);
    T* input = inputs[l].data_ptr<T>() + t * B * K;  // X^(ℓ)_t (B, K)
    const Rows<const T> previous = rows_of<const T>(hidden[l]);
    if (l == 0) {
      const int64_t width = K - d;
      const Rows<const T> r = rows_of<const T>(reading);
      for (int64_t b = 0; b < B; ++b) {
        std::memcpy(input + b * K, r.row(b), width * sizeof(T));
        std::memcpy(input + b * K + width, previous.row(b), d * sizeof(T));
      }
    } else {
      const T* below = new_hidden.back().data_ptr<T>();
      const T* mask = masks.has_value() ? masks->data_ptr<T>() + ((t * (layers - 1) + l - 1) * B) * d : nullptr;
      for (int64_t b = 0; b < B; ++b) {
        T* row = input + b * K;
        if (mask) {
          for (int64_t j = 0; j < d; ++j) row[j] = below[b * d + j] * mask[b * d + j];
        } else {
          std::memcpy(row, below + b * d, d * sizeof(T));
        }
        std::memcpy(row + d, previous.row(b), d * sizeof(T));
      }
    }
    // projected: W^(1)'s token columns and biases applied; for ℓ > 1 the bias, repeated over the rows
    const Rows<const T> init = l == 0 ? rows_of<const T>(projected) : Rows<const T>{biases[l - 1].data_ptr<T>(), 0};
    Tensor h = at::empty({B, d}, options);
    T* gates = lstm ? saved_data + l * saved_per_lstm_layer(B, d) : h.data_ptr<T>();  // (B, G)
    product<T>({gates, G}, init, {input, K}, {weight.data_ptr<T>(), G}, B, K, G, options);
    if (!lstm) {
      tanh_in_place(gates, B * G);
    } else {
      Tensor c = at::empty({B, d}, options);
      T* squashed = gates + 4 * B * d;  // tanh(c) (B, d)
      const Rows<const T> previous_cell = rows_of<const T>(cells[l]);
      T* cell = c.data_ptr<T>();
      T* out = h.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        T* row = gates + b * 4 * d;  // z, then i, f, g, o
        const T* before = previous_cell.row(b);
        T* c_row = cell + b * d;
        T* s_row = squashed + b * d;
        T* h_row = out + b * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          const T input_gate = sigmoid(row[j]), forget_gate = sigmoid(row[d + j]);
          const T candidate = hyperbolic_tangent(row[2 * d + j]), output_gate = sigmoid(row[3 * d + j]);
          const T c_value = forget_gate * before[j] + input_gate * candidate;
          const T s_value = hyperbolic_tangent(c_value);
          row[j] = input_gate, row[d + j] = forget_gate, row[2 * d + j] = candidate, row[3 * d + j] = output_gate;
          c_row[j] = c_value, s_row[j] = s_value, h_row[j] = output_gate * s_value;
        }
      }
      new_cells.push_back(c);
    }
    new_hidden.push_back(h);
  }
  std::vector<Tensor> outputs = new_hidden;
  outputs.insert(outputs.end(), new_cells.begin(), new_cells.end());
  if (has_actions) {
    TORCH_CHECK(transposed_action_weight.is_contiguous() && action_inputs->is_contiguous(), "step: W_aᵀ and the h^(L) table must be contiguous");
    const T* top = new_hidden.back().data_ptr<T>();
    std::memcpy(action_inputs->data_ptr<T>() + t * B * d, top, B * d * sizeof(T));
    const int64_t A = transposed_action_weight.size(1);
    const T* weight = transposed_action_weight.data_ptr<T>();  // W_aᵀ (d, A)
    const T* bias = action_bias.has_value() ? action_bias->data_ptr<T>() : nullptr;
    T* log_sigmoid_input = saved_data + (lstm ? layers * saved_per_lstm_layer(B, d) : 0);
    int64_t offset = 0;
    for (size_t k = 0; k < action_sizes.size(); ++k) {
      const int64_t width = action_sizes[k];
      Tensor part = at::empty({B, width}, options);
      const bool log_sigmoid = saves_log_sigmoid && k + 1 == action_sizes.size();
      T* logits = log_sigmoid ? log_sigmoid_input : part.data_ptr<T>();
      product<T>({logits, width}, {bias ? bias + offset : nullptr, 0}, {top, d}, {weight + offset, A}, B, d, width, options);
      if (log_sigmoid) {  // log σ(x) = min(x, 0) − log(1 + e^{−|x|})
        T* out = part.data_ptr<T>();
        for (int64_t i = 0; i < B * width; ++i) out[i] = std::min(logits[i], T(0)) - std::log1p(std::exp(-std::abs(logits[i])));
      }
      outputs.push_back(part);
      offset += width;
    }
  }
  outputs.push_back(saved);
  return outputs;
}

// The gradients of r_{t−1}, h^(1..L)_{t−1}, then c^(1..L)_{t−1} (LSTM), from those of ``step``'s
// outputs (undefined: 0) (that of its projection is row t of ``gate_gradients[0]``, written here;
// ``grad_action_parts``: of the action layers' parts, none for a step without actions); ``hidden`` is
// h^(1..L)_t, ``saved`` what ``step_values`` saved; ``weights``: W^(ℓ) (gates · d, inputs),
// ``action_weight``: W_a (actions, d), contiguous.
template <typename T>
std::vector<Tensor> step_gradients(
    int64_t t, at::TensorList grad_hidden, at::TensorList grad_cells, at::TensorList grad_action_parts,
    at::TensorList hidden, at::TensorList previous_cells_in, const Tensor& saved, at::TensorList weights,
    const std::optional<Tensor>& masks_in, at::TensorList gate_gradients, const std::optional<Tensor>& action_gradients,
    const Tensor& action_weight, at::IntArrayRef action_sizes) {
  const int64_t layers = static_cast<int64_t>(weights.size());
  const int64_t B = hidden[0].size(0), d = hidden[0].size(1);
  const bool lstm = !previous_cells_in.empty();
  const auto options = hidden[0].options();
  std::optional<Tensor> masks;
  if (masks_in.has_value()) masks = masks_in->contiguous();
  const T* saved_data = saved.data_ptr<T>();
  // ∂L/∂h^(ℓ)_t, every contribution summed: given, from the action layers (ℓ = L), from layer ℓ + 1
  std::vector<T> grad_h(layers * B * d);
  for (int64_t l = 0; l < layers; ++l) {
    if (!grad_hidden[l].defined()) continue;  // an output unused: a gradient of 0
    const Tensor given = unit_columns(grad_hidden[l]);
    const Rows<const T> rows = rows_of<const T>(given);
    for (int64_t b = 0; b < B; ++b) std::memcpy(grad_h.data() + (l * B + b) * d, rows.row(b), d * sizeof(T));
  }
  if (!grad_action_parts.empty()) {
    TORCH_CHECK(action_gradients->is_contiguous() && action_weight.is_contiguous(), "step_backward: W_a and ∂a must be contiguous");
    const int64_t A = action_weight.size(0);
    T* grad_logits = action_gradients->data_ptr<T>() + t * B * A;  // (B, A), the parts side by side
    const int64_t log_sigmoid_at = lstm ? layers * saved_per_lstm_layer(B, d) : 0;
    const bool log_sigmoid_last = saved.numel() > log_sigmoid_at;
    int64_t offset = 0;
    for (size_t k = 0; k < grad_action_parts.size(); ++k) {
      const int64_t width = action_sizes[k];
      if (!grad_action_parts[k].defined()) {
        for (int64_t b = 0; b < B; ++b) std::fill_n(grad_logits + b * A + offset, width, T(0));
        offset += width;
        continue;
      }
      const Tensor part = unit_columns(grad_action_parts[k]);
      const Rows<const T> rows = rows_of<const T>(part);
      if (log_sigmoid_last && k + 1 == grad_action_parts.size()) {  // (log σ)'(x) = σ(−x)
        const T* x = saved_data + log_sigmoid_at;
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t j = 0; j < width; ++j) grad_logits[b * A + offset + j] = rows.row(b)[j] * sigmoid(-x[b * width + j]);
        }
      } else {
        for (int64_t b = 0; b < B; ++b) std::memcpy(grad_logits + b * A + offset, rows.row(b), width * sizeof(T));
      }
      offset += width;
    }
    T* top = grad_h.data() + (layers - 1) * B * d;
    product<T>({top, d}, {top, d}, {grad_logits, A}, {action_weight.data_ptr<T>(), d}, B, A, d, options);
  }
  std::vector<Tensor> grad_previous_hidden(layers), grad_previous_cells(lstm ? layers : 0);
  Tensor grad_reading;
  std::vector<T> grad_input;
  for (int64_t l = layers - 1; l >= 0; --l) {
    const Tensor& weight = weights[l];  // W^(ℓ) (G, K)
    TORCH_CHECK(weight.is_contiguous() && gate_gradients[l].is_contiguous(), "step_backward: W^(ℓ) and G^(ℓ) must be contiguous");
    const int64_t G = weight.size(0), K = weight.size(1);
    T* grad_gates = gate_gradients[l].data_ptr<T>() + t * B * G;  // G^(ℓ)_t (B, G)
    const T* grad = grad_h.data() + l * B * d;
    if (!lstm) {
      const Tensor h_tensor = hidden[l].contiguous();  // h^(ℓ)_t, step's own output
      const T* h = h_tensor.data_ptr<T>();
      for (int64_t i = 0; i < B * d; ++i) grad_gates[i] = grad[i] * (T(1) - h[i] * h[i]);
    } else {
      const T* activations = saved_data + l * saved_per_lstm_layer(B, d);  // i, f, g, o (B, 4d)
      const T* squashed = activations + 4 * B * d;                        // tanh(c) (B, d)
      const Tensor given_cell = grad_cells[l].defined() ? unit_columns(grad_cells[l]) : Tensor();
      const std::vector<T> zeros(given_cell.defined() ? 0 : d);
      const Rows<const T> grad_cell_rows = given_cell.defined() ? rows_of<const T>(given_cell) : Rows<const T>{zeros.data(), 0};
      const Tensor previous_cell = unit_columns(previous_cells_in[l]);
      const Rows<const T> previous = rows_of<const T>(previous_cell);
      Tensor grad_previous_cell = at::empty({B, d}, options);
      T* grad_before = grad_previous_cell.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) {
        const T* a = activations + b * 4 * d;
        const T* s = squashed + b * d;
        const T* dh = grad + b * d;
        const T* dc_given = grad_cell_rows.row(b);
        const T* before = previous.row(b);
        T* g = grad_gates + b * G;
        for (int64_t j = 0; j < d; ++j) {
          // ∂c = ∂c_t + ∂h ⊙ o ⊙ (1 − tanh²(c)); ∂(i, f, g, o) = (∂c ⊙ g, ∂c ⊙ c_{t−1}, ∂c ⊙ i, ∂h ⊙ tanh(c))
          const T input_gate = a[j], forget_gate = a[d + j], candidate = a[2 * d + j], output_gate = a[3 * d + j];
          const T grad_cell = dc_given[j] + dh[j] * output_gate * (T(1) - s[j] * s[j]);
          g[j] = grad_cell * candidate * (input_gate * (T(1) - input_gate));
          g[d + j] = grad_cell * before[j] * (forget_gate * (T(1) - forget_gate));
          g[2 * d + j] = grad_cell * input_gate * (T(1) - candidate * candidate);
          g[3 * d + j] = dh[j] * s[j] * (output_gate * (T(1) - output_gate));
          grad_before[b * d + j] = grad_cell * forget_gate;
        }
      }
      grad_previous_cells[l] = grad_previous_cell;
    }
    grad_input.resize(B * K);  // ∂X^(ℓ)_t (B, K)
    product<T>({grad_input.data(), K}, {nullptr, 0}, {grad_gates, G}, {weight.data_ptr<T>(), K}, B, G, K, options);
    const int64_t below_width = K - d;
    Tensor previous = at::empty({B, d}, options);
    T* previous_data = previous.data_ptr<T>();
    for (int64_t b = 0; b < B; ++b) std::memcpy(previous_data + b * d, grad_input.data() + b * K + below_width, d * sizeof(T));
    grad_previous_hidden[l] = previous;
    if (l == 0) {
      grad_reading = at::empty({B, below_width}, options);
      T* reading = grad_reading.data_ptr<T>();
      for (int64_t b = 0; b < B; ++b) std::memcpy(reading + b * below_width, grad_input.data() + b * K, below_width * sizeof(T));
    } else {
      T* below = grad_h.data() + (l - 1) * B * d;
      const T* mask = masks.has_value() ? masks->data_ptr<T>() + ((t * (layers - 1) + l - 1) * B) * d : nullptr;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < d; ++j) {
          const T value = grad_input[b * K + j];
          below[b * d + j] += mask ? value * mask[b * d + j] : value;
        }
      }
    }
  }
  std::vector<Tensor> outputs = {grad_reading};
  outputs.insert(outputs.end(), grad_previous_hidden.begin(), grad_previous_hidden.end());
  outputs.insert(outputs.end(), grad_previous_cells.begin(), grad_previous_cells.end());
  return outputs;
}

// The outputs of step t (``step_values``), in the dtype of ``projected``.
std::vector<Tensor> step_outputs(
    int64_t t, const Tensor& projected, const Tensor& reading, at::TensorList hidden, at::TensorList cells,
    at::TensorList weights, at::TensorList biases, const std::optional<Tensor>& masks, at::TensorList inputs,
    const std::optional<Tensor>& action_inputs, const Tensor& transposed_action_weight,
    const std::optional<Tensor>& action_bias, at::IntArrayRef action_sizes, bool log_sigmoid_last) {
  TORCH_CHECK(projected.device().is_cpu(), "stacklm_recurrent::step runs on the CPU");
  return AT_DISPATCH_FLOATING_TYPES(projected.scalar_type(), "stacklm_recurrent_step", [&] {
    return step_values<scalar_t>(
        t, projected, reading, hidden, cells, weights, biases, masks, inputs, action_inputs, transposed_action_weight,
        action_bias, action_sizes, log_sigmoid_last);
  });
}

// The op ``step`` below autograd: ``step_values``' outputs, what the backward reads last.
std::vector<Tensor> step_composite(
    int64_t t, const Tensor& projected, const Tensor& reading, const Tensor& order, at::TensorList hidden,
    at::TensorList cells, at::TensorList weights, at::TensorList transposed_weights, at::TensorList biases,
    const std::optional<Tensor>& masks, at::TensorList inputs, at::TensorList gate_gradients,
    const std::optional<Tensor>& action_inputs, const std::optional<Tensor>& action_gradients,
    const Tensor& action_weight, const Tensor& transposed_action_weight, const std::optional<Tensor>& action_bias,
    at::IntArrayRef action_sizes, bool log_sigmoid_last) {
  return step_outputs(
      t, projected, reading, hidden, cells, weights, biases, masks, inputs, action_inputs, transposed_action_weight,
      action_bias, action_sizes, log_sigmoid_last);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Step t as one autograd node: forward ``step_values``, backward ``step_gradients``, both in C++ (no
// Python between them). Its inputs are every tensor argument of the op ``step``; it passes gradients
// to ``projected`` (row t of G^(1), a view of the table), ``reading``, ``order`` (an empty one: the
// node of the weights' gradients waits for every step's) and h^(ℓ)_{t−1}, c^(ℓ)_{t−1}; the others
// (weights, tables, masks) get none. Unused outputs' gradients stay undefined (read as 0). Its forward
// calls the op below autograd, so that tracing sees the op, not its insides; the values the backward
// reads are the op's last output, not differentiable.
struct StepNode : torch::autograd::Function<StepNode> {
  static variable_list forward(
      AutogradContext* ctx, int64_t t, const Tensor& projected, const Tensor& reading, const Tensor& order,
      at::TensorList hidden, at::TensorList cells, at::TensorList weights, at::TensorList transposed_weights,
      at::TensorList biases, const std::optional<Tensor>& masks, at::TensorList inputs, at::TensorList gate_gradients,
      const std::optional<Tensor>& action_inputs, const std::optional<Tensor>& action_gradients,
      const Tensor& action_weight, const Tensor& transposed_action_weight, const std::optional<Tensor>& action_bias,
      at::IntArrayRef action_sizes, bool log_sigmoid_last) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("stacklm_recurrent::step", "")
                               .typed<decltype(step_composite)>();
    std::vector<Tensor> outputs;
    {
      at::AutoDispatchBelowADInplaceOrView below;  // the op itself, as tracing sees it
      outputs = op.call(
          t, projected, reading, order, hidden, cells, weights, transposed_weights, biases, masks, inputs,
          gate_gradients, action_inputs, action_gradients, action_weight, transposed_action_weight, action_bias,
          action_sizes, log_sigmoid_last);
    }
    const int64_t layers = static_cast<int64_t>(weights.size());
    ctx->set_materialize_grads(false);
    ctx->mark_non_differentiable({outputs.back()});
    std::vector<Tensor> kept(outputs.begin(), outputs.begin() + layers);  // h^(ℓ)_t
    kept.insert(kept.end(), cells.begin(), cells.end());                  // c^(ℓ)_{t−1}
    ctx->save_for_backward(kept);
    ctx->saved_data["t"] = t;
    ctx->saved_data["saved"] = outputs.back();
    ctx->saved_data["weights"] = transposed_weights.vec();  // W^(ℓ)
    ctx->saved_data["masks"] = masks;
    ctx->saved_data["gate_gradients"] = gate_gradients.vec();
    ctx->saved_data["action_gradients"] = action_gradients;
    ctx->saved_data["action_weight"] = action_weight;  // W_a
    ctx->saved_data["action_sizes"] = action_inputs.has_value() ? action_sizes.vec() : std::vector<int64_t>{};
    ctx->saved_data["lstm"] = !cells.empty();
    // the node's inputs as apply counts them: each argument one, each tensor of a list one
    ctx->saved_data["inputs"] = static_cast<int64_t>(
        4 + hidden.size() + cells.size() + weights.size() + transposed_weights.size() + biases.size() + 1 +
        inputs.size() + gate_gradients.size() + 7);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list kept = ctx->get_saved_variables();
    const std::vector<Tensor> weights = ctx->saved_data["weights"].toTensorVector();
    const int64_t layers = static_cast<int64_t>(weights.size());
    const bool lstm = ctx->saved_data["lstm"].toBool();
    const int64_t t = ctx->saved_data["t"].toInt();
    const std::vector<Tensor> gate_gradients = ctx->saved_data["gate_gradients"].toTensorVector();
    const std::vector<int64_t> action_sizes = ctx->saved_data["action_sizes"].toIntVector();
    const Tensor saved = ctx->saved_data["saved"].toTensor();
    const std::optional<Tensor> masks = ctx->saved_data["masks"].toOptional<Tensor>();
    const std::optional<Tensor> action_gradients = ctx->saved_data["action_gradients"].toOptional<Tensor>();
    const Tensor action_weight = ctx->saved_data["action_weight"].toTensor();
    const at::TensorList all(grads);
    const at::TensorList grad_hidden = all.slice(0, layers), grad_cells = all.slice(layers, lstm ? layers : 0);
    const int64_t states = lstm ? 2 * layers : layers;
    const at::TensorList grad_parts = all.slice(states, all.size() - 1 - states);  // not the saved values'
    const at::TensorList hidden = at::TensorList(kept).slice(0, layers), previous_cells = at::TensorList(kept).slice(layers);
    std::vector<Tensor> gradients = AT_DISPATCH_FLOATING_TYPES(saved.scalar_type(), "stacklm_recurrent_step_backward", [&] {
      return step_gradients<scalar_t>(
          t, grad_hidden, grad_cells, grad_parts, hidden, previous_cells, saved, weights, masks, gate_gradients,
          action_gradients, action_weight, action_sizes);
    });
    variable_list result(ctx->saved_data["inputs"].toInt());  // undefined but for the five below
    result[1] = gate_gradients[0].select(0, t);                 // projected: G^(1)_t, written by step_gradients
    result[2] = gradients[0];                                   // r_{t−1}
    result[3] = at::empty({0}, saved.options());                // order
    for (size_t k = 1; k < gradients.size(); ++k) result[3 + k] = gradients[k];  // h^(ℓ)_{t−1}, c^(ℓ)_{t−1}
    return result;
  }
};

// The op ``step`` under autograd: one StepNode.
std::vector<Tensor> step_autograd(
    int64_t t, const Tensor& projected, const Tensor& reading, const Tensor& order, at::TensorList hidden,
    at::TensorList cells, at::TensorList weights, at::TensorList transposed_weights, at::TensorList biases,
    const std::optional<Tensor>& masks, at::TensorList inputs, at::TensorList gate_gradients,
    const std::optional<Tensor>& action_inputs, const std::optional<Tensor>& action_gradients,
    const Tensor& action_weight, const Tensor& transposed_action_weight, const std::optional<Tensor>& action_bias,
    at::IntArrayRef action_sizes, bool log_sigmoid_last) {
  return StepNode::apply(
      t, projected, reading, order, hidden, cells, weights, transposed_weights, biases, masks, inputs, gate_gradients,
      action_inputs, action_gradients, action_weight, transposed_action_weight, action_bias, action_sizes,
      log_sigmoid_last);
}

}  // namespace

// The schema marks the tables the forward writes into (``Tensor(a!)``); no output aliases an input.
// The backward (StepNode) writes G^(ℓ)_t and the action layers' gradient into ``gate_gradients`` and
// ``action_gradients``, which the forward only hands on. Registered as CompositeExplicitAutograd (and
// Autograd): registered without a dispatch key, an op is composite, and tracing (torch.compile,
// functionalization, dispatch modes) would step into it and see neither the op nor its writes.
TORCH_LIBRARY(stacklm_recurrent, library) {
  library.def(
      "step(int t, Tensor projected, Tensor reading, Tensor order, Tensor[] hidden, Tensor[] cells, "
      "Tensor[] weights, Tensor[] transposed_weights, Tensor[] biases, Tensor? masks, Tensor(a!)[] inputs, "
      "Tensor[] gate_gradients, Tensor(b!)? action_inputs, Tensor? action_gradients, Tensor action_weight, "
      "Tensor transposed_action_weight, Tensor? action_bias, int[] action_sizes, bool log_sigmoid_last) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(stacklm_recurrent, CompositeExplicitAutograd, library) {
  library.impl("step", &step_composite);
}

TORCH_LIBRARY_IMPL(stacklm_recurrent, Autograd, library) {
  library.impl("step", &step_autograd);
}
