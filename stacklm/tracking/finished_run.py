"""A finished training run's records, written the same way by every experiment's training
command (``stacklm train``, ``stacklm cfl train``): its metadata columns (identity, what the
run measured, its settings; ``stacklm.tracking.records``) and its ``model.pt``
(``stacklm.training.run_files``), which carries that metadata."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch

from stacklm.tracking.records import BUILT_MODEL, RunMetadata, code_version
from stacklm.training.run_files import SavedModel, save_model
from stacklm.training.run_state import TrainResult


def run_metadata(model: torch.nn.Module, result: TrainResult, run_settings: dict[str, Any], **identity: Any) -> RunMetadata:
    """The metadata columns of a finished run: ``identity`` (task, architecture, phase, trial,
    seed, learning rate, tokens per batch, data version) and what the run itself measured; its
    config, the run's settings and the built model's config (``built_model``: the options as
    the model applied them, e.g. no dropout where a CFL model has none)."""
    return RunMetadata(
        **identity,
        parameters=sum(parameter.numel() for parameter in model.parameters()),
        code_version=code_version(),
        wall_time_s=result.wall_time_s,
        tokens_per_s=result.tokens_per_s,
        config=json.dumps(run_settings | {BUILT_MODEL: asdict(model.config)}, sort_keys=True),
    )


def save_trained_model(path: Path, model: torch.nn.Module, vocabulary: Sequence[str], metadata: RunMetadata, run_settings: dict[str, Any]) -> None:
    """The best parameters with everything needed to rebuild and evaluate the model."""
    save_model(
        path,
        SavedModel(
            task=metadata.task,
            architecture=metadata.architecture,
            vocabulary=tuple(vocabulary),
            model_config=model.config,
            parameters={name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
            metadata=asdict(metadata),
            settings=run_settings,
        ),
    )
