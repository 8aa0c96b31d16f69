"""Several training runs of one architecture, trained together one step at a time: on a GPU a
small model's step costs its kernel launches, so K runs in one vmapped forward and backward
(``grouped_step``) cost about what one does.

Each run (:class:`GroupedRun`) is trained as ``loop.train`` trains it alone (DuSell & Cotterell
(2025) App. D; DuSell & Chiang (2022) App. 8), and ends with the same curve and parameters
within float tolerance: its own data order (``epoch_groups`` of its seed), dropout masks (its
generator state, ``run_dropout``), learning rate, gradient clipping and Adam step, checkpoints,
schedule and early stopping, training-state file (resumable alone or in a group, the same
format) and result. Only the forward and backward are shared. At each step every run still
training takes its next batch; a run that ends (early stopping, its last epoch, a diverged loss,
a state it cannot write) leaves the group, and the others go on unchanged.

On CUDA a run alone replays CUDA graphs of its batches padded to buckets
(``stacklm.training.cuda_graph``); its masks are then drawn for the buckets' shapes, and so are
they here (``cuda_graphs``). The grouped step itself runs eagerly.

What can be grouped: runs of one architecture and one set of model options, on the torch
backend (the PyTorch implementations; the compiled CPU kernels do not vmap). Learning rates,
token budgets B, epochs and schedules may differ: a step pads the runs' batches to the largest
(B, n) among them, so runs of similar budgets waste least (a final's seeds share theirs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from stacklm.errors import StacklmError
from stacklm.training.batching import Batch, epoch_groups, make_batch
from stacklm.training.config import TrainConfig
from stacklm.training.grouped_step import GroupedStep
from stacklm.training.loop import AfterStep, StopRequest, TrainingDiverged, TrainingInterrupted
from stacklm.training.progress import Progress
from stacklm.training.run_dropout import RunRandomness
from stacklm.training.run_state import (
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
from stacklm.training.strings import StringData


@dataclass
class GroupedRun:
    """One run of a group: what ``loop.train`` takes for it alone. ``randomness`` is the state of
    torch's generators it starts from (``RunRandomness.seeded(seed, device)``, as
    ``torch.manual_seed(seed)`` before ``train``); it draws the run's dropout masks and is saved
    with its state."""

    model: nn.Module
    training: Sequence[Sequence[int]]
    validation: Sequence[Sequence[int]]
    config: TrainConfig
    seed: int
    eos_index: int
    randomness: RunRandomness
    checkpoint_path: str | Path | None = None
    fingerprint: str = ""
    progress: Progress = field(default_factory=Progress)
    checkpoint_scores: CheckpointScores | None = None
    after_step: AfterStep | None = None
    backend: dict[str, str] | None = None
    resume_other_backend: bool = False


class _Lane:
    """A run of the group between its steps: ``loop.train``'s bookkeeping, one step at a time."""

    def __init__(self, run: GroupedRun, device: torch.device) -> None:
        self.data = StringData(run.training, run.validation, run.config, seed=run.seed, eos_index=run.eos_index)
        self.run, self.device = run, device
        run.model.to(device)
        # as loop.train's: capturable on CUDA, where the run alone replays its steps from CUDA graphs
        self.optimizer = torch.optim.Adam(run.model.parameters(), lr=run.config.learning_rate, fused=True, capturable=device.type == "cuda")
        self.lengths = [len(string) for string in run.training]
        self.state = TrainingState(schedule=ScheduleState.initial(run.config), best_parameters=copy_parameters(run.model.state_dict()))
        path = run.checkpoint_path
        if path is not None and Path(path).exists():
            with run.randomness.active():  # the saved generator state becomes the run's
                self.state, _ = restore_state(path, run.fingerprint, run.model, self.optimizer, device, None if run.resume_other_backend else run.backend)
            checkpoints = len(self.state.curve)
            run.progress.line(f"resuming from {path}: epoch {self.state.epoch + 1}, batch {self.state.batch_index + 1}, step {self.state.step}, "
                              f"after {checkpoints} checkpoint{'' if checkpoints == 1 else 's'}{':' if checkpoints else ''}")
            for record in self.state.curve:
                run.progress.line(f"  {record.describe()}")
        self.session_start = time.monotonic()
        self.wall_before = self.state.wall_time_s
        self.groups: list[list[int]] | None = None  # the batches of the current epoch
        if self.state.step == 0:  # a fresh run: the initial parameters are step 0
            self._log_step()

    def next_batch(self) -> Batch | None:
        """The run's next batch, ending epochs (and checkpointing) on the way; None once it has ended."""
        run, state = self.run, self.state
        with run.randomness.active():
            while not state.stopped_early and state.epoch < run.config.max_epochs:
                if self.groups is None:
                    self.groups = epoch_groups(self.lengths, run.config, run.seed, state.epoch)
                    run.progress.start_epoch(state.epoch + 1, state.batch_index, len(self.groups))
                if state.batch_index < len(self.groups):
                    return make_batch(run.training, self.groups[state.batch_index], run.eos_index).to(self.device)
                state.epoch += 1
                state.batch_index = 0
                self.groups = None
                last_epoch = state.epoch == run.config.max_epochs
                if run.config.examples_per_checkpoint is None or (last_epoch and state.batches_since_checkpoint > 0):
                    self._checkpoint()
        return None

    def count_step(self, loss_value: float) -> None:
        """The step is taken; a non-finite loss ends the run (``TrainingDiverged``)."""
        state = self.state
        state.step += 1
        if not math.isfinite(loss_value):
            assert self.groups is not None
            path = self.run.checkpoint_path
            raise TrainingDiverged(
                f"loss is {loss_value} at step {state.step} (epoch {state.epoch + 1}, batch {state.batch_index + 1} of {len(self.groups)})"
                + (f"; the last checkpoint is {path}" if state.curve and path is not None else "")
            )

    def finish_step(self, loss_value: float, batch: Batch) -> None:
        """Clip the gradient the grouped backward left in the run's model, take its Adam step, and count the batch."""
        run, state = self.run, self.state
        with run.randomness.active():
            nn.utils.clip_grad_norm_(run.model.parameters(), run.config.gradient_clip_norm)
            self.optimizer.step()
            self._log_step()
            state.batch_index += 1
            state.examples_seen += batch.size
            state.examples_since_checkpoint += batch.size
            state.batches_since_checkpoint += 1
            state.tokens_since_checkpoint += batch.num_tokens
            state.loss_since_checkpoint += loss_value
            state.tokens += batch.num_tokens
            run.progress.update(loss_value, batch.num_tokens)
            every = run.config.examples_per_checkpoint
            if every is not None and state.examples_since_checkpoint >= every:
                state.examples_since_checkpoint -= every
                self._checkpoint()

    def interrupt(self, reason: str) -> str:
        """Save the state of the current step (a stop was requested); what the run's log says of it."""
        state, path = self.state, self.run.checkpoint_path
        assert self.groups is not None
        with self.run.randomness.active():
            state.wall_time_s = self.wall_before + time.monotonic() - self.session_start
            if path is not None:
                save_state(path, self.run.fingerprint, self.run.model, self.optimizer, state, self.run.backend, None)
        message = (f"{reason} at step {state.step} (epoch {state.epoch + 1}, batch {state.batch_index} of {len(self.groups)})"
                   + (f"; the training state is saved in {path}: the same command continues" if path is not None else ""))
        self.run.progress.line(message)
        self.run.progress.close()
        return message

    def result(self) -> TrainResult:
        """The run's result, its best checkpoint's parameters loaded into its model."""
        self.run.progress.close()
        return final_result(self.run.model, self.state, self.wall_before + time.monotonic() - self.session_start)

    def _checkpoint(self) -> None:
        run, state = self.run, self.state
        state.wall_time_s = self.wall_before + time.monotonic() - self.session_start
        summary = take_checkpoint(run.model, self.optimizer, state, self.data, run.config, run.checkpoint_scores)
        if run.checkpoint_path is not None:
            save_state(run.checkpoint_path, run.fingerprint, run.model, self.optimizer, state, run.backend, None)
        run.progress.line(summary)

    def _log_step(self) -> None:
        if self.run.after_step is not None:
            self.run.model.eval()
            with torch.no_grad():
                self.state.step_rows.extend(dict(row) for row in self.run.after_step(self.state.step, self.state.epoch + 1))


