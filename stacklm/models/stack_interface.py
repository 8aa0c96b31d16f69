"""The layers that connect a network to a differentiable stack, one per kind of stack.

A network hands a stack interface its hidden vectors h (the top layer's h_t in a stack RNN,
x̄_t^LN in a stack-attention sublayer); the interface computes the stack's actions from them
(DuSell & Cotterell (2025) §3 ``Actions``, §4.1, App. C.4; DuSell & Chiang (2022) §2–3, App. 7) and owns the parameter-free
stack of ``stacklm.stacks``. ``actions`` accepts h with or without a time dimension, (B, d) or
(B, n, d), so one interface serves step-by-step and whole-sequence use. Every layer reading h is
linear, so the actions are ``actions_from_logits`` of their outputs side by side; a stack RNN
computes those in one product with the weights stacked (``input_weight``).

Each kind of stack has a frozen spec (the sizes of the stack; the first field ``kind`` tags
it in configs) and an interface module:

- superposition (m): a'_t = W_a h + b_a, a_t = softmax(a'_t) over (push, pop, no-op);
  v_t = σ(W_v h + b_v) ∈ (0, 1)^m, or W_v h + b_v unbounded with ``pushed_vector="raw"``;
- stratification (m): (u_t, d_t) = σ(W_s h + b_s), v_t = tanh(W_v h + b_v) (DuSell & Chiang (2022) App. 7.1);
- nondeterministic (|Q|, |Γ|; NS, NS+S, NS+U, NS+S+U): the QS(2QS + Q) logits W_a h + b_a are
  the log transition weights, log-softmaxed per (q, x) when normalized (DuSell & Chiang (2022) eq. 1, §3.1);
- vector nondeterministic (dVPDA; |Q|, |Γ|, m): unnormalized log weights W_a h + b_a (DuSell & Cotterell (2025)
  App. B.2) and log v_t = log σ(W_v h + b_v), or log v_t = W_v h + b_v with
  ``pushed_vector="raw"`` (v_t = exp(W_v h)); the stack owns the learned bottom logits w₀.

Stack RNNs use biases (DuSell & Cotterell (2025) §4.1); stack attention does not (App. C.4).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from stacklm.models.base import TANH_GAIN, uniform_, uniform_layer_, xavier_
from stacklm.models.options import PushedVector
from stacklm.stacks.base import Stack, StackState
from stacklm.stacks.nondeterministic import NondeterministicActions, NondeterministicStack, num_action_logits
from stacklm.stacks.stratification import StratificationActions, StratificationStack
from stacklm.stacks.superposition import SuperpositionActions, SuperpositionStack
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions, VectorNondeterministicStack


@dataclass(frozen=True)
class SuperpositionSpec:
    kind: Literal["superposition"] = "superposition"
    vector_size: int = 50  # m; DuSell & Cotterell (2025) §5
    max_depth: int | None = None  # D; None = unbounded (DuSell & Cotterell (2025), DuSell & Chiang (2022) CFL)

    @property
    def reading_size(self) -> int:
        return self.vector_size


@dataclass(frozen=True)
class StratificationSpec:
    kind: Literal["stratification"] = "stratification"
    vector_size: int = 20  # m; DuSell & Chiang (2022) App. 8 searches {2, 20, 40}

    @property
    def reading_size(self) -> int:
        return self.vector_size


@dataclass(frozen=True)
class NondeterministicSpec:
    """The NS-RNN family's stack (DuSell & Chiang (2022) §2.4, §3): reading over top symbols, or states and symbols."""

    kind: Literal["nondeterministic"] = "nondeterministic"
    num_states: int = 2  # |Q|
    num_symbols: int = 3  # |Γ|
    normalized: bool = False  # NS, NS+S: a softmax over each (q, x)'s transitions; +U: raw log weights
    states_in_reading: bool = True  # +S: the reading is over (state, top symbol)

    @property
    def reading_size(self) -> int:
        return self.num_states * self.num_symbols if self.states_in_reading else self.num_symbols


@dataclass(frozen=True)
class VectorNondeterministicSpec:
    """The dVPDA of the "+Nd" models (DuSell & Cotterell (2025) §3.2): |Q| = |Γ| = 3, m = 5 (§5)."""

    kind: Literal["vector-nondeterministic"] = "vector-nondeterministic"
    num_states: int = 3  # |Q|
    num_symbols: int = 3  # |Γ|
    vector_size: int = 5  # m

    @property
    def reading_size(self) -> int:
        return self.num_states * self.num_symbols * self.vector_size


