"""``stacklm tracking init`` and ``sync``: runs written as Parquet, mirrored into a real MLflow
store (their files as artifacts, or their folder as a tag), read back through a real ``mlflow
server``; a final run's model loaded back through MLflow's own API; reruns, changed runs, an
unreachable store and disabled tracking."""

import math
import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from stacklm.errors import StacklmError, UsageError
from stacklm.evaluation.metrics import MetricValue
from stacklm.models.registry import build_model
from stacklm.tasks import get_task
from stacklm.tracking.finished_run import save_trained_model
from stacklm.workflow.tracking import register
from stacklm.tracking.mlflow_mirror import TrackingSettings
from stacklm.tracking.records import RunMetadata, curve_table, metrics_table, write_table
from stacklm.training.run_files import load_model, rebuild_model
from stacklm.training.run_state import CheckpointRecord

SEARCH = RunMetadata(
    task="question-formation", architecture="Tf", phase="search", trial=4, seed=4, learning_rate=1e-4, tokens_per_batch=900,
    parameters=1234, data_version="cd" * 32, code_version="0.1.0", wall_time_s=2.0, tokens_per_s=500.0,
    config=json.dumps({"training": {"max_epochs": 5}}),
)
COMMIT = "0123456789abcdef" * 2 + "01234567"
FINAL = replace(SEARCH, phase="final", trial=None, seed=1, wall_time_s=3.0, code_version=f"0.1.0+g{COMMIT}",
                config=json.dumps({"model": {"dropout": 0.1}, "built_model": {"width": 8, "dropout": 0.0}}))
FINISHED_S = 1_790_000_000.25  # when the final run's train.parquet was written
CURVE = [CheckpointRecord(index, index, 5 * index, 100 * index, 1e-4, 4.0 / index, 3.0 / index, True) for index in (1, 2, 3)]
FINAL_METRICS = [MetricValue("test", None, "full_accuracy", 0.875), MetricValue("generalization", None, "log_ratio", -1.5)]
VOCABULARY = ("the", "newt", "can", "see", "quest", "decl")
SEARCH_KEY = "question-formation/Tf/search/trial-4"
FINAL_KEY = "question-formation/Tf/final/seed-1"


@pytest.fixture(autouse=True)
def quick_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


def tracking(*arguments: str | Path) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    parsed = parser.parse_args(["tracking", *map(str, arguments)])
    return parsed.func(parsed)


def write_settings(folder: Path, tracking_settings: dict) -> Path:
    path = folder / "settings.json"
    path.write_text(json.dumps({"tasks": ["question-formation", "passivization"], "cfl": {"languages": []}, "tracking": tracking_settings}))
    return path


@pytest.fixture
def runs(tmp_path: Path) -> tuple[list[Path], list[Path]]:
    """A search run (its curve) and a final run (its curve and metrics), as the commands write them."""
    search, final = tmp_path / "runs" / "search", tmp_path / "runs" / "final"
    write_table(curve_table(CURVE, SEARCH), search / "train.parquet")
    write_table(curve_table(CURVE[:2], FINAL), final / "train.parquet")
    os.utime(final / "train.parquet", (FINISHED_S, FINISHED_S))
    write_table(metrics_table(FINAL_METRICS, FINAL), final / "metrics.parquet")
    write_final_model(final / "model.pt", FINAL)
    (tmp_path / "logs").mkdir()
    for name in ("search-train", "final-train", "final-evaluate"):
        (tmp_path / "logs" / f"{name}.log").write_text(f"log of {name}\n")
    return [search / "train.parquet", final / "train.parquet"], [final / "metrics.parquet"]


def write_final_model(path: Path, metadata: RunMetadata) -> None:
    """A small trained model's ``model.pt``, as ``stacklm train`` writes it."""
    model = build_model(metadata.architecture, len(VOCABULARY) + 1, parameter_budget=3_000, generator=torch.Generator().manual_seed(0))
    save_trained_model(path, model, VOCABULARY, metadata, json.loads(metadata.config))


def sync(settings: Path, runs: tuple[list[Path], list[Path]], out: Path) -> dict[str, str]:
    curves, metrics = runs
    logs = curves[0].parents[2] / "logs"
    assert tracking(
        "sync", "--settings", settings, "--experiment", "question-formation", "--curves", *curves, "--metrics", *metrics,
        "--curve-logs", logs / "search-train.log", logs / "final-train.log", "--metrics-logs", logs / "final-evaluate.log", "--out", out,
    ) == 0
    return json.loads(out.read_text())


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


