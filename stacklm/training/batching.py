"""Minibatches of language-model strings, grouped by length.

A string w (token indices, EOS excluded) is scored as w·EOS: the model reads w_1 … w_n and
predicts n + 1 symbols. A batch of strings padded to the longest length n holds
``size · (n + 1)`` predicted positions, counting EOS and padding. The token budget B bounds,
by default, ``size · n`` — the raw lengths, EOS excluded, as the authors' code of DuSell &
Cotterell (2025) counts (``docs/design/authors-code.md#token-budget-and-batching``), so that batches are as large
as theirs; ``token_budget="scored"`` bounds ``size · (n + 1)``, the positions the paper's text
(App. D) says B counts (a transformer's BOS is its input's first position and the target's EOS
its last, so n + 1 per string either way).

- ``token_budget_batches``: shuffle, stable-sort by length, grow each batch greedily while it
  fits the budget (an over-long string forms its own batch), then shuffle the batch order.
- ``same_length_batches``: strings of one length, ``strings_per_batch`` at a time, in data
  order (CFL: each training batch of the data set shares one length), then shuffled.

Each epoch's order is a pure function of (seed, epoch), so a resumed run rebuilds it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from stacklm.training.config import TokenBudget, TrainConfig

PADDING_INPUT = 0  # any valid index: positions ≤ a string's length never depend on padding


@dataclass(frozen=True)
class Batch:
    inputs: Tensor  # (B, n) token indices, padded with PADDING_INPUT
    targets: Tensor  # (B, n + 1) w·EOS, padded with anything
    mask: Tensor  # (B, n + 1) bool: True at the |w| + 1 scored positions of each string
    indices: tuple[int, ...]  # positions of the strings in the data set

    @property
    def size(self) -> int:
        return self.inputs.size(0)

    @property
    def num_tokens(self) -> int:
        """Σ (|w| + 1): the scored positions, EOS included."""
        return int(self.mask.sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device), self.mask.to(device), self.indices)


def make_batch(strings: Sequence[Sequence[int]], indices: Sequence[int], eos_index: int) -> Batch:
    lengths = torch.tensor([len(strings[index]) for index in indices])
    longest = int(lengths.max()) if len(indices) else 0
    inputs = torch.full((len(indices), longest), PADDING_INPUT, dtype=torch.long)
    targets = torch.full((len(indices), longest + 1), eos_index, dtype=torch.long)
    for row, index in enumerate(indices):
        tokens = torch.tensor(strings[index], dtype=torch.long)
        inputs[row, : len(tokens)] = tokens
        targets[row, : len(tokens)] = tokens
    mask = torch.arange(longest + 1).unsqueeze(0) <= lengths.unsqueeze(1)  # (B, n + 1)
    return Batch(inputs, targets, mask, tuple(indices))


def group_by_token_budget(lengths: Sequence[int], order: Sequence[int], tokens_per_batch: int, token_budget: TokenBudget = "raw") -> list[list[int]]:
    """Greedy groups of ``order`` (stably sorted by length) with size · longest ≤ B (``"raw"``)
    or size · (longest + 1) ≤ B (``"scored"``: EOS counted)."""
    extra = 1 if token_budget == "scored" else 0
    groups: list[list[int]] = []
    current: list[int] = []
    for index in sorted(order, key=lambda position: lengths[position]):
        if current and (len(current) + 1) * (lengths[index] + extra) > tokens_per_batch:
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups


def group_by_length(lengths: Sequence[int], strings_per_batch: int) -> list[list[int]]:
    """Runs of ``strings_per_batch`` strings of one length, in data order within each length."""
    by_length: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        by_length.setdefault(length, []).append(index)
    groups: list[list[int]] = []
    for length in sorted(by_length):
        members = by_length[length]
        groups.extend(members[start : start + strings_per_batch] for start in range(0, len(members), strings_per_batch))
    return groups


def epoch_groups(lengths: Sequence[int], config: TrainConfig, seed: int, epoch: int) -> list[list[int]]:
    """The training batches of ``epoch`` (as data-set indices), in the order they are used."""
    generator = random.Random(f"batches:{seed}:{epoch}")
    if config.tokens_per_batch is not None:
        order = list(range(len(lengths)))
        generator.shuffle(order)
        groups = group_by_token_budget(lengths, order, config.tokens_per_batch, config.token_budget)
    else:
        assert config.strings_per_batch is not None
        groups = group_by_length(lengths, config.strings_per_batch)
    generator.shuffle(groups)
    return groups


def validation_groups(lengths: Sequence[int], config: TrainConfig) -> list[list[int]]:
    """Batches for scoring the validation set, built once: sorted by length, like training's."""
    if config.tokens_per_batch is not None:
        return group_by_token_budget(lengths, range(len(lengths)), config.tokens_per_batch, config.token_budget)
    assert config.strings_per_batch is not None
    return group_by_length(lengths, config.strings_per_batch)