StackSpec = SuperpositionSpec | StratificationSpec | NondeterministicSpec | VectorNondeterministicSpec


def transition_count(num_states: int, num_symbols: int) -> int:
    """QS(2QS + Q): push, replace and pop weights for every (q, x)."""
    return num_action_logits(num_states, num_symbols)


class StackInterface(nn.Module, ABC):
    """Actions from hidden vectors of size ``input_size``, and the stack they drive."""

    stack: Stack[Any]
    reading_size: int

    @abstractmethod
    def input_layers(self) -> tuple[nn.Linear, ...]:
        """The layers reading h, in the order of their outputs in ``actions_from_logits``."""

    @abstractmethod
    def actions_from_logits(self, logits: Tensor) -> Any:
        """The stack's actions from the outputs of ``input_layers`` side by side (…, Σ outputs)."""

    def input_weight(self) -> tuple[Tensor, Tensor | None]:
        """The weights of ``input_layers`` stacked (Σ outputs, d), and their biases (Σ outputs,) or None."""
        layers = self.input_layers()
        if len(layers) == 1:
            return layers[0].weight, layers[0].bias
        weight = torch.cat([layer.weight for layer in layers])
        if layers[0].bias is None:
            return weight, None
        return weight, torch.cat([layer.bias for layer in layers])

    def actions(self, hidden: Tensor) -> Any:
        """The stack's actions for h of shape (B, d) or (B, n, d)."""
        return self.actions_from_logits(torch.cat([layer(hidden) for layer in self.input_layers()], dim=-1))

    @abstractmethod
    def initialize(self, generator: torch.Generator) -> None: ...

    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> StackState[Any]:
        return self.stack.initial_state(batch_size, like, max_steps)

    def readings(self, hidden: Tensor) -> Tensor:
        """r_1 … r_n of a stack driven by the actions of h (B, n, d): (B, n, reading_size)."""
        return self.stack.readings(self.actions(hidden))


class SuperpositionInterface(StackInterface):
    def __init__(self, input_size: int, spec: SuperpositionSpec, *, bias: bool, pushed_vector: PushedVector) -> None:
        super().__init__()
        self.stack = SuperpositionStack(vector_size=spec.vector_size, max_depth=spec.max_depth)
        self.reading_size = spec.reading_size
        self.pushed_vector = pushed_vector
        self.action_layer = nn.Linear(input_size, 3, bias=bias)  # W_a
        self.push_layer = nn.Linear(input_size, spec.vector_size, bias=bias)  # W_v

    def input_layers(self) -> tuple[nn.Linear, ...]:
        return self.action_layer, self.push_layer

    def actions_from_logits(self, logits: Tensor) -> SuperpositionActions:
        action_logits, pushed = logits.split([3, logits.size(-1) - 3], dim=-1)  # (…, 3), (…, m)
        probabilities = torch.softmax(action_logits, dim=-1)
        if self.pushed_vector == "sigmoid":
            pushed = torch.sigmoid(pushed)
        return SuperpositionActions(probabilities=probabilities, pushed=pushed)

    def initialize(self, generator: torch.Generator) -> None:
        xavier_(self.action_layer, 1.0, generator)
        xavier_(self.push_layer, 1.0, generator)


class StratificationInterface(StackInterface):
    def __init__(self, input_size: int, spec: StratificationSpec) -> None:
        super().__init__()
        self.stack = StratificationStack(vector_size=spec.vector_size)
        self.reading_size = spec.reading_size
        self.strength_layer = nn.Linear(input_size, 2)  # (u_t, d_t) before σ
        self.push_layer = nn.Linear(input_size, spec.vector_size)  # v_t before tanh

    def input_layers(self) -> tuple[nn.Linear, ...]:
        return self.strength_layer, self.push_layer

    def actions_from_logits(self, logits: Tensor) -> StratificationActions:
        strength_logits, pushed = logits.split([2, logits.size(-1) - 2], dim=-1)  # (…, 2), (…, m)
        strengths = torch.sigmoid(strength_logits)
        return StratificationActions(pop_strength=strengths[..., 0], push_strength=strengths[..., 1], pushed=torch.tanh(pushed))

    def initialize(self, generator: torch.Generator) -> None:
        xavier_(self.strength_layer, 1.0, generator)
        xavier_(self.push_layer, TANH_GAIN, generator)


