"""stacklm.tracking.finished_run: a finished run's metadata columns (its identity, what it
measured, its settings and the built model's config) and its model file, which carries them."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from stacklm.models.registry import build_model
from stacklm.tracking.finished_run import run_metadata, save_trained_model
from stacklm.tracking.records import BUILT_MODEL
from stacklm.training.run_files import load_model
from stacklm.training.run_state import TrainResult

RESULT = TrainResult(curve=(), best_validation_cross_entropy=1.5, stopped_early=True, epochs=2, steps=10, wall_time_s=3.0, tokens_per_s=100.0)
SETTINGS = {"seed": 1, "hyperparameters": {"learning_rate": 0.001}}


def test_the_metadata_hold_the_identity_the_measurements_and_the_built_models_config() -> None:
    model = build_model("Tf+Nd", 7, parameter_budget=3_000, generator=torch.Generator().manual_seed(0))
    metadata = run_metadata(model, RESULT, SETTINGS, task="question-formation", architecture="Tf+Nd", phase="final", trial=None,
                            seed=1, learning_rate=0.001, tokens_per_batch=512, data_version="abc")
    assert (metadata.task, metadata.architecture, metadata.phase, metadata.seed, metadata.data_version) == ("question-formation", "Tf+Nd", "final", 1, "abc")
    assert metadata.parameters == sum(parameter.numel() for parameter in model.parameters())
    assert (metadata.wall_time_s, metadata.tokens_per_s) == (3.0, 100.0)
    assert json.loads(metadata.config) == {**SETTINGS, BUILT_MODEL: json.loads(json.dumps(asdict(model.config)))}


def test_the_model_file_carries_the_metadata_and_the_best_parameters(tmp_path: Path) -> None:
    model = build_model("Tf+Nd", 7, parameter_budget=3_000, generator=torch.Generator().manual_seed(0))
    metadata = run_metadata(model, RESULT, SETTINGS, task="question-formation", architecture="Tf+Nd", phase="search", trial=3,
                            seed=1, learning_rate=0.001, tokens_per_batch=512, data_version="abc")
    save_trained_model(tmp_path / "model.pt", model, ["a", "b", "c", "d", "e", "f"], metadata, SETTINGS)
    saved = load_model(tmp_path / "model.pt")
    assert (saved.task, saved.architecture, saved.vocabulary) == ("question-formation", "Tf+Nd", ("a", "b", "c", "d", "e", "f"))
    assert (saved.metadata, saved.settings, saved.model_config) == (asdict(metadata), SETTINGS, model.config)
    assert saved.parameters.keys() == model.state_dict().keys()
    assert all(torch.equal(saved.parameters[name], tensor) for name, tensor in model.state_dict().items())
