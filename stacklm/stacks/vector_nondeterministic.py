"""The differentiable vector PDA (dVPDA) of the "+Nd" models (DuSell & Cotterell 2025, §3.2, eq. 6, App. B.2).

Stack elements are pairs (y, v) ∈ Γ × R^m. The transitions are those of the nondeterministic
stack (log weights Δ⁺, Δ^R, Δ⁻, unnormalized: a_t = exp(a'_t)) plus the vector v_t that a
push puts with its symbol; a replace keeps the vector, a pop exposes the one below. The run
starts in q0 with only (⊥, v₀) on the stack and never empties it; replacing ⊥ is allowed
(``pda.py`` row i = −1). The reading is, for every (r, y),

    r_t[r,y] = Σ_{runs π ⇝ (t, r, y)} ψ(π) v(π) / Σ_{r',y'} Σ_{runs π ⇝ (t, r', y')} ψ(π)  (eq. 6)
             = η[t][r,y,:] / Σ_{r',y'} α[t][r',y'],

flattened in the order (r, y, m) to size |Q|·|Γ|·m. η is computed without ζ (``pda.py``).
v₀ = σ(w₀) with w₀ learned (``bottom="learned"``), or 0 (``"zero"``) or 1 (``"one"``).
The pushed vector is given in log space: log σ(W_v h) in a stack RNN, or the raw linear output
when a stack-attention layer pushes exp(W_v x)
(``docs/design/authors-code.md#pushed-vector-of-stack-attention``).

Cost: that of the NS stack plus O(n²·Q²S·m) for η without a window (O(n·D²·Q³S·m) with one);
``pda.py`` has the full accounting.

The compiled CPU kernel of this DP (whole sequences, and one step per call for stack RNNs)
lives in ``stacklm.kernels.dvpda``, which ``stacklm.kernels.backend.accelerate`` puts in place of
this module's PyTorch DP; both compute the same readings (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Literal, Self

import torch
from torch import Tensor, nn

from stacklm.semiring import LOG, Semiring
from stacklm.stacks.base import Stack, StackState
from stacklm.stacks.contraction import Contraction, engine_for
from stacklm.stacks.nondeterministic import NondeterministicActions, transitions_from_actions
from stacklm.stacks.pda import (
    PDASizes,
    PDATables,
    advance,
    from_log,
    initial_tables,
    normalize,
)

BottomVector = Literal["learned", "zero", "one"]


@dataclass(frozen=True)
class VectorNondeterministicActions:
    """Log transition weights and the log pushed vector; leading dims (B,) or (B, n)."""

    push: Tensor  # (..., Q, S, Q, S): log Δ⁺[q,x→r,y]
    replace: Tensor  # (..., Q, S, Q, S): log Δ^R[q,x→r,y]
    pop: Tensor  # (..., Q, S, Q): log Δ⁻[q,x→r]
    pushed: Tensor  # (..., m): log v_t
    # (..., Q·S·(2QS + Q)): the logits that push, replace and pop are views of (``from_logits``);
    # None where they are not their views
    logits: Tensor | None = None

    @staticmethod
    def from_logits(
        logits: Tensor, log_pushed: Tensor, num_states: int, num_symbols: int
    ) -> VectorNondeterministicActions:
        """Unnormalized weights exp(logits) (DuSell & Cotterell 2025, App. B.2) and log v_t = ``log_pushed``."""
        actions = NondeterministicActions.from_logits(logits, num_states, num_symbols, normalize=False)
        return VectorNondeterministicActions(actions.push, actions.replace, actions.pop, log_pushed, logits)


def vector_reading(alpha: Tensor, eta: Tensor, semiring: type[Semiring]) -> Tensor:
    """r_t = η[t] / Σ α[t] from α (..., N) and η (..., m, N): (..., Q·S·m) in the order (r, y, m)."""
    total = semiring.sum(alpha, dim=-1, keepdim=True).unsqueeze(-1)  # (..., 1, 1)
    return normalize(semiring, eta, total).transpose(-1, -2).flatten(-2)


@dataclass(frozen=True)
class VectorNondeterministicState(StackState[VectorNondeterministicActions]):
    """γ, α, η of the last columns (``tables``)."""

    tables: PDATables
    sizes: PDASizes
    engine: Contraction

    def next(self, actions: VectorNondeterministicActions) -> Self:
        semiring = self.engine.semiring
        symbol_actions = NondeterministicActions(actions.push, actions.replace, actions.pop)
        transitions = transitions_from_actions(symbol_actions, semiring, from_log(semiring, actions.pushed))
        return replace(self, tables=advance(self.tables, transitions, self.sizes, self.engine))

    def reading(self) -> Tensor:
        """(B, Q·S·m) in the order (r, y, m)."""
        if self.tables.eta is None:
            raise ValueError("these tables hold no vectors")
        return vector_reading(self.tables.alpha, self.tables.eta, self.engine.semiring)

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        return replace(self, tables=self.tables.transform_tensors(function, self.engine))


class VectorNondeterministicStack(nn.Module, Stack[VectorNondeterministicActions]):
    """dVPDA with |Q| states, |Γ| symbols, vectors of size m; ``window`` = D bounds memory.

    A module only for its bottom vector: with ``bottom="learned"`` it owns w₀ (m,), and
    v₀ = σ(w₀). ``semiring`` and ``fast`` as for ``NondeterministicStack``.
    """

    def __init__(
        self,
        num_states: int,
        num_symbols: int,
        vector_size: int,
        window: int | None = None,
        bottom: BottomVector = "learned",
        semiring: type[Semiring] = LOG,
        fast: bool = True,
    ) -> None:
        super().__init__()
        if vector_size < 1:
            raise ValueError(f"vector_size must be at least 1, got {vector_size}")
        self.sizes = PDASizes(num_states, num_symbols, vector_size, window=window, bottom_replaceable=True)
        self.engine = engine_for(semiring, fast)
        self.bottom = bottom
        self.bottom_logits = nn.Parameter(torch.zeros(vector_size)) if bottom == "learned" else None
        self.reading_size = num_states * num_symbols * vector_size

    def forward(
        self, actions: VectorNondeterministicActions, initial: VectorNondeterministicState | None = None
    ) -> Tensor:
        """``readings``: r_1 … r_n (B, n, Q·S·m)."""
        return self.readings(actions, initial)

    def log_bottom(self, like: Tensor) -> Tensor:
        """log v₀ (m,)."""
        if self.bottom_logits is not None:
            return nn.functional.logsigmoid(self.bottom_logits).to(like.dtype)
        value = -math.inf if self.bottom == "zero" else 0.0
        return torch.full((self.sizes.vector_size,), value, dtype=like.dtype, device=like.device)

    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> VectorNondeterministicState:
        """The empty stack: only (⊥, v₀) in q0."""
        semiring = self.engine.semiring
        bottom = from_log(semiring, self.log_bottom(like)).unsqueeze(0).expand(batch_size, -1)
        tables = initial_tables(self.sizes, batch_size, bottom, self.engine, like, max_steps)
        return VectorNondeterministicState(tables, self.sizes, self.engine)

    def step_actions(self, actions: VectorNondeterministicActions, step: int) -> VectorNondeterministicActions:
        return VectorNondeterministicActions(
            actions.push[:, step],
            actions.replace[:, step],
            actions.pop[:, step],
            actions.pushed[:, step],
            None if actions.logits is None else actions.logits[:, step],
        )

    def num_steps(self, actions: VectorNondeterministicActions) -> int:
        return actions.pop.size(1)

    def readings(
        self, actions: VectorNondeterministicActions, initial: StackState[VectorNondeterministicActions] | None = None
    ) -> Tensor:
        """r_1 … r_n (B, n, Q·S·m), all read at once after the steps."""
        if initial is not None and not isinstance(initial, VectorNondeterministicState):
            raise TypeError(f"not a state of this stack: {type(initial).__name__}")
        return self.run(actions, initial)[0]

    def run(
        self, actions: VectorNondeterministicActions, initial: VectorNondeterministicState | None = None
    ) -> tuple[Tensor, VectorNondeterministicState]:
        """r_1 … r_n (B, n, Q·S·m) and the state after step n (for the next chunk)."""
        steps = self.num_steps(actions)
        state = initial if initial is not None else self.initial_state(actions.pop.size(0), actions.pop, steps)
        alphas, etas = [], []
        for step in range(steps):
            state = state.next(self.step_actions(actions, step))
            alphas.append(state.tables.alpha)
            etas.append(state.tables.eta)
        if not alphas:
            return actions.pop.new_zeros(actions.pop.size(0), 0, self.reading_size), state
        readings = vector_reading(torch.stack(alphas, dim=1), torch.stack(etas, dim=1), self.engine.semiring)
        return readings, state
