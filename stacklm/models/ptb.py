"""The Penn Treebank language models of DuSell & Chiang (2022) §5 and App. 10
(``docs/design/cfl-and-ptb.md#ptb-models-and-parameter-counts``).

Embedding E (V × H) → one LSTM layer of H units reading [E x_t ; r_{t−1}] (PyTorch's two
bias vectors per gate) → affine output (H → V, with bias); no tying, no dropout. With a stack,
each step t runs

    h_t, c_t = LSTM([E x_t ; r_{t−1}], h_{t−1}, c_{t−1});   y_t = W_y h_t + b_y;
    a_t = Actions(h_t);   s_t = Stack(s_{t−1}, a_t);   r_t = Reading(s_t),

with r_0 the reading of the initial stack. Actions are computed at every step, the chunk's
last included, so the state handed to the next chunk is complete (truncated BPTT: the
caller detaches it). The stacks:

- ``LimitedNondeterministic``: the nondeterministic stack with window D (§5.1): γ[i→t] = 0
  when t − i > D. NS: normalized actions, reading over the top symbol; RNS: unnormalized
  actions, reading over (state, top symbol). Cost O(|Q|⁴|Γ|³D²n) time, O(|Q|²|Γ|²Dn) memory.
- ``Superposition`` (JM): depth limit 10, pushing either h_t itself (m = H) or a learned
  σ(W_v h_t + b_v) of size m.

Every parameter is drawn from U(−0.05, 0.05) (App. 10).

Names (for settings, paths and tables; ``ptb_config`` and ``ptb_model_name`` are inverses):
``lstm`` (H = 256) or ``lstm-H``; ``jm-hidden`` (H = m = 247) and ``jm-learned`` (H = 256, m = 22),
depth 10; ``ns-Q-S`` and ``rns-Q-S``: |Q| = Q, |Γ| = S, H = 256, D = 35. These are the
configurations of the released scripts
(``docs/design/cfl-and-ptb.md#ptb-models-and-parameter-counts``); which of them form the grid
is the settings' choice. The registry (``stacklm.models.registry``) holds the models built from
``ModelOptions``; these are built from their name alone.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Literal, Mapping, Self, Sequence

import torch
from torch import Tensor, nn

from stacklm.errors import StacklmError
from stacklm.settings_file import build
from stacklm.stacks.base import Stack, StackState
from stacklm.stacks.nondeterministic import NondeterministicActions, NondeterministicStack, num_action_logits
from stacklm.stacks.superposition import SuperpositionActions, SuperpositionStack

INIT_BOUND = 0.05  # App. 10: U[−0.05, 0.05] for every parameter


@dataclass(frozen=True)
class LimitedNondeterministic:
    num_states: int  # |Q|
    num_symbols: int  # |Γ|
    renormalizing: bool  # RNS: unnormalized actions and states in the reading; NS: neither
    window: int = 35  # D

    @property
    def reading_size(self) -> int:
        return self.num_states * self.num_symbols if self.renormalizing else self.num_symbols


@dataclass(frozen=True)
class Superposition:
    push: Literal["hidden", "learned"]  # push h_t, or a learned σ(W_v h_t + b_v)
    vector_size: int  # m; equals H when pushing h_t
    max_depth: int = 10

    @property
    def reading_size(self) -> int:
        return self.vector_size


@dataclass(frozen=True)
class PtbModelConfig:
    vocabulary_size: int = 10_000  # V, for the embedding and the softmax
    hidden_units: int = 256  # H, also the embedding size
    stack: LimitedNondeterministic | Superposition | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stack, Superposition) and self.stack.push == "hidden" and self.stack.vector_size != self.hidden_units:
            raise ValueError(f"pushing h_t needs m = H = {self.hidden_units}, got m = {self.stack.vector_size}")

    @property
    def reading_size(self) -> int:
        return 0 if self.stack is None else self.stack.reading_size

    def parameter_count(self) -> int:
        """V·H + 4H(H + |r| + H) + 8H + H·V + V + the stack's layers."""
        vocabulary, hidden = self.vocabulary_size, self.hidden_units
        count = vocabulary * hidden + 4 * hidden * (hidden + self.reading_size + hidden) + 8 * hidden + hidden * vocabulary + vocabulary
        if isinstance(self.stack, LimitedNondeterministic):
            count += (hidden + 1) * num_action_logits(self.stack.num_states, self.stack.num_symbols)
        elif isinstance(self.stack, Superposition):
            count += 3 * hidden + 3 + (hidden * self.stack.vector_size + self.stack.vector_size if self.stack.push == "learned" else 0)
        return count


