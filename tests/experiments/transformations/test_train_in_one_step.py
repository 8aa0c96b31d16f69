"""``stacklm train`` of several runs on a GPU trains the runs of one architecture in one step
(``stacklm.training.grouped``); here on the CPU, where it is asked for by hand, against the same
runs trained one after another."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from stacklm.experiments.transformations import training
from stacklm.training.run_files import load_model
from tests.experiments.transformations.test_train import data_dir, run  # noqa: F401  (data_dir: a fixture, found by name)

TRIALS = {1: {"learning_rate": 0.003, "tokens_per_batch": 256, "max_epochs": 1}, 2: {"learning_rate": 0.001, "tokens_per_batch": 384, "max_epochs": 1}}


def train(data_dir: Path, directory: Path) -> None:
    """Trials 1 and 2 of Tf and trial 1 of LSTM, in one process on the torch backend."""
    runs = [("Tf", 1), ("Tf", 2), ("LSTM", 1)]
    each = lambda pattern: [str(directory / pattern.format(name=name.lower(), seed=seed)) for name, seed in runs]  # noqa: E731
    run("train", "--task", "question-formation", "--architecture", *(name for name, _ in runs), "--data-dir", str(data_dir),
        "--settings", str(directory.parent / "settings.json"), "--device", "cpu", "--threads", "1", "--backend", "torch", "--phase", "search",
        "--seed", *(str(seed) for _, seed in runs), "--trial", *(str(seed) for _, seed in runs),
        "--hparams", *(str(directory.parent / f"hp{seed}.json") for _, seed in runs),
        "--out", *each("{name}{seed}"), "--checkpoint", *each("{name}{seed}.pt"), "--log", *each("{name}{seed}.log"))


@pytest.mark.e2e
def test_runs_of_one_architecture_trained_in_one_step_equal_the_runs_trained_one_after_another(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({
        "model": {"dropout": 0.1},
        "training": {"parameter_budget": 8000, "examples_per_checkpoint": 300, "progress_interval_s": 0},
        "evaluation": {"curve_examples": 20, "samples_per_input": 2},
    }))
    for seed, hyperparameters in TRIALS.items():
        (tmp_path / f"hp{seed}.json").write_text(json.dumps(hyperparameters))
    train(data_dir, tmp_path / "alone")
    monkeypatch.setattr(training, "in_one_step", lambda device: True)
    train(data_dir, tmp_path / "together")
    assert "run 2 of 3: Tf, seed 2 -> " in capsys.readouterr().err.split("in one step with 1 other")[1]
    for stem in ("tf1", "tf2", "lstm1"):
        timing = ["wall_time_s", "tokens_per_s", "code_version"]
        curves = [pq.read_table(tmp_path / group / stem / "train.parquet").drop(timing).to_pylist() for group in ("alone", "together")]
        assert len(curves[0]) == len(curves[1]) >= 3
        for alone, together in zip(*curves):
            assert alone.keys() == together.keys()
            for key, value in alone.items():
                assert together[key] == (pytest.approx(value, rel=1e-4, abs=1e-6) if isinstance(value, float) else value), key
        parameters = [load_model(tmp_path / group / stem / "model.pt").parameters for group in ("alone", "together")]
        for name, tensor in parameters[0].items():
            if not name.endswith("key.bias"):  # its gradient is 0 but for rounding (tests/training/test_grouped.py)
                torch.testing.assert_close(parameters[1][name], tensor, rtol=1e-4, atol=1e-5, msg=name)
        assert "checkpoint 3:" in (tmp_path / "together" / f"{stem}.log").read_text()
