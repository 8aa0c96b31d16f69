"""One training step without host work, and the losses it leaves on the device until they are read.

A step (DuSell & Cotterell (2025) App. D; DuSell & Chiang (2022) App. 8) is the forward, the loss
−mean log p(w·EOS), the backward, L2 clipping of the global gradient norm and an Adam step. It
reads no scalar back (no ``.item()``, ``float(t)``, ``if t:``), copies nothing from the host and
builds no tensor from Python values (the stacks' index tables are built once per shape,
``stacklm.stacks.device_tables``): on CUDA the host then never waits for the device, and the
whole step can be recorded as one CUDA graph (``stacklm.training.cuda_graph``). Its loss stays
on the device; a ``LossLedger`` keeps the losses of the steps since the last reading and reads
them back in one copy when the loop needs their values (a checkpoint, a progress line, a stop),
which is where a non-finite loss is found (``stacklm.training.loop``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_of: Callable[[], Tensor], gradient_clip_norm: float) -> Tensor:
    """One optimizer step of ``model`` (in training mode) on the loss that ``loss_of()`` computes
    (``batch_loss`` of a batch on the model's device, or ``buckets.padded_loss``); that loss, a
    detached 0-dim tensor on the device."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), gradient_clip_norm)
    optimizer.step()
    return loss.detach()


@dataclass(frozen=True)
class StepPlace:
    """Where a step is in the run, as an error names it."""

    step: int  # optimizer steps so far, this one included
    epoch: int  # 1-based
    batch: int  # 1-based, in the epoch
    batches: int  # in the epoch

    def __str__(self) -> str:
        return f"step {self.step} (epoch {self.epoch}, batch {self.batch} of {self.batches})"


class LossLedger:
    """The losses of the steps not read yet, with their places, read back in one copy.

    At most ``limit`` stay pending: ``full`` says when the loop should read them. ``last`` is the
    most recent loss read (None before the first reading).
    """

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self.pending: list[tuple[StepPlace, Tensor]] = []
        self.last: float | None = None

    def add(self, place: StepPlace, loss: Tensor) -> None:
        """Keep the 0-dim ``loss`` of the step at ``place`` (a tensor that no later step overwrites)."""
        self.pending.append((place, loss))

    @property
    def full(self) -> bool:
        return len(self.pending) >= self.limit

    def read(self) -> list[tuple[StepPlace, float]]:
        """The pending losses in step order, as Python floats (the float32 values exactly); none
        pending after. One copy from the device, which waits for their steps to finish."""
        if not self.pending:
            return []
        values = torch.stack([loss for _, loss in self.pending]).tolist()
        read = [(place, value) for (place, _), value in zip(self.pending, values)]
        self.pending = []
        self.last = values[-1]
        return read
