"""What one training run is told: the loop's schedule (``TrainConfig``), built from the
``training`` section of the settings and a trial's hyperparameters.

Three schedules run through the same loop:

- DuSell & Cotterell (2025) App. D (syntactic transformations): batches under a token budget B, Adam, L2
  clipping at 10, a checkpoint every 80 000 training examples, learning rate × 0.5 at the
  2nd consecutive checkpoint without a new best validation cross-entropy, stop at the 3rd;
- DuSell & Chiang (2022) App. 8 (CFL tasks): batches of 10 strings of one length, Adam, clipping at 5, a
  checkpoint every epoch, ``ReduceLROnPlateau(factor=0.9, patience=5)`` on the validation
  perplexity (relative threshold 1e-4), stop after 10 epochs without a new best, 200 epochs;
- DuSell & Chiang (2022) App. 10 (PTB): truncated-BPTT chunks (``stacklm.training.chunks``),
  plain SGD at the drawn η, the norm clipped at c · the chunk's targets, a checkpoint every epoch,
  η ÷ 1.5 after each epoch without a relative gain of 1e-4 in validation perplexity
  (``ReduceLROnPlateau(factor=1/1.5, patience=0)`` of the released code), stop after 2 epochs in
  a row without a new best, 100 epochs; a non-finite training loss (η drawn too large) ends the
  run, not the job.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from stacklm.errors import StacklmError
from stacklm.models.options import PARAMETER_BUDGET


# What the token budget B counts per string of a batch padded to length n (``batching``):
# "raw", n (the authors' code, the default); "scored", n + 1 with EOS (the paper's App. D text).
TokenBudget = Literal["raw", "scored"]
# The optimizer: Adam (App. D, App. 8) or plain SGD (App. 10).
Optimizer = Literal["adam", "sgd"]
# A checkpoint's training loss: the mean of its batches' losses (App. D, App. 8), or of their
# tokens' (App. 10: the epoch's NLL per target, each chunk's mean weighted by its targets).
TrainLoss = Literal["per_batch", "per_token"]
# A non-finite training loss: "fail" the run (TrainingDiverged), or "stop" it there, recorded as
# a checkpoint with a NaN training loss and an infinite validation cross-entropy, never the best,
# the best parameters before it kept (App. 10's search spans learning rates that diverge).
Divergence = Literal["fail", "stop"]
_APP_10_ONLY = ("clip_per_token", "optimizer", "train_loss", "divergence")  # recorded only where set (TrainConfig.record)


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float  # initial learning rate of the optimizer
    # How strings are batched (``stacklm.training.strings.StringData``, which needs one of the
    # two): B, a budget per batch counted as token_budget says, or same-length batches of this many
    # strings (CFL); both None where the batches are made otherwise (PTB's chunks).
    tokens_per_batch: int | None
    strings_per_batch: int | None = None
    max_epochs: int = 1000
    examples_per_checkpoint: int | None = 80_000  # None: a checkpoint at the end of every epoch
    gradient_clip_norm: float = 10.0
    clip_per_token: bool = False  # clip at gradient_clip_norm · the batch's scored tokens (App. 10's c · targets)
    optimizer: Optimizer = "adam"
    train_loss: TrainLoss = "per_batch"
    divergence: Divergence = "fail"
    learning_rate_decay_factor: float = 0.5
    # Consecutive checkpoints without improvement that multiply the learning rate by the factor
    # (torch's ReduceLROnPlateau patience + 1): App. D "after 2 checkpoints"; CFL patience 5 → 6.
    learning_rate_patience: int = 2
    improvement_threshold: float = 0.0  # relative: better means metric < best · (1 − threshold)
    early_stopping_patience: int = 3  # stop at this many consecutive checkpoints without a new best
    validation_metric: Literal["cross_entropy", "perplexity"] = "cross_entropy"
    token_budget: TokenBudget = "raw"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise StacklmError(f"learning_rate must be a positive number, got {self.learning_rate!r}")
        if self.tokens_per_batch is not None and self.strings_per_batch is not None:
            raise StacklmError("at most one of tokens_per_batch and strings_per_batch may be set")
        for name in ("tokens_per_batch", "strings_per_batch", "examples_per_checkpoint"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise StacklmError(f"{name} must be at least 1, got {value!r}")
        for name in ("max_epochs", "learning_rate_patience", "early_stopping_patience"):
            if getattr(self, name) < 1:
                raise StacklmError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if not 0 < self.learning_rate_decay_factor <= 1:
            raise StacklmError(f"learning_rate_decay_factor must lie in (0, 1], got {self.learning_rate_decay_factor!r}")
        if not self.gradient_clip_norm > 0:
            raise StacklmError(f"gradient_clip_norm must be positive, got {self.gradient_clip_norm!r}")
        if not 0 <= self.improvement_threshold < 1:
            raise StacklmError(f"improvement_threshold must lie in [0, 1), got {self.improvement_threshold!r}")

    def record(self) -> dict[str, Any]:
        """The fields as a run records them (its settings, its fingerprint): those of App. 10 alone
        (``clip_per_token``, ``optimizer``, ``train_loss``, ``divergence``) only where set, so that
        the runs of App. D and App. 8 keep the fingerprints and records of the commits before them."""
        defaults = {item.name: item.default for item in fields(self)}
        return {name: value for name, value in asdict(self).items() if name not in _APP_10_ONLY or value != defaults[name]}


def cfl_train_config(learning_rate: float) -> TrainConfig:
    """The CFL schedule of DuSell & Chiang (2022) App. 8 (``docs/design/cfl-and-ptb.md#cfl-training``)."""
    return TrainConfig(
        learning_rate=learning_rate,
        tokens_per_batch=None,
        strings_per_batch=10,
        max_epochs=200,
        examples_per_checkpoint=None,
        gradient_clip_norm=5.0,
        learning_rate_decay_factor=0.9,
        learning_rate_patience=6,
        improvement_threshold=1e-4,
        early_stopping_patience=10,
        validation_metric="perplexity",
    )


def ptb_train_config(learning_rate: float, clip_per_target: float, max_epochs: int) -> TrainConfig:
    """The PTB schedule of DuSell & Chiang (2022) App. 10 for a restart's drawn η and c
    (``docs/design/cfl-and-ptb.md#ptb-training``): the learning-rate rule is torch's
    ``ReduceLROnPlateau(mode="min", factor=1/1.5, patience=0)`` (relative threshold 1e-4) on the
    validation perplexity, as ``stacklm.training.schedule.after_checkpoint`` computes it."""
    return TrainConfig(
        learning_rate=learning_rate,
        tokens_per_batch=None,
        max_epochs=max_epochs,
        examples_per_checkpoint=None,
        gradient_clip_norm=clip_per_target,
        clip_per_token=True,
        optimizer="sgd",
        train_loss="per_token",
        divergence="stop",
        learning_rate_decay_factor=1 / 1.5,
        learning_rate_patience=1,
        improvement_threshold=1e-4,
        early_stopping_patience=2,
        validation_metric="perplexity",
    )


@dataclass(frozen=True)
class Hyperparameters:
    """One trial's ``HP.json``: ``max_epochs`` null means train to convergence."""

    learning_rate: float
    tokens_per_batch: int
    max_epochs: int | None


@dataclass(frozen=True)
class TrainingSettings:
    """The ``training`` section of the settings (App. D values by default)."""

    parameter_budget: int = PARAMETER_BUDGET  # every model is sized to about this many parameters
    max_epochs: int = 1000  # the cap when a trial trains to convergence
    examples_per_checkpoint: int = 80_000
    gradient_clip_norm: float = 10.0
    learning_rate_decay_factor: float = 0.5
    learning_rate_patience: int = 2
    early_stopping_patience: int = 3
    progress_interval_s: float = 60.0  # seconds between plain progress lines when stderr is not a terminal
    token_budget: TokenBudget = "raw"  # what B counts: raw lengths (authors' code) or EOS too (paper text)

    def train_config(self, hyperparameters: Hyperparameters) -> TrainConfig:
        return TrainConfig(
            learning_rate=hyperparameters.learning_rate,
            tokens_per_batch=hyperparameters.tokens_per_batch,
            max_epochs=hyperparameters.max_epochs if hyperparameters.max_epochs is not None else self.max_epochs,
            examples_per_checkpoint=self.examples_per_checkpoint,
            gradient_clip_norm=self.gradient_clip_norm,
            learning_rate_decay_factor=self.learning_rate_decay_factor,
            learning_rate_patience=self.learning_rate_patience,
            early_stopping_patience=self.early_stopping_patience,
            token_budget=self.token_budget,
        )