def train_group(
    runs: Sequence[GroupedRun], device: torch.device | str = "cpu", stop_request: StopRequest | None = None, cuda_graphs: bool = True
) -> list[TrainResult | StacklmError]:
    """Train ``runs`` (one architecture, each model initialised) together; each ends as ``loop.train``
    would end it alone, its best parameters in its model. Returns, per run in order, its result or
    the ``StacklmError`` that ended it (a diverged loss, a state of another run, …), which stops no
    other run. When ``stop_request`` is set, every run still training saves the state of the
    current step and ``TrainingInterrupted`` is raised. ``cuda_graphs``: as ``loop.train``'s, the
    run alone that each run equals on CUDA (graphed: its masks drawn for its batches' buckets)."""
    device = torch.device(device)
    step = GroupedStep(runs[0].model, bucketed=cuda_graphs and device.type == "cuda")
    outcomes: list[TrainResult | StacklmError | None] = [None] * len(runs)
    lanes: dict[int, _Lane] = {}
    for index, run in enumerate(runs):
        try:
            lanes[index] = _Lane(run, device)
        except StacklmError as error:
            outcomes[index] = error
    while lanes:
        batches: dict[int, Batch] = {}
        for index, lane in list(lanes.items()):
            try:
                batch = lane.next_batch()
                if batch is not None:
                    batches[index] = batch
                    continue
                outcomes[index] = lane.result()
            except StacklmError as error:
                outcomes[index] = error
            del lanes[index]
        if not lanes:
            break
        for index in batches:
            lanes[index].optimizer.zero_grad(set_to_none=True)
        stepping = list(batches)
        losses = step.losses([lanes[index].run.model for index in stepping], [batches[index] for index in stepping],
                             [lanes[index].run.randomness for index in stepping])  # (K,)
        values = losses.tolist()  # one read for every run
        kept = []
        for position, (index, value) in enumerate(zip(stepping, values)):
            try:
                lanes[index].count_step(value)
                kept.append(position)
            except TrainingDiverged as error:
                outcomes[index] = error
                lanes[index].run.progress.close()
                del lanes[index]
        if kept:
            losses[kept].sum().backward()
        for position in kept:
            index = stepping[position]
            try:
                lanes[index].finish_step(values[position], batches[index])
            except StacklmError as error:
                outcomes[index] = error
                del lanes[index]
        if stop_request is not None and stop_request.reason is not None and lanes:
            messages = [lane.interrupt(stop_request.reason) for lane in lanes.values()]
            raise TrainingInterrupted("; ".join(messages))
    assert all(outcome is not None for outcome in outcomes)
    return [outcome for outcome in outcomes if outcome is not None]
