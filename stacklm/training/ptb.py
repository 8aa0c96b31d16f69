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

Resumption (as ``stacklm.training.loop`` for the task runs): with ``checkpoint_path``, the whole
training state (model, optimizer, schedule, epochs done, the best epoch and its parameters, the
early-stopping count, RNG states and the curve so far) is written atomically at each epoch's
end through ``stacklm.training.checkpoint``, and the same call after a kill continues from it,
giving bitwise the same curve and parameters as a run never interrupted. The epoch is the unit
of resumption: every epoch starts from the initial state (§3.2), so the state at an epoch's end
is complete, whereas mid-epoch the carried LSTM and stack state would be needed as well. A stop
request (SIGTERM) therefore stops after the current chunk and keeps the last epoch's state as
written; the resumed run repeats the interrupted epoch from its first chunk.
``train_resumably`` keys the state by the run's fingerprint and locks it, as the task runs do.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from stacklm.data.ptb import Chunk
from stacklm.errors import StacklmError
from stacklm.models.ptb import PtbLanguageModel
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.loop import StopRequest, TrainingInterrupted
from stacklm.training.progress import Progress

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


def train_epoch(
    model: PtbLanguageModel,
    chunks: Sequence[Chunk],
    optimizer: torch.optim.SGD,
    clip_per_target: float,
    progress: Progress | None = None,
    stop_request: StopRequest | None = None,
) -> float:
    """One epoch in order; the mean training NLL per target (nats). ``progress`` hears of each
    chunk; a ``stop_request`` set raises ``TrainingInterrupted`` after the current chunk."""
    model.train()
    start = time.monotonic()
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
        if progress is not None:
            progress.update(value, count / max(time.monotonic() - start, 1e-9))
        if stop_request is not None and stop_request.reason is not None:
            raise TrainingInterrupted(f"{stop_request.reason} at chunk {index + 1} of {len(chunks)}")
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


@dataclass(frozen=True)
class TrainingResult:
    epochs: tuple[EpochRecord, ...]
    best_epoch: int  # whose parameters the model holds afterwards

    @property
    def best_valid_perplexity(self) -> float:
        return self.epochs[self.best_epoch - 1].valid_perplexity


@dataclass
class _State:
    """What a resumed run needs besides the model, optimizer and schedule."""

    records: list[EpochRecord] = field(default_factory=list)
    best_epoch: int = 0  # 0: the initial parameters
    without_best: int = 0  # epochs in a row without a new best
    best_parameters: dict[str, Tensor] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.without_best == PATIENCE


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
    raises ``TrainingInterrupted`` after the current chunk, the last epoch's state kept.
    """
    progress = progress if progress is not None else Progress()
    optimizer = torch.optim.SGD(model.parameters(), lr=draw.learning_rate)
    schedule = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=1 / DECAY, patience=0)
    state = _State(best_parameters=_copy(model.state_dict()))
    if checkpoint_path is not None and Path(checkpoint_path).exists():
        state = _restore(checkpoint_path, fingerprint, model, optimizer, schedule)
        progress.line(f"resuming from {checkpoint_path} after epoch {len(state.records)}")
    while not state.finished and len(state.records) < max_epochs:
        epoch = len(state.records) + 1
        learning_rate = optimizer.param_groups[0]["lr"]
        progress.start_epoch(epoch, 0, len(train_chunks))
        try:
            train_nll = train_epoch(model, train_chunks, optimizer, draw.clip_per_target, progress, stop_request)
        except TrainingInterrupted as error:
            progress.close()
            kept = f"the state after epoch {epoch - 1} is in {checkpoint_path}: the same call repeats epoch {epoch}"
            raise TrainingInterrupted(f"{error} of epoch {epoch}" + (f"; {kept}" if checkpoint_path is not None else "")) from None
        perplexity = evaluate(model, valid_chunks)
        schedule.step(perplexity)
        is_best = state.best_epoch == 0 or perplexity < state.records[state.best_epoch - 1].valid_perplexity
        state.records.append(EpochRecord(epoch, learning_rate, train_nll, perplexity, is_best))
        if is_best:
            state.best_parameters, state.best_epoch, state.without_best = _copy(model.state_dict()), epoch, 0
        else:
            state.without_best += 1
        progress.line(
            f"epoch {epoch}: learning rate {learning_rate:.4g} train NLL {train_nll:.4f} validation perplexity {perplexity:.2f}"
            + (" (best)" if is_best else "") + (" — stopping early" if state.finished else "")
        )
        if checkpoint_path is not None:
            _save(checkpoint_path, fingerprint, model, optimizer, schedule, state)
    progress.close()
    model.load_state_dict(state.best_parameters)
    return TrainingResult(tuple(state.records), state.best_epoch)


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
) -> TrainingResult:
    """``train`` as a job runs it: the state kept beside ``checkpoint`` under the fingerprint of
    ``fingerprint_source`` (what determines the trained parameters: model, draw, data), locked
    against a second writer, resumed when it exists; SIGTERM stops it after the current chunk.
    A finished run deletes the states of other fingerprints there."""
    fingerprint = checkpoint_file.fingerprint(fingerprint_source)
    state = checkpoint_file.keyed_path(checkpoint, fingerprint)
    stop_request = StopRequest()
    stop_request.install()
    with checkpoint_file.exclusive(state):
        result = train(
            model, train_chunks, valid_chunks, draw, max_epochs,
            checkpoint_path=state, fingerprint=fingerprint, progress=Progress(interval_s=progress_interval_s), stop_request=stop_request,
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
) -> _State:
    payload: dict[str, Any] = checkpoint_file.load(path)
    if payload.get("fingerprint") != fingerprint:
        raise StacklmError(
            f"{path}: this checkpoint belongs to another run (its fingerprint differs from this run's model, draw and data); "
            "delete it to start this run afresh"
        )
    try:
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        schedule.load_state_dict(payload["schedule"])
        state = _State([EpochRecord(**record) for record in payload["records"]], payload["best_epoch"], payload["without_best"], payload["best_parameters"])
        torch.set_rng_state(payload["rng_cpu"])
    except (KeyError, TypeError, RuntimeError, ValueError) as error:
        raise StacklmError(f"{path}: not the training state of this PTB model ({type(error).__name__}: {error}); {checkpoint_file.ADVICE}") from None
    if payload["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(payload["rng_cuda"])
    return state