def _linear_(layer: nn.Linear, xavier: bool, generator: torch.Generator) -> None:
    if xavier:
        xavier_(layer, 1.0, generator)
    else:
        uniform_layer_(layer, generator)


class NondeterministicInterface(StackInterface):
    def __init__(self, input_size: int, spec: NondeterministicSpec, *, bias: bool, xavier: bool) -> None:
        super().__init__()
        self.spec = spec
        self.xavier = xavier
        self.stack = NondeterministicStack(spec.num_states, spec.num_symbols, states_in_reading=spec.states_in_reading)
        self.reading_size = spec.reading_size
        self.action_layer = nn.Linear(input_size, num_action_logits(spec.num_states, spec.num_symbols), bias=bias)

    def input_layers(self) -> tuple[nn.Linear, ...]:
        return (self.action_layer,)

    def actions_from_logits(self, logits: Tensor) -> NondeterministicActions:
        spec = self.spec
        return NondeterministicActions.from_logits(logits, spec.num_states, spec.num_symbols, normalize=spec.normalized)

    def initialize(self, generator: torch.Generator) -> None:
        _linear_(self.action_layer, self.xavier, generator)


class VectorNondeterministicInterface(StackInterface):
    stack: VectorNondeterministicStack  # a module: it owns the bottom logits w₀

    def __init__(
        self, input_size: int, spec: VectorNondeterministicSpec, *, bias: bool, pushed_vector: PushedVector, xavier: bool
    ) -> None:
        super().__init__()
        self.spec = spec
        self.xavier = xavier
        self.pushed_vector = pushed_vector
        self.stack = VectorNondeterministicStack(spec.num_states, spec.num_symbols, spec.vector_size, bottom="learned")
        self.reading_size = spec.reading_size
        self.action_layer = nn.Linear(input_size, num_action_logits(spec.num_states, spec.num_symbols), bias=bias)
        self.push_layer = nn.Linear(input_size, spec.vector_size, bias=bias)

    def input_layers(self) -> tuple[nn.Linear, ...]:
        return self.action_layer, self.push_layer

    def actions_from_logits(self, logits: Tensor) -> VectorNondeterministicActions:
        spec = self.spec
        vector_size = spec.vector_size
        action_logits, pushed = logits.split([logits.size(-1) - vector_size, vector_size], dim=-1)  # (…, QS(2QS + Q)), (…, m)
        log_pushed = nn.functional.logsigmoid(pushed) if self.pushed_vector == "sigmoid" else pushed
        return VectorNondeterministicActions.from_logits(action_logits, log_pushed, spec.num_states, spec.num_symbols)

    def initialize(self, generator: torch.Generator) -> None:
        _linear_(self.action_layer, self.xavier, generator)
        _linear_(self.push_layer, self.xavier, generator)
        bottom_logits = self.stack.bottom_logits
        assert bottom_logits is not None
        uniform_(bottom_logits, generator)


def build_interface(
    spec: StackSpec, input_size: int, *, bias: bool, pushed_vector: PushedVector = "sigmoid", xavier: bool = True
) -> StackInterface:
    """The interface of ``spec`` reading hidden vectors of size ``input_size``.

    ``xavier=False`` initialises the action and pushed-vector layers of the nondeterministic
    stacks U(−0.1, 0.1) instead of Xavier (the plain ``nn.Linear`` layers of both papers' code);
    the superposition and stratification layers are Xavier in the papers and their code alike.
    """
    match spec:
        case SuperpositionSpec():
            return SuperpositionInterface(input_size, spec, bias=bias, pushed_vector=pushed_vector)
        case StratificationSpec():
            return StratificationInterface(input_size, spec)
        case NondeterministicSpec():
            return NondeterministicInterface(input_size, spec, bias=bias, xavier=xavier)
        case VectorNondeterministicSpec():
            return VectorNondeterministicInterface(input_size, spec, bias=bias, pushed_vector=pushed_vector, xavier=xavier)
    raise TypeError(f"unknown stack spec {spec!r}")
