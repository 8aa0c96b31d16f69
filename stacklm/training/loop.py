"""The training loop shared by every schedule (DuSell & Cotterell (2025) App. D; DuSell & Chiang (2022) App. 8, App. 10).

What it trains on is a ``TrainingData`` (``stacklm.training.sources``), which makes its steps:
strings (the tasks, the CFLs; on CUDA replayed from a CUDA graph per padded batch shape,
``stacklm.training.cuda_graph``) or a PTB stream's truncated-BPTT chunks (eager). Per batch, one
step without host work (``stacklm.training.step``): the data's mean loss, backward, L2 clipping
of the global gradient norm (times the batch's tokens with ``clip_per_token``), an Adam or SGD
step. The steps' losses stay on the device and are
read back together: before each checkpoint, before a requested stop saves the state, when a
progress line or ``after_step`` comes, at the end, and at least every 256 steps. A non-finite loss
stops the run at that reading, ``TrainingDiverged`` naming the first step whose loss was
non-finite (its epoch and batch): the steps after it, up to the reading, train on non-finite
values, and nothing of them is saved or scored. With ``divergence="stop"`` the losses are read
after every step, and a non-finite one ends the run there instead, recorded, its best parameters
kept. At each checkpoint (every
``examples_per_checkpoint`` training examples, the surplus carrying over, or at each epoch's
end) the validation cross-entropy per token (EOS counted; its exponential, the perplexity, with
``validation_metric="perplexity"``) drives the schedule and early
stopping; the best parameters are kept, and the whole training state is written atomically
to ``checkpoint_path``: model, optimizer, schedule, counters, position in the epoch, RNG
states and the learning curve so far. A ``checkpoint_scores`` callback, when given, also scores
the model at each checkpoint (the generalization curves: accuracies on fixed subsets of the
test and generalization sets); its values join the curve and never steer training. An ``after_step``
callback, when given, is called before the first optimizer step of a fresh run and after every
optimizer step, with the model in eval mode and
without gradients (a look at the model in training: DuSell & Chiang (2022)'s Figure 2 logs the stack actions
every 100 updates); the rows it returns are kept in the training state, so a resumed run keeps
those of its earlier sessions, and they never steer training either. The same call after a kill continues from there and
gives the same result as a run that was never interrupted; a requested stop (SIGTERM, sent
by SLURM before a time limit) saves the state at the current step first. After the last epoch a final
checkpoint scores the batches trained since the previous one, so that a short run (the
hyperparameter search's 5 epochs) is judged on all of its training.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from stacklm.errors import StacklmError, located
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.config import TrainConfig
from stacklm.training.progress import Progress
from stacklm.training.schedule import ScheduleState, after_checkpoint, is_new_best, perplexity, should_stop
from stacklm.training.sources import TrainingData
from stacklm.training.step import LossLedger, StepPlace


class TrainingDiverged(StacklmError):
    """The loss became NaN or infinite."""


class TrainingInterrupted(StacklmError):
    """A stop was requested (SIGTERM before a cluster's time limit); the state was saved first."""


class StopRequest:
    """Set by a signal: the loop then saves its whole state after the current step and stops.

    The state between two checkpoints is as complete as at a checkpoint (position in the epoch,
    counters, optimizer, RNG states), so the resumed run still equals an uninterrupted one.
    """

    def __init__(self) -> None:
        self.reason: str | None = None

    def install(self, signals: Sequence[signal.Signals] = (signal.SIGTERM,)) -> None:
        for number in signals:
            signal.signal(number, self._handle)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        self.reason = signal.Signals(number).name


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
AfterStep = Callable[[int, int], Sequence[Mapping[str, Any]]]  # (step, 1-based epoch) → rows to keep


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


def train(
    model: nn.Module,
    data: TrainingData,
    config: TrainConfig,
    *,
    checkpoint_path: str | Path | None = None,
    fingerprint: str = "",
    device: torch.device | str = "cpu",
    progress: Progress | None = None,
    stop_request: StopRequest | None = None,
    checkpoint_scores: CheckpointScores | None = None,
    after_step: AfterStep | None = None,
    backend: dict[str, str] | None = None,
    resume_other_backend: bool = False,
    cuda_graphs: bool = True,
) -> TrainResult:
    """Train ``model`` (already initialised) on ``data`` and leave the best checkpoint's parameters
    in it (the initial ones when a run stopped by divergence had none).

    ``fingerprint`` identifies the run (config, seed, data); a checkpoint written under another
    fingerprint is refused rather than resumed. ``backend`` (``stacklm.kernels.backend.record``:
    the implementation the model runs on) is saved with the state; a state saved under another
    backend is refused unless ``resume_other_backend`` (its dropout masks and rounding would
    differ from there on; a state that names none resumes). When ``stop_request`` is set, the state is saved
    after the current step and ``TrainingInterrupted`` is raised. ``checkpoint_scores()``, called
    with the model in eval mode and without gradients, adds its values to each checkpoint's record;
    ``after_step(step, epoch)``, called likewise after each optimizer step and once before the
    first (step 0, the initial parameters, when the run starts afresh), returns rows that the
    result's ``step_rows`` keeps (saved with the training state, so a resumed run keeps them).
    ``cuda_graphs``, on CUDA: each padded batch shape's step replays from a CUDA graph
    (``stacklm.training.cuda_graph``; else the eager step runs); the CPU always runs the eager step.
    """
    device = torch.device(device)
    progress = progress if progress is not None else Progress()
    model.to(device)
    optimizer = _optimizer(model, config, device)
    state = TrainingState(schedule=ScheduleState.initial(config), best_parameters=_copy(model.state_dict()))
    carried: Sequence[Tensor] | None = None  # the state a run stopped within an epoch carries into its next batch
    if checkpoint_path is not None and Path(checkpoint_path).exists():
        state, carried = _restore(checkpoint_path, fingerprint, model, optimizer, device, None if resume_other_backend else backend)
        checkpoints = len(state.curve)
        progress.line(f"resuming from {checkpoint_path}: epoch {state.epoch + 1}, batch {state.batch_index + 1}, step {state.step}, "
                      f"after {checkpoints} checkpoint{'' if checkpoints == 1 else 's'}{':' if checkpoints else ''}")
        for record in state.curve:
            progress.line(f"  {record.describe()}")
    session_start = time.monotonic()
    wall_before = state.wall_time_s
    step = data.steps(model, optimizer, config, device, graphs=cuda_graphs)
    ledger = LossLedger()
    pending_tokens: list[int] = []  # the scored tokens of the steps whose losses are pending, in order

    def read_losses() -> float:
        """Read the pending losses into the state (a non-finite one ends the run naming its step); the last one."""
        read, tokens = ledger.read(), list(pending_tokens)
        pending_tokens.clear()
        for (place, value), count in zip(read, tokens):
            if not math.isfinite(value):
                raise TrainingDiverged(
                    f"loss is {value} at {place}"
                    + (f"; the last checkpoint is {checkpoint_path}" if state.curve and checkpoint_path is not None else "")
                )
            state.loss_since_checkpoint += value * count if config.train_loss == "per_token" else value
        return math.nan if ledger.last is None else ledger.last

    def checkpoint() -> None:
        read_losses()
        state.wall_time_s = wall_before + time.monotonic() - session_start
        summary = _take_checkpoint(model, optimizer, state, data, config, checkpoint_scores)
        if checkpoint_path is not None:
            _save(checkpoint_path, fingerprint, model, optimizer, state, backend, data.carried() if state.batch_index else None)
        progress.line(summary)

    def log_step() -> None:
        if after_step is not None:
            model.eval()
            with torch.no_grad():
                state.step_rows.extend(dict(row) for row in after_step(state.step, state.epoch + 1))

    if state.step == 0:  # a fresh run: the initial parameters are step 0
        log_step()
    while not state.stopped_early and not state.diverged and state.epoch < config.max_epochs:
        groups = _epoch_batches(data, model, state, carried, checkpoint_path)
        carried = None
        progress.start_epoch(state.epoch + 1, state.batch_index, len(groups))
        for index in range(state.batch_index, len(groups)):
            model.train()
            state.step += 1
            batch = step(groups[index])
            ledger.add(StepPlace(state.step, state.epoch + 1, index + 1, len(groups)), batch.loss)
            pending_tokens.append(batch.tokens)
            if after_step is not None or ledger.full or config.divergence == "stop":
                try:
                    read_losses()
                except TrainingDiverged as error:
                    if config.divergence == "fail":
                        raise
                    state.wall_time_s = wall_before + time.monotonic() - session_start
                    _record_divergence(state)
                    if checkpoint_path is not None:
                        _save(checkpoint_path, fingerprint, model, optimizer, state, backend, None)
                    progress.line(f"{error}: the run diverged; stopping, the best parameters restored")
                    break
            log_step()
            state.batch_index = index + 1
            state.examples_seen += batch.examples
            state.examples_since_checkpoint += batch.examples
            state.batches_since_checkpoint += 1
            state.tokens_since_checkpoint += batch.tokens
            state.tokens += batch.tokens
            progress.update(read_losses, batch.tokens)
            if config.examples_per_checkpoint is not None and state.examples_since_checkpoint >= config.examples_per_checkpoint:
                state.examples_since_checkpoint -= config.examples_per_checkpoint
                checkpoint()
                if state.stopped_early:
                    break
            if stop_request is not None and stop_request.reason is not None:
                read_losses()
                state.wall_time_s = wall_before + time.monotonic() - session_start
                if checkpoint_path is not None:
                    _save(checkpoint_path, fingerprint, model, optimizer, state, backend, data.carried())
                progress.close()
                raise TrainingInterrupted(
                    f"{stop_request.reason} at step {state.step} (epoch {state.epoch + 1}, batch {index + 1} of {len(groups)})"
                    + (f"; the training state is saved in {checkpoint_path}: the same command continues" if checkpoint_path is not None else "")
                )
        else:
            state.epoch += 1
            state.batch_index = 0
            last_epoch = state.epoch == config.max_epochs
            if config.examples_per_checkpoint is None or (last_epoch and state.batches_since_checkpoint > 0):
                checkpoint()
    read_losses()
    progress.close()
    return _result(model, state, wall_before + time.monotonic() - session_start)


def _result(model: nn.Module, state: TrainingState, wall_time_s: float) -> TrainResult:
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


def _optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    # fused: one kernel for all parameters, a quarter of the default's time; capturable on CUDA, for its graphs
    return torch.optim.Adam(model.parameters(), lr=config.learning_rate, fused=True, capturable=device.type == "cuda")


def _copy(parameters: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in parameters.items()}


def _epoch_batches(data: TrainingData, model: nn.Module, state: TrainingState, carried: Sequence[Tensor] | None, path: str | Path | None) -> Sequence[Any]:
    """The batches of the current epoch from ``data``, positioned after those already trained; a
    carried state of the saved run at ``path`` that does not fit the model is refused naming the file."""
    try:
        return data.start_epoch(model, state.epoch, state.batch_index, carried)
    except StacklmError as error:
        if carried is None or path is None:
            raise
        raise located(path, None, f"not the training state of this run's model ({error}); {checkpoint_file.ADVICE}") from None


def _record_divergence(state: TrainingState) -> None:
    """End the run at a non-finite training loss: a last record with a NaN training loss and an
    infinite validation cross-entropy, never the best."""
    state.curve.append(
        CheckpointRecord(
            checkpoint=len(state.curve) + 1,
            epoch=state.epoch + 1,
            step=state.step,
            examples_seen=state.examples_seen,
            learning_rate_used=state.schedule.learning_rate,
            train_loss=math.nan,
            validation_cross_entropy=math.inf,
            is_best=False,
        )
    )
    state.diverged = True


def _take_checkpoint(
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
        state.best_parameters = _copy(model.state_dict())
    state.schedule = after_checkpoint(state.schedule, metric, config)
    for group in optimizer.param_groups:
        group["lr"] = state.schedule.learning_rate
    state.stopped_early = should_stop(state.schedule, config)
    state.batches_since_checkpoint = 0
    state.tokens_since_checkpoint = 0
    state.loss_since_checkpoint = 0.0
    return f"{record.describe()} next learning rate {state.schedule.learning_rate:.3g}" + (" — stopping early" if state.stopped_early else "")


def _save(
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


def _restore(
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
