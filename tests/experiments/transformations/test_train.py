"""End to end: ``stacklm train`` then ``stacklm evaluate`` on a small generated question-formation set."""

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from stacklm import cli
from stacklm.data.examples import write_examples
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.errors import StacklmError
from stacklm.experiments.transformations import evaluate as evaluate_command
from stacklm.tasks import get_task
from stacklm.training import checkpoint
from stacklm.experiments.transformations import train as train_command
from stacklm.training.run_files import load_model

MAX_SOURCE_TOKENS = 9  # the short sentences of the grammar ("her newt does giggle . quest"), so that CPU training is quick


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    train_command.register(subparsers)
    evaluate_command.register(subparsers)
    arguments = parser.parse_args(list(argv))
    return arguments.func(arguments)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("question-formation")
    splits = build_splits(get_task("question-formation"), SplitSizes(train=10000, validation=400, test=800, generalization=100), seed=0)
    short = {name: [example for example in examples if len(example.source) <= MAX_SOURCE_TOKENS] for name, examples in splits.items()}
    sizes = {"train": 2000, "validation": 80, "test": 150, "generalization": 100}
    for name, examples in short.items():
        assert len(examples) >= sizes[name] or name == "generalization"
        write_examples(directory / f"{name}.tsv", examples[: sizes[name]])
    return directory


def write_settings(path: Path, tracking_uri: str) -> Path:
    settings = {
        "tasks": ["question-formation"],
        "model": {"dropout": 0.0},  # dropout slows learning too much for a short CPU run
        "training": {"parameter_budget": 45_000, "examples_per_checkpoint": 2000, "progress_interval_s": 30},
        "evaluation": {"tokens_per_batch": 2048, "samples_per_input": 2},
        "tracking": {"uri": tracking_uri, "request_retries": 0, "request_timeout_s": 2},
    }
    path.write_text(json.dumps(settings))
    return path


