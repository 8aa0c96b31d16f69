"""End to end: ``stacklm train`` then ``stacklm evaluate`` on a small generated question-formation set."""

import argparse
import re
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
from stacklm.tasks import get_task
from stacklm.training import checkpoint
from stacklm.experiments.transformations import commands, training
from stacklm.training.run_files import load_model

MAX_SOURCE_TOKENS = 9  # the short sentences of the grammar ("her newt does giggle . quest"), so that CPU training is quick


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    commands.register(subparsers)
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


# Several runs in one process (resources.runs_per_job): two search trials of their own hyperparameters,
# with dropout (the global RNG) and generalization curves (sampling) on, checked against each run
# trained alone in a process of its own.
TRIALS = {1: {"learning_rate": 0.003, "tokens_per_batch": 256, "max_epochs": 1}, 2: {"learning_rate": 0.001, "tokens_per_batch": 384, "max_epochs": 1}}


def runs_command(data_dir: Path, directory: Path, name: str, seeds: list[int], architectures: tuple[str, ...] = ("Tf",), phase: str = "search") -> list[str]:
    """``stacklm train`` of the search trials ``seeds`` of ``architectures`` (one for all, or one
    per seed) in one process, its files under ``directory/name``: ``run<seed>``, ``state<seed>.pt``
    and ``run<seed>.log`` for Tf, ``run<seed>-<architecture>`` and so on for another; with ``phase``
    final, final runs of those seeds with the trials' hyperparameters."""
    runs = list(zip(architectures * len(seeds) if len(architectures) == 1 else architectures, seeds))

    def each(pattern: str) -> list[str]:
        return [str(directory / name / pattern.format(seed=seed if architecture == "Tf" else f"{seed}-{architecture.lower()}")) for architecture, seed in runs]

    return [sys.executable, "-c", RUNNER, "train", "--task", "question-formation", "--architecture", *architectures, "--data-dir", str(data_dir),
            "--settings", str(directory / "settings.json"), "--device", "cpu", "--threads", "1", "--phase", phase,
            "--seed", *map(str, seeds), *(("--trial", *map(str, seeds)) if phase == "search" else ()), "--hparams", *(str(directory / f"hp{seed}.json") for seed in seeds),
            "--out", *each("run{seed}"), "--checkpoint", *each("state{seed}.pt"), "--log", *each("run{seed}.log")]


