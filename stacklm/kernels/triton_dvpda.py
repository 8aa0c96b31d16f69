"""The dVPDA (``stacklm.stacks.vector_nondeterministic``) on CUDA, in Triton: its whole-sequence forward
and exact backward, one kernel launch each, and the stack RNNs' steps, one launch per step
(``triton_dvpda_kernels``).

The same dynamic program as ``dvpda.cpp`` (``stacks/pda.py``: full stack, bottom replaceable,
vectors; DuSell & Cotterell (2025), §3.2 and eq. 6) with the same interface as its whole-sequence op
(:func:`stacklm.kernels.dvpda.compiled_readings`): the actions packed as a controller's linear
layers give them, (B, n, N·(2N + Q) + m), log v_t = log σ(x_t) taken in the kernel where asked, and
one gradient for that whole tensor and one for log v₀. Its numerics are plain log space (every
sum a log-sum-exp relative to its largest term), where the C++ kernel keeps shares and real sums
relative to log α; both compute the same readings and gradients (tested in float64).

One program per batch element holds the step loop: its whole table of log γ and log η columns,
O(n²·N²) per element, stays in global memory for the backward, which runs the steps in reverse
in one more program per element. A run of B elements occupies B streaming multiprocessors.

The same steps also run one per launch (``dvpda_step``, ``dvpda_step_backward``), for the stack
RNNs, whose actions at step t depend on the reading of step t − 1: :class:`TritonSequenceState`,
the state that :meth:`TritonVectorNondeterministicInterface.initial_state` gives a whole-sequence
forward, writes one column per step into tables allocated once for the run
(:class:`TritonStepTables`), and each step's backward adds into adjoint tables shared by the run,
ordered as the compiled kernel's one-step op orders them (``stacklm.kernels.dvpda``).

Triton is optional: nothing here imports it before a kernel runs. On the CPU the programs run
only under Triton's interpreter (``TRITON_INTERPRET=1`` set before the first call), as the tests
run them. :class:`TritonVectorNondeterministicStack` and :class:`TritonVectorNondeterministicInterface`
are what ``accelerate(model, "cuda-triton")`` puts in place; elsewhere (an initial state given to
``readings``, a device or dtype the kernel does not take, states for incremental use) they are the
PyTorch DP's.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, Callable, Self

import torch
from torch import Tensor, nn

from stacklm.kernels.dvpda import _table_size, initial_reading, packed_logits
from stacklm.models.stack_interface import VectorNondeterministicInterface
from stacklm.stacks.base import StackState
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions, VectorNondeterministicStack

ROW_BLOCK = 16  # rows of a column per block of a program's loops


def available() -> tuple[bool, str | None]:
    """Whether Triton is installed (without importing it), and why not."""
    if importlib.util.find_spec("triton") is None:
        return False, "triton is not installed (pip install triton, or the test extras)"
    return True, None


def kernels() -> ModuleType:
    """The Triton programs, imported at the first call (which imports Triton)."""
    from stacklm.kernels import triton_dvpda_kernels

    return triton_dvpda_kernels


def runs_on_triton(like: Tensor) -> bool:
    """Whether tensors like ``like`` go to the kernel: float32 or float64 on CUDA, or on the CPU
    where the programs run on Triton's interpreter."""
    if like.dtype not in (torch.float32, torch.float64):
        return False
    if like.device.type == "cuda":
        return True
    return like.device.type == "cpu" and available()[0] and kernels().INTERPRETED


def _power_of_two(size: int) -> int:
    return 1 << max(size - 1, 0).bit_length()


class _TritonReadings(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, bottom: Tensor, num_states: int, num_symbols: int, log_sigmoid: bool) -> Tensor:
        batch_size, steps, _ = logits.shape
        configurations, vector_size = num_states * num_symbols, bottom.size(1)
        table_size = _table_size(steps, configurations, vector_size)
        table = logits.new_empty(batch_size, table_size)
        alpha = logits.new_empty(batch_size, steps + 1, configurations)
        prime = logits.new_empty(batch_size, steps * configurations * num_states)
        readings = logits.new_empty(batch_size, steps, configurations * vector_size)
        sizes = block_sizes(num_states, num_symbols, vector_size, log_sigmoid)
        kernels().dvpda_forward[(batch_size,)](
            logits, logits.stride(0), logits.stride(1), bottom, table, alpha, prime, readings, steps, table_size, **sizes
        )
        ctx.save_for_backward(logits, table, alpha)
        ctx.sizes = sizes
        return readings

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        logits, table, alpha = ctx.saved_tensors
        batch_size, steps, _ = logits.shape
        sizes = ctx.sizes
        grad_table = torch.zeros_like(table)
        grad_alpha = torch.zeros_like(alpha)
        prime = table.new_empty(batch_size, steps * sizes["Q"] * sizes["S"] * sizes["Q"])
        grad_prime = torch.empty_like(prime)
        grad_logits = torch.empty_like(logits, memory_format=torch.contiguous_format)
        grad_bottom = logits.new_empty(batch_size, sizes["M"])
        kernels().dvpda_backward[(batch_size,)](
            grad.contiguous(), logits, logits.stride(0), logits.stride(1), table, alpha, prime, grad_table,
            grad_alpha, grad_prime, grad_logits, grad_bottom, steps, table.size(1), **sizes,
        )  # fmt: skip
        return grad_logits, grad_bottom, None, None, None


