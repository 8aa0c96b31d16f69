"""The dVPDA (``stacklm.stacks.vector_nondeterministic``) on a compiled CPU kernel (``dvpda.cpp``): its
whole-sequence forward and backward, and one step per call.

The kernel runs the dynamic program of ``stacks/pda.py`` (full stack, bottom replaceable, vectors)
with the numerics of ``ShiftedLogContraction`` (``stacks/shifted.py``): products shifted by log α,
exact per-column normalisers, the pop read from shares Ŝ ∈ [0, 1]. Groups of eight batch
elements run at once, one per vector lane (a last group of fewer pads its lanes), one group per
task (OpenMP through ``at::parallel_for``, so ``torch.set_num_threads`` applies), every step
in one call: no tensor operation per step. Its backward is written by hand in the same
kernel (each log-sum-exp passes g·exp(term − result), from the same shifted products).
The γ rows of each new column are summed in real space relative to one scale per
configuration, the largest of their terms' log offsets (as scaled forward algorithms for HMMs
do), so they take no exp or log per row; their log γ is not kept past column 0 (``gamma`` holds log η).
What it keeps for backward is O(B·n²·N²) (B rounded up to a multiple of eight): the columns of log η, the shares, and
each step's pops (three tensors of one size, each allocated apart), and α. A step's pops are the pop totals of its η rows and the inverse of each configuration's total
over the γ rows (m + 1 values per configuration and step; the γ rows' pop totals live in scratch
memory reused by every step, which stays in cache): the backward takes the replace and pop
terms' adjoints of a γ row from its share in column t, that inverse and the terms' factors per
configuration (recomputed), as every gradient of a γ row is its share times a factor.

Both ops read the actions packed as a controller's linear layers give them (one gather in the
kernel, no copy; the one-step op at any row stride, the whole-sequence op from contiguous rows): per step the N·(2N + Q) log transition weights, per
configuration (q, x) its N push, N replace and Q pop weights (``NondeterministicActions.from_logits``);
the whole-sequence op reads the pushed vector's part from the same rows, after them, and takes
log v_t = log σ(x_t) of it itself where asked (a stack-attention layer's one product with the
stacked input weights, :func:`compiled_readings`), so that its backward returns one gradient for
that whole output.

The same DP also runs one step per call (:func:`compiled_step`), for controllers whose actions
at step t depend on the reading of step t − 1 (stack RNNs): the tables are allocated for the
run's length once (:class:`StepTables`), in the groups of eight lanes of the whole-sequence
kernel, and each step writes its column into them (only its logits, v_t and reading move in and
out of lanes); each step's
backward is the same code as the whole-sequence backward's step t, adding into adjoint tables
shared by the run. A (B, 0) tensor passed from step to step orders them in autograd, so the
backward of step t runs after those of steps t + 1 … n, which complete the adjoints it reads.

In place of the PyTorch classes (``stacklm.kernels.backend.accelerate``):
:class:`CompiledVectorNondeterministicStack` reads whole sequences from the empty stack on the
kernel; :class:`CompiledVectorNondeterministicInterface` reads a stack-attention layer's whole
output in place (:func:`packed_readings`), and gives :class:`CompiledState` as the initial state
of a run without gradients (evaluation, sampling). Elsewhere (an initial state given, other
dtypes or devices, gradients through incremental states) they are the PyTorch DP's. The stack
RNNs' whole-sequence forward drives a :class:`SequenceRun` (``stacklm.kernels.recurrent``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Self

import torch
from torch import Tensor, nn

from stacklm.kernels import build
from stacklm.models.stack_interface import VectorNondeterministicInterface
from stacklm.stacks.base import StackState
from stacklm.stacks.contraction import FAST
from stacklm.stacks.pda import PDASizes
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions, VectorNondeterministicStack

INITIAL_CAPACITY = 16  # steps of a compiled state's first tables when the run's length is not given


def kernel_applies(stack: VectorNondeterministicStack) -> bool:
    """Whether the kernel runs this stack's DP: the full stack (no window), in LOG with the fast products."""
    return stack.sizes.window is None and stack.engine is FAST


