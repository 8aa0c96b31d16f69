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
when a stack-attention layer pushes exp(W_v x) (``reference-implementation.md`` §12.1).

Cost: that of the NS stack plus O(n²·Q²S·m) for η without a window (O(n·D²·Q³S·m) with one);
``pda.py`` has the full accounting.

Kernels. ``readings`` of a whole sequence from the empty stack, without a window, in LOG with
the fast products, on the CPU, can run as one compiled kernel (``kernels/compiled.py``: the
same DP and numerics, forward and backward, built at first use). ``kernel="compiled"``
requires it (and raises if it cannot build), ``"torch"`` never uses it, ``"auto"`` (default)
uses it where it applies and builds, and warns once if the build fails; ``packed_readings`` gives
it a controller's whole output [logits; pushed part] in place (a stack-attention layer's one
product, log σ of the pushed part in the kernel), ``readings`` packs the actions so. The same kernel, one
step per call, runs ``sequence_state``'s states (a stack RNN's forward) and, without
gradients, ``initial_state``'s (evaluation, sampling), under the same conditions. Incremental
states with gradients (``pytorch_state``), chunks (``run``, an initial state), windows, other
semirings and CUDA use the PyTorch DP.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Callable, Literal, Self

import torch
from torch import Tensor, nn

from stacklm.semiring import LOG, Semiring
from stacklm.stacks.base import Stack, StackState
from stacklm.stacks.contraction import Contraction, engine_for
from stacklm.stacks.kernels import compiled
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
INITIAL_CAPACITY = 16  # steps of a compiled state's first tables when the run's length is not given
Kernel = Literal["auto", "compiled", "torch"]


@dataclass(frozen=True)
class VectorNondeterministicActions:
    """Log transition weights and the log pushed vector; leading dims (B,) or (B, n)."""

    push: Tensor  # (..., Q, S, Q, S): log Δ⁺[q,x→r,y]
    replace: Tensor  # (..., Q, S, Q, S): log Δ^R[q,x→r,y]
    pop: Tensor  # (..., Q, S, Q): log Δ⁻[q,x→r]
    pushed: Tensor  # (..., m): log v_t
    # (..., Q·S·(2QS + Q)): the logits that push, replace and pop are views of (``from_logits``),
    # which the compiled kernel's steps read without copies; None where they are not its views
    logits: Tensor | None = None

    @staticmethod
    def from_logits(
        logits: Tensor, log_pushed: Tensor, num_states: int, num_symbols: int
    ) -> VectorNondeterministicActions:
        """Unnormalized weights exp(logits) (DuSell & Cotterell 2025, App. B.2) and log v_t = ``log_pushed``."""
        actions = NondeterministicActions.from_logits(logits, num_states, num_symbols, normalize=False)
        return VectorNondeterministicActions(actions.push, actions.replace, actions.pop, log_pushed, logits)

    def packed_logits(self) -> Tensor:
        """(..., Q·S·(2QS + Q)): per configuration (q, x) its push, replace and pop log weights, the
        layout of ``from_logits``'s logits (those logits themselves where known)."""
        if self.logits is not None:
            return self.logits
        lead = self.pop.shape[:-3]
        configurations = self.pop.size(-3) * self.pop.size(-2)
        return torch.cat(
            [
                self.push.reshape(*lead, configurations, configurations),
                self.replace.reshape(*lead, configurations, configurations),
                self.pop.reshape(*lead, configurations, self.pop.size(-1)),
            ],
            dim=-1,
        ).flatten(-2)


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


