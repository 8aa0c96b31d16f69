"""Batches padded to a few static shapes, for the CUDA graphs of training (``stacklm.training.cuda_graph``).

A captured graph replays fixed shapes, so a batch of B strings, the longest of length n, is
padded to its bucket (B̂, n̂): each rounded up to the grid 1, 2, 3, then 2^k · {4, 5, 6}
(4, 5, 6, 8, 10, 12, 16, 20, 24, …), less than 4/3 of the size in each dimension, and a few
shapes per run. Padding is inert: padded positions are masked out of the loss, padded rows weigh
0, and every model here is causal and keeps the rows of a batch apart, so no scored position
reads padding. The loss of a padded batch is

    L = −Σ_b ρ_b Σ_t mask[b, t] log p(targets[b, t] | inputs[b, 1 … t]),   ρ_b = 1/B for the B
                                                                            strings, 0 for padding,

the eager loss −(1/B) Σ_b log p(w_b·EOS) (``stacklm.training.loss``) to float rounding, and so
are its gradients (tested on every architecture).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from stacklm.training.batching import PADDING_INPUT, Batch
from stacklm.training.loss import position_log_probabilities


def bucket_size(size: int) -> int:
    """The smallest value of the grid 1, 2, 3, 2^k · {4, 5, 6} at or above ``size``."""
    if size <= 4:
        return size
    scale = 1
    while 6 * scale < size:
        scale *= 2
    return next(step * scale for step in (4, 5, 6) if step * scale >= size)


@dataclass(frozen=True)
class PaddedBatch:
    """A batch padded to its bucket (B̂ strings of length n̂)."""

    inputs: Tensor  # (B̂, n̂) token indices, padded with PADDING_INPUT
    targets: Tensor  # (B̂, n̂ + 1)
    mask: Tensor  # (B̂, n̂ + 1) bool: True at the scored positions of the strings
    row_weights: Tensor  # (B̂,) float32: ρ_b, 1/B for the strings, 0 for the padding rows

    @property
    def shape(self) -> tuple[int, int]:
        """(B̂, n̂): the graph's key."""
        return (self.inputs.size(0), self.inputs.size(1))

    def to(self, device: torch.device, non_blocking: bool = False) -> PaddedBatch:
        return PaddedBatch(*(tensor.to(device, non_blocking=non_blocking) for tensor in self.tensors()))

    def pin_memory(self) -> PaddedBatch:
        return PaddedBatch(*(tensor.pin_memory() for tensor in self.tensors()))

    def copy_(self, other: PaddedBatch) -> None:
        """Write ``other`` (of the same shape) into these tensors, without waiting for the copy."""
        for mine, theirs in zip(self.tensors(), other.tensors()):
            mine.copy_(theirs, non_blocking=True)

    def tensors(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return (self.inputs, self.targets, self.mask, self.row_weights)


def pad_to_bucket(batch: Batch) -> PaddedBatch:
    """``batch`` (on any device) padded to (bucket_size(B), bucket_size(n)) on its device."""
    size, length = batch.inputs.shape
    padded_size, padded_length = bucket_size(size), bucket_size(length)
    device = batch.inputs.device
    inputs = torch.full((padded_size, padded_length), PADDING_INPUT, dtype=batch.inputs.dtype, device=device)
    inputs[:size, :length] = batch.inputs
    targets = torch.full((padded_size, padded_length + 1), PADDING_INPUT, dtype=batch.targets.dtype, device=device)
    targets[:size, : length + 1] = batch.targets
    mask = torch.zeros((padded_size, padded_length + 1), dtype=torch.bool, device=device)
    mask[:size, : length + 1] = batch.mask
    row_weights = torch.zeros(padded_size, dtype=torch.float32, device=device)
    row_weights[:size] = 1.0 / size
    return PaddedBatch(inputs, targets, mask, row_weights)


def padded_loss(model: nn.Module, batch: PaddedBatch) -> Tensor:
    """L = −Σ_b ρ_b Σ_t mask[b, t] log p(…): a scalar, the eager batch loss to rounding."""
    positions = position_log_probabilities(model, batch.inputs, batch.targets)  # (B̂, n̂ + 1)
    strings = positions.masked_fill(~batch.mask, 0.0).sum(dim=1)  # (B̂,)
    return -(strings * batch.row_weights).sum()

