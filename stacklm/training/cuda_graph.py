"""Training steps on CUDA replayed from CUDA graphs, one graph per padded batch shape.

An eager step launches one kernel per operation from Python, thousands per step for the stack
models, so on a GPU the host sets the pace, not the device. A CUDA graph records a whole step
(``stacklm.training.step.training_step``: forward, loss, backward, clipping, and Adam, which must
be ``capturable``) once and replays it in one launch. Its shapes are fixed, so each batch is
padded to its bucket (``stacklm.training.buckets``), whose loss and gradients equal the eager
step's to rounding (its dropout draws other masks: the padded tensors are larger).

Per bucket shape (B̂, n̂): the first batch runs eagerly on a side stream, which builds what a
capture cannot build from the host (the stacks' index tables, the optimizer's state, the
libraries' workspaces); the second captures the step, into one memory pool that every graph
shares, and every batch of that shape replays it: the batch is copied into the graph's static
inputs, the graph replays, and its loss is copied out before another replay overwrites it. Every
tensor a graph writes is written before it is read within the replay, so sharing the pool is safe
when graphs replay one at a time, as here. The learning rate is a constant of a captured Adam
step: when the schedule changes it, the graphs are dropped and captured again.

:func:`training_steps` uses graphs only on CUDA; on the CPU the eager step runs, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from stacklm.training.batching import Batch
from stacklm.training.buckets import PaddedBatch, pad_to_bucket, padded_loss
from stacklm.training.config import TrainConfig
from stacklm.training.loss import batch_loss
from stacklm.training.step import training_step

TrainingSteps = Callable[[Batch], Tensor]  # a batch on the host → its loss, a 0-dim tensor on the device


def training_steps(model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig, device: torch.device, graphs: bool = True) -> TrainingSteps:
    """The training step of ``model`` on ``device``: graphed (:class:`GraphedSteps`) on CUDA when
    ``graphs``, else eager (the batch copied to the device, then ``training_step``)."""
    if graphs and device.type == "cuda":
        return GraphedSteps(model, optimizer, config.gradient_clip_norm, device)

    def eager(batch: Batch) -> Tensor:
        on_device = batch.to(device)
        return training_step(model, optimizer, lambda: batch_loss(model, on_device), config.gradient_clip_norm)

    return eager


@dataclass(frozen=True)
class CapturedStep:
    graph: torch.cuda.CUDAGraph
    batch: PaddedBatch  # the static inputs, on the device, outside the graphs' pool
    loss: Tensor  # the static output, in the pool: overwritten by the next replay of any graph


class GraphedSteps:
    """Training steps of ``model`` on CUDA, captured per padded batch shape and replayed.

    ``optimizer`` must be ``capturable`` (``torch.optim.Adam(..., capturable=True)``)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, gradient_clip_norm: float, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs run on CUDA, not on {device}")
        if not all(group.get("capturable", False) for group in optimizer.param_groups):
            raise ValueError("a captured optimizer step needs capturable=True")
        self.model = model
        self.optimizer = optimizer
        self.gradient_clip_norm = gradient_clip_norm
        self.device = device
        self.side_stream = torch.cuda.Stream(device)
        self.warmed: set[tuple[int, int]] = set()  # shapes whose first batch ran eagerly
        self.captured: dict[tuple[int, int], CapturedStep] = {}
        self.pool: tuple[int, int] | None = None  # the graphs' shared memory pool, once one is captured
        self.learning_rates = self._learning_rates()

    def __call__(self, batch: Batch) -> Tensor:
        padded = pad_to_bucket(batch).pin_memory()
        if self._learning_rates() != self.learning_rates:
            self.captured.clear()
            self.pool = None
            self.learning_rates = self._learning_rates()
        if padded.shape not in self.warmed:
            self.warmed.add(padded.shape)
            return self._eager(padded.to(self.device, non_blocking=True))
        captured = self.captured.get(padded.shape)
        if captured is None:
            captured = self.captured[padded.shape] = self._capture(padded.to(self.device, non_blocking=True))
        else:
            captured.batch.copy_(padded)
        captured.graph.replay()
        return captured.loss.clone()

    def _step(self, batch: PaddedBatch) -> Tensor:
        return training_step(self.model, self.optimizer, lambda: padded_loss(self.model, batch), self.gradient_clip_norm)

    def _eager(self, batch: PaddedBatch) -> Tensor:
        """The step on a side stream (as a warm-up before a capture must run), ordered after and before the current stream's work."""
        current = torch.cuda.current_stream(self.device)
        self.side_stream.wait_stream(current)
        with torch.cuda.stream(self.side_stream):
            loss = self._step(batch)
        current.wait_stream(self.side_stream)
        loss.record_stream(current)
        return loss

    def _capture(self, batch: PaddedBatch) -> CapturedStep:
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)  # the gradients are then the graph's own tensors
        with torch.cuda.graph(graph, pool=self.pool):
            loss = self._step(batch)
        if self.pool is None:
            self.pool = graph.pool()
        return CapturedStep(graph, batch, loss)

    def _learning_rates(self) -> tuple[float, ...]:
        return tuple(float(group["lr"]) for group in self.optimizer.param_groups)
