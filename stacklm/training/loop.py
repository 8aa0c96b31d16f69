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
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from stacklm.errors import StacklmError, located
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.config import TrainConfig
from stacklm.training.progress import Progress
from stacklm.training.run_state import (
    CheckpointRecord,
    CheckpointScores,
    TrainingState,
    TrainResult,
    copy_parameters,
    final_result,
    restore_state,
    save_state,
    take_checkpoint,
)
from stacklm.training.schedule import ScheduleState
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


AfterStep = Callable[[int, int], Sequence[Mapping[str, Any]]]  # (step, 1-based epoch) → rows to keep


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
    state = TrainingState(schedule=ScheduleState.initial(config), best_parameters=copy_parameters(model.state_dict()))
    carried: Sequence[Tensor] | None = None  # the state a run stopped within an epoch carries into its next batch
    if checkpoint_path is not None and Path(checkpoint_path).exists():
        state, carried = restore_state(checkpoint_path, fingerprint, model, optimizer, device, None if resume_other_backend else backend)
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
        summary = take_checkpoint(model, optimizer, state, data, config, checkpoint_scores)
        if checkpoint_path is not None:
            save_state(checkpoint_path, fingerprint, model, optimizer, state, backend, data.carried() if state.batch_index else None)
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
                        save_state(checkpoint_path, fingerprint, model, optimizer, state, backend, None)
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
                    save_state(checkpoint_path, fingerprint, model, optimizer, state, backend, data.carried())
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
    return final_result(model, state, wall_before + time.monotonic() - session_start)


def _optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    # fused: one kernel for all parameters, a quarter of the default's time; capturable on CUDA, for its graphs
    return torch.optim.Adam(model.parameters(), lr=config.learning_rate, fused=True, capturable=device.type == "cuda")


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