@dataclass(frozen=True)
class CompiledState(StackState[VectorNondeterministicActions]):
    """A state on the compiled kernel, one kernel call per ``next``.

    The states of one run share its tables (``kernels/compiled.py``), into which ``next``
    writes the next column. With gradients (``sequence_state``: a training forward) each state
    is advanced once, within the steps the tables were made for, and never copied. Without
    (``torch.no_grad``: evaluation, sampling) a state may be advanced twice, copied or sliced:
    it copies the tables first, and grows them when a run outlasts them.
    """

    tables: compiled.StepTables
    sizes: PDASizes
    step: int  # t, the steps taken
    order: Tensor  # log v₀ (B, m) at t = 0, then the (B, 0) tensor of step t (``compiled_step``)
    current: Tensor  # r_t (B, Q·S·m)

    def next(self, actions: VectorNondeterministicActions) -> Self:
        return self.next_from_logits(actions.packed_logits(), actions.pushed)

    def next_from_logits(self, logits: Tensor, pushed: Tensor) -> Self:
        """``next`` of the actions ``VectorNondeterministicActions.from_logits(logits, pushed, …)``,
        without making them: logits (B, Q·S·(2QS + Q)), log v_t (B, m)."""
        tables = self.tables
        if tables.steps != self.step or self.step == tables.capacity:
            if torch.is_grad_enabled():
                raise ValueError("with gradients, a compiled state is advanced once, within its tables' steps")
            capacity = tables.capacity if self.step < tables.capacity else 2 * tables.capacity
            tables = tables.prefix(self.step, capacity)
        reading, order = compiled.compiled_step(tables, logits, pushed, self.order)
        return replace(self, tables=tables, step=self.step + 1, order=order, current=reading)

    def reading(self) -> Tensor:
        """(B, Q·S·m) in the order (r, y, m)."""
        return self.current

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        if torch.is_grad_enabled():
            raise TypeError("with gradients, a compiled state is never copied or sliced")
        return replace(
            self, tables=self.tables.transform(function), order=function(self.order), current=function(self.current)
        )