def block_sizes(num_states: int, num_symbols: int, vector_size: int, log_sigmoid: bool) -> dict[str, int | bool]:
    """The programs' compile-time sizes: Q, S, m, their blocks (powers of two) and the row block."""
    return {
        "Q": num_states,
        "S": num_symbols,
        "M": vector_size,
        "BN": _power_of_two(num_states * num_symbols),
        "BQ": _power_of_two(num_states),
        "BM": _power_of_two(vector_size),
        "BR": ROW_BLOCK,
        "LOG_SIGMOID": log_sigmoid,
    }


def triton_readings(logits: Tensor, bottom: Tensor, num_states: int, num_symbols: int, log_sigmoid: bool) -> Tensor:
    """r_1 … r_n (B, n, N·m) in the order (r, y, m), the contract of ``compiled_readings``: ``logits``
    (B, n, N·(2N + Q) + m), N = Q·S, per step the N·(2N + Q) log transition weights (per source
    configuration its N push, N replace and Q pop weights), then the pushed vector's part (log v_t,
    or x_t with log v_t = log σ(x_t) taken in the kernel where ``log_sigmoid``); ``bottom`` log v₀ (B, m).
    On CUDA (or the CPU under Triton's interpreter), float32 or float64; the gradient of ``logits``
    is one tensor of its shape."""
    configurations = num_states * num_symbols
    if logits.size(-1) != configurations * (2 * configurations + num_states) + bottom.size(-1):
        raise ValueError("logits must be (B, n, N·(2N + Q) + m) with N = Q·S configurations")
    if logits.size(1) == 0:
        return logits.new_zeros(logits.size(0), 0, configurations * bottom.size(-1))
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    return _TritonReadings.apply(logits, bottom.contiguous(), num_states, num_symbols, log_sigmoid)


def packed_triton_readings(stack: VectorNondeterministicStack, outputs: Tensor, log_sigmoid: bool) -> Tensor:
    """r_1 … r_n of ``stack`` from the kernel for ``outputs`` = [logits; p] (B, n, Q·S·(2QS + Q) + m),
    as ``stacklm.kernels.dvpda.packed_readings`` reads them."""
    bottom = stack.log_bottom(outputs).unsqueeze(0).expand(outputs.size(0), -1)  # (B, m)
    sizes = stack.sizes
    return triton_readings(outputs, bottom, sizes.num_states, sizes.num_symbols, log_sigmoid)


class TritonVectorNondeterministicStack(VectorNondeterministicStack):
    """``readings`` of a whole sequence from the empty stack on the Triton kernel."""

    def readings(
        self, actions: VectorNondeterministicActions, initial: StackState[VectorNondeterministicActions] | None = None
    ) -> Tensor:
        if initial is not None or not runs_on_triton(actions.pop):
            return super().readings(actions, initial)
        return packed_triton_readings(self, torch.cat([packed_logits(actions), actions.pushed], dim=-1), log_sigmoid=False)


class TritonVectorNondeterministicInterface(VectorNondeterministicInterface):
    """A stack-attention layer's readings from one product with the stacked weights (``input_weight``),
    read by the Triton kernel as it is, log σ of the pushed part included; a stack RNN's steps on the
    kernel's one-step programs (:meth:`initial_state`)."""

    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> StackState[Any]:
        """With ``max_steps`` (what a stack RNN's whole-sequence forward gives), a :class:`TritonSequenceState`
        with tables for that many steps, gradients included; else (incremental use) the PyTorch DP's state."""
        if max_steps is None or not runs_on_triton(like):
            return super().initial_state(batch_size, like, max_steps)
        log_bottom = self.stack.log_bottom(like).unsqueeze(0).expand(batch_size, -1)  # (B, m)
        sizes = self.stack.sizes
        tables = TritonStepTables(log_bottom, max_steps, sizes.num_states, sizes.num_symbols)
        return TritonSequenceState(tables, 0, log_bottom, initial_reading(log_bottom, sizes))

    def readings(self, hidden: Tensor) -> Tensor:
        if not runs_on_triton(hidden):
            return super().readings(hidden)
        outputs = nn.functional.linear(hidden, *self.input_weight())  # (B, n, QS(2QS + Q) + m)
        return packed_triton_readings(self.stack, outputs, log_sigmoid=self.pushed_vector == "sigmoid")