def runs_on_kernel(like: Tensor) -> bool:
    """Whether tensors like ``like`` go to the kernel: on the CPU, float32 or float64."""
    return like.device.type == "cpu" and like.dtype in (torch.float32, torch.float64)


def packed_logits(actions: VectorNondeterministicActions) -> Tensor:
    """(..., Q·S·(2QS + Q)): per configuration (q, x) its push, replace and pop log weights, the
    layout of ``VectorNondeterministicActions.from_logits``'s logits (those logits themselves where known)."""
    if actions.logits is not None:
        return actions.logits
    lead = actions.pop.shape[:-3]
    configurations = actions.pop.size(-3) * actions.pop.size(-2)
    return torch.cat(
        [
            actions.push.reshape(*lead, configurations, configurations),
            actions.replace.reshape(*lead, configurations, configurations),
            actions.pop.reshape(*lead, configurations, actions.pop.size(-1)),
        ],
        dim=-1,
    ).flatten(-2)


def packed_readings(stack: VectorNondeterministicStack, outputs: Tensor, log_sigmoid: bool) -> Tensor:
    """r_1 … r_n (B, n, Q·S·m) of ``stack`` from the kernel, for the actions ``from_logits(logits, log v_t, …)``
    of ``outputs`` = [logits; p] (B, n, Q·S·(2QS + Q) + m), with log v_t = log σ(p) where
    ``log_sigmoid``, else p: the kernel reads them in place, and their gradient is one tensor."""
    bottom = stack.log_bottom(outputs).unsqueeze(0).expand(outputs.size(0), -1)  # (B, m)
    sizes = stack.sizes
    return compiled_readings(outputs, bottom, sizes.num_states, sizes.num_symbols, log_sigmoid)


def initial_reading(log_bottom: Tensor, sizes: PDASizes) -> Tensor:
    """r_0 (B, Q·S·m): v₀ at (q0, ⊥), the only configuration of the empty stack; 0 elsewhere. ``log_bottom`` (B, m)."""
    empty = log_bottom.new_zeros(log_bottom.size(0), (sizes.num_configurations - 1) * sizes.vector_size)
    return torch.cat([log_bottom.exp(), empty], dim=1)


@dataclass(frozen=True)
class CompiledState(StackState[VectorNondeterministicActions]):
    """A state of a run without gradients (evaluation, sampling) on the kernel, one kernel call per ``next``.

    The states of one run share its tables, into which ``next`` writes the next column; a state
    advanced a second time, copied or sliced (``transform_tensors``) copies the tables first, and
    ``next`` grows them when a run outlasts them. Its actions carry no gradient (``next`` refuses
    them): incremental states with gradients are the PyTorch DP's.
    """

    tables: StepTables
    sizes: PDASizes
    step: int  # t, the steps taken
    order: Tensor  # log v₀ (B, m) at t = 0, then the (B, 0) tensor of step t (``compiled_step``)
    current: Tensor  # r_t (B, Q·S·m)

    def next(self, actions: VectorNondeterministicActions) -> Self:
        return self.next_from_logits(packed_logits(actions), actions.pushed)

    def next_from_logits(self, logits: Tensor, pushed: Tensor) -> Self:
        """``next`` of the actions ``VectorNondeterministicActions.from_logits(logits, pushed, …)``,
        without making them: logits (B, Q·S·(2QS + Q)), log v_t (B, m)."""
        if logits.requires_grad or pushed.requires_grad:
            raise ValueError("a compiled dVPDA state runs without gradients (torch.no_grad: evaluation, sampling)")
        tables = self.tables
        if tables.steps != self.step or self.step == tables.capacity:
            capacity = tables.capacity if self.step < tables.capacity else 2 * tables.capacity
            tables = tables.prefix(self.step, capacity)
        reading, order = compiled_step(tables, logits, pushed, self.order)
        return replace(self, tables=tables, step=self.step + 1, order=order, current=reading)

    def reading(self) -> Tensor:
        """(B, Q·S·m) in the order (r, y, m)."""
        return self.current

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        return replace(
            self, tables=self.tables.transform(function), order=function(self.order), current=function(self.current)
        )


