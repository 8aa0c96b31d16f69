"""A training run's state (DuSell & Cotterell (2025) App. D; DuSell & Chiang (2022) App. 8): the
learning curve's records, what a resumed run needs besides its model and optimizer, a checkpoint
(score the validation set, advance the schedule, keep the best parameters), the state's file, and
the result of an ended run. ``loop.train`` drives one run through them, ``grouped.train_grouped``
several runs at once; each run's file is the same either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from stacklm.errors import StacklmError, located
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.config import TrainConfig
from stacklm.training.schedule import ScheduleState, after_checkpoint, is_new_best, perplexity, should_stop
from stacklm.training.sources import TrainingData


@dataclass(frozen=True)
class CheckpointRecord:
    """One row of the learning curve."""

    checkpoint: int  # 1-based
    epoch: int  # 1-based epoch in which the checkpoint was taken
    step: int  # optimizer steps so far
    examples_seen: int  # training examples so far
    learning_rate_used: float  # the learning rate of the steps before this checkpoint
    train_loss: float  # mean batch loss since the previous checkpoint
    validation_cross_entropy: float  # nats per token, EOS included
    is_best: bool
    scores: dict[str, float] = field(default_factory=dict)  # checkpoint_scores of the model at this checkpoint

    def describe(self) -> str:
        """The checkpoint's line in the training log."""
        return (
            f"checkpoint {self.checkpoint}: epoch {self.epoch} step {self.step} train loss {self.train_loss:.4f} "
            f"validation cross-entropy {self.validation_cross_entropy:.4f}{' (best)' if self.is_best else ''} learning rate {self.learning_rate_used:.3g}"
            + "".join(f" {name} {value:.3f}" for name, value in self.scores.items())
        )


CheckpointScores = Callable[[], Mapping[str, float]]  # scores the model being trained


@dataclass
class TrainingState:
    """Everything a resumed run needs besides the model and optimizer."""

    schedule: ScheduleState
    epoch: int = 0  # completed epochs
    batch_index: int = 0  # batches of the current epoch already trained
    step: int = 0
    examples_seen: int = 0
    examples_since_checkpoint: int = 0
    batches_since_checkpoint: int = 0
    tokens_since_checkpoint: int = 0
    loss_since_checkpoint: float = 0.0  # Σ batch losses (per_batch), or Σ batch loss · tokens (per_token)
    tokens: int = 0
    wall_time_s: float = 0.0
    stopped_early: bool = False
    diverged: bool = False  # a non-finite training loss ended the run (divergence="stop")
    curve: list[CheckpointRecord] = field(default_factory=list)
    best_parameters: dict[str, Tensor] | None = None  # the best checkpoint's; before the first, the initial ones
    step_rows: list[dict[str, Any]] = field(default_factory=list)  # what after_step returned, in order


@dataclass(frozen=True)
class TrainResult:
    curve: tuple[CheckpointRecord, ...]
    best_validation_cross_entropy: float
    stopped_early: bool
    epochs: int
    steps: int
    wall_time_s: float
    tokens_per_s: float
    step_rows: tuple[dict[str, Any], ...] = ()  # the rows of after_step, over every session of the run
    diverged: bool = False  # a non-finite training loss ended the run (divergence="stop"): its last record


def final_result(model: nn.Module, state: TrainingState, wall_time_s: float) -> TrainResult:
    """The ended run's result, its best checkpoint's parameters loaded into ``model``."""
    if state.best_parameters is None:
        raise StacklmError("training ended without a checkpoint")
    model.load_state_dict(state.best_parameters)
    return TrainResult(
        curve=tuple(state.curve),
        best_validation_cross_entropy=min(record.validation_cross_entropy for record in state.curve),
        stopped_early=state.stopped_early,
        epochs=state.epoch,
        steps=state.step,
        wall_time_s=wall_time_s,
        tokens_per_s=state.tokens / max(wall_time_s, 1e-9),
        step_rows=tuple(state.step_rows),
        diverged=state.diverged,
    )


def copy_parameters(parameters: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in parameters.items()}


