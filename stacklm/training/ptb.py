"""Training and evaluating a PTB model with truncated BPTT (DuSell & Chiang (2022) App. 10;
``docs/design/cfl-and-ptb.md#ptb-data-and-batching``, ``docs/design/cfl-and-ptb.md#ptb-training``).

- A pass (training epoch or evaluation) starts from the initial state and carries the state
  from chunk to chunk, detached, sliced to the chunk's batch when the short stream has ended.
- Loss: the mean NLL over the chunk's B·T targets. Plain SGD at learning rate η; the global
  gradient norm is clipped at c · (number of targets in the chunk).
- η and c: a random-search run's draw (``stacklm.experiments.ptb.search``: log-uniform on
  [1, 100] and [1e-5, 1e-3], the paper's "divided by batch size and sequence length" and
  "multiplied by" them, since the loss is a mean).
- After each epoch, validation perplexity; η ÷ 1.5 when it is not a new best (torch's
  ``ReduceLROnPlateau`` with patience 0, as in the released code: with its default
  relative threshold, a gain under 0.01 % also divides η); stop after 2 epochs in a row without
  a lower validation perplexity, or after 100 epochs; the best epoch's parameters are restored.
- A training loss that is not finite (a drawn η too large: the search spans [1, 100]) ends the
  run there: the epoch is recorded with a NaN training NLL and an infinite validation
  perplexity, never the best, and the best epoch before it is restored (none: the initial
  parameters, with no finite validation perplexity, so the restart is never selected).

Resumption (as ``stacklm.training.loop`` for the task runs): with ``checkpoint_path``, the whole
training state (model, optimizer, schedule, epochs done, the best epoch and its parameters, the
early-stopping count, RNG states, the curve so far) is written atomically at each epoch's end
through ``stacklm.training.checkpoint``, and the same call after a kill continues from it,
giving bitwise the same curve and parameters as a run never interrupted. A stop request
(SIGTERM) stops after the current chunk and saves the position in the epoch too: the chunks
done, their summed NLL and the state carried into the next chunk (LSTM, reading, stack). That
state's tensors are saved; its structure (step counts, window bookkeeping) is rebuilt on resume
by running the model over as many steps of the epoch (batch 1, under ``no_grad``), which depends
on the number of steps alone, and then given the saved tensors.
``train_resumably`` keys the state by the run's fingerprint and locks it, as the task runs do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import Tensor, nn

from stacklm.data.ptb import Chunk
from stacklm.errors import StacklmError, located
from stacklm.models.ptb import PtbLanguageModel, PtbModelConfig, PtbState, ptb_config_fields, ptb_config_from_fields
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.loop import StopRequest, TrainingInterrupted
from stacklm.training.progress import Progress

DECAY = 1.5
PATIENCE = 2
MAX_EPOCHS = 100


@dataclass(frozen=True)
class SearchDraw:
    """A restart's hyperparameters (drawn by ``stacklm.experiments.ptb.search``)."""

    learning_rate: float  # η for the mean loss
    clip_per_target: float  # c: the norm is clipped at c · targets in the chunk



@dataclass(frozen=True)
class EpochPosition:
    """How far an epoch has come: what a run stopped within it resumes from."""

    chunk: int = 0  # chunks of the epoch trained
    total_nll: float = 0.0  # Σ −ln p over their targets
    targets: int = 0
    state: PtbState | None = None  # the state after them, detached: carried into chunk ``chunk`` + 1


class Diverged(StacklmError):
    """A training loss that is not finite."""


class EpochInterrupted(TrainingInterrupted):
    """A stop request within an epoch; ``position`` is where the epoch stands."""

    def __init__(self, message: str, position: EpochPosition) -> None:
        super().__init__(message)
        self.position = position