def compiled_state(stack: VectorNondeterministicStack, batch_size: int, like: Tensor, capacity: int) -> CompiledState:
    """The empty stack of ``stack`` on the kernel, with tables for ``capacity`` steps."""
    log_bottom = stack.log_bottom(like).unsqueeze(0).expand(batch_size, -1)  # (B, m)
    sizes = stack.sizes
    tables = StepTables(log_bottom, capacity, sizes.num_states, sizes.num_symbols)
    return CompiledState(tables, sizes, 0, log_bottom, initial_reading(log_bottom, sizes))


class SequenceRun:
    """The dVPDA of one whole-sequence forward driven step by step (a stack RNN's), gradients
    included: tables for at most ``capacity`` steps, one kernel call per step, each step taken once."""

    def __init__(self, stack: VectorNondeterministicStack, batch_size: int, like: Tensor, capacity: int) -> None:
        log_bottom = stack.log_bottom(like).unsqueeze(0).expand(batch_size, -1)  # (B, m)
        sizes = stack.sizes
        self.tables = StepTables(log_bottom, capacity, sizes.num_states, sizes.num_symbols)
        self.order = log_bottom  # log v₀ at step 1, then the order tensor of the step before
        self.current = initial_reading(log_bottom, sizes)

    def next(self, parts: tuple[Tensor, Tensor]) -> None:
        """The next step, of the actions ``VectorNondeterministicActions.from_logits(logits, log v_t, …)``
        for ``parts`` = (logits (B, Q·S·(2QS + Q)), log v_t (B, m)), read as they are."""
        logits, pushed = parts
        self.current, self.order = compiled_step(self.tables, logits, pushed, self.order)

    def reading(self) -> Tensor:
        """r_t (B, Q·S·m)."""
        return self.current


class CompiledVectorNondeterministicStack(VectorNondeterministicStack):
    """``readings`` of a whole sequence from the empty stack on the kernel (CPU, float32 or float64)."""

    def readings(
        self, actions: VectorNondeterministicActions, initial: StackState[VectorNondeterministicActions] | None = None
    ) -> Tensor:
        if initial is not None or not runs_on_kernel(actions.pop):
            return super().readings(actions, initial)
        return packed_readings(self, torch.cat([packed_logits(actions), actions.pushed], dim=-1), log_sigmoid=False)


class CompiledVectorNondeterministicInterface(VectorNondeterministicInterface):
    """A stack-attention layer's readings from one product with the stacked weights (``input_weight``),
    which the kernel reads as it is, log σ of the pushed part included (:func:`packed_readings`);
    the initial state of a run without gradients on the kernel (:class:`CompiledState`)."""

    def readings(self, hidden: Tensor) -> Tensor:
        if not runs_on_kernel(hidden):
            return super().readings(hidden)
        outputs = nn.functional.linear(hidden, *self.input_weight())  # (B, n, QS(2QS + Q) + m)
        return packed_readings(self.stack, outputs, log_sigmoid=self.pushed_vector == "sigmoid")

    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> StackState[Any]:
        """Without gradients (``torch.no_grad``) a :class:`CompiledState` with tables for ``max_steps``
        steps (``INITIAL_CAPACITY`` if not given; grown as needed); else the PyTorch DP's state."""
        if torch.is_grad_enabled() or not runs_on_kernel(like):
            return super().initial_state(batch_size, like, max_steps)
        return compiled_state(self.stack, batch_size, like, max_steps or INITIAL_CAPACITY)


class _CompiledReadings(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, bottom: Tensor, num_states: int, num_symbols: int, log_sigmoid: bool) -> Tensor:
        readings, *saved = torch.ops.stacklm_dvpda.forward(logits, bottom, num_states, num_symbols, log_sigmoid)
        ctx.save_for_backward(logits, readings, *saved)
        ctx.arguments = num_states, num_symbols, log_sigmoid
        return readings

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_logits, grad_bottom = torch.ops.stacklm_dvpda.backward(grad.contiguous(), *ctx.saved_tensors, *ctx.arguments)
        return grad_logits, grad_bottom, None, None, None


