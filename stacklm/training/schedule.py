"""The learning-rate schedule and early stopping, as a pure function of the checkpoints so far.

At each checkpoint the validation metric m (cross-entropy per token, or perplexity for CFL):

- is a new best when m < best (strict); ``checkpoints_without_best`` counts the consecutive
  checkpoints that were not, and the run stops when it reaches ``early_stopping_patience``;
- is an improvement for the learning rate when m < plateau_best · (1 − threshold), as in
  torch's ``ReduceLROnPlateau(mode="min", threshold_mode="rel")``; after
  ``learning_rate_patience`` consecutive checkpoints without one, the learning rate is
  multiplied by ``learning_rate_decay_factor`` and that count restarts from zero.

With App. D's values (threshold 0, patience 2, stop at 3) the rate is halved at the 2nd
consecutive checkpoint without a new best, and the run stops at the 3rd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from stacklm.training.config import TrainConfig


@dataclass(frozen=True)
class ScheduleState:
    learning_rate: float
    best: float = math.inf
    checkpoints_without_best: int = 0
    plateau_best: float = math.inf
    checkpoints_without_improvement: int = 0

    @classmethod
    def initial(cls, config: TrainConfig) -> ScheduleState:
        return cls(learning_rate=config.learning_rate)


def perplexity(cross_entropy: float) -> float:
    """exp(cross-entropy), the validation metric of App. 8 and App. 10; ∞ past the largest float
    (a validation cross-entropy above 709 nats, as a learning rate drawn too large gives)."""
    try:
        return math.exp(cross_entropy)
    except OverflowError:
        return math.inf


def is_new_best(state: ScheduleState, metric: float) -> bool:
    return metric < state.best


def after_checkpoint(state: ScheduleState, metric: float, config: TrainConfig) -> ScheduleState:
    """The schedule after a checkpoint whose validation metric is ``metric``."""
    if is_new_best(state, metric):
        state = replace(state, best=metric, checkpoints_without_best=0)
    else:
        state = replace(state, checkpoints_without_best=state.checkpoints_without_best + 1)
    if metric < state.plateau_best * (1 - config.improvement_threshold):
        return replace(state, plateau_best=metric, checkpoints_without_improvement=0)
    without_improvement = state.checkpoints_without_improvement + 1
    if without_improvement >= config.learning_rate_patience:
        return replace(
            state,
            learning_rate=state.learning_rate * config.learning_rate_decay_factor,
            checkpoints_without_improvement=0,
        )
    return replace(state, checkpoints_without_improvement=without_improvement)


def should_stop(state: ScheduleState, config: TrainConfig) -> bool:
    return state.checkpoints_without_best >= config.early_stopping_patience
