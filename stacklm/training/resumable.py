"""A training run that survives its job: the state kept beside a checkpoint path under the
fingerprint of what determines the trained parameters, locked against a second writer,
resumed when it exists, saved on SIGTERM (``stacklm.training.checkpoint``, ``loop``); alone,
or with other runs of its architecture in one step (``grouped``)."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import torch

from stacklm.errors import StacklmError
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.config import TrainConfig
from stacklm.training.grouped import GroupedRun, train_group
from stacklm.training.loop import AfterStep, StopRequest, train
from stacklm.training.progress import Progress
from stacklm.training.run_state import CheckpointScores, TrainResult
from stacklm.training.sources import TrainingData


def resumable_training(
    model: torch.nn.Module,
    data: TrainingData,
    config: TrainConfig,
    *,
    fingerprint_source: dict[str, Any],
    checkpoint: Path,
    device: torch.device,
    progress_interval_s: float,
    checkpoint_scores: CheckpointScores | None = None,
    after_step: AfterStep | None = None,
    on_state: Callable[[Path], None] | None = None,
    stop_request: StopRequest | None = None,
    progress_stream: TextIO | None = None,
    backend: dict[str, str] | None = None,
    resume_other_backend: bool = False,
) -> TrainResult:
    """Train as ``stacklm train``, ``stacklm cfl train`` and ``stacklm ptb train`` do: the state is kept beside
    ``checkpoint`` under the fingerprint of ``fingerprint_source`` (what determines the trained
    parameters), locked against a second writer, and resumed when it exists
    (``stacklm.training.checkpoint``); a progress line every ``progress_interval_s``, SIGTERM
    saving and stopping; ``checkpoint_scores`` and ``after_step`` as in ``train``. A finished run deletes the states of other fingerprints there.
    ``on_state(path)`` learns the state file before training starts (the live mirror's watcher).
    A process that trains several runs passes its one ``stop_request``, installed once, so that
    a SIGTERM between two runs still stops it; ``progress_stream`` takes the run's progress lines
    (default: stderr); ``backend`` and ``resume_other_backend`` as in ``train``."""
    fingerprint = checkpoint_file.fingerprint(fingerprint_source)
    state = checkpoint_file.keyed_path(checkpoint, fingerprint)
    if stop_request is None:
        stop_request = StopRequest()
        stop_request.install()
    if on_state is not None:
        on_state(state)
    with checkpoint_file.exclusive(state):
        result = train(
            model,
            data,
            config,
            checkpoint_path=state,
            fingerprint=fingerprint,
            device=device,
            progress=Progress(stream=progress_stream, interval_s=progress_interval_s),
            stop_request=stop_request,
            checkpoint_scores=checkpoint_scores,
            after_step=after_step,
            backend=backend,
            resume_other_backend=resume_other_backend,
        )
    checkpoint_file.remove_others(checkpoint, keep=state)
    return result


def resumable_group(
    runs: Sequence[GroupedRun],
    fingerprint_sources: Sequence[dict[str, Any]],
    *,
    device: torch.device,
    on_state: Sequence[Callable[[Path], None] | None] | None = None,
    stop_request: StopRequest | None = None,
) -> list[TrainResult | StacklmError]:
    """``resumable_training`` for runs trained together (``stacklm.training.grouped``): each run's
    ``checkpoint_path`` is the path its state is kept beside, under the fingerprint of its
    ``fingerprint_sources`` entry, locked while the group trains; a run whose state another process
    holds does not train, and its error is its outcome. A finished run deletes the states of other
    fingerprints beside it. Returns each run's result or error, in order (``train_group``)."""
    outcomes: list[TrainResult | StacklmError | None] = [None] * len(runs)
    keyed: dict[int, tuple[Path, GroupedRun]] = {}
    with ExitStack() as locks:
        for index, (run, source) in enumerate(zip(runs, fingerprint_sources)):
            assert run.checkpoint_path is not None
            fingerprint = checkpoint_file.fingerprint(source)
            state = checkpoint_file.keyed_path(run.checkpoint_path, fingerprint)
            if on_state is not None and on_state[index] is not None:
                on_state[index](state)  # type: ignore[misc]
            try:
                locks.enter_context(checkpoint_file.exclusive(state))
            except StacklmError as error:
                outcomes[index] = error
                continue
            keyed[index] = (Path(run.checkpoint_path), replace(run, checkpoint_path=state, fingerprint=fingerprint))
        trained = train_group([run for _, run in keyed.values()], device, stop_request) if keyed else []
    for (index, (base, run)), outcome in zip(keyed.items(), trained):
        outcomes[index] = outcome
        if isinstance(outcome, TrainResult):
            assert run.checkpoint_path is not None
            checkpoint_file.remove_others(base, keep=Path(run.checkpoint_path))
    return [outcome for outcome in outcomes if outcome is not None]