def compiled_readings(logits: Tensor, bottom: Tensor, num_states: int, num_symbols: int, log_sigmoid: bool) -> Tensor:
    """r_1 … r_n (B, n, N·m) in the order (r, y, m), on the CPU, float32 or float64.

    ``logits`` (B, n, N·(2N + Q) + m), N = Q·S: per step the N·(2N + Q) log transition weights,
    per configuration (q, x) its N push, N replace and Q pop weights (the layout of
    ``VectorNondeterministicActions.from_logits`` and of :func:`compiled_step`), then the pushed
    vector's part: log v_t, or x_t with log v_t = log σ(x_t) taken in the kernel where
    ``log_sigmoid`` (the stacked input layers' output as it is). ``bottom`` log v₀ (B, m).
    The gradient of ``logits`` is one tensor of its shape (the pushed part's that of x_t).
    """
    build.load()
    return _CompiledReadings.apply(logits.contiguous(), bottom.contiguous(), num_states, num_symbols, log_sigmoid)


class StepTables:
    """The tables of one run of at most ``capacity`` steps, filled one column per :func:`compiled_step`.

    ``log_bottom`` (B, m) is log v₀. ``steps`` counts the columns written after column 0.
    ``columns`` are the (G, table, L) tables of the columns (gamma first, then what the backward
    reads), ``alpha`` (G, capacity + 1, N, L): element b in lane b mod L of group b // L,
    G = ⌈B / L⌉, L the kernel's lane count (``LANE_COUNT`` in ``lanes.h``: the tables' last
    dimension, as ``start`` makes them; :func:`batch_of`, :func:`lanes_of`). The adjoint tables
    are made by the first backward step of the run and dropped after step 1's.
    """

    def __init__(self, log_bottom: Tensor, capacity: int, num_states: int, num_symbols: int) -> None:
        build.load()
        bottom = log_bottom.detach().contiguous()
        *columns, self.alpha = torch.ops.stacklm_dvpda.start(bottom, capacity, num_states, num_symbols)
        self.columns: tuple[Tensor, ...] = tuple(columns)
        self.batch_size = bottom.size(0)
        self.capacity = capacity
        self.vector_size = bottom.size(1)
        self.steps = 0
        self.grad_gamma: Tensor | None = None
        self.grad_alpha: Tensor | None = None

    def _replaced(self, columns: list[Tensor], alpha: Tensor, batch_size: int, capacity: int, steps: int) -> StepTables:
        copy = object.__new__(StepTables)
        copy.columns, copy.alpha = tuple(columns), alpha
        copy.batch_size, copy.capacity, copy.steps, copy.vector_size = batch_size, capacity, steps, self.vector_size
        copy.grad_gamma = copy.grad_alpha = None
        return copy

    def prefix(self, steps: int, capacity: int) -> StepTables:
        """Tables of ``capacity`` steps holding a copy of columns 0 … ``steps`` (no gradients)."""
        groups, _, configurations, lanes = self.alpha.shape
        used = _table_size(steps, configurations, self.vector_size)
        tensors = []
        for table in self.columns:
            copy = table.new_empty(groups, _table_size(capacity, configurations, self.vector_size), lanes)
            copy[:, :used] = table[:, :used]
            tensors.append(copy)
        alpha = self.alpha.new_empty(groups, capacity + 1, configurations, lanes)
        alpha[:, : steps + 1] = self.alpha[:, : steps + 1]
        return self._replaced(tensors, alpha, self.batch_size, capacity, steps)

    def transform(self, function: Callable[[Tensor], Tensor]) -> StepTables:
        """``function`` applied to every table along the batch dimension, into tables of their own
        holding columns 0 … ``steps`` and room for one more step (a copy grows past it like any
        state): a copy of every prompt for each of V − 1 first tokens takes only what it reads."""
        configurations, lanes = self.alpha.shape[2:]
        used = _table_size(self.steps, configurations, self.vector_size)
        capacity = self.steps + 1
        tensors = []
        for table in self.columns:
            part = lanes_of(function(batch_of(table[:, :used], self.batch_size)), lanes)  # (G', used, L)
            copy = part.new_empty(part.size(0), _table_size(capacity, configurations, self.vector_size), lanes)
            copy[:, :used] = part
            tensors.append(copy)
        part = function(batch_of(self.alpha[:, : self.steps + 1], self.batch_size))  # (B', steps + 1, N)
        batch_size = part.size(0)
        part = lanes_of(part, lanes)  # (G', steps + 1, N, L)
        alpha = part.new_empty(part.size(0), capacity + 1, configurations, lanes)
        alpha[:, : self.steps + 1] = part
        return self._replaced(tensors, alpha, batch_size, capacity, self.steps)


