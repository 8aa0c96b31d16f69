"""A stack run by a compiled kernel one step per call, in a stack RNN's whole-sequence forward
(``stacklm.kernels.recurrent``): the symbol stack (``symbol_stack``), the stratification stack
(``stratification``) and the superposition stack (``superposition``).

A run's tables (:class:`StepTables`) hold the state of every step: the forward fills them one step
at a time, the backward reads them in reverse. Each step is one autograd node, from the step's
layer outputs as they are (its logits) to the reading r_t and an order tensor: an empty (B, 0)
tensor passed from step to step, so that autograd runs the backward of step t after those of
steps t + 1 … n, which complete the adjoints of step t's state. The adjoint tables are the run's
too: made by its first backward step (step n) and dropped after step 1's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class StepTables:
    """The tables of one run of at most ``capacity`` steps, ``steps`` of them taken; a kernel's
    tables define :meth:`forward` and :meth:`backward`. ``strided_rows``: the kernel reads logits
    whose rows (the batch) lie at any stride; else they are made contiguous first."""

    capacity: int
    steps: int
    strided_rows = False

    def forward(self, step: int, logits: Tensor) -> Tensor:
        """r_t of step t = ``step`` from its ``logits``, step t's state written into the tables."""
        raise NotImplementedError

    def backward(self, step: int, grad_reading: Tensor, logits: Tensor) -> Tensor:
        """∂L/∂logits of step t = ``step`` from ∂L/∂r_t (contiguous), adding step t's part to the
        adjoints of the earlier steps' state (made at the run's first backward step, dropped after step 1's)."""
        raise NotImplementedError


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, order: Tensor, tables: StepTables) -> tuple[Tensor, Tensor]:
        step = tables.steps + 1
        reading = tables.forward(step, logits)
        tables.steps = step
        ctx.save_for_backward(logits)
        ctx.tables = tables
        ctx.step = step
        ctx.order_shape = order.shape
        return reading, reading.new_empty(reading.size(0), 0)

    @staticmethod
    def backward(ctx: Any, grad_reading: Tensor, grad_order: Tensor) -> tuple[Tensor | None, ...]:
        (logits,) = ctx.saved_tensors
        grad_logits = ctx.tables.backward(ctx.step, grad_reading.contiguous(), logits)
        return grad_logits, grad_reading.new_empty(ctx.order_shape), None


def next_step(tables: StepTables, logits: Tensor, order: Tensor) -> tuple[Tensor, Tensor]:
    """r_t of the next step t = ``tables.steps`` + 1 from its ``logits`` (the tables' dtype), and the
    order tensor of step t; ``order``: any (B, 0) tensor at step 1, else what step t − 1 returned."""
    if tables.steps >= tables.capacity:
        raise ValueError(f"the tables hold {tables.capacity} steps")
    if not (logits.stride(-1) == 1 and (tables.strided_rows or logits.is_contiguous())):
        logits = logits.contiguous()
    return _Step.apply(logits, order, tables)


class StepRun:
    """A stack of one whole-sequence forward of a stack RNN, gradients included, on a kernel's
    ``tables``: ``current`` is r_t (r_0 before the first step), each :meth:`next` one kernel call."""

    tables: StepTables
    current: Tensor
    order: Tensor

    def next(self, parts: tuple[Tensor, ...]) -> None:
        """The next step, of its logits ``parts`` = (logits (B, …),) as the interface's layers give them."""
        (logits,) = parts
        self.current, self.order = next_step(self.tables, logits, self.order)

    def reading(self) -> Tensor:
        """r_t."""
        return self.current
