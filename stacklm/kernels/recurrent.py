"""The stack RNNs' whole-sequence forward (``stacklm.models.recurrent``) on compiled CPU kernels (``recurrent.cpp``).

A step's products and cells are one compiled autograd node (:class:`SequenceSteps`, its backward
written out), the weights' gradients one product per weight over all steps, and the dVPDA runs one
kernel call per step (``stacklm.kernels.dvpda``: :class:`~stacklm.kernels.dvpda.SequenceRun`), reading
the action layers' output in the parts the step hands over (:func:`step_parts`), as do the symbol,
stratification and superposition stacks (:func:`stack_run`). The same
operations as the model's own forward, in the same order, with the same dropout masks where its
dropout modules are the kernel's (``stacklm.kernels.backend``): the same results within float
rounding (tested). :class:`CompiledRecurrentLanguageModel` takes the place of the model's class.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from stacklm.kernels.dvpda import SequenceRun, kernel_applies, runs_on_kernel
from stacklm.kernels.stratification import CompiledStratificationInterface, StratificationRun
from stacklm.kernels.superposition import CompiledSuperpositionInterface, SuperpositionRun
from stacklm.kernels.symbol_stack import CompiledNondeterministicStack, SymbolStackRun
from stacklm.models.recurrent import RecurrentLanguageModel, StepWeights
from stacklm.models.stack_interface import NondeterministicInterface, StackInterface, VectorNondeterministicInterface
from stacklm.stacks.base import StackState
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions


def step_parts(interface: StackInterface) -> tuple[list[int], bool]:
    """How a step hands over the outputs of the interface's ``input_layers``: the widths of the parts
    it splits them into, and whether it takes the last part as log σ. The dVPDA's action logits and
    pushed vector apart, the latter as log v_t = log σ(W_v h + b_v) unless ``pushed_vector="raw"``;
    every other stack's outputs whole."""
    if isinstance(interface, VectorNondeterministicInterface):
        return [interface.action_layer.out_features, interface.push_layer.out_features], interface.pushed_vector == "sigmoid"
    return [sum(layer.out_features for layer in interface.input_layers())], False


class StateRun:
    """A stack's states through one forward, advanced by the parts of :func:`step_parts`."""

    def __init__(self, interface: StackInterface, state: StackState[Any]) -> None:
        self.interface = interface
        self.state = state

    def next(self, parts: tuple[Tensor, ...]) -> None:
        interface = self.interface
        if isinstance(interface, VectorNondeterministicInterface):
            action_logits, log_pushed = parts
            spec = interface.spec
            actions = VectorNondeterministicActions.from_logits(action_logits, log_pushed, spec.num_states, spec.num_symbols)
        else:
            (logits,) = parts
            actions = interface.actions_from_logits(logits)
        self.state = self.state.next(actions)

    def reading(self) -> Tensor:
        return self.state.reading()


def stack_run(
    interface: StackInterface, batch_size: int, like: Tensor, updates: int
) -> StateRun | SequenceRun | SymbolStackRun | StratificationRun | SuperpositionRun:
    """The stack of one forward of ``updates`` stack updates: the dVPDA on its kernel where it applies,
    the symbol stack on its own where the interface holds it (``stacklm.kernels.symbol_stack``), the
    stratification and superposition stacks on theirs where the interface is compiled
    (``stacklm.kernels.stratification``, ``stacklm.kernels.superposition``), each reading the action
    layers' output as it is."""
    stack = interface.stack
    if updates > 0 and isinstance(interface, VectorNondeterministicInterface) and kernel_applies(interface.stack):
        return SequenceRun(interface.stack, batch_size, like, updates)
    if updates > 0 and isinstance(interface, NondeterministicInterface) and isinstance(stack, CompiledNondeterministicStack):
        return SymbolStackRun(stack, batch_size, like, updates, interface.spec.normalized)
    if updates > 0 and isinstance(interface, CompiledStratificationInterface):
        return StratificationRun(interface, batch_size, like, updates)
    if updates > 0 and isinstance(interface, CompiledSuperpositionInterface):
        return SuperpositionRun(interface, batch_size, like, updates)
    return StateRun(interface, interface.initial_state(batch_size, like, updates or None))


