import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest

from stacklm.evaluation.command import evaluation_mirror
from stacklm.evaluation.metrics import MetricValue
from stacklm.tracking.command import register
from stacklm.tracking.mlflow_mirror import MirroredRun, TrackingSettings, TrackingWarning, mirror
from stacklm.tracking.records import RunMetadata
from stacklm.training.command import training_mirror
from stacklm.training.loop import CheckpointRecord, TrainResult

METADATA = RunMetadata(
    task="question-formation", architecture="Tf", phase="search", trial=4, seed=7, learning_rate=1e-4, tokens_per_batch=900,
    parameters=1234, data_version="cd" * 32, code_version="0.1.0", wall_time_s=2.0, tokens_per_s=500.0, config="{}",
)
RESULT = TrainResult(
    curve=tuple(CheckpointRecord(index, index, 5 * index, 100 * index, 1e-4, 4.0 / index, 3.0 / index, True) for index in (1, 2, 3)),
    best_validation_cross_entropy=1.0, stopped_early=False, epochs=3, steps=15, wall_time_s=2.0, tokens_per_s=500.0,
)


@pytest.fixture(autouse=True)
def quick_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(port: int, endpoint: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/2.0/mlflow/{endpoint}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def get(port: int, endpoint: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/2.0/mlflow/{endpoint}", timeout=10) as response:
        return json.load(response)


def port_is_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_runs_mirrored_to_sqlite_are_found_through_a_real_mlflow_server(tmp_path: Path) -> None:
    database = tmp_path / "mlflow" / "mlflow.db"
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps({"tasks": ["question-formation", "passivization"], "tracking": {"uri": f"sqlite:///{database}"}}))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    arguments = parser.parse_args(["tracking", "init", "--settings", str(settings_file)])
    assert arguments.func(arguments) == 0 and database.exists()
    assert arguments.func(arguments) == 0  # a second init finds the store and the experiments
    settings = TrackingSettings(uri=f"sqlite:///{database}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrackingWarning)
        run_id = mirror(settings, training_mirror(METADATA, {"training": {"max_epochs": 5}}, RESULT))
        rows = [MetricValue("test", None, "full_accuracy", 0.875), MetricValue("generalization", None, "log_ratio", -1.5)]
        assert mirror(settings, evaluation_mirror(METADATA, rows)) == run_id
        assert mirror(settings, training_mirror(METADATA, {"training": {"max_epochs": 5}}, RESULT)) != run_id  # a rerun replaces

    port = free_port()
    environment = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("mlflow")), "server", "--backend-store-uri", f"sqlite:///{database}",
         "--default-artifact-root", (tmp_path / "artifacts").as_uri(), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=environment, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not become healthy"
                time.sleep(0.5)
        experiments = post(port, "experiments/search", {"max_results": 10})["experiments"]
        identifier = next(experiment["experiment_id"] for experiment in experiments if experiment["name"] == "question-formation")
        assert "passivization" in {experiment["name"] for experiment in experiments}
        found = post(port, "runs/search", {"experiment_ids": [identifier], "filter": "tags.`stacklm.run` = 'question-formation/Tf/search/trial-4'"})
        assert len(found["runs"]) == 1  # the replaced run is deleted
        run = found["runs"][0]
        params = {param["key"]: param["value"] for param in run["data"]["params"]}
        assert params["learning_rate"] == "0.0001" and params["trial"] == "4" and params["settings.training.max_epochs"] == "5"
        history = get(port, f"metrics/get-history?run_id={run['info']['run_id']}&metric_key=validation_cross_entropy")["metrics"]
        assert sorted((point["step"], point["value"]) for point in history) == [(100, 3.0), (200, 1.5), (300, 1.0)]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    assert not port_is_open(port)


def test_an_unreachable_store_warns_once_and_returns_nothing(tmp_path: Path) -> None:
    settings = TrackingSettings(uri=f"http://127.0.0.1:{free_port()}", request_retries=0, request_timeout_s=2)
    with pytest.warns(TrackingWarning) as caught:
        assert mirror(settings, training_mirror(METADATA, {}, RESULT)) is None
    assert len(caught) == 1 and "Parquet records are complete" in str(caught[0].message)


def test_disabled_tracking_sends_nothing(tmp_path: Path) -> None:
    settings = TrackingSettings(enabled=False, uri=f"sqlite:///{tmp_path / 'never.db'}")
    assert mirror(settings, MirroredRun("t", "k", {}, {}, {}, replace=False)) is None
    assert not (tmp_path / "never.db").exists()


def test_relative_sqlite_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert TrackingSettings(uri="sqlite:///results/mlflow.db").resolved_uri() == f"sqlite:///{tmp_path}/results/mlflow.db"
    assert TrackingSettings(uri="sqlite:////abs/m.db").resolved_uri() == "sqlite:////abs/m.db"