@pytest.fixture(scope="module")
def alone(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each trial trained alone, by a process of its own."""
    directory = tmp_path_factory.mktemp("runs")
    (directory / "settings.json").write_text(json.dumps({
        "model": {"dropout": 0.1},
        "training": {"parameter_budget": 8000, "examples_per_checkpoint": 300, "progress_interval_s": 0},
        "evaluation": {"curve_examples": 20, "samples_per_input": 2},
    }))
    for seed, hyperparameters in TRIALS.items():
        (directory / f"hp{seed}.json").write_text(json.dumps(hyperparameters))
        subprocess.run(runs_command(data_dir, directory, "alone", [seed]), check=True, capture_output=True)
    return directory


def assert_runs_equal(directory: Path, name: str) -> None:
    """Curves, final parameters and training states of ``directory/name`` equal those of the runs trained alone."""
    for seed in TRIALS:
        assert_run_equal(directory / "alone", directory / name, str(seed))


def assert_run_equal(alone: Path, together: Path, stem: str) -> None:
    """The run ``run<stem>`` (state ``state<stem>``) of ``together`` equals that of ``alone``: curves, final parameters, training state."""
    timing = ["wall_time_s", "tokens_per_s", "code_version"]
    curves = [pq.read_table(group / f"run{stem}" / "train.parquet").drop(timing).to_pylist() for group in (alone, together)]
    assert curves[0] == curves[1] and len(curves[0]) >= 3
    parameters = [load_model(group / f"run{stem}" / "model.pt").parameters for group in (alone, together)]
    assert parameters[0].keys() == parameters[1].keys() and all(torch.equal(parameters[0][key], parameters[1][key]) for key in parameters[0])
    [state_alone], [state_together] = (list(group.glob(f"state{stem}.*.pt")) for group in (alone, together))
    assert state_alone.name == state_together.name  # the same fingerprint
    states = [checkpoint.load(path) for path in (state_alone, state_together)]
    for state in states:
        del state["counters"]["wall_time_s"]
    assert_same_values(states[0], states[1])


def assert_same_values(first: object, second: object) -> None:
    if isinstance(first, torch.Tensor):
        assert isinstance(second, torch.Tensor) and torch.equal(first, second)
    elif isinstance(first, dict):
        assert isinstance(second, dict) and first.keys() == second.keys()
        for key in first:
            assert_same_values(first[key], second[key])
    elif isinstance(first, (list, tuple)):
        assert isinstance(second, (list, tuple)) and len(first) == len(second)
        for one, other in zip(first, second):
            assert_same_values(one, other)
    else:
        assert first == second


@pytest.mark.e2e
def test_runs_trained_in_one_process_equal_each_run_trained_alone(data_dir: Path, alone: Path) -> None:
    together = subprocess.run(runs_command(data_dir, alone, "together", list(TRIALS)), check=True, capture_output=True, text=True)
    assert "run 2 of 2: Tf, seed 2" in together.stderr and "checkpoint 1:" not in together.stderr  # the runs' lines are in their logs
    assert_runs_equal(alone, "together")
    logs = [(alone / "together" / f"run{seed}.log").read_text() for seed in TRIALS]
    assert all(log.startswith("epoch 1 batch 1/") and "checkpoint 1:" in log for log in logs)
    assert {row["trial"] for seed in TRIALS for row in pq.read_table(alone / "together" / f"run{seed}" / "train.parquet").to_pylist()} == set(TRIALS)


@pytest.mark.e2e
def test_runs_of_several_architectures_in_one_process_equal_each_run_trained_alone(data_dir: Path, alone: Path) -> None:
    """Trial 1 of Tf and of LSTM (the same seed) together, as a group of a task's runs spans architectures."""
    subprocess.run(runs_command(data_dir, alone, "alone", [1], ("LSTM",)), check=True, capture_output=True)
    together = subprocess.run(runs_command(data_dir, alone, "architectures", [1, 1], ("Tf", "LSTM")), check=True, capture_output=True, text=True)
    assert "run 1 of 2: Tf, seed 1" in together.stderr and "run 2 of 2: LSTM, seed 1" in together.stderr
    for stem in ("1", "1-lstm"):
        assert_run_equal(alone / "alone", alone / "architectures", stem)
    architectures = [{row["architecture"] for row in pq.read_table(alone / "architectures" / f"run{stem}" / "train.parquet").to_pylist()} for stem in ("1", "1-lstm")]
    assert architectures == [{"Tf"}, {"LSTM"}]


@pytest.mark.e2e
def test_a_killed_process_of_several_runs_resumes_each_run_and_retrains_none_that_finished(data_dir: Path, alone: Path) -> None:
    command = runs_command(data_dir, alone, "killed", list(TRIALS))
    killed = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert killed.stderr is not None
    for line in killed.stderr:
        if line.startswith("run 2 of 2"):
            break
    second_log = alone / "killed" / "run2.log"
    while "checkpoint 2:" not in (second_log.read_text() if second_log.exists() else ""):  # the line follows the saved state
        assert killed.poll() is None, "the second run ended before it was killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert (alone / "killed" / "run1" / "model.pt").exists() and not (alone / "killed" / "run2" / "model.pt").exists()
    (alone / "killed" / "run1" / "model.pt").unlink()  # Snakemake deletes the outputs of a killed job

    subprocess.run(command, check=True, capture_output=True)
    first, second = ((alone / "killed" / f"run{seed}.log").read_text().splitlines() for seed in TRIALS)
    assert first[0].startswith("resuming from") and not any(line.startswith(("epoch", "checkpoint")) for line in first)  # finished: not retrained
    assert second[0].startswith("resuming from") and "checkpoint 3:" in "\n".join(second) and not any(line.startswith("checkpoint 1:") for line in second)
    assert_runs_equal(alone, "killed")


@pytest.mark.e2e
def test_runs_evaluated_in_one_process_equal_each_run_evaluated_alone_and_a_failed_one_stops_none(data_dir: Path, alone: Path) -> None:
    subprocess.run(runs_command(data_dir, alone, "final", list(TRIALS), phase="final"), check=True, capture_output=True)

    def evaluate(runs: list[str], outs: list[str], logs: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", RUNNER, "evaluate", "--task", "question-formation", "--data-dir", str(data_dir),
                               "--settings", str(alone / "settings.json"), "--device", "cpu", "--threads", "1",
                               "--run", *(str(alone / "final" / run) for run in runs), "--out", *(str(alone / out) for out in outs),
                               "--log", *(str(alone / log) for log in logs)], capture_output=True, text=True)

    for seed in TRIALS:
        assert evaluate([f"run{seed}"], [f"alone{seed}.parquet"], [f"alone{seed}.log"]).returncode == 0
    together = evaluate(["run1", "missing", "run2"], ["together1.parquet", "missing.parquet", "together2.parquet"], ["1.log", "missing.log", "2.log"])
    assert together.returncode == 1 and "1 of 3 runs failed; the others are written." in together.stderr
    assert "run 3 of 3: " in together.stderr and "model file not found" in (alone / "missing.log").read_text()
    for seed in TRIALS:
        rows = [pq.read_table(alone / f"{group}{seed}.parquet").to_pylist() for group in ("alone", "together")]
        assert rows[0] == rows[1] and {(row["phase"], row["seed"]) for row in rows[0]} == {("final", seed)}
        assert (alone / f"{seed}.log").read_text() == (alone / f"alone{seed}.log").read_text() == ""
    assert not (alone / "missing.parquet").exists()