def train_epoch(
    model: PtbLanguageModel,
    chunks: Sequence[Chunk],
    optimizer: torch.optim.SGD,
    clip_per_target: float,
    progress: Progress | None = None,
    stop_request: StopRequest | None = None,
    position: EpochPosition = EpochPosition(),
) -> float:
    """One epoch in order, from ``position`` (the start by default); the mean training NLL per
    target (nats). ``progress`` hears of each chunk; a ``stop_request`` set raises
    ``EpochInterrupted`` after the current chunk."""
    model.train()
    total, count, state = position.total_nll, position.targets, position.state
    device = model.output.weight.device
    for index in range(position.chunk, len(chunks)):
        chunk = chunks[index]
        state = model.initial_state(chunk.batch_size) if state is None else state.detach().first_rows(chunk.batch_size)
        targets = chunk.targets.to(device)
        logits, state = model(chunk.inputs.to(device), state)  # (B, T, V)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        value = loss.item()
        if not math.isfinite(value):
            raise Diverged(f"the training loss is {value} at chunk {index + 1} of {len(chunks)}; the run diverged")
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip_per_target * chunk.num_targets)
        optimizer.step()
        total += value * chunk.num_targets
        count += chunk.num_targets
        if progress is not None:
            progress.update(value, chunk.num_targets)
        if stop_request is not None and stop_request.reason is not None:
            stopped_at = EpochPosition(index + 1, total, count, state.detach())
            raise EpochInterrupted(f"{stop_request.reason} at chunk {index + 1} of {len(chunks)}", stopped_at)
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
    is_best: bool  # a new best validation perplexity

    def describe(self) -> str:
        """The epoch's line in the training log."""
        return (
            f"epoch {self.epoch}: learning rate {self.learning_rate:.4g} train NLL {self.train_nll:.4f} validation perplexity {self.valid_perplexity:.2f}"
            + (" (best)" if self.is_best else "")
        )


@dataclass(frozen=True)
class TrainingResult:
    epochs: tuple[EpochRecord, ...]
    best_epoch: int  # whose parameters the model holds afterwards; 0: the initial ones (diverged in epoch 1)
    diverged: bool = False  # the last epoch's training loss was not finite
    wall_time_s: float = field(default=0.0, compare=False)  # training and validation, summed over resumptions
    targets_trained: int = field(default=0, compare=False)  # training targets of the completed epochs

    @property
    def tokens_per_s(self) -> float:
        return self.targets_trained / max(self.wall_time_s, 1e-9)

    @property
    def best_valid_perplexity(self) -> float:
        return self.epochs[self.best_epoch - 1].valid_perplexity if self.best_epoch else math.inf


@dataclass
class _State:
    """What a resumed run needs besides the model, optimizer and schedule."""

    records: list[EpochRecord] = field(default_factory=list)
    best_epoch: int = 0  # 0: the initial parameters
    without_best: int = 0  # epochs in a row without a new best
    best_parameters: dict[str, Tensor] = field(default_factory=dict)
    diverged: bool = False
    wall_time_s: float = 0.0
    targets_trained: int = 0

    @property
    def finished(self) -> bool:
        return self.without_best == PATIENCE or self.diverged


def train(
    model: PtbLanguageModel,
    train_chunks: Sequence[Chunk],
    valid_chunks: Sequence[Chunk],
    draw: SearchDraw,
    max_epochs: int = MAX_EPOCHS,
    *,
    checkpoint_path: str | Path | None = None,
    fingerprint: str = "",
    progress: Progress | None = None,
    stop_request: StopRequest | None = None,
) -> TrainingResult:
    """Train until 2 epochs in a row bring no new best validation perplexity; restore the best.

    With ``checkpoint_path``, the state is saved there at each epoch's end and resumed from it
    when it exists (refused if written under another ``fingerprint``); a set ``stop_request``
    saves the state after the current chunk and raises ``TrainingInterrupted``.
    """
    progress = progress if progress is not None else Progress()
    optimizer = torch.optim.SGD(model.parameters(), lr=draw.learning_rate)
    schedule = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=1 / DECAY, patience=0)
    state, position = _State(best_parameters=_copy(model.state_dict())), EpochPosition()
    if checkpoint_path is not None and Path(checkpoint_path).exists():
        state, position = _restore(checkpoint_path, fingerprint, model, optimizer, schedule, train_chunks)
        epochs = len(state.records)
        progress.line(f"resuming from {checkpoint_path} at epoch {epochs + 1}, chunk {position.chunk}, after {epochs} epoch{'' if epochs == 1 else 's'}{':' if epochs else ''}")
        for record in state.records:
            progress.line(f"  {record.describe()}")
    while not state.finished and len(state.records) < max_epochs:
        epoch = len(state.records) + 1
        learning_rate = optimizer.param_groups[0]["lr"]
        progress.start_epoch(epoch, position.chunk, len(train_chunks))
        started = time.monotonic()
        try:
            train_nll = train_epoch(model, train_chunks, optimizer, draw.clip_per_target, progress, stop_request, position)
        except Diverged as error:
            progress.close()
            state.wall_time_s += time.monotonic() - started
            state.records.append(EpochRecord(epoch, learning_rate, math.nan, math.inf, False))
            state.diverged, position = True, EpochPosition()
            progress.line(f"epoch {epoch}: {error}; stopping, the best epoch ({state.best_epoch or 'none'}) restored")
            if checkpoint_path is not None:
                _save(checkpoint_path, fingerprint, model, optimizer, schedule, state, position)
            break
        except EpochInterrupted as error:
            progress.close()
            state.wall_time_s += time.monotonic() - started
            if checkpoint_path is None:
                raise TrainingInterrupted(f"{error} of epoch {epoch}") from None
            _save(checkpoint_path, fingerprint, model, optimizer, schedule, state, error.position)
            raise TrainingInterrupted(f"{error} of epoch {epoch}; the training state is saved in {checkpoint_path}: the same call continues") from None
        position = EpochPosition()
        perplexity = evaluate(model, valid_chunks)
        state.wall_time_s += time.monotonic() - started
        state.targets_trained += sum(chunk.num_targets for chunk in train_chunks)
        schedule.step(perplexity)
        is_best = state.best_epoch == 0 or perplexity < state.records[state.best_epoch - 1].valid_perplexity
        state.records.append(EpochRecord(epoch, learning_rate, train_nll, perplexity, is_best))
        if is_best:
            state.best_parameters, state.best_epoch, state.without_best = _copy(model.state_dict()), epoch, 0
        else:
            state.without_best += 1
        progress.line(state.records[-1].describe() + (" — stopping early" if state.finished else ""))
        if checkpoint_path is not None:
            _save(checkpoint_path, fingerprint, model, optimizer, schedule, state, position)
    progress.close()
    model.load_state_dict(state.best_parameters)
    return TrainingResult(tuple(state.records), state.best_epoch, state.diverged, state.wall_time_s, state.targets_trained)


