"""The dVPDA (``stacklm.stacks.vector_nondeterministic``) on CUDA, in Triton: its whole-sequence forward
and exact backward, one kernel launch each (``triton_dvpda_kernels``).

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

Triton is optional: nothing here imports it before a kernel runs. On the CPU the programs run
only under Triton's interpreter (``TRITON_INTERPRET=1`` set before the first call), as the tests
run them. :class:`TritonVectorNondeterministicStack` and :class:`TritonVectorNondeterministicInterface`
are what ``accelerate(model, "cuda-triton")`` puts in place; elsewhere (an initial state given, a
device or dtype the kernel does not take, incremental states) they are the PyTorch DP's.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn

from stacklm.kernels.dvpda import packed_logits
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


def _table_size(steps: int, configurations: int, vector_size: int) -> int:
    """N · Σ_{t ≤ steps} rows(t), rows(t) = m + (t + 1)·N: the size of an element's table."""
    columns = steps + 1
    return configurations * (columns * vector_size + configurations * columns * (columns + 1) // 2)


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
    read by the Triton kernel as it is, log σ of the pushed part included."""

    def readings(self, hidden: Tensor) -> Tensor:
        if not runs_on_triton(hidden):
            return super().readings(hidden)
        outputs = nn.functional.linear(hidden, *self.input_weight())  # (B, n, QS(2QS + Q) + m)
        return packed_triton_readings(self.stack, outputs, log_sigmoid=self.pushed_vector == "sigmoid")
