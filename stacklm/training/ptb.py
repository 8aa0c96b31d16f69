"""Training and evaluating a PTB model with truncated BPTT (DuSell & Chiang (2022) App. 10;
``cfl-and-ptb.md`` §3.2, §3.4).

- A pass (training epoch or evaluation) starts from the initial state and carries the state
  from chunk to chunk, detached, sliced to the chunk's batch when the short stream has ended.
- Loss: the mean NLL over the chunk's B·T targets. Plain SGD at learning rate η; the global
  gradient norm is clipped at c · (number of targets in the chunk).
- η and c of a random-search run: log-uniform on [1, 100] and [1e-5, 1e-3] (the paper's
  "divided by batch size and sequence length" and "multiplied by" them: the loss is a mean).
- After each epoch, validation perplexity; η ÷ 1.5 when it is not a new best (torch's
  ``ReduceLROnPlateau`` with patience 0, as §3.4 gives the released code: with its default
  relative threshold, a gain under 0.01 % also divides η); stop after 2 epochs in a row without
  a lower validation perplexity, or after 100 epochs; the best epoch's parameters are restored.

Checkpoint files and resumption are the caller's (they depend on the run's settings).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from stacklm.data.ptb import Chunk
from stacklm.errors import StacklmError
from stacklm.models.ptb import PtbLanguageModel

LEARNING_RATE_RANGE = (1.0, 100.0)
CLIP_RANGE = (1e-5, 1e-3)
DECAY = 1.5
PATIENCE = 2
MAX_EPOCHS = 100


@dataclass(frozen=True)
class SearchDraw:
    learning_rate: float  # η for the mean loss
    clip_per_target: float  # c: the norm is clipped at c · targets in the chunk


def draw_hyperparameters(generator: random.Random) -> SearchDraw:
    """η ~ log-uniform [1, 100], c ~ log-uniform [1e-5, 1e-3]."""

    def log_uniform(low: float, high: float) -> float:
        return math.exp(generator.uniform(math.log(low), math.log(high)))

    return SearchDraw(log_uniform(*LEARNING_RATE_RANGE), log_uniform(*CLIP_RANGE))


def train_epoch(model: PtbLanguageModel, chunks: Sequence[Chunk], optimizer: torch.optim.SGD, clip_per_target: float) -> float:
    """One epoch in order; the mean training NLL per target (nats)."""
    model.train()
    total, count = 0.0, 0
    state = None
    device = model.output.weight.device
    for index, chunk in enumerate(chunks):
        state = model.initial_state(chunk.batch_size) if state is None else state.detach().first_rows(chunk.batch_size)
        targets = chunk.targets.to(device)
        logits, state = model(chunk.inputs.to(device), state)  # (B, T, V)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        value = loss.item()
        if not math.isfinite(value):
            raise StacklmError(f"the training loss is {value} at chunk {index + 1} of {len(chunks)}; the run diverged")
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip_per_target * chunk.num_targets)
        optimizer.step()
        total += value * chunk.num_targets
        count += chunk.num_targets
    return total / count


def evaluate(model: PtbLanguageModel, chunks: Sequence[Chunk]) -> float:
    """Perplexity exp(−Σ log p / N) over every target of the split."""
    model.eval()
    total, count = 0.0, 0
    state = None
    device = model.output.weight.device
    with torch.no_grad():
        for chunk in chunks:
            state = model.initial_state(chunk.batch_size) if state is None else state.first_rows(chunk.batch_size)
            logits, state = model(chunk.inputs.to(device), state)
            total += float(nn.functional.cross_entropy(logits.flatten(0, 1), chunk.targets.to(device).flatten(), reduction="sum"))
            count += chunk.num_targets
    return math.exp(total / count)


@dataclass(frozen=True)
class EpochRecord:
    epoch: int  # 1-based
    learning_rate: float  # η used during the epoch
    train_nll: float  # mean per target, nats
    valid_perplexity: float


@dataclass(frozen=True)
class TrainingResult:
    epochs: tuple[EpochRecord, ...]
    best_epoch: int  # whose parameters the model holds afterwards

    @property
    def best_valid_perplexity(self) -> float:
        return self.epochs[self.best_epoch - 1].valid_perplexity


def train(
    model: PtbLanguageModel, train_chunks: Sequence[Chunk], valid_chunks: Sequence[Chunk], draw: SearchDraw, max_epochs: int = MAX_EPOCHS
) -> TrainingResult:
    """Train until 2 epochs in a row bring no new best validation perplexity; restore the best."""
    optimizer = torch.optim.SGD(model.parameters(), lr=draw.learning_rate)
    schedule = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=1 / DECAY, patience=0)
    records: list[EpochRecord] = []
    best_state, best_epoch, without_best = copy.deepcopy(model.state_dict()), 0, 0
    for epoch in range(1, max_epochs + 1):
        learning_rate = optimizer.param_groups[0]["lr"]
        train_nll = train_epoch(model, train_chunks, optimizer, draw.clip_per_target)
        perplexity = evaluate(model, valid_chunks)
        records.append(EpochRecord(epoch, learning_rate, train_nll, perplexity))
        schedule.step(perplexity)
        if best_epoch == 0 or perplexity < records[best_epoch - 1].valid_perplexity:
            best_state, best_epoch, without_best = copy.deepcopy(model.state_dict()), epoch, 0
        else:
            without_best += 1
            if without_best == PATIENCE:
                break
    model.load_state_dict(best_state)
    return TrainingResult(tuple(records), best_epoch)
