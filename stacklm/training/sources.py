"""What the training loop trains on and scores (``stacklm.training.loop``): a ``TrainingData``.

The loop asks it for an epoch's batches, the training step of a batch (``steps``: forward, loss,
backward, clipping and the optimizer's step, ``stacklm.training.step.training_step``, or its
CUDA graph) and the validation cross-entropy; it owns the rest (the optimizer, the losses' reading,
checkpoints, schedule, resumption). Two kinds exist:

- ``stacklm.training.strings.StringData``: strings scored as w·EOS, batched under a token budget
  or by length, shuffled per epoch (DuSell & Cotterell (2025) App. D; DuSell & Chiang (2022) App. 8);
- ``stacklm.training.chunks.ChunkData``: one long stream cut into truncated-BPTT chunks, the
  model's state carried from chunk to chunk (DuSell & Chiang (2022) App. 10).

A kind that carries a state between batches gives it as tensors (``carried``) when the loop
saves a run stopped within an epoch, and takes it back when the run resumes (``start_epoch``),
so that the resumed run equals the run never interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch
from torch import Tensor, nn

from stacklm.training.config import TrainConfig


@dataclass(frozen=True)
class BatchLoss:
    """A training step's loss, as the loop needs it."""

    loss: Tensor  # the batch's mean loss: a 0-dim tensor on the device, detached (the step is taken)
    examples: int  # strings (or streams) in the batch
    tokens: int  # scored positions (targets)


class TrainingData(Protocol):
    def start_epoch(self, model: nn.Module, epoch: int, done: int, carried: Sequence[Tensor] | None) -> Sequence[Any]:
        """The batches of ``epoch`` (0-based) in the order they are trained, the first ``done`` of
        them already trained, ``carried`` the state they left (``carried()`` as saved; None at an
        epoch's start and for data that carry nothing)."""
        ...

    def steps(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig, device: torch.device, graphs: bool
    ) -> Callable[[Any], BatchLoss]:
        """The training step of ``model`` on a batch of ``start_epoch``'s (in order, the model in
        training mode): one optimizer step, clipped as ``config`` says; CUDA graphs where the data
        allow them and ``graphs``."""
        ...

    def carried(self) -> list[Tensor] | None:
        """The state the batches trained so far carry into the next one, detached; None if none."""
        ...

    def validation_cross_entropy(self, model: nn.Module) -> float:
        """Σ −log p / Σ scored positions over the validation data (nats per token), without gradients."""
        ...
