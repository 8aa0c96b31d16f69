"""A training run that survives its job: the state kept beside a checkpoint path under the
fingerprint of what determines the trained parameters, locked against a second writer,
resumed when it exists, saved on SIGTERM (``stacklm.training.checkpoint``, ``loop``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import torch

from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.config import TrainConfig
from stacklm.training.loop import AfterStep, CheckpointScores, StopRequest, TrainResult, train
from stacklm.training.progress import Progress


def resumable_training(
    model: torch.nn.Module,
    training_data: Sequence[Sequence[int]],
    validation_data: Sequence[Sequence[int]],
    config: TrainConfig,
    *,
    fingerprint_source: dict[str, Any],
    seed: int,
    eos_index: int,
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
    """Train as ``stacklm train`` and ``stacklm cfl train`` do: the state is kept beside
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
            training_data,
            validation_data,
            config,
            seed=seed,
            eos_index=eos_index,
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