def without_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every import of MLflow fail, even of a module an earlier test imported."""
    for name in [name for name in sys.modules if name == "mlflow" or name.startswith("mlflow.")] + ["mlflow"]:
        monkeypatch.setitem(sys.modules, name, None)


def test_a_small_transformer_learns_question_formation_and_neither_command_touches_mlflow(
    data_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the discard port, where nothing listens, and no MLflow to import: `stacklm tracking sync` mirrors the records later
    settings = write_settings(tmp_path / "settings.json", "http://127.0.0.1:9")
    without_mlflow(monkeypatch)
    (tmp_path / "hp.json").write_text(json.dumps({"learning_rate": 0.005, "tokens_per_batch": 256, "max_epochs": 20}))
    run_dir = tmp_path / "run"
    common = ["--task", "question-formation", "--data-dir", str(data_dir), "--settings", str(settings), "--device", "cpu", "--threads", "1"]
    assert run("train", *common, "--architecture", "Tf", "--hparams", str(tmp_path / "hp.json"), "--seed", "1",
               "--checkpoint", str(tmp_path / "ckpt.pt"), "--out", str(run_dir)) == 0
    curve = pq.read_table(run_dir / "train.parquet").to_pylist()
    assert [row["checkpoint"] for row in curve] == list(range(1, len(curve) + 1)) and len(curve) >= 5
    assert {row["architecture"] for row in curve} == {"Tf"} and curve[0]["parameters"] > 30_000
    assert "stopping early" in capfd.readouterr().err or len(curve) == 20

    assert run("evaluate", *common, "--run", str(run_dir), "--out", str(run_dir / "metrics.parquet")) == 0
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    metrics = {(row["split"], row["rule"], row["metric"]): row["value"] for row in rows}
    assert metrics[("test", None, "full_accuracy")] > 0.9
    assert metrics[("test", None, "partial_accuracy")] >= metrics[("test", None, "full_accuracy")]
    assert metrics[("validation", None, "cross_entropy")] == pytest.approx(min(row["validation_cross_entropy"] for row in curve), rel=1e-4)
    assert ("generalization", None, "log_ratio") in metrics and ("generalization", None, "mean_log_ratio") in metrics
    assert {row["phase"] for row in rows} == {"final"} and {row["trial"] for row in rows} == {None}
    assert {row["data_version"] for row in rows} == {curve[0]["data_version"]}
    config = json.loads(rows[0]["config"])
    assert config["evaluation"]["samples_per_input"] == 2 and config["model"]["dropout"] == 0.0 and config["hyperparameters"]["max_epochs"] == 20
    assert "tracking" not in config  # where a run is mirrored does not describe the run


def test_unknown_settings_keys_and_missing_models_are_named(data_dir: Path, tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"training": {"examples_per_chekpoint": 10}}))
    (tmp_path / "hp.json").write_text(json.dumps({"learning_rate": 0.005, "tokens_per_batch": 256, "max_epochs": 1}))
    with pytest.raises(StacklmError, match="training.examples_per_chekpoint"):
        run("train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", str(data_dir), "--hparams", str(tmp_path / "hp.json"),
            "--seed", "1", "--settings", str(settings), "--checkpoint", str(tmp_path / "ckpt.pt"), "--out", str(tmp_path / "run"))
    settings.write_text("{}")
    with pytest.raises(StacklmError, match="model.pt: model file not found"):
        run("evaluate", "--task", "question-formation", "--run", str(tmp_path / "run"), "--data-dir", str(data_dir),
            "--settings", str(settings), "--out", str(tmp_path / "metrics.parquet"))


RUNNER = """
import sys
from stacklm import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_run_killed_mid_epoch_or_stopped_by_sigterm_and_restarted_equals_an_uninterrupted_run(data_dir: Path, tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "training": {"parameter_budget": 8000, "examples_per_checkpoint": 300, "progress_interval_s": 0},
    }))
    (tmp_path / "hp.json").write_text(json.dumps({"learning_rate": 0.003, "tokens_per_batch": 256, "max_epochs": 1}))

    def command(name: str) -> list[str]:
        return [sys.executable, "-c", RUNNER, "train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", str(data_dir),
                "--hparams", str(tmp_path / "hp.json"), "--seed", "3", "--settings", str(settings), "--device", "cpu", "--threads", "1",
                "--checkpoint", str(tmp_path / f"{name}.ckpt"), "--out", str(tmp_path / name)]

    subprocess.run(command("whole"), check=True, capture_output=True)
    killed = subprocess.Popen(command("killed"), stderr=subprocess.PIPE, text=True)
    assert killed.stderr is not None
    for line in killed.stderr:  # the line is printed once the checkpoint is on disk
        if line.startswith("checkpoint 3:"):
            break
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "killed" / "model.pt").exists()
    [state_path] = tmp_path.glob("killed.*.ckpt")  # killed.<fingerprint>.ckpt, beside the --checkpoint path
    state = checkpoint.load(state_path)
    assert len(state["curve"]) >= 3 and state["counters"]["epoch"] == 0 and 0 < state["counters"]["batch_index"]  # inside the only epoch
    stopped = subprocess.Popen(command("killed"), stderr=subprocess.PIPE, text=True)  # resumes, then gets a SIGTERM between checkpoints
    assert stopped.stderr is not None
    assert next(stopped.stderr).startswith("resuming from")
    after_checkpoint = False
    for line in stopped.stderr:  # a progress line after checkpoint 4: a step past it is done
        if line.startswith("checkpoint 4:"):
            after_checkpoint = True
        elif after_checkpoint and line.startswith("epoch "):
            break
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait() == 1 and "SIGTERM at step" in stopped.stderr.read()  # a failed command, not a usage error
    state = checkpoint.load(state_path)
    assert len(state["curve"]) >= 4  # the resumed run's own progress is saved
    resumed = subprocess.run(command("killed"), check=True, capture_output=True, text=True)
    assert "resuming from" in resumed.stderr

    timing = ["wall_time_s", "tokens_per_s", "code_version"]  # the clock, and commits others make meanwhile in a shared checkout
    curves = [pq.read_table(tmp_path / name / "train.parquet").drop(timing).to_pylist() for name in ("whole", "killed")]
    assert curves[0] == curves[1] and len(curves[0]) >= 7
    whole, continued = (load_model(tmp_path / name / "model.pt").parameters for name in ("whole", "killed"))
    assert whole.keys() == continued.keys() and all(torch.equal(whole[key], continued[key]) for key in whole)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--learning-rate", "0.001"], "--learning-rate needs --tokens-per-batch"),
        (["--hparams", "hp.json", "--max-epochs", "3"], "leave out --tokens-per-batch and --max-epochs"),
    ],
)
def test_hyperparameters_come_from_a_trial_file_or_from_flags(flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", str(tmp_path), "--out", str(tmp_path / "run")]
    assert cli.main(base + flags) == 2  # a usage error, as argparse's own
    assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(base + ["--hparams", "hp.json", "--learning-rate", "0.001"])
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
