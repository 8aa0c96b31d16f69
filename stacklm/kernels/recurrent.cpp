// One step of a stack RNN's whole-sequence forward, and its backward (stacklm/models/recurrent.py,
// SequenceSteps): the layers' products and cells and the action layers' product. The same ATen
// operations the Python step would call, called from C++, so a step costs two calls from Python
// instead of some sixty; any device, float32 or float64.
//
// Step t writes X^(ℓ)_t = [r_{t−1} ; h^(1)_{t−1}] (ℓ = 1) or [h̸^(ℓ−1)_t ; h^(ℓ)_{t−1}] (ℓ > 1) into row t
// of the run's tables ``inputs`` (n, B, inputs) and h^(L)_t into row t of ``action_inputs``; its
// backward writes G^(ℓ)_t, the gradient of W^(ℓ) X^(ℓ)_t + b, into row t of ``gate_gradients`` and
// the action layers' output gradient into ``action_gradients``, from which the weights' gradients
// are one product over all steps (SequenceSteps.weight_gradients).
//
// The action layers' output a_t = W_a h^(L)_t + b_a comes out in parts of ``action_sizes`` columns, each
// contiguous (one part: a_t itself), and with ``log_sigmoid_last`` the last part as log σ of its columns
// (the dVPDA's pushed vector, log v_t = log σ(W_v h + b_v)): the stack's step reads them as they are,
// with no operation from Python between the two steps.
//
// Cells, for gates z = W [x ; h_{t−1}] + b:
//   RNN:  h = tanh(z);
//   LSTM: i, f, g, o = σ, σ, tanh, σ of z;  c = f ⊙ c_{t−1} + i ⊙ g;  h = o ⊙ tanh(c).

#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <vector>

