"""Strings as training data (``stacklm.training.sources.TrainingData``): each string w scored as
w·EOS, batched by ``stacklm.training.batching`` (a token budget, or same-length batches; each
epoch's order a pure function of (seed, epoch)), the loss of App. D (``stacklm.training.loss``;
on CUDA each padded batch shape's step replayed from a CUDA graph, ``stacklm.training.cuda_graph``)
and the validation cross-entropy per token, EOS counted (DuSell & Cotterell (2025) App. D;
DuSell & Chiang (2022) App. 8)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from stacklm.errors import StacklmError
from stacklm.training.batching import Batch, epoch_groups, make_batch, validation_groups
from stacklm.training.config import TrainConfig
from stacklm.training.cuda_graph import training_steps
from stacklm.training.loss import string_log_probabilities
from stacklm.training.sources import BatchLoss


def validation_cross_entropy(model: nn.Module, batches: Sequence[Batch]) -> float:
    """Σ −log p(w·EOS) / Σ (|w| + 1) over the validation set (micro-averaged, nats per token)."""
    model.eval()
    total = 0.0
    tokens = 0
    with torch.no_grad():
        for batch in batches:
            total -= float(string_log_probabilities(model, batch).double().sum())
            tokens += batch.num_tokens
    return total / tokens


class StringData:
    """Training and validation strings (token indices, EOS excluded), batched as ``config`` says
    (``tokens_per_batch`` or ``strings_per_batch``), shuffled with ``seed``."""

    def __init__(self, training: Sequence[Sequence[int]], validation: Sequence[Sequence[int]], config: TrainConfig, *, seed: int, eos_index: int) -> None:
        if not training or not validation:
            raise StacklmError("training and validation data must not be empty")
        if config.tokens_per_batch is None and config.strings_per_batch is None:
            raise StacklmError("strings need tokens_per_batch or strings_per_batch to be batched")
        self.training, self.validation, self.config, self.seed, self.eos_index = training, validation, config, seed, eos_index
        self.lengths = [len(string) for string in training]
        self.validation_batches: list[Batch] | None = None  # built once, on the model's device

    def start_epoch(self, model: nn.Module, epoch: int, done: int, carried: Sequence[Tensor] | None) -> list[list[int]]:
        return epoch_groups(self.lengths, self.config, self.seed, epoch)

    def steps(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig, device: torch.device, graphs: bool
    ) -> Callable[[list[int]], BatchLoss]:
        step = training_steps(model, optimizer, config, device, graphs=graphs)

        def train_on(group: list[int]) -> BatchLoss:
            strings = make_batch(self.training, group, self.eos_index)
            return BatchLoss(step(strings), strings.size, strings.num_tokens)

        return train_on

    def carried(self) -> None:
        return None

    def validation_cross_entropy(self, model: nn.Module) -> float:
        if self.validation_batches is None:
            groups = validation_groups([len(string) for string in self.validation], self.config)
            self.validation_batches = [make_batch(self.validation, group, self.eos_index).to(_device(model)) for group in groups]
        return validation_cross_entropy(model, self.validation_batches)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