def train_resumably(
    model: PtbLanguageModel,
    train_chunks: Sequence[Chunk],
    valid_chunks: Sequence[Chunk],
    draw: SearchDraw,
    max_epochs: int = MAX_EPOCHS,
    *,
    checkpoint: Path,
    fingerprint_source: dict[str, Any],
    progress_interval_s: float = 60.0,
    stop_request: StopRequest | None = None,
    stream: TextIO | None = None,
) -> TrainingResult:
    """``train`` as a job runs it: the state kept beside ``checkpoint`` under the fingerprint of
    ``fingerprint_source`` (what determines the trained parameters: model, draw, data), locked
    against a second writer, resumed when it exists; SIGTERM stops it after the current chunk
    (through ``stop_request``, installed by the caller: one for a command's several runs; by
    default one installed here). Progress lines go to ``stream`` (default stderr). A finished run
    deletes the states of other fingerprints there."""
    fingerprint = checkpoint_file.fingerprint(fingerprint_source)
    state = checkpoint_file.keyed_path(checkpoint, fingerprint)
    if stop_request is None:
        stop_request = StopRequest()
        stop_request.install()
    with checkpoint_file.exclusive(state):
        result = train(
            model, train_chunks, valid_chunks, draw, max_epochs,
            checkpoint_path=state, fingerprint=fingerprint, progress=Progress(stream=stream, interval_s=progress_interval_s), stop_request=stop_request,
        )
    checkpoint_file.remove_others(checkpoint, keep=state)
    return result


def _copy(parameters: dict[str, Tensor]) -> dict[str, Tensor]:
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in parameters.items()}


def _save(
    path: str | Path,
    fingerprint: str,
    model: PtbLanguageModel,
    optimizer: torch.optim.SGD,
    schedule: torch.optim.lr_scheduler.ReduceLROnPlateau,
    state: _State,
    position: EpochPosition,
) -> None:
    checkpoint_file.save(
        path,
        {
            "fingerprint": fingerprint,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "records": [asdict(record) for record in state.records],
            "best_epoch": state.best_epoch,
            "without_best": state.without_best,
            "best_parameters": state.best_parameters,
            "diverged": state.diverged,
            "wall_time_s": state.wall_time_s,
            "targets_trained": state.targets_trained,
            "position": {
                "chunk": position.chunk,
                "total_nll": position.total_nll,
                "targets": position.targets,
                "state": None if position.state is None else position.state.tensors(),
            },
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        },
    )