namespace {

using at::Tensor;

// h^(1..L)_t, then c^(1..L)_t (LSTM), then the parts of the action layers' output (B, action_sizes[k])
// where ``action_inputs`` is given, then what the backward reads: per LSTM layer (i, f, g, o) and
// tanh(c), then (``log_sigmoid_last``, with actions) the last part before log σ and log σ's buffer.
std::vector<Tensor> step(
    int64_t t, const Tensor& projected, const Tensor& reading, at::TensorList hidden, at::TensorList cells,
    at::TensorList weights, at::TensorList biases, const std::optional<Tensor>& masks, at::TensorList inputs,
    const std::optional<Tensor>& action_inputs, const Tensor& action_weight, const std::optional<Tensor>& action_bias,
    at::IntArrayRef action_sizes, bool log_sigmoid_last) {
  const int64_t layers = static_cast<int64_t>(weights.size());
  const int64_t d = hidden[0].size(1);
  const bool lstm = !cells.empty();
  std::vector<Tensor> new_hidden, new_cells, saved;
  for (int64_t l = 0; l < layers; ++l) {
    Tensor input = inputs[l].select(0, t);  // X^(ℓ)_t (B, inputs)
    Tensor gates;                           // (B, gates · d)
    if (l == 0) {
      const int64_t width = reading.size(1);
      input.narrow(1, 0, width).copy_(reading);
      input.narrow(1, width, d).copy_(hidden[0]);
      gates = at::addmm(projected, input, weights[0]);  // projected: W^(1)'s token columns and biases applied
    } else {
      Tensor below = input.narrow(1, 0, d);
      if (masks.has_value()) {
        at::mul_out(below, new_hidden.back(), masks->select(0, t).select(0, l - 1));
      } else {
        below.copy_(new_hidden.back());
      }
      input.narrow(1, d, d).copy_(hidden[l]);
      gates = at::addmm(biases[l - 1], input, weights[l]);
    }
    if (!lstm) {
      new_hidden.push_back(gates.tanh_());
      continue;
    }
    Tensor activations = at::sigmoid(gates);  // i, f, g, o
    Tensor candidate = activations.narrow(1, 2 * d, d);
    at::tanh_out(candidate, gates.narrow(1, 2 * d, d));
    Tensor cell = at::addcmul(activations.narrow(1, d, d) * cells[l], activations.narrow(1, 0, d), candidate);
    Tensor squashed = at::tanh(cell);
    new_hidden.push_back(activations.narrow(1, 3 * d, d) * squashed);
    new_cells.push_back(cell);
    saved.push_back(activations);
    saved.push_back(squashed);
  }
  std::vector<Tensor> outputs = new_hidden;
  outputs.insert(outputs.end(), new_cells.begin(), new_cells.end());
  if (action_inputs.has_value()) {
    action_inputs->select(0, t).copy_(new_hidden.back());
    Tensor action_logits = at::linear(new_hidden.back(), action_weight, action_bias);  // (B, actions)
    std::vector<Tensor> parts = action_logits.split_with_sizes(action_sizes, 1);
    for (Tensor& part : parts) part = part.contiguous();
    if (log_sigmoid_last) {
      auto [log_sigmoid, buffer] = at::log_sigmoid_forward(parts.back());
      saved.push_back(parts.back());
      saved.push_back(buffer);
      parts.back() = log_sigmoid;
    }
    outputs.insert(outputs.end(), parts.begin(), parts.end());
  }
  outputs.insert(outputs.end(), saved.begin(), saved.end());
  return outputs;
}

// The gradients of r_{t−1}, h^(1..L)_{t−1}, then c^(1..L)_{t−1} (LSTM), from those of ``step``'s
// outputs (that of its projection is row t of ``gate_gradients[0]``, written here) (``grad_action_parts``: of
// the action layers' parts, none for a step without actions); ``hidden`` is h^(1..L)_t, ``saved``
// what ``step`` returned after its outputs.
std::vector<Tensor> step_backward(
    int64_t t, at::TensorList grad_hidden, at::TensorList grad_cells, at::TensorList grad_action_parts,
    at::TensorList hidden, at::TensorList previous_cells, at::TensorList saved, at::TensorList weights,
    const std::optional<Tensor>& masks, at::TensorList gate_gradients, const std::optional<Tensor>& action_gradients,
    const Tensor& action_weight) {
  const int64_t layers = static_cast<int64_t>(weights.size());
  const int64_t d = hidden[0].size(1);
  const bool lstm = !previous_cells.empty();
  std::vector<Tensor> grad_h(grad_hidden.begin(), grad_hidden.end());
  if (!grad_action_parts.empty()) {
    Tensor grad_action_logits = action_gradients->select(0, t);  // (B, actions), the parts side by side
    const size_t log_sigmoid_saved = lstm ? 2 * layers : 0;  // where log σ's input and buffer are, if saved
    int64_t offset = 0;
    for (size_t k = 0; k < grad_action_parts.size(); ++k) {
      const Tensor& grad_part = grad_action_parts[k];
      Tensor target = grad_action_logits.narrow(1, offset, grad_part.size(1));
      if (k + 1 == grad_action_parts.size() && saved.size() > log_sigmoid_saved) {
        target.copy_(at::log_sigmoid_backward(grad_part, saved[log_sigmoid_saved], saved[log_sigmoid_saved + 1]));
      } else {
        target.copy_(grad_part);
      }
      offset += grad_part.size(1);
    }
    grad_h.back() = at::addmm(grad_h.back(), grad_action_logits, action_weight);
  }
  std::vector<Tensor> grad_previous_hidden(layers), grad_previous_cells(lstm ? layers : 0);
  Tensor grad_reading;
  for (int64_t l = layers - 1; l >= 0; --l) {
    Tensor grad_gates = gate_gradients[l].select(0, t);  // G^(ℓ)_t (B, gates · d)
    if (!lstm) {
      at::tanh_backward_out(grad_gates, grad_h[l], hidden[l]);
    } else {
      const Tensor& activations = saved[2 * l];
      const Tensor& squashed = saved[2 * l + 1];
      Tensor input_gate = activations.narrow(1, 0, d), forget_gate = activations.narrow(1, d, d);
      Tensor candidate = activations.narrow(1, 2 * d, d), output_gate = activations.narrow(1, 3 * d, d);
      // ∂c ← ∂c + ∂h ⊙ o ⊙ (1 − tanh²(c)); ∂(i, f, g, o) = (∂c ⊙ g, ∂c ⊙ c_{t−1}, ∂c ⊙ i, ∂h ⊙ tanh(c))
      Tensor grad_cell = grad_cells[l] + at::tanh_backward(grad_h[l] * output_gate, squashed);
      Tensor grad_activations = at::empty_like(activations);
      Tensor part = grad_activations.narrow(1, 0, d);
      at::mul_out(part, grad_cell, candidate);
      part = grad_activations.narrow(1, d, d);
      at::mul_out(part, grad_cell, previous_cells[l]);
      part = grad_activations.narrow(1, 2 * d, d);
      at::mul_out(part, grad_cell, input_gate);
      part = grad_activations.narrow(1, 3 * d, d);
      at::mul_out(part, grad_h[l], squashed);
      at::sigmoid_backward_out(grad_gates, grad_activations, activations);
      Tensor grad_candidate = grad_gates.narrow(1, 2 * d, d);
      at::tanh_backward_out(grad_candidate, grad_activations.narrow(1, 2 * d, d), candidate);
      grad_previous_cells[l] = grad_cell * forget_gate;
    }
    Tensor grad_input = at::mm(grad_gates, weights[l].t());  // ∂X^(ℓ)_t (B, inputs)
    const int64_t below_width = grad_input.size(1) - d;
    grad_previous_hidden[l] = grad_input.narrow(1, below_width, d);
    Tensor below = grad_input.narrow(1, 0, below_width);
    if (l == 0) {
      grad_reading = below;
    } else if (masks.has_value()) {
      grad_h[l - 1] = at::addcmul(grad_h[l - 1], below, masks->select(0, t).select(0, l - 1));
    } else {
      grad_h[l - 1] = grad_h[l - 1] + below;
    }
  }
  std::vector<Tensor> outputs = {grad_reading};
  outputs.insert(outputs.end(), grad_previous_hidden.begin(), grad_previous_hidden.end());
  outputs.insert(outputs.end(), grad_previous_cells.begin(), grad_previous_cells.end());
  return outputs;
}

}  // namespace

// The schemas mark the tables each op writes into (``Tensor(a!)``); no output aliases an input. The
// kernels are registered as CompositeExplicitAutograd (any device): registered without a dispatch
// key, an op is composite, and tracing (torch.compile, functionalization, dispatch modes) would
// step into it and see neither the op nor its writes.
TORCH_LIBRARY(stacklm_recurrent, library) {
  library.def(
      "step(int t, Tensor projected, Tensor reading, Tensor[] hidden, Tensor[] cells, Tensor[] weights, "
      "Tensor[] biases, Tensor? masks, Tensor(a!)[] inputs, Tensor(b!)? action_inputs, Tensor action_weight, "
      "Tensor? action_bias, int[] action_sizes, bool log_sigmoid_last) -> Tensor[]");
  library.def(
      "step_backward(int t, Tensor[] grad_hidden, Tensor[] grad_cells, Tensor[] grad_action_parts, "
      "Tensor[] hidden, Tensor[] previous_cells, Tensor[] saved, Tensor[] weights, Tensor? masks, "
      "Tensor(a!)[] gate_gradients, Tensor(b!)? action_gradients, Tensor action_weight) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(stacklm_recurrent, CompositeExplicitAutograd, library) {
  library.impl("step", &step);
  library.impl("step_backward", &step_backward);
}