def take_checkpoint(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: TrainingState,
    data: TrainingData,
    config: TrainConfig,
    checkpoint_scores: CheckpointScores | None,
) -> str:
    """Score the validation set, advance the schedule, keep the best parameters; a summary line."""
    cross_entropy = data.validation_cross_entropy(model)
    scores: dict[str, float] = {}
    if checkpoint_scores is not None:
        model.eval()
        with torch.no_grad():
            scores = {name: float(value) for name, value in checkpoint_scores().items()}
    metric = perplexity(cross_entropy) if config.validation_metric == "perplexity" else cross_entropy
    new_best = is_new_best(state.schedule, metric)
    record = CheckpointRecord(
        checkpoint=len(state.curve) + 1,
        epoch=state.epoch if state.batch_index == 0 else state.epoch + 1,
        step=state.step,
        examples_seen=state.examples_seen,
        learning_rate_used=state.schedule.learning_rate,
        train_loss=state.loss_since_checkpoint / max(1, state.tokens_since_checkpoint if config.train_loss == "per_token" else state.batches_since_checkpoint),
        validation_cross_entropy=cross_entropy,
        is_best=new_best,
        scores=scores,
    )
    state.curve.append(record)
    if new_best:
        state.best_parameters = copy_parameters(model.state_dict())
    state.schedule = after_checkpoint(state.schedule, metric, config)
    for group in optimizer.param_groups:
        group["lr"] = state.schedule.learning_rate
    state.stopped_early = should_stop(state.schedule, config)
    state.batches_since_checkpoint = 0
    state.tokens_since_checkpoint = 0
    state.loss_since_checkpoint = 0.0
    return f"{record.describe()} next learning rate {state.schedule.learning_rate:.3g}" + (" — stopping early" if state.stopped_early else "")


def save_state(
    path: str | Path,
    fingerprint: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: TrainingState,
    backend: dict[str, str] | None,
    carried: Sequence[Tensor] | None,
) -> None:
    """The whole training state at ``path``, with the state ``carried`` into the next batch (the
    data's, when the run stops within an epoch); a write that fails (a full disk) leaves the state
    saved before as it was, and its error says so."""
    kept_apart = ("schedule", "curve", "best_parameters", "step_rows")
    counters = {item.name: getattr(state, item.name) for item in fields(state) if item.name not in kept_apart}
    payload = {
        "fingerprint": fingerprint,
        "backend": backend,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": asdict(state.schedule),
        "counters": counters,
        "curve": [asdict(record) for record in state.curve],
        "best_parameters": state.best_parameters,
        "step_rows": state.step_rows,
        "carried": None if carried is None else list(carried),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    try:
        checkpoint_file.save(path, payload)
    except StacklmError as error:
        raise StacklmError(f"{error}; the training state saved before (if any) is kept as it was: once the file can be written, "
                           "the same command continues from it") from None


def restore_state(
    path: str | Path, fingerprint: str, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, backend: dict[str, str] | None
) -> tuple[TrainingState, list[Tensor] | None]:
    """The training state saved at ``path`` and the state it carries into its next batch, its model
    and optimizer states loaded into ``model`` and ``optimizer``; a state of another run, one saved under a backend other than ``backend`` (None:
    any), or one that does not fit this run's model (a missing key, a reshaped tensor), is a
    one-line ``StacklmError`` naming the file."""
    payload: dict[str, Any] = checkpoint_file.load(path)
    if "fingerprint" not in payload:
        raise located(path, None, "this checkpoint holds no fingerprint, so no run can tell it as its own; delete it to start this run afresh")
    if payload["fingerprint"] != fingerprint:
        raise StacklmError(
            f"{path}: this checkpoint belongs to another run (its fingerprint differs from this run's config, seed and data); "
            "delete it to start this run afresh"
        )
    saved_backend = payload.get("backend")  # None in states saved before backends were recorded
    if backend is not None and saved_backend is not None and saved_backend["backend"] != backend["backend"]:
        raise StacklmError(
            f"{path}: this run was trained on the {saved_backend['backend']} backend, and this process runs {backend['backend']}, "
            f"whose dropout masks and rounding differ; resume it with --backend {saved_backend['backend']}, "
            "or with --resume-other-backend to continue on this one"
        )
    checkpoint_file.load_parameters(model, payload.get("model"), path)
    try:
        model.to(device)
        optimizer.load_state_dict(payload["optimizer"])
        state = TrainingState(
            schedule=ScheduleState(**payload["schedule"]),
            curve=[CheckpointRecord(**record) for record in payload["curve"]],
            best_parameters=payload["best_parameters"],
            step_rows=payload.get("step_rows", []),  # absent from states saved before after_step existed
            **payload["counters"],
        )
        torch.set_rng_state(payload["rng_cpu"])
        if payload["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["rng_cuda"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise located(path, None, f"not the training state of this run's model ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                                  f"{checkpoint_file.ADVICE}") from None
    return state, payload.get("carried")  # absent from states saved before the data carried state
