"""The `ci` preset end to end through Snakemake: the real DAG, a real SQLite MLflow store,
real Parquet, rendered tables and figures.

Two copies of the workflow run side by side: A straight through; B killed while a model is
training (SIGINT to Snakemake's process group, as Ctrl-C in its terminal: Snakemake and the
training job stop, the lock is released, the checkpoint stays), then started again with the
same command. Both must end with the same tables. A's MLflow store (filled by the rule
tracking_sync from the runs' Parquet files) is then served and loaded in headless Chromium;
B's store is deleted, its report rebuilt, byte for byte, from Parquet alone, and the store
rebuilt by `--forcerun tracking`.

All tests share the two runs through one session fixture; `make test` runs `pytest -n 2
--dist loadfile`, which keeps this file's tests on one worker (xdist 3.8's loadgroup split
them across both, and each built the fixture).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

import stacklm.workflow.settings as resolution
from stacklm.tracking.runs import task_run_key
from tests.workflow.snakemake_runs import copy_workflow, run_snakemake, snakemake_command, snakemake_environment
from tests.workflow.test_dag import job_counts

RUN = ("--profile", "profiles/cpu", "--configfile", "test.yaml")
CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.e2e  # every test reads the two Snakemake runs of the session fixture


@dataclass(frozen=True)
class Pipelines:
    straight: Path  # run once, uninterrupted
    resumed: Path  # interrupted mid-training, then the same command again
    killed_while: str  # the run directory that was training when B was interrupted
    settings: resolution.ResolvedSettings


def wait_for_training(directory: Path, process: subprocess.Popen[str], timeout_s: float) -> str:
    """Poll until a model has a checkpoint but no model.pt yet; its run directory."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("the pipeline finished before any model was seen training")
        for checkpoint in (directory / "results" / "checkpoints").glob("*/*/*/*.pt"):  # {index}.{fingerprint}.pt
            task, architecture, phase = checkpoint.parts[-4:-1]
            run = Path("results", "runs", task, architecture, phase, checkpoint.name.split(".")[0])
            if not (directory / run / "model.pt").exists():
                return str(run)
        time.sleep(0.05)
    raise AssertionError(f"no model was training within {timeout_s} s")