def tags(run: dict) -> dict[str, str]:
    return {tag["key"]: tag["value"] for tag in run["data"]["tags"]}


def port_is_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def run_names(database: Path) -> list[tuple[str, str]]:
    """Every run in the store, deleted ones included: (its stacklm.run key, lifecycle stage)."""
    with sqlite3.connect(database) as store:
        return sorted(store.execute(
            "SELECT tags.value, runs.lifecycle_stage FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid AND tags.key = 'stacklm.run'"
        ))


@pytest.mark.e2e
def test_runs_synced_from_parquet_are_found_through_a_real_mlflow_server(tmp_path: Path, runs: tuple[list[Path], list[Path]]) -> None:
    database = tmp_path / "mlflow" / "mlflow.db"
    settings = write_settings(tmp_path, {"uri": f"sqlite:///{database}"})
    assert tracking("init", "--settings", settings) == 0 and database.exists()
    assert tracking("init", "--settings", settings) == 0  # a second init finds the store and the experiments
    manifest = sync(settings, runs, tmp_path / "question-formation.json")
    assert set(manifest) == {SEARCH_KEY, FINAL_KEY}

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
        listed = post(port, "runs/search", {"experiment_ids": [identifier]})["runs"]
        found = {tags(run)["stacklm.run"]: run for run in listed}
        assert len(listed) == 2 and set(found) == {SEARCH_KEY, FINAL_KEY}  # one run per key
        assert {name: run["info"]["run_id"] for name, run in found.items()} == manifest
        # short names (the experiment names the task), task and architecture as tags
        assert {run["info"]["run_name"] for run in listed} == {"Tf search trial-4", "Tf final seed-1"}
        assert {key: tags(found[FINAL_KEY])[key] for key in ("task", "architecture", "phase", "seed")} == {
            "task": "question-formation", "architecture": "Tf", "phase": "final", "seed": "1"}
        assert tags(found[SEARCH_KEY])["trial"] == "4" and "seed" not in tags(found[SEARCH_KEY])

        search = found[SEARCH_KEY]
        params = {param["key"]: param["value"] for param in search["data"]["params"]}
        assert params["learning_rate"] == "0.0001" and params["trial"] == "4" and params["settings.training.max_epochs"] == "5"
        assert params["tokens_per_batch"] == "900" and params["data_version"] == "cd" * 32 and "config" not in params
        metrics = {metric["key"]: metric["value"] for metric in search["data"]["metrics"]}
        assert metrics["best_validation_cross_entropy"] == 1.0 and metrics["steps"] == 15 and metrics["epochs"] == 3
        assert metrics["wall_time_s"] == 2.0 and metrics["tokens_per_s"] == 500.0 and "test/full_accuracy" not in metrics
        history = get(port, f"metrics/get-history?run_id={manifest[SEARCH_KEY]}&metric_key=curve/validation_cross_entropy")["metrics"]
        assert sorted((point["step"], point["value"]) for point in history) == [(100, 3.0), (200, 1.5), (300, 1.0)]
        history = get(port, f"metrics/get-history?run_id={manifest[SEARCH_KEY]}&metric_key=curve/train_loss")["metrics"]
        assert sorted((point["step"], point["value"]) for point in history) == [(100, 4.0), (200, 2.0), (300, 4.0 / 3)]

        final = {metric["key"]: metric["value"] for metric in found[FINAL_KEY]["data"]["metrics"]}
        assert final["test/full_accuracy"] == 0.875 and final["generalization/log_ratio"] == -1.5
        assert final["best_validation_cross_entropy"] == 1.5 and final["wall_time_s"] == 3.0
        final_tags = tags(found[FINAL_KEY])
        assert final_tags["mlflow.source.git.commit"] == COMMIT and "mlflow.source.git.commit" not in tags(search)
        assert final_tags["stacklm.folder"] == str(tmp_path / "runs" / "final")
        # training's own times: ended when train.parquet was written, wall_time_s before
        assert found[FINAL_KEY]["info"]["end_time"] == 1_790_000_000_250 and found[FINAL_KEY]["info"]["start_time"] == 1_790_000_000_250 - 3000
        # the built model's config, not the options it was built under, is model.*
        final_params = {param["key"]: param["value"] for param in found[FINAL_KEY]["data"]["params"]}
        assert final_params["model.dropout"] == "0.0" and final_params["settings.model.dropout"] == "0.1" and final_params["model.width"] == "8"

        # the run's files as artifacts, the same bytes
        listing = get(port, f"artifacts/list?run_id={manifest[FINAL_KEY]}")["files"]
        assert sorted(item["path"] for item in listing) == ["logs", "metrics.parquet", "model.pt", "train.parquet"]
        logs = [get(port, f"artifacts/list?run_id={manifest[FINAL_KEY]}&path=logs/{job}")["files"] for job in ("train", "evaluate")]
        assert [[item["path"] for item in files] for files in logs] == [["logs/train/final-train.log"], ["logs/evaluate/final-evaluate.log"]]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/get-artifact?run_id={manifest[FINAL_KEY]}&path=model.pt", timeout=10) as response:
            assert response.read() == (tmp_path / "runs" / "final" / "model.pt").read_bytes()
        assert sorted(item["path"] for item in get(port, f"artifacts/list?run_id={manifest[SEARCH_KEY]}")["files"]) == ["logs", "train.parquet"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    assert not port_is_open(port)


@pytest.mark.e2e
def test_a_rerun_keeps_unchanged_runs_and_replaces_exactly_a_changed_one(
    tmp_path: Path, runs: tuple[list[Path], list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    database = tmp_path / "mlflow.db"
    settings = write_settings(tmp_path, {"uri": f"sqlite:///{database}"})
    assert tracking("init", "--settings", settings) == 0
    first = sync(settings, runs, tmp_path / "first.json")
    searches = []
    original = MlflowClient.search_runs

    def counted(client: MlflowClient, *args: object, **kwargs: object) -> object:
        searches.append(args)
        return original(client, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "search_runs", counted)

    assert sync(settings, runs, tmp_path / "again.json") == first
    assert run_names(database) == [(FINAL_KEY, "active"), (SEARCH_KEY, "active")]  # nothing created, nothing deleted
    assert len(searches) == 1  # one search for the experiment, not one per run

    write_table(metrics_table([replace(FINAL_METRICS[0], value=0.5)], FINAL), runs[1][0])  # the final run is evaluated again
    changed = sync(settings, runs, tmp_path / "changed.json")
    assert changed[SEARCH_KEY] == first[SEARCH_KEY] and changed[FINAL_KEY] != first[FINAL_KEY]
    assert run_names(database) == [(FINAL_KEY, "active"), (FINAL_KEY, "deleted"), (SEARCH_KEY, "active")]
    metrics = MlflowClient(tracking_uri=f"sqlite:///{database}").get_run(changed[FINAL_KEY]).data.metrics
    assert metrics["test/full_accuracy"] == 0.5 and "generalization/log_ratio" not in metrics


@pytest.mark.e2e
def test_without_artifacts_a_run_leads_to_its_folder_and_turning_them_on_replaces_it(
    tmp_path: Path, runs: tuple[list[Path], list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # nothing may land in the working directory's ./mlruns
    database = tmp_path / "mlflow" / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{database}")
    settings = write_settings(tmp_path, {"uri": f"sqlite:///{database}", "artifacts": False})
    assert tracking("init", "--settings", settings) == 0
    folders_only = sync(settings, runs, tmp_path / "folders.json")
    assert client.get_run(folders_only[FINAL_KEY]).data.tags["stacklm.folder"] == str(tmp_path / "runs" / "final")
    assert client.list_artifacts(folders_only[FINAL_KEY]) == [] and not (tmp_path / "mlflow" / "artifacts").exists()

    settings = write_settings(tmp_path, {"uri": f"sqlite:///{database}", "artifacts": True})
    with_files = sync(settings, runs, tmp_path / "files.json")
    assert set(with_files.values()).isdisjoint(folders_only.values())  # the choice changed: every run replaced
    assert {item.path for item in client.list_artifacts(with_files[FINAL_KEY])} == {"logs", "metrics.parquet", "model.pt", "train.parquet"}
    stored = list((tmp_path / "mlflow" / "artifacts" / "question-formation").glob("*/artifacts/model.pt"))
    assert [path.read_bytes() for path in stored] == [(tmp_path / "runs" / "final" / "model.pt").read_bytes()]
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_without_mlflow_installed_the_rules_fail_naming_the_extra(
    tmp_path: Path, runs: tuple[list[Path], list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [name for name in sys.modules if name == "mlflow" or name.startswith("mlflow.")] + ["mlflow"]:
        monkeypatch.setitem(sys.modules, name, None)  # every import of MLflow fails, as in a venv without the extra
    settings = write_settings(tmp_path, {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    with pytest.raises(StacklmError, match=r"MLflow is not installed: pip install -e '\.\[tracking\]' -c constraints.txt"):
        tracking("init", "--settings", settings)
    assert not (tmp_path / "mlflow.db").exists()


def test_an_unreachable_store_is_an_error_naming_it_quickly(tmp_path: Path, runs: tuple[list[Path], list[Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(variable)  # the settings' retries and timeout apply
    uri = f"http://127.0.0.1:{free_port()}"
    settings = write_settings(tmp_path, {"uri": uri, "request_retries": 0, "request_timeout_s": 2})
    start = time.monotonic()
    for action in (["init"], ["sync", "--experiment", "question-formation", "--curves", *runs[0], "--out", tmp_path / "manifest.json"]):
        with pytest.raises(StacklmError, match="Parquet records are complete") as caught:
            tracking(*action, "--settings", settings)
        assert uri in str(caught.value) and "rerunning the rule" in str(caught.value)
    assert time.monotonic() - start < 20 and not (tmp_path / "manifest.json").exists()


def test_sync_refuses_a_sqlite_store_that_init_has_not_created(tmp_path: Path, runs: tuple[list[Path], list[Path]]) -> None:
    settings = write_settings(tmp_path, {"uri": f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"})
    with pytest.raises(StacklmError, match="tracking init"):
        sync(settings, runs, tmp_path / "manifest.json")
    assert not (tmp_path / "mlflow").exists()


def test_disabled_tracking_writes_an_empty_manifest_and_touches_no_store(tmp_path: Path, runs: tuple[list[Path], list[Path]]) -> None:
    settings = write_settings(tmp_path, {"enabled": False, "uri": f"sqlite:///{tmp_path / 'mlflow' / 'never.db'}"})
    assert tracking("init", "--settings", settings) == 0
    assert sync(settings, runs, tmp_path / "manifest.json") == {}
    assert not (tmp_path / "mlflow").exists()


def test_an_experiment_of_no_task_or_language_is_refused(tmp_path: Path, runs: tuple[list[Path], list[Path]]) -> None:
    settings = write_settings(tmp_path, {"enabled": False})
    with pytest.raises(StacklmError, match="'german-passivization' is neither a task, a CFL language nor the PTB experiment"):
        tracking("sync", "--settings", settings, "--experiment", "german-passivization", "--curves", *runs[0], "--out", tmp_path / "m.json")


def test_relative_sqlite_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert TrackingSettings(uri="sqlite:///results/mlflow.db").resolved_uri() == f"sqlite:///{tmp_path}/results/mlflow.db"
    assert TrackingSettings(uri="sqlite:////abs/m.db").resolved_uri() == "sqlite:////abs/m.db"
    assert TrackingSettings(uri="http://127.0.0.1:5000").sqlite_path() is None


def stored_runs(database: Path, experiment: str) -> dict[str, tuple[dict, dict, dict]]:
    """Each run of ``experiment`` in the store by its key: its tags, params and metrics."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{database}")
    found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return {run.data.tags["stacklm.run"]: (run.data.tags, run.data.params, run.data.metrics) for run in found}


@pytest.mark.e2e
def test_experiments_synced_in_one_call_equal_a_call_each(tmp_path: Path, runs: tuple[list[Path], list[Path]]) -> None:
    """resources.runs_per_job > 1: one `stacklm tracking sync` of two experiments, each with the files
    after its --experiment, mirrors what two calls mirror, and writes each experiment's manifest."""
    curves, metrics = runs
    other = tmp_path / "runs" / "passivization"
    write_table(curve_table(CURVE, replace(FINAL, task="passivization")), other / "train.parquet")
    write_table(metrics_table(FINAL_METRICS, replace(FINAL, task="passivization")), other / "metrics.parquet")
    write_final_model(other / "model.pt", replace(FINAL, task="passivization"))
    logs = tmp_path / "logs"
    question = ["--curves", *curves, "--metrics", *metrics, "--curve-logs", logs / "search-train.log", logs / "final-train.log",
                "--metrics-logs", logs / "final-evaluate.log"]
    passivization = ["--curves", other / "train.parquet", "--metrics", other / "metrics.parquet", "--curve-logs", "--metrics-logs"]  # no logs
    stores = {}
    for way in ("alone", "together"):
        (tmp_path / way).mkdir()
        database = tmp_path / way / "mlflow.db"
        settings = write_settings(tmp_path / way, {"uri": f"sqlite:///{database}"})
        assert tracking("init", "--settings", settings) == 0
        manifests = [tmp_path / way / "question-formation.json", tmp_path / way / "passivization.json"]
        if way == "alone":
            assert tracking("sync", "--settings", settings, "--experiment", "question-formation", *question, "--out", manifests[0]) == 0
            assert tracking("sync", "--settings", settings, "--experiment", "passivization", *passivization, "--out", manifests[1]) == 0
        else:
            assert tracking("sync", "--settings", settings, "--experiment", "question-formation", *question,
                            "--experiment", "passivization", *passivization, "--out", *manifests) == 0
        stores[way] = {name: stored_runs(database, name) for name in ("question-formation", "passivization")}
        assert [set(json.loads(path.read_text())) for path in manifests] == [set(stores[way][name]) for name in ("question-formation", "passivization")]
    assert set(stores["together"]["question-formation"]) == {SEARCH_KEY, FINAL_KEY}
    assert set(stores["together"]["passivization"]) == {"passivization/Tf/final/seed-1"}
    assert stores["together"] == stores["alone"]
    settings = write_settings(tmp_path, {"enabled": False})
    with pytest.raises(UsageError, match="--metrics: given 1 times for 2 --experiment"):  # files of one experiment only: refused
        tracking("sync", "--settings", settings, "--experiment", "question-formation", "--curves", *curves, "--metrics", *metrics,
                 "--experiment", "passivization", "--curves", other / "train.parquet", "--out", tmp_path / "a.json", tmp_path / "b.json")
    with pytest.raises(UsageError, match="--out: 1 given for 2 --experiment"):
        tracking("sync", "--settings", settings, "--experiment", "question-formation", *question, "--experiment", "passivization", *passivization,
                 "--out", tmp_path / "a.json")


@pytest.mark.e2e
def test_a_final_runs_model_loads_back_through_mlflow_and_gives_the_trained_models_outputs(
    tmp_path: Path, runs: tuple[list[Path], list[Path]]
) -> None:
    import mlflow
    import mlflow.pytorch
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings = write_settings(tmp_path, {"uri": uri})
    assert tracking("init", "--settings", settings) == 0
    manifest = sync(settings, runs, tmp_path / "manifest.json")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("question-formation").experiment_id
    # the Models tab: one model, the final run's (a search run has no results, and no model)
    assert [model.source_run_id for model in client.search_logged_models([experiment])] == [manifest[FINAL_KEY]]

    mlflow.set_tracking_uri(uri)
    loaded = mlflow.pytorch.load_model(f"runs:/{manifest[FINAL_KEY]}/model")
    trained = rebuild_model(load_model(tmp_path / "runs" / "final" / "model.pt"), get_task("question-formation"))
    tokens = torch.tensor([[0, 1, 2, 3, 4], [1, 0, 3, 2, 5]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), trained(tokens), rtol=0, atol=0)
    assert not loaded.training
    folder = Path(mlflow.artifacts.download_artifacts(f"runs:/{manifest[FINAL_KEY]}/model", dst_path=str(tmp_path / "download")))
    assert (folder / "extra_files" / "vocabulary.txt").read_text().split("\n")[:-1] == list(VOCABULARY)
    assert (folder / "code" / "stacklm" / "models" / "transformer.py").is_file()  # the model's code travels with it
    # a fresh interpreter, as a user loads it: the model's classes come from the code logged with it
    script = (
        "import sys, mlflow, mlflow.pytorch, torch\n"
        f"mlflow.set_tracking_uri({uri!r})\n"
        f"model = mlflow.pytorch.load_model('runs:/{manifest[FINAL_KEY]}/model')\n"
        f"torch.save(model(torch.tensor({tokens.tolist()})).detach(), {str(tmp_path / 'outputs.pt')!r})\n"
        "print(sys.modules[type(model).__module__].__file__)\n"
    )
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"} | {"MLFLOW_DISABLE_TELEMETRY": "true"}
    loading = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    assert loading.returncode == 0, loading.stderr[-3000:]
    assert "/code/stacklm/models/" in loading.stdout.strip().splitlines()[-1]
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "outputs.pt"), trained(tokens), rtol=0, atol=0)

    # the source tags the UI shows as Source and Version
    tags = client.get_run(manifest[FINAL_KEY]).data.tags
    assert (tags["mlflow.source.name"], tags["mlflow.source.type"], tags["mlflow.source.git.commit"]) == ("stacklm train", "LOCAL", COMMIT)
    assert client.get_run(manifest[FINAL_KEY]).info.end_time == 1_790_000_000_250  # logging the model ended no run at its own time

    write_table(metrics_table([replace(FINAL_METRICS[0], value=0.5)], FINAL), runs[1][0])  # evaluated again: the run and its model replaced
    changed = sync(settings, runs, tmp_path / "changed.json")
    assert [model.source_run_id for model in client.search_logged_models([experiment])] == [changed[FINAL_KEY]] != [manifest[FINAL_KEY]]


@pytest.mark.e2e
def test_a_model_file_that_is_not_a_model_is_named(tmp_path: Path, runs: tuple[list[Path], list[Path]]) -> None:
    (tmp_path / "runs" / "final" / "model.pt").write_bytes(b"not a model")
    settings = write_settings(tmp_path, {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    assert tracking("init", "--settings", settings) == 0
    with pytest.raises(StacklmError, match="final/model.pt"):
        sync(settings, runs, tmp_path / "manifest.json")


@pytest.mark.e2e
def test_an_evaluated_ptb_restarts_model_loads_back_through_mlflow(tmp_path: Path) -> None:
    import mlflow.pytorch

    from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig
    from stacklm.tracking.mlflow_mirror import initialize_store
    from stacklm.tracking.mlflow_mirror import sync as sync_runs
    from stacklm.tracking.records import ptb_curve_table, ptb_metric_rows, ptb_metrics_table
    from stacklm.tracking.runs import ptb_runs
    from stacklm.training.run_files import SavedModel, load_model, rebuild_ptb_model, save_model
    from tests.tracking.ptb_epochs import ptb_epoch

    config = PtbModelConfig(vocabulary_size=len(VOCABULARY) + 1, hidden_units=4, stack=LimitedNondeterministic(2, 2, renormalizing=True, window=3))
    model = PtbLanguageModel(config)
    model.initialize(torch.Generator().manual_seed(0))
    metadata = replace(SEARCH, task="ptb", architecture="rns-2-2", trial=None, seed=1, code_version=f"0.1.0+g{COMMIT}")
    run = tmp_path / "ptb" / "rns-2-2" / "1"
    save_model(run / "model.pt", SavedModel("ptb", "rns-2-2", VOCABULARY, config, model.state_dict(), {}, {}, validation_cross_entropy=math.log(40.0)))
    write_table(ptb_curve_table([ptb_epoch(1, 1.0, 4.0, 40.0, True)], metadata, 1e-4), run / "train.parquet")
    write_table(ptb_metrics_table(ptb_metric_rows(40.0, 41.0, None), metadata, 1e-4), run / "metrics.parquet")
    settings = TrackingSettings(uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    initialize_store(settings, ["ptb"])
    manifest = sync_runs(settings, "ptb", ptb_runs("ptb", [run / "train.parquet"], [run / "metrics.parquet"]))

    mlflow.set_tracking_uri(settings.resolved_uri())
    loaded = mlflow.pytorch.load_model(f"runs:/{manifest['ptb/rns-2-2/restart-1']}/model")
    trained = rebuild_ptb_model(load_model(run / "model.pt"))
    inputs = torch.tensor([[0, 1, 2, 3], [4, 5, 0, 1]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(inputs, loaded.initial_state(2))[0], trained(inputs, trained.initial_state(2))[0], rtol=0, atol=0)