class TritonStepTables:
    """The tables of one run of at most ``capacity`` steps, filled one column per :class:`TritonSequenceState`
    step (``dvpda_step``, one launch): each element's table of log γ and log η columns (B, table size),
    log α (B, capacity + 1, N), the pop's scratch, and the adjoint tables, made by the first backward
    step of the run and dropped after step 1's. ``log_bottom`` (B, m) is log v₀."""

    def __init__(self, log_bottom: Tensor, capacity: int, num_states: int, num_symbols: int) -> None:
        bottom = log_bottom.detach().contiguous()
        batch_size, vector_size = bottom.shape
        configurations = num_states * num_symbols
        self.capacity = capacity
        self.steps = 0
        self.sizes = block_sizes(num_states, num_symbols, vector_size, log_sigmoid=False)
        self.table = bottom.new_empty(batch_size, _table_size(capacity, configurations, vector_size))
        self.alpha = bottom.new_empty(batch_size, capacity + 1, configurations)
        self.prime = bottom.new_empty(batch_size, capacity * configurations * num_states)
        self.grad_table: Tensor | None = None
        self.grad_alpha: Tensor | None = None
        start_sizes = {key: self.sizes[key] for key in ("Q", "S", "M", "BN", "BM")}
        kernels().dvpda_start[(batch_size,)](bottom, self.table, self.alpha, self.table.size(1), capacity, **start_sizes)


class _TritonStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, pushed: Tensor, order: Tensor, tables: TritonStepTables) -> tuple[Tensor, Tensor]:
        step = tables.steps + 1
        batch_size = logits.size(0)
        reading = logits.new_empty(batch_size, tables.alpha.size(2) * pushed.size(1))
        kernels().dvpda_step[(batch_size,)](
            step, logits, logits.stride(0), pushed, tables.table, tables.alpha, tables.prime, reading,
            tables.table.size(1), tables.capacity, **tables.sizes,
        )  # fmt: skip
        tables.steps = step
        ctx.save_for_backward(logits, pushed)
        ctx.tables, ctx.step, ctx.order_shape = tables, step, order.shape
        return reading, reading.new_zeros(batch_size, 0)

    @staticmethod
    def backward(ctx: Any, grad_reading: Tensor, grad_order: Tensor) -> tuple[Tensor | None, ...]:
        tables: TritonStepTables = ctx.tables
        if tables.grad_table is None or tables.grad_alpha is None:
            tables.grad_table = torch.zeros_like(tables.table)
            tables.grad_alpha = torch.zeros_like(tables.alpha)
        logits, pushed = ctx.saved_tensors
        grad_logits = logits.new_empty(logits.shape)
        grad_pushed = torch.empty_like(pushed)
        kernels().dvpda_step_backward[(logits.size(0),)](
            ctx.step, grad_reading.contiguous(), logits, logits.stride(0), pushed, tables.table, tables.alpha,
            tables.prime, tables.grad_table, tables.grad_alpha, torch.empty_like(tables.prime), grad_logits, grad_pushed,
            tables.table.size(1), tables.capacity, **tables.sizes,
        )  # fmt: skip
        if ctx.step == 1:
            # Step 1 received log v₀ as its order tensor: the adjoint of column 0's η rows at (q0, ⊥).
            configurations = tables.alpha.size(2)
            grad_order = tables.grad_table[:, : ctx.order_shape[1] * configurations : configurations].clone()
            tables.grad_table = tables.grad_alpha = None
        else:
            grad_order = grad_reading.new_zeros(ctx.order_shape)
        return grad_logits, grad_pushed, grad_order, None


@dataclass(frozen=True)
class TritonSequenceState(StackState[VectorNondeterministicActions]):
    """A state of one stack RNN's whole-sequence forward on the Triton kernel, gradients included: one
    launch per ``next`` (and one per step of the backward), each step taken once, in order.

    The states of one run share its tables, into which ``next`` writes the next column, so a state is
    advanced at most once and is neither copied nor sliced (incremental uses take the PyTorch DP's
    states). A (B, 0) tensor passed from step to step orders the steps' backwards in autograd, as
    the compiled kernel's one-step op does (``stacklm.kernels.dvpda``).
    """

    tables: TritonStepTables
    step: int  # t, the steps taken
    order: Tensor  # log v₀ (B, m) at t = 0, then the (B, 0) tensor of step t
    current: Tensor  # r_t (B, Q·S·m)

    def next(self, actions: VectorNondeterministicActions) -> Self:
        tables = self.tables
        if tables.steps != self.step:
            raise ValueError("a Triton sequence state is advanced once: its run's tables hold the later steps")
        if tables.steps >= tables.capacity:
            raise ValueError(f"the tables hold {tables.capacity} steps")
        logits = packed_logits(actions)  # (B, N·(2N + Q)), rows of any stride
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        reading, order = _TritonStep.apply(logits, actions.pushed.contiguous(), self.order, tables)
        return replace(self, step=self.step + 1, order=order, current=reading)

    def reading(self) -> Tensor:
        """(B, Q·S·m) in the order (r, y, m)."""
        return self.current

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        raise ValueError("a Triton sequence state is neither copied nor sliced: incremental uses take the PyTorch DP's states")