class CompiledRecurrentLanguageModel(RecurrentLanguageModel):
    """A stack RNN's whole-sequence forward on the kernels (module docstring), on the CPU in float32 or float64."""

    def forward(self, tokens: Tensor) -> Tensor:
        interface = self.interface
        like = self.layers[0].input_weight
        if interface is None or not runs_on_kernel(like):
            return super().forward(tokens)
        batch_size, length = tokens.shape
        reading_to_output = self.config.reading_to_output
        updates, projected, weights, masks = self._sequence_start(tokens)
        hidden, cells = self._initial_layers(batch_size)
        stack = stack_run(interface, batch_size, like, updates)
        steps = SequenceSteps(self, weights, batch_size, length, updates, masks)
        order = steps.order(weights)
        top_hidden = [hidden[-1]]  # h^(L)_0 … h^(L)_n
        readings = [stack.reading()] if reading_to_output else []  # r_0 … r_n (+R)
        pending = None  # without +R: the action layers' outputs of h_{t−1}, applied at step t
        for t, projected_token in enumerate(projected.unbind(1)):  # unbind: one backward for all steps
            if pending is not None:
                stack.next(pending)
            hidden, cells, action_parts = steps.step(t, order, projected_token, stack.reading(), hidden, cells)
            top_hidden.append(hidden[-1])
            if reading_to_output:
                assert action_parts is not None
                stack.next(action_parts)
                readings.append(stack.reading())
            else:
                pending = action_parts
        output = torch.stack(top_hidden, dim=1)  # (B, n + 1, d)
        if reading_to_output:
            output = torch.cat([output, torch.stack(readings, dim=1)], dim=-1)  # (B, n + 1, d + |r|)
        return self._logits(output)  # (B, n + 1, V)