def batch_of(lanes: Tensor, batch_size: int) -> Tensor:
    """(B, …) from the lanes (⌈B / L⌉, …, L) of the kernel's tables: element b is lane b mod L of group b // L."""
    batch_first = lanes.movedim(-1, 1)  # (G, 8, …)
    return batch_first.reshape(-1, *batch_first.shape[2:])[:batch_size]


def lanes_of(batch: Tensor, lanes: int) -> Tensor:
    """(⌈B / L⌉, …, L) from (B, …), L = ``lanes``, the inverse of :func:`batch_of`; a last group of
    fewer elements repeats its last one in the lanes past the batch (a valid state, whose results are dropped)."""
    padding = -batch.size(0) % lanes
    if padding:
        batch = torch.cat([batch, batch[-1:].expand(padding, *batch.shape[1:])])
    return batch.reshape(-1, lanes, *batch.shape[1:]).movedim(1, -1)


def _table_size(steps: int, configurations: int, vector_size: int) -> int:
    """N · Σ_{t ≤ steps} rows(t), rows(t) = m + (t + 1)·N: the flat size of columns 0 … steps."""
    columns = steps + 1
    return configurations * (columns * vector_size + configurations * columns * (columns + 1) // 2)


class _CompiledStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, pushed: Tensor, order: Tensor, tables: StepTables) -> tuple[Tensor, Tensor]:
        step = tables.steps + 1
        reading = torch.ops.stacklm_dvpda.step(step, logits, pushed, *tables.columns, tables.alpha)
        tables.steps = step
        ctx.save_for_backward(logits, pushed, reading)
        ctx.tables = tables
        ctx.step = step
        ctx.order_shape = order.shape
        return reading, reading.new_zeros(reading.size(0), 0)

    @staticmethod
    def backward(ctx: Any, grad_reading: Tensor, grad_order: Tensor) -> tuple[Tensor | None, ...]:
        tables: StepTables = ctx.tables
        if tables.grad_gamma is None or tables.grad_alpha is None:
            tables.grad_gamma = torch.zeros_like(tables.columns[0])
            tables.grad_alpha = torch.zeros_like(tables.alpha)
        logits, pushed, reading = ctx.saved_tensors
        grad_logits, grad_pushed = torch.ops.stacklm_dvpda.step_backward(
            ctx.step, grad_reading.contiguous(), logits, pushed, reading,
            *tables.columns, tables.alpha, tables.grad_gamma, tables.grad_alpha,
        )  # fmt: skip
        if ctx.step == 1:
            # Step 1 received log v₀ as its order tensor: the adjoint of column 0's η rows.
            grad_order = batch_of(tables.grad_gamma[:, : ctx.order_shape[1]], ctx.order_shape[0]).clone()
            tables.grad_gamma = tables.grad_alpha = None
        else:
            grad_order = grad_reading.new_zeros(ctx.order_shape)
        return grad_logits, grad_pushed, grad_order, None


def compiled_step(tables: StepTables, logits: Tensor, pushed: Tensor, order: Tensor) -> tuple[Tensor, Tensor]:
    """r_t (B, N·m) of the next step t = ``tables.steps`` + 1, and the order tensor of step t.

    ``logits`` (B, N·(2N + Q)): per configuration c the log weights of its N pushes, N replaces
    and Q pops, as the controller's output is laid out (``NondeterministicActions.from_logits``;
    rows of any stride, no copy); ``pushed`` log v_t (B, m); the tables' dtype. ``order``: log v₀
    (B, m) at step 1, else what step t − 1 returned.
    """
    if tables.steps >= tables.capacity:
        raise ValueError(f"the tables hold {tables.capacity} steps")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    return _CompiledStep.apply(logits, pushed.contiguous(), order, tables)