JM_HIDDEN = PtbModelConfig(hidden_units=247, stack=Superposition("hidden", 247))
JM_LEARNED = PtbModelConfig(hidden_units=256, stack=Superposition("learned", 22))
_NAME = re.compile(r"lstm(?:-(?P<hidden>[1-9][0-9]*))?|(?P<kind>r?ns)-(?P<states>[1-9][0-9]*)-(?P<symbols>[1-9][0-9]*)|jm-(?:hidden|learned)")


def ptb_config(name: str) -> PtbModelConfig:
    """The PTB model called ``name`` (V = 10,000): see the module's names."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise StacklmError(f"unknown PTB model {name!r}; names: lstm, lstm-H, jm-hidden, jm-learned, ns-Q-S, rns-Q-S")
    if name.startswith("jm-"):
        return JM_HIDDEN if name == "jm-hidden" else JM_LEARNED
    if match["kind"] is None:
        return PtbModelConfig(hidden_units=int(match["hidden"] or 256))
    return PtbModelConfig(stack=LimitedNondeterministic(int(match["states"]), int(match["symbols"]), renormalizing=match["kind"] == "rns"))


def ptb_model_name(config: PtbModelConfig) -> str:
    """The name ``ptb_config`` reads back as ``config``; an error for a config no name stands for."""
    stack = config.stack
    if stack is None:
        name = "lstm" if config.hidden_units == 256 else f"lstm-{config.hidden_units}"
    elif isinstance(stack, Superposition):
        name = f"jm-{stack.push}"
    else:
        name = f"{'rns' if stack.renormalizing else 'ns'}-{stack.num_states}-{stack.num_symbols}"
    if config.vocabulary_size != 10_000 or ptb_config(name) != config:
        raise StacklmError(f"no PTB model name stands for {config}")
    return name


STACK_KINDS: dict[str, type[LimitedNondeterministic] | type[Superposition]] = {
    "limited_nondeterministic": LimitedNondeterministic,
    "superposition": Superposition,
}


def ptb_config_fields(config: PtbModelConfig) -> dict[str, Any]:
    """``config`` as plain values (a saved model's), the stack tagged with its ``kind``."""
    stack = None
    if config.stack is not None:
        kind = next(name for name, cls in STACK_KINDS.items() if isinstance(config.stack, cls))
        stack = {"kind": kind, **asdict(config.stack)}
    return {"vocabulary_size": config.vocabulary_size, "hidden_units": config.hidden_units, "stack": stack}


def ptb_config_from_fields(fields: Mapping[str, Any], source: str) -> PtbModelConfig:
    """The config ``ptb_config_fields`` gave ``fields``; a ``StacklmError`` naming ``source`` and the key."""
    if not isinstance(fields, Mapping):
        raise StacklmError(f"{source}: a PTB model config must be a mapping, got {type(fields).__name__}")
    config = build(PtbModelConfig, {key: value for key, value in fields.items() if key != "stack"}, source=source)
    stack = fields.get("stack")
    if stack is None:
        return config
    if not isinstance(stack, Mapping) or stack.get("kind") not in STACK_KINDS:
        raise StacklmError(f"{source}: key 'stack.kind' must be one of {', '.join(STACK_KINDS)}")
    spec = build(STACK_KINDS[stack["kind"]], {key: value for key, value in stack.items() if key != "kind"}, "stack", source=source)
    try:
        return replace(config, stack=spec)
    except ValueError as error:
        raise StacklmError(f"{source}: {error}") from None


@dataclass(frozen=True)
class PtbState:
    """What one chunk hands the next: the LSTM's h and c, r_t and the stack."""

    hidden: Tensor  # (B, H)
    cell: Tensor  # (B, H)
    reading: Tensor  # (B, |r|); (B, 0) without a stack
    stack: StackState | None

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        stack = None if self.stack is None else self.stack.transform_tensors(function)
        return replace(self, hidden=function(self.hidden), cell=function(self.cell), reading=function(self.reading), stack=stack)

    def detach(self) -> Self:
        return self.transform_tensors(lambda tensor: tensor.detach())

    def first_rows(self, batch_size: int) -> Self:
        """The state of the first ``batch_size`` streams (a chunk after the short stream ended)."""
        return self.transform_tensors(lambda tensor: tensor[:batch_size])

    def tensors(self) -> list[Tensor]:
        """Every tensor the state holds, in ``transform_tensors``'s order (what a saved state keeps)."""
        found: list[Tensor] = []

        def collect(tensor: Tensor) -> Tensor:
            found.append(tensor)
            return tensor

        self.transform_tensors(collect)
        return found

    def with_tensors(self, tensors: Sequence[Tensor]) -> Self:
        """This state's structure (step counts, window bookkeeping) holding ``tensors``, the
        ``tensors()`` of a state of the same structure; batch sizes may differ. A ``ValueError``
        when their number or their shapes past the batch do not fit."""
        mine = self.tensors()
        if len(mine) != len(tensors) or any(a.shape[1:] != b.shape[1:] for a, b in zip(mine, tensors)):
            raise ValueError(
                f"{len(tensors)} tensors of shapes {[tuple(t.shape) for t in tensors]} do not fit a state of "
                f"{len(mine)} tensors of shapes {[tuple(t.shape) for t in mine]} (batch aside)"
            )
        given = iter(tensors)
        return self.transform_tensors(lambda tensor: next(given))


class PtbLanguageModel(nn.Module):
    def __init__(self, config: PtbModelConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_units
        self.embedding = nn.Embedding(config.vocabulary_size, hidden)
        self.output = nn.Linear(hidden, config.vocabulary_size)
        self.stack: Stack | None = None
        spec = config.stack
        if spec is None:
            self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
            return
        self.cell = nn.LSTMCell(hidden + spec.reading_size, hidden)
        if isinstance(spec, LimitedNondeterministic):
            self.action_layer = nn.Linear(hidden, num_action_logits(spec.num_states, spec.num_symbols))
            self.stack = NondeterministicStack(spec.num_states, spec.num_symbols, states_in_reading=spec.renormalizing, window=spec.window)
        else:
            self.action_layer = nn.Linear(hidden, 3)  # push, pop, no-op
            self.push_layer = nn.Linear(hidden, spec.vector_size) if spec.push == "learned" else None
            self.stack = SuperpositionStack(vector_size=spec.vector_size, max_depth=spec.max_depth)

    def initialize(self, generator: torch.Generator) -> None:
        """U(−0.05, 0.05) for every parameter, in ``named_parameters`` order."""
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.uniform_(-INIT_BOUND, INIT_BOUND, generator=generator)

    def initial_state(self, batch_size: int) -> PtbState:
        like = self.output.weight
        zeros = like.new_zeros(batch_size, self.config.hidden_units)
        if self.stack is None:
            return PtbState(zeros, zeros, like.new_zeros(batch_size, 0), None)
        stack = self.stack.initial_state(batch_size, like)
        return PtbState(zeros, zeros, stack.reading(), stack)

    def _actions(self, hidden: Tensor) -> NondeterministicActions | SuperpositionActions:
        spec = self.config.stack
        if isinstance(spec, LimitedNondeterministic):
            logits = self.action_layer(hidden)  # (B, QS(2QS + Q))
            return NondeterministicActions.from_logits(logits, spec.num_states, spec.num_symbols, normalize=not spec.renormalizing)
        probabilities = torch.softmax(self.action_layer(hidden), dim=-1)  # (B, 3)
        pushed = hidden if self.push_layer is None else torch.sigmoid(self.push_layer(hidden))  # (B, m)
        return SuperpositionActions(probabilities=probabilities, pushed=pushed)

    def forward(self, inputs: Tensor, state: PtbState) -> tuple[Tensor, PtbState]:
        """Logits (B, T, V) for the next token after each of ``inputs`` (B, T), and the state after them."""
        embedded = self.embedding(inputs)  # (B, T, H)
        if self.stack is None:
            outputs, (hidden, cell) = self.lstm(embedded, (state.hidden.unsqueeze(0), state.cell.unsqueeze(0)))  # (B, T, H)
            return self.output(outputs), replace(state, hidden=hidden.squeeze(0), cell=cell.squeeze(0))
        hidden, cell, reading, stack = state.hidden, state.cell, state.reading, state.stack
        assert stack is not None
        steps = []
        for token in embedded.unbind(dim=1):  # (B, H) each
            hidden, cell = self.cell(torch.cat([token, reading], dim=-1), (hidden, cell))
            stack = stack.next(self._actions(hidden))
            reading = stack.reading()  # (B, |r|)
            steps.append(hidden)
        outputs = torch.stack(steps, dim=1)  # (B, T, H)
        return self.output(outputs), PtbState(hidden, cell, reading, stack)
