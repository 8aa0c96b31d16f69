"""A tiny GRU language model with the interface of ``stacklm.models.base.LanguageModel``.

The training and evaluation tests use it where any language model will do, so that they do
not depend on an architecture's speed or size.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import Tensor, nn

from stacklm.training.config import TrainConfig
from stacklm.training.strings import StringData


@dataclass(frozen=True)
class ToyState:
    model: "ToyLanguageModel"
    hidden: Tensor  # (B, H)

    def output(self) -> Tensor:
        return self.model.output(self.hidden)  # (B, V)

    def next(self, tokens: Tensor) -> "ToyState":
        return replace(self, hidden=self.model.cell(self.model.embedding(tokens), self.hidden))

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> "ToyState":
        return replace(self, hidden=function(self.hidden))

    def batch_size(self) -> int:
        return self.hidden.size(0)

    def slice_batch(self, index: slice | Tensor) -> "ToyState":
        return self.transform_tensors(lambda tensor: tensor[index])


class ToyLanguageModel(nn.Module):
    def __init__(self, vocabulary_size: int, hidden_size: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        self.vocabulary_size = vocabulary_size
        self.embedding = nn.Embedding(vocabulary_size, hidden_size)
        self.initial_hidden = nn.Parameter(torch.zeros(hidden_size))
        self.cell = nn.GRUCell(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(hidden_size, vocabulary_size)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits (B, n + 1, V) for tokens (B, n)."""
        hidden = self.initial_hidden.expand(tokens.size(0), -1)  # (B, H)
        hiddens = [hidden]
        for step in range(tokens.size(1)):
            hidden = self.cell(self.embedding(tokens[:, step]), hidden)
            hiddens.append(hidden)
        return self.output(self.dropout(torch.stack(hiddens, dim=1)))  # (B, n + 1, V)

    def initial_state(self, batch_size: int) -> ToyState:
        return ToyState(self, self.initial_hidden.expand(batch_size, -1))

    def initialize(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.uniform_(-0.5, 0.5, generator=generator)


def counting_data(count: int, seed: int) -> list[list[int]]:
    """Strings a^k b^k over {0, 1} (EOS = 2), k = 1 … 6: learnable, with varied lengths."""
    generator = random.Random(seed)
    return [[0] * k + [1] * k for k in (generator.randint(1, 6) for _ in range(count))]


def toy_config() -> TrainConfig:
    # "scored": batches of at most 40 scored positions, as these tests were sized for
    return TrainConfig(learning_rate=0.01, tokens_per_batch=40, max_epochs=3, examples_per_checkpoint=50, early_stopping_patience=10, token_budget="scored")


def toy_data(seed: int = 1, config: TrainConfig | None = None) -> StringData:
    """The toy run's data: 120 training and 30 validation strings of ``counting_data``, batched as
    ``config`` (default ``toy_config()``) says, shuffled with ``seed``."""
    return StringData(counting_data(120, 1), counting_data(30, 2), config or toy_config(), seed=seed, eos_index=2)