@pytest.fixture(scope="session")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> Pipelines:
    root = tmp_path_factory.mktemp("pipelines")
    directories = []
    for name in ("straight", "resumed"):
        directory = copy_workflow(root / name)
        (directory / "test.yaml").write_text(yaml.safe_dump({"preset": "ci"}))
        directories.append(directory)
    straight, resumed = directories
    # One core each, side by side: the pair costs about one run on two cores.
    arguments = (*RUN, "--cores", "1")
    with open(straight / "snakemake.out", "w") as straight_log, open(resumed / "killed.out", "w") as killed_log:
        first = subprocess.Popen(
            snakemake_command(*arguments), cwd=straight, env=snakemake_environment(), stdout=straight_log, stderr=subprocess.STDOUT, text=True
        )
        second = subprocess.Popen(
            snakemake_command(*arguments),
            cwd=resumed,
            env=snakemake_environment(),
            stdout=killed_log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: Snakemake and the jobs it started
            # A background job of a non-interactive shell (`make test &`, a CI runner) inherits SIGINT
            # ignored, and so would Snakemake and its jobs: give them the default action back.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        killed_while = wait_for_training(resumed, second, timeout_s=300)
        os.killpg(second.pid, signal.SIGINT)
        assert second.wait(timeout=120) != 0
        assert first.wait(timeout=600) == 0, (straight / "snakemake.out").read_text()[-5000:]
    again = run_snakemake(resumed, *arguments)
    assert again.returncode == 0, (again.stdout + again.stderr)[-5000:]
    (resumed / "resumed.out").write_text(again.stdout + again.stderr)
    settings = resolution.resolve(yaml.safe_load((straight / "config.yaml").read_text()) | {"preset": "ci"})
    return Pipelines(straight, resumed, killed_while, settings)


def report_files(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted((directory / "results" / "report" / "tables").iterdir())
    }


def test_ci_run_writes_metrics_tables_figures_and_mlflow_runs(pipelines: Pipelines) -> None:
    directory, settings = pipelines.straight, pipelines.settings
    metrics = pd.read_parquet(directory / "results" / "metrics.parquet")
    runs = metrics[["task", "architecture", "seed"]].drop_duplicates()
    assert len(runs) == len(settings.tasks) * len(settings.architectures) * len(settings.final.seeds)
    assert set(metrics["phase"]) == {"final"}
    assert {"full_accuracy", "partial_accuracy", "log_ratio", "cross_entropy"} <= set(metrics["metric"])
    for task in settings.tasks:
        table = (directory / "results" / "report" / "tables" / f"{task}.tex").read_text()
        for name in settings.architectures:
            assert f"\n{name} & " in table
    assert (directory / "results" / "report" / "figures" / "figure3.png").read_bytes().startswith(b"\x89PNG")
    assert (directory / "results" / "report" / "figures" / "figure3.pdf").read_bytes().startswith(b"%PDF")
    assert "\\input{tables/" in (directory / "results" / "report" / "report.tex").read_text()
    names = mlflow_run_names(directory)
    trials = settings.search.trials
    assert len(names) == len(settings.tasks) * len(settings.architectures) * (trials + len(settings.final.seeds))
    assert names == manifest_runs(directory, settings)  # one run per key, no deleted one


def mlflow_run_names(directory: Path) -> set[str]:
    """The stacklm.run key of every run in the SQLite store, deleted ones included."""
    with sqlite3.connect(directory / "results" / "mlflow" / "mlflow.db") as store:
        return {key for (key,) in store.execute("SELECT value FROM tags WHERE key = 'stacklm.run'")}


def test_every_mlflow_run_holds_its_files_the_commit_and_its_training_times(pipelines: Pipelines) -> None:
    from mlflow.tracking import MlflowClient

    directory = pipelines.straight
    client = MlflowClient(tracking_uri=f"sqlite:///{directory / 'results' / 'mlflow' / 'mlflow.db'}")
    manifest = json.loads((directory / "results" / "tracking" / f"{pipelines.settings.tasks[0]}.json").read_text())
    for key, run_id in manifest.items():
        run = client.get_run(run_id)
        folder = Path(run.data.tags["stacklm.folder"])
        assert folder.parents[2] == directory.resolve() / "results" / "runs" / key.split("/")[0]
        curve = pq.read_table(folder / "train.parquet").to_pylist()
        assert task_run_key(*(curve[0][column] for column in ("task", "architecture", "phase", "trial", "seed"))) == key
        assert run.data.tags["mlflow.source.git.commit"] == curve[0]["code_version"].split("+g")[1]
        assert len(run.data.tags["mlflow.source.git.commit"]) == 40
        assert run.info.end_time - run.info.start_time == round(curve[0]["wall_time_s"] * 1000)
        files = {item.path for item in client.list_artifacts(run_id)}
        final = "/final/" in key
        assert files == {"model.pt", "train.parquet", "logs"} | ({"metrics.parquet"} if final else set())
        logs = {item.path for item in client.list_artifacts(run_id, "logs")}
        assert logs == {"logs/train"} | ({"logs/evaluate"} if final else set())  # the training job's log, and the evaluation's
        index = key.rsplit("-", 1)[1]
        assert [item.path for item in client.list_artifacts(run_id, "logs/train")] == [f"logs/train/{index}.log"]
        stored = Path(client.download_artifacts(run_id, "model.pt", str(directory / "downloads" / run_id)))
        assert stored.read_bytes() == (folder / "model.pt").read_bytes()
        built = json.loads(curve[0]["config"])["built_model"]
        assert run.data.params["model.dropout"] == json.dumps(built["dropout"])



def test_the_end_of_a_run_says_where_the_results_are_and_how_to_open_mlflow(pipelines: Pipelines) -> None:
    output = (pipelines.straight / "snakemake.out").read_text()
    assert "stacklm: the results are in\n  results/report/tables/<task>.{tex,md,html}" in output
    store = pipelines.straight.resolve() / "results" / "mlflow" / "mlflow.db"
    assert f"mlflow server --backend-store-uri sqlite:///{store} --host 127.0.0.1" in output


def manifest_runs(directory: Path, settings: resolution.ResolvedSettings) -> set[str]:
    """The run keys of every task's tracking_sync manifest."""
    return {key for task in settings.tasks for key in json.loads((directory / "results" / "tracking" / f"{task}.json").read_text())}


def test_killed_mid_training_then_rerun_ends_with_the_same_tables(pipelines: Pipelines) -> None:
    assert (pipelines.resumed / pipelines.killed_while / "model.pt").exists()
    # The rerun continued the interrupted model from its checkpoint rather than starting over.
    log = Path("logs", "train", *Path(pipelines.killed_while).parts[2:]).with_suffix(".log")
    assert "resuming from" in (pipelines.resumed / log).read_text()
    assert report_files(pipelines.resumed) == report_files(pipelines.straight)
    figure = Path("results", "report", "figures", "figure3.pdf")
    assert (pipelines.resumed / figure).read_bytes() == (pipelines.straight / figure).read_bytes()


def test_report_rebuilt_without_the_mlflow_store_is_identical(pipelines: Pipelines) -> None:
    directory = pipelines.resumed
    before = report_files(directory)
    document = directory / "results" / "report" / "report.tex"
    written = document.stat().st_mtime_ns
    shutil.rmtree(directory / "results" / "mlflow")
    result = run_snakemake(directory, *RUN, "--forcerun", "report")
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    output = result.stdout + result.stderr
    # "rule train:" would also match "localrule train:"
    assert "rule report:" in output and "rule train:" not in output and "rule evaluate:" not in output
    assert "rule tracking" not in output
    assert document.stat().st_mtime_ns > written
    assert not (directory / "results" / "mlflow").exists()
    assert report_files(directory) == before

    # the store is rebuilt from the Parquet files: init, then every experiment's sync; no model is retrained
    result = run_snakemake(directory, *RUN, "--forcerun", "tracking")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "rule tracking_sync:" in output and "rule train:" not in output and "rule evaluate:" not in output and "rule report:" not in output
    assert mlflow_run_names(directory) == manifest_runs(directory, pipelines.settings) == mlflow_run_names(pipelines.straight)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def mlflow_server(pipelines: Pipelines) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1 over run A's SQLite store, stopped by its process group."""
    port = free_port()
    store = pipelines.straight / "results" / "mlflow" / "mlflow.db"
    environment = {**snakemake_environment(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        ["mlflow", "server", "--backend-store-uri", f"sqlite:///{store}", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("mlflow server did not become healthy") from None
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_mlflow_ui_shows_the_runs_in_headless_chromium(pipelines: Pipelines, mlflow_server: str) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: `make test` installs Debian's chromium")
    with urllib.request.urlopen(f"{mlflow_server}/api/2.0/mlflow/experiments/search?max_results=100", timeout=10) as response:
        experiments = {item["name"]: item["experiment_id"] for item in json.load(response)["experiments"]}
    task = pipelines.settings.tasks[0]
    with tempfile.TemporaryDirectory() as profile:
        page = subprocess.run(
            [
                str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--window-size=1400,900", "--virtual-time-budget=20000", "--dump-dom",
                f"{mlflow_server}/#/experiments/{experiments[task]}/runs",
            ],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=180,
        )
    dom = page.stdout
    for name in pipelines.settings.architectures:
        for seed in pipelines.settings.final.seeds:
            assert f"{name} final seed-{seed}" in dom, f"run {name} final seed-{seed} of {task} not on the page"


def report_scripts(page: str) -> dict[str, dict]:
    """The JSON objects the report page assigns to ``results`` and ``categories``."""
    found = {}
    for name in ("results", "categories"):
        script = re.search(rf'<script id="{name}">\s*var {name} = (.*?);\s*</script>', page, re.S)
        assert script is not None, f"no {name} in the report"
        found[name] = json.loads(script.group(1))
    return found


def embedded(entry: dict) -> bytes:
    """The bytes of a result as the report embeds them (a base64 data URI)."""
    return base64.b64decode(entry["data_uri"].split(";base64,", 1)[1])


def test_snakemake_report_holds_figure3_and_every_table_with_captions(pipelines: Pipelines) -> None:
    directory, settings = pipelines.straight, pipelines.settings
    result = run_snakemake(directory, *RUN, "--report", "report.html")
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    scripts = report_scripts((directory / "report.html").read_text())
    results, categories = scripts["results"], scripts["categories"]
    fruit = categories["Bearing Syntactic Fruit (DuSell & Cotterell, 2025)"]
    for extension in ("png", "pdf"):
        path = f"results/report/figures/figure3.{extension}"
        assert path in fruit["Figure 3"] and "Figure 3 of DuSell &amp; Cotterell (2025)" in results[path]["caption"]
        assert "Preset ci: data drawn from stacklm" in results[path]["caption"] and "A reduced scale" in results[path]["caption"]
        assert embedded(results[path]) == (directory / path).read_bytes()
    for task in settings.tasks:
        path = f"results/report/tables/{task}.html"
        assert path in fruit[task] and f"<strong>{task}</strong>" in results[path]["caption"]
        assert "<strong>Scale.</strong> Preset ci: data drawn from stacklm" in results[path]["caption"]  # the run's scale, in every caption
        assert results[path]["mime_type"] == "text/html"  # shown in the page, not offered as a download
        page = embedded(results[path]).decode()
        assert page == (directory / path).read_text()
        text = re.sub(r"<[^>]+>", "", page)
        markdown = (directory / "results" / "report" / "tables" / f"{task}.md").read_text()
        rows = [line for line in markdown.splitlines() if line.startswith("| ") and "---" not in line]
        assert len(rows) == page.count("<tr>")  # every row of the table, header rows included
        for row in rows:
            assert "".join(cell.strip().replace("**", "") for cell in row.strip("|").split("|")) in text.replace("\n", "")
        for name in settings.architectures:
            assert f"<td>{name}</td>" in page


def test_a_config_change_in_the_same_folder_reruns_what_depends_on_it(pipelines: Pipelines, tmp_path: Path) -> None:
    """A changed data.seed, same folder, same command: every model is trained afresh on the new
    data (not refused by its old checkpoint), the report is rewritten, and one checkpoint per
    run remains, the new config's."""
    directory = tmp_path / "changed"
    shutil.copytree(pipelines.straight, directory, symlinks=True)
    metrics_before = pd.read_parquet(directory / "results" / "metrics.parquet")
    report_before = (directory / "results" / "report" / "report.tex").stat().st_mtime_ns
    (directory / "test.yaml").write_text(yaml.safe_dump({"preset": "ci", "data": {"seed": pipelines.settings.data.seed + 1}}))
    result = run_snakemake(directory, *RUN)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "rule train:" in output and "rule report:" in output
    metrics = pd.read_parquet(directory / "results" / "metrics.parquet")
    assert set(metrics["data_version"]).isdisjoint(set(metrics_before["data_version"]))
    assert (directory / "results" / "report" / "report.tex").stat().st_mtime_ns > report_before
    runs = metrics[["task", "architecture", "seed"]].drop_duplicates()
    states = list((directory / "results" / "checkpoints").glob("*/*/final/*.pt"))
    assert len(states) == len(runs) == len({path.name.split(".")[0] + str(path.parent) for path in states})


def test_a_change_of_the_tracking_settings_only_reruns_only_the_mirror(pipelines: Pipelines, tmp_path: Path) -> None:
    """Each job reads only its sections of the settings: a new tracking URI reruns the tracking
    settings file, the store's creation and the syncs, and no training, evaluation or report."""
    directory = tmp_path / "tracking"
    shutil.copytree(pipelines.straight, directory, symlinks=True)
    unchanged = run_snakemake(directory, *RUN, "-n")
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr  # the copy is complete
    (directory / "test.yaml").write_text(yaml.safe_dump({"preset": "ci", "tracking": {"uri": "sqlite:///results/mlflow/other.db"}}))
    result = run_snakemake(directory, *RUN, "-n")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    assert {rule: count for rule, count in counts.items() if rule not in ("all", "total")} == {
        "settings": 1,
        "tracking": 1,
        "tracking_sync": len(pipelines.settings.tasks),
    }


def test_a_change_of_a_cadence_setting_reruns_nothing(pipelines: Pipelines, tmp_path: Path) -> None:
    """training.progress_interval_s says how often progress lines come, not what a job computes: a
    change rewrites its own file (results/settings/cadence.json), which the training jobs read as an
    ancient input, and reruns no training, evaluation or report (it listed 21 jobs)."""
    directory = tmp_path / "cadence"
    shutil.copytree(pipelines.straight, directory, symlinks=True)
    interval = pipelines.settings.training.progress_interval_s + 7
    (directory / "test.yaml").write_text(yaml.safe_dump({"preset": "ci", "training": {"progress_interval_s": interval}}))
    result = run_snakemake(directory, *RUN, "-n")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert {rule: count for rule, count in job_counts(output).items() if rule not in ("all", "total")} == {"settings": 1}