def test_a_failed_run_does_not_stop_the_others(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trained: list[int] = []

    def train_run(phase: str, planned: training.PlannedRun, *rest: object) -> None:
        trained.append(planned.seed)
        if planned.seed == 1:
            raise StacklmError("loss is nan at step 7")

    monkeypatch.setattr(training, "train_run", train_run)
    logs = [str(tmp_path / f"{seed}.log") for seed in (1, 2)]
    with pytest.raises(StacklmError, match="1 of 2 runs failed; the others are written. Tf, seed 1: loss is nan at step 7"):
        run("train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", str(data_dir), "--learning-rate", "0.001",
            "--tokens-per-batch", "256", "--seed", "1", "2", "--out", str(tmp_path / "a"), str(tmp_path / "b"), "--log", *logs)
    assert trained == [1, 2] and (tmp_path / "1.log").read_text() == "error: loss is nan at step 7\n"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--seed", "1", "2", "--out", "a"], "--out: 1 given for 2 --seed: one per seed, in the same order"),
        (["--seed", "1", "2", "--out", "a", "b", "--hparams", "x.json", "y.json", "z.json"], r"--hparams: 3 given for 2 --seed: .* \(or one for all\)"),
        (["--seed", "1", "2", "--out", "a", "b", "--log", "l"], "--log: 1 given"),
        (["--seed", "3", "3", "--out", "a", "b"], r"an architecture's seed is given twice \(Tf 3, Tf 3\)"),
        (["--architecture", "LSTM", "LSTM", "Tf", "--seed", "3", "4", "--out", "a", "b"], "--architecture: 3 given for 2 --seed: .* \\(or one for all\\)"),
    ],
)
def test_the_options_of_several_runs_are_one_per_seed(flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("x.json", "y.json", "z.json"):
        (tmp_path / name).write_text(json.dumps({"learning_rate": 0.001, "tokens_per_batch": 256, "max_epochs": 1}))
    base = ["train", "--task", "question-formation", "--data-dir", str(tmp_path)] + ([] if "--architecture" in flags else ["--architecture", "Tf"])
    if "--hparams" not in flags:
        base += ["--learning-rate", "0.001", "--tokens-per-batch", "256"]
    flags = [str(tmp_path / flag) if flag.endswith(".json") else flag for flag in flags]
    assert cli.main(base + flags) == 2
    assert re.search(message, capsys.readouterr().err)