def _restore(
    path: str | Path,
    fingerprint: str,
    model: PtbLanguageModel,
    optimizer: torch.optim.SGD,
    schedule: torch.optim.lr_scheduler.ReduceLROnPlateau,
    train_chunks: Sequence[Chunk],
) -> tuple[_State, EpochPosition]:
    payload: dict[str, Any] = checkpoint_file.load(path)
    if payload.get("fingerprint") != fingerprint:
        raise StacklmError(
            f"{path}: this checkpoint belongs to another run (its fingerprint differs from this run's model, draw and data); "
            "delete it to start this run afresh"
        )
    checkpoint_file.load_parameters(model, payload.get("model"), path)
    try:
        optimizer.load_state_dict(payload["optimizer"])
        schedule.load_state_dict(payload["schedule"])
        state = _State(
            [EpochRecord(**record) for record in payload["records"]],
            payload["best_epoch"],
            payload["without_best"],
            payload["best_parameters"],
            payload["diverged"],
            payload["wall_time_s"],
            payload["targets_trained"],
        )
        saved = payload["position"]
        carried = None if saved["state"] is None else _carried_state(model, train_chunks[: saved["chunk"]], saved["state"])
        position = EpochPosition(saved["chunk"], saved["total_nll"], saved["targets"], carried)
        torch.set_rng_state(payload["rng_cpu"])
    except (KeyError, TypeError, RuntimeError, ValueError) as error:
        raise located(path, None, f"not the training state of this PTB model ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                                  f"{checkpoint_file.ADVICE}") from None
    if payload["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(payload["rng_cuda"])
    return state, position


def _carried_state(model: PtbLanguageModel, done: Sequence[Chunk], tensors: Sequence[Tensor]) -> PtbState:
    """The state carried past the chunks ``done``, from its saved tensors: the structure of a state
    after as many steps (the model run on batch 1 without gradients), holding them."""
    device = model.output.weight.device
    with torch.no_grad():
        like = model.initial_state(1)
        for chunk in done:
            _, like = model(torch.zeros(1, chunk.inputs.size(1), dtype=torch.long, device=device), like)
    return like.with_tensors([tensor.to(device) for tensor in tensors])


# ---------------------------------------------------------------------------------------------
# A trained PTB model's file (``model.pt`` of a run): what evaluation needs without the training
# run, as tensors and plain values that load with ``torch.load(weights_only=True)``
# (``stacklm.training.checkpoint``), as the task runs' ``model.pt`` (``stacklm.training.run_files``).


@dataclass(frozen=True)
class SavedPtbModel:
    config: PtbModelConfig
    vocabulary: tuple[str, ...]  # ordinary tokens in index order; <eos> follows
    parameters: dict[str, Tensor]  # the best epoch's
    metadata: dict[str, Any]  # RunMetadata fields
    clip_per_target: float  # the drawn c
    best_valid_perplexity: float  # of the parameters saved (∞ when no epoch reached a finite one)

    def model(self) -> PtbLanguageModel:
        """The trained model, in eval mode, on the CPU."""
        model = PtbLanguageModel(self.config)
        model.load_state_dict(self.parameters)
        return model.eval()


def save_ptb_model(path: str | Path, saved: SavedPtbModel) -> None:
    checkpoint_file.save(
        path,
        {
            "kind": "ptb",
            "config": ptb_config_fields(saved.config),
            "vocabulary": list(saved.vocabulary),
            "parameters": {name: tensor.detach().cpu() for name, tensor in saved.parameters.items()},
            "metadata": saved.metadata,
            "clip_per_target": saved.clip_per_target,
            "best_valid_perplexity": saved.best_valid_perplexity,
        },
    )


def load_ptb_model(path: str | Path) -> SavedPtbModel:
    """The model ``save_ptb_model`` wrote; a ``StacklmError`` naming the file for any other."""
    if not Path(path).is_file():
        raise located(path, None, "model file not found (has `stacklm ptb train` finished for this run?)")
    content = checkpoint_file.load(path)
    if content.get("kind") != "ptb":
        raise located(path, None, f"not a PTB model file; {checkpoint_file.ADVICE}")
    try:
        saved = SavedPtbModel(
            config=ptb_config_from_fields(content["config"], f"{path}: config"),
            vocabulary=tuple(content["vocabulary"]),
            parameters=content["parameters"],
            metadata=content["metadata"],
            clip_per_target=float(content["clip_per_target"]),
            best_valid_perplexity=float(content["best_valid_perplexity"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise located(path, None, f"not a PTB model file of this stacklm ({type(error).__name__}: {error}); {checkpoint_file.ADVICE}") from None
    if len(saved.vocabulary) + 1 != saved.config.vocabulary_size:
        raise located(path, None, f"{len(saved.vocabulary)} tokens and <eos> for a model of V = {saved.config.vocabulary_size}; {checkpoint_file.ADVICE}")
    checkpoint_file.load_parameters(PtbLanguageModel(saved.config), saved.parameters, path)  # a misfit named here, not as a traceback in .model()
    return saved