class VectorNondeterministicStack(nn.Module, Stack[VectorNondeterministicActions]):
    """dVPDA with |Q| states, |Γ| symbols, vectors of size m; ``window`` = D bounds memory.

    A module only for its bottom vector: with ``bottom="learned"`` it owns w₀ (m,), and
    v₀ = σ(w₀). ``semiring`` and ``fast`` as for ``NondeterministicStack``; ``kernel`` chooses
    the compiled whole-sequence kernel (module docstring).
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
        kernel: Kernel = "auto",
    ) -> None:
        super().__init__()
        if vector_size < 1:
            raise ValueError(f"vector_size must be at least 1, got {vector_size}")
        self.sizes = PDASizes(num_states, num_symbols, vector_size, window=window, bottom_replaceable=True)
        self.engine = engine_for(semiring, fast)
        self.kernel_applies = window is None and semiring is LOG and fast
        if kernel == "compiled" and not self.kernel_applies:
            raise ValueError("the compiled kernel runs the full stack (no window) in LOG with fast=True only")
        self.kernel = kernel
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

    def initial_state(
        self, batch_size: int, like: Tensor, max_steps: int | None = None
    ) -> VectorNondeterministicState | CompiledState:
        """Without gradients (``torch.no_grad``) on the compiled kernel where ``readings`` would use
        it; else the PyTorch DP's state (``pytorch_state``)."""
        if not torch.is_grad_enabled() and self.kernel_applies_to(like) and self.uses_compiled_kernel(like):
            return self.compiled_state(batch_size, like, max_steps or INITIAL_CAPACITY)
        return self.pytorch_state(batch_size, like, max_steps)

    def pytorch_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> VectorNondeterministicState:
        """The empty stack of the PyTorch DP (chunks, windows, gradients through copies)."""
        semiring = self.engine.semiring
        bottom = from_log(semiring, self.log_bottom(like)).unsqueeze(0).expand(batch_size, -1)
        tables = initial_tables(self.sizes, batch_size, bottom, self.engine, like, max_steps)
        return VectorNondeterministicState(tables, self.sizes, self.engine)

    def sequence_state(self, batch_size: int, like: Tensor, max_steps: int) -> VectorNondeterministicState | CompiledState:
        """On the compiled kernel where ``readings`` would use it (module docstring), else ``initial_state``'s."""
        if max_steps < 1 or not self.uses_compiled_kernel(like):
            return self.pytorch_state(batch_size, like, max_steps)
        return self.compiled_state(batch_size, like, max_steps)

    def compiled_state(self, batch_size: int, like: Tensor, capacity: int) -> CompiledState:
        """The empty stack on the compiled kernel, with tables for ``capacity`` steps."""
        log_bottom = self.log_bottom(like).unsqueeze(0).expand(batch_size, -1)  # (B, m)
        sizes = self.sizes
        tables = compiled.StepTables(log_bottom, capacity, sizes.num_states, sizes.num_symbols)
        # r_0: v₀ at (q0, ⊥), the only configuration of the empty stack; 0 elsewhere.
        empty = log_bottom.new_zeros(batch_size, (sizes.num_configurations - 1) * sizes.vector_size)
        initial_reading = torch.cat([log_bottom.exp(), empty], dim=1)
        return CompiledState(tables, sizes, 0, log_bottom, initial_reading)

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
        if self.uses_compiled_kernel(actions.pop, initial):
            return self.compiled_readings(actions)
        return self.run(actions, initial)[0]

    def uses_compiled_kernel(self, like: Tensor, initial: VectorNondeterministicState | None = None) -> bool:
        """Whether ``readings`` of actions like ``like`` from ``initial`` run the compiled kernel."""
        if self.kernel == "torch":
            return False
        applies = initial is None and self.kernel_applies_to(like)
        if self.kernel == "compiled":
            if not applies:
                raise ValueError(
                    "the compiled kernel reads whole sequences from the empty stack on the CPU in float32 or float64"
                )
            return True
        if not applies:
            return False
        built, error = compiled.available()
        if not built:
            warnings.warn(f"using the PyTorch dVPDA: {error}", RuntimeWarning, stacklevel=3)
        return built

    def kernel_applies_to(self, like: Tensor) -> bool:
        """Whether the compiled kernel can run this stack on tensors like ``like`` (CPU, float32 or float64)."""
        return self.kernel_applies and like.device.type == "cpu" and like.dtype in (torch.float32, torch.float64)

    def compiled_readings(self, actions: VectorNondeterministicActions) -> Tensor:
        """r_1 … r_n (B, n, Q·S·m) from the compiled kernel (``kernels/compiled.py``)."""
        return self.packed_readings(torch.cat([actions.packed_logits(), actions.pushed], dim=-1), log_sigmoid=False)

    def packed_readings(self, outputs: Tensor, log_sigmoid: bool) -> Tensor:
        """r_1 … r_n (B, n, Q·S·m) from the compiled kernel, for the actions ``from_logits(logits, log v_t, …)``
        of ``outputs`` = [logits; p] (B, n, Q·S·(2QS + Q) + m), with log v_t = log σ(p) where
        ``log_sigmoid``, else p: the kernel reads them in place, and their gradient is one tensor."""
        bottom = self.log_bottom(outputs).unsqueeze(0).expand(outputs.size(0), -1)  # (B, m)
        sizes = self.sizes
        return compiled.compiled_readings(outputs, bottom, sizes.num_states, sizes.num_symbols, log_sigmoid)

    def run(
        self, actions: VectorNondeterministicActions, initial: VectorNondeterministicState | None = None
    ) -> tuple[Tensor, VectorNondeterministicState]:
        """r_1 … r_n (B, n, Q·S·m) and the state after step n (for the next chunk)."""
        steps = self.num_steps(actions)
        state = initial if initial is not None else self.pytorch_state(actions.pop.size(0), actions.pop, steps)
        alphas, etas = [], []
        for step in range(steps):
            state = state.next(self.step_actions(actions, step))
            alphas.append(state.tables.alpha)
            etas.append(state.tables.eta)
        if not alphas:
            return actions.pop.new_zeros(actions.pop.size(0), 0, self.reading_size), state
        readings = vector_reading(torch.stack(alphas, dim=1), torch.stack(etas, dim=1), self.engine.semiring)
        return readings, state
