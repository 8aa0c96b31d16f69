"""Live mirroring: a watcher logs a training run's checkpoints to MLflow while it trains, and
nothing it meets (no store, no MLflow) can fail or hold up the training job."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import stacklm
from stacklm.data.examples import write_examples
from stacklm.tracking.live import ENVIRONMENT, LIVE_TAG, watch
from stacklm.tracking.mlflow_mirror import TrackingSettings, initialize_store

RECORD = {"checkpoint": 1, "epoch": 1, "step": 3, "examples_seen": 100, "learning_rate_used": 0.01, "train_loss": 2.5,
          "validation_cross_entropy": 2.0, "is_best": True, "scores": {"test_full_accuracy": 0.25}}  # fmt: skip
RUN = {"experiment": "question-formation", "key": "question-formation/Tf/final/seed-1", "name": "Tf final seed-1",
       "tags": {"task": "question-formation", "architecture": "Tf", "phase": "final", "seed": "1"}}  # fmt: skip


@pytest.fixture(autouse=True)
def quiet_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.mark.e2e
def test_the_watcher_logs_each_checkpoint_once_until_training_ends(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (experiment_id,) = initialize_store(TrackingSettings(uri=uri), ["question-formation"])
    curve = [RECORD]
    reads = []

    def read_curve() -> list[dict]:
        reads.append(len(curve))
        return list(curve)

    def pause() -> None:  # a checkpoint is taken while the watcher waits
        curve.append(RECORD | {"checkpoint": 2, "examples_seen": 200, "validation_cross_entropy": 1.5, "scores": {}})

    states = iter([True, False])
    run_id = watch(MlflowClient(tracking_uri=uri), experiment_id, RUN, read_curve, lambda: next(states), pause)
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.info.run_name == "Tf final seed-1 (live)" and run.info.status == "FINISHED" and reads == [1, 2]
    assert run.data.tags[LIVE_TAG] == "true" and run.data.tags["stacklm.run"] == RUN["key"] and run.data.tags["architecture"] == "Tf"
    history = sorted((point.step, point.value) for point in client.get_metric_history(run_id, "curve/validation_cross_entropy"))
    assert history == [(100, 2.0), (200, 1.5)]  # each checkpoint once
    assert [(point.step, point.value) for point in client.get_metric_history(run_id, "curve/learning_rate")] == [(100, 0.01), (200, 0.01)]
    assert [(point.step, point.value) for point in client.get_metric_history(run_id, "curve/test_full_accuracy")] == [(100, 0.25)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("live-data")
    sizes = stacklm.SplitSizes(train=300, validation=30, test=30, generalization=30)
    for name, examples in stacklm.generate_splits("question-formation", seed=0, sizes=sizes).items():
        write_examples(folder / f"{name}.tsv", examples)
    (folder / "settings.json").write_text(json.dumps({"training": {"parameter_budget": 20_000, "examples_per_checkpoint": 100}}))
    return folder


def train(data: Path, out: Path, uri: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stacklm.cli", "train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", str(data),
         "--settings", str(data / "settings.json"), "--learning-rate", "0.001", "--tokens-per-batch", "512", "--max-epochs", "1",
         "--device", "cpu", "--threads", "1", "--out", str(out)],
        env=os.environ | {ENVIRONMENT: uri, "MLFLOW_DISABLE_TELEMETRY": "true"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def wait_for(condition, timeout_s: float = 120) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the watcher did not finish"
        time.sleep(0.5)


@pytest.mark.e2e
def test_a_training_job_is_mirrored_live_into_an_initialised_store(data: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (experiment_id,) = initialize_store(TrackingSettings(uri=uri), ["question-formation"])
    result = train(data, tmp_path / "run", uri)
    assert result.returncode == 0, result.stderr[-3000:]
    client = MlflowClient(tracking_uri=uri)

    def finished() -> bool:
        runs = client.search_runs([experiment_id], filter_string=f"tags.`{LIVE_TAG}` = 'true'")
        return len(runs) == 1 and runs[0].info.status == "FINISHED"

    wait_for(finished)
    (run,) = client.search_runs([experiment_id])
    curve = pq.read_table(tmp_path / "run" / "train.parquet").to_pylist()
    history = sorted((point.step, point.value) for point in client.get_metric_history(run.info.run_id, "curve/validation_cross_entropy"))
    assert len(curve) >= 3 and history == [(row["examples_seen"], row["validation_cross_entropy"]) for row in curve]


@pytest.mark.e2e
def test_no_store_cannot_fail_training_and_the_watcher_creates_none(data: Path, tmp_path: Path) -> None:
    store = tmp_path / "never" / "mlflow.db"
    result = train(data, tmp_path / "run", f"sqlite:///{store}")
    assert result.returncode == 0 and (tmp_path / "run" / "model.pt").is_file(), result.stderr[-3000:]
    (log,) = (tmp_path / "run").glob("*.live.log")
    wait_for(lambda: "nothing mirrored live" in log.read_text())
    assert not store.parent.exists()