class SequenceSteps:
    """The products and cells of one whole-sequence forward of a stack RNN, one autograd node per
    step (the op ``stacklm_recurrent::step``: forward and backward in ``recurrent.cpp``, its node made
    in C++, loops over the tensors' memory), the weights' gradients deferred to one node after all
    steps (``_WeightGradients``).

    Step t multiplies X^(ℓ)_t = [r_{t−1} ; h^(1)_{t−1}] (ℓ = 1) or [h̸^(ℓ−1)_t ; h^(ℓ)_{t−1}] (ℓ > 1)
    by W^(ℓ)ᵀ, and h^(L)_t by the action layers' weights joined (``StepWeights``). Its backward
    passes the gradients to X^(ℓ)_t and keeps G^(ℓ)_t, the gradient of the product's output; then

        ∂L/∂W^(ℓ)ᵀ = Σ_t X^(ℓ)_tᵀ G^(ℓ)_t,   ∂L/∂b^(ℓ) = Σ_t Σ_rows G^(ℓ)_t,

    one product over all n·B rows instead of one over B rows per step (the action layers' likewise).
    The inputs and gradients are kept time-major, (n, B, ·), in tables made once per forward. The
    action layers' output leaves the step in the parts :func:`step_parts` gives (the
    dVPDA's: its logits, and log σ of its pushed vector's), which the stack's step reads as they are.
    """

    def __init__(
        self,
        model: RecurrentLanguageModel,
        weights: StepWeights,
        batch_size: int,
        length: int,
        updates: int,
        dropout_masks: Tensor | None,
    ) -> None:
        assert weights.actions is not None
        self.num_layers = len(weights.layers)
        self.lstm = model.config.cell == "lstm"
        self.updates = updates  # steps whose h^(L)_t drives the stack
        self.dropout_masks = dropout_masks  # (n, L − 1, B, d) or None
        # both layouts, contiguous: the forward runs along W^(ℓ)ᵀ's and W_aᵀ's rows, the backward along W^(ℓ)'s and W_a's
        self.layer_weights = [weight.detach().contiguous() for weight in weights.layers]  # W^(ℓ)ᵀ (inputs, gates · d)
        self.transposed_layer_weights = [weight.detach().t().contiguous() for weight in weights.layers]  # W^(ℓ)
        self.biases = [bias.detach() for bias in weights.biases]
        action_weight, action_bias = weights.actions
        self.action_weight = action_weight.detach().contiguous()  # W_a (actions, d)
        self.transposed_action_weight = action_weight.detach().t().contiguous()  # W_aᵀ (d, actions)
        self.action_bias = None if action_bias is None else action_bias.detach()
        assert model.interface is not None
        self.action_sizes, self.log_sigmoid_last = step_parts(model.interface)  # how the step splits a_t
        like = self.action_weight
        self.inputs = [like.new_empty(length, batch_size, weight.size(0)) for weight in self.layer_weights]  # X^(ℓ)
        # G^(ℓ) and the action layers' G, zeros: a step whose backward does not run adds nothing
        self.gate_gradients = [like.new_zeros(length, batch_size, weight.size(1)) for weight in self.layer_weights]
        self.action_inputs = like.new_empty(updates, batch_size, model.config.hidden_units)  # h^(L)_t
        self.action_gradients = like.new_zeros(updates, batch_size, self.action_weight.size(0))
        self.order_gradient = like.new_zeros(0)  # every step's: the order tensor carries no gradient

    def order(self, weights: StepWeights) -> Tensor:
        """The empty tensor that every step takes (``step``), so that the weights' gradients run after
        all steps' backward. Not kept here: the node's context holds these steps (no reference cycle);
        the steps' nodes hold their tables and weights, not these steps."""
        assert weights.actions is not None
        return _WeightGradients.apply(self, *weights.layers, *weights.biases, *weights.actions)

    def step(
        self,
        t: int,
        order: Tensor,
        projected: Tensor,
        reading: Tensor,
        hidden: tuple[Tensor, ...],
        cells: tuple[Tensor, ...],
    ) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], tuple[Tensor, ...] | None]:
        """h^(ℓ)_t, c^(ℓ)_t and, for steps that drive the stack, the parts of the action layers' outputs
        (:func:`step_parts`: (B, width) each) from ``order``, W^(1)'s token columns and
        biases applied to x'_t (B, gates · d), r_{t−1} (B, |r|) and the states of step t − 1."""
        has_actions = t < self.updates
        outputs = torch.ops.stacklm_recurrent.step(
            t, projected, reading, order, hidden, cells, self.layer_weights, self.transposed_layer_weights,
            self.biases, self.dropout_masks, self.inputs, self.gate_gradients,
            self.action_inputs if has_actions else None, self.action_gradients if has_actions else None,
            self.action_weight, self.transposed_action_weight, self.action_bias, self.action_sizes, self.log_sigmoid_last,
        )  # fmt: skip
        num_layers = self.num_layers
        states = num_layers * (2 if self.lstm else 1)
        new_cells = tuple(outputs[num_layers:states]) if self.lstm else ()
        # h^(ℓ)_t, c^(ℓ)_t, the parts of the action layers' outputs, then the values the step's backward reads
        return tuple(outputs[:num_layers]), new_cells, tuple(outputs[states:-1]) if has_actions else None

    def weight_gradients(self) -> list[Tensor]:
        """∂L/∂W^(ℓ)ᵀ, ∂L/∂b^(ℓ) (ℓ > 1), the action layers' weight and bias gradients: one product
        each over the steps (class docstring)."""
        rows = [table.flatten(0, 1) for table in self.gate_gradients]  # (n · B, gates · d)
        layers = [torch.mm(inputs.flatten(0, 1).t(), grad) for inputs, grad in zip(self.inputs, rows)]
        biases = [grad.sum(0) for grad in rows[1:]]
        action_rows = self.action_gradients.flatten(0, 1)  # (updates · B, actions)
        action_weight = torch.mm(action_rows.t(), self.action_inputs.flatten(0, 1))
        return [*layers, *biases, action_weight, action_rows.sum(0)]


class _WeightGradients(torch.autograd.Function):
    """The weights of one forward's steps: an empty tensor every step takes, so that this node's
    backward (``SequenceSteps.weight_gradients``) runs after all of theirs."""

    @staticmethod
    def forward(ctx: Any, steps: SequenceSteps, *weights: Tensor | None) -> Tensor:
        ctx.steps = steps
        ctx.has_weight = [weight is not None for weight in weights]
        return steps.action_weight.new_empty(0)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_order: Tensor) -> tuple[Tensor | None, ...]:
        gradients = ctx.steps.weight_gradients()
        return None, *(grad if present else None for grad, present in zip(gradients, ctx.has_weight))
