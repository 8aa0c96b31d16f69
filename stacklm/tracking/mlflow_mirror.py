"""A mirror of the runs' Parquet records in MLflow, for browsing; never the source of truth.

One MLflow experiment per task and per CFL language; one MLflow run per stacklm run, tagged
``stacklm.run`` with its key (``task/architecture/phase/trial-or-seed``), ``stacklm.folder``
with its folder, ``stacklm.digest`` with the sha256 of the Parquet files it was built from,
and named short (``Tf+Nd final seed-1``: the experiment already says the task). Its artifacts
are the run's files (model, Parquet records, job logs), copied into the store, and a run with
results has its model logged as an MLflow model (``stacklm.tracking.logged_model``: it loads
with ``mlflow.pytorch.load_model``, and the experiment's Models tab lists it); with
``tracking.artifacts: false`` (a remote store, large files) the folder tag alone leads to
them, and no model is logged. Its start and end are the training's, not the mirror's. Training and
evaluation jobs never touch MLflow (``docs/design/mlflow.md#jobs-never-touch-mlflow``):
``stacklm tracking sync`` mirrors an experiment's finished runs in one serial job, skipping each run whose key and digest are already
there and replacing one whose Parquet changed, so that a rerun costs one search of the store.

MLflow 3.17 pitfalls (``docs/design/mlflow.md#mlflow-3-pitfalls``): the tracking URI is always
explicit (a relative SQLite path is made absolute here); a fresh SQLite store written by parallel jobs breaks in
its schema migration, so ``stacklm tracking init`` creates the store and the experiments once,
serially, and ``sync`` refuses a SQLite store that does not exist yet.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Literal, Mapping, Sequence, TypeVar

from stacklm.errors import StacklmError

KEY_TAG = "stacklm.run"
DIGEST_TAG = "stacklm.digest"
FOLDER_TAG = "stacklm.folder"
SQLITE_PREFIX = "sqlite:///"
SEARCH_PAGE_RUNS = 1000  # runs per page of the one search of an experiment's existing runs

Result = TypeVar("Result")
ModelKind = Literal["task", "cfl", "ptb"]  # the experiment that wrote a model file, which says how to rebuild it


@dataclass(frozen=True)
class TrackingSettings:
    """The ``tracking`` section of the settings."""

    enabled: bool = True
    uri: str = "sqlite:///results/mlflow/mlflow.db"  # a relative SQLite path is taken from the working directory
    request_timeout_s: int = 30  # per HTTP request to a tracking server
    request_retries: int = 2  # HTTP retries before giving up (MLflow's default of 7 waits minutes)
    artifacts: bool = True  # copy each run's files into the store; False: only the tag with the run's folder

    def resolved_uri(self) -> str:
        """The URI with a relative SQLite path made absolute (MLflow stores paths absolute anyway)."""
        if self.uri.startswith(SQLITE_PREFIX) and not self.uri.startswith(SQLITE_PREFIX + "/"):
            return SQLITE_PREFIX + str(Path(self.uri[len(SQLITE_PREFIX) :]).resolve())
        return self.uri

    def sqlite_path(self) -> Path | None:
        """The SQLite file of the store; None for a tracking server."""
        uri = self.resolved_uri()
        return Path(uri[len(SQLITE_PREFIX) :]) if uri.startswith(SQLITE_PREFIX) else None

    def artifact_root(self) -> Path | None:
        """Where a SQLite store keeps the experiments' artifacts (beside the database, not in the
        working directory's ./mlruns); None for a tracking server, which has its own."""
        path = self.sqlite_path()
        return path.parent / "artifacts" if path is not None else None


@dataclass(frozen=True)
class ModelFile:
    """A run's ``model.pt``, logged as an MLflow model (``stacklm.tracking.logged_model``)."""

    path: Path
    kind: ModelKind


@dataclass(frozen=True)
class MirroredRun:
    """What MLflow shows of one stacklm run, built from its Parquet files (``stacklm.tracking.runs``)."""

    key: str  # its stacklm.run tag: task/architecture/phase/trial-or-seed, language/model/setting
    name: str  # the short name the UI shows
    digest: str  # sha256 of the Parquet files it was built from
    params: Mapping[str, str]
    metrics: Mapping[str, float]  # logged at step 0
    curves: Mapping[str, Sequence[tuple[int, float]]]  # name → (step, value) points
    tags: Mapping[str, str]  # task, architecture … and the source tags (mlflow.source.name, .type, .git.commit)
    folder: Path  # the run's folder (tag stacklm.folder)
    files: Sequence[tuple[Path, str]]  # (file, artifact folder: "" for the top, logs/train …) copied as artifacts
    start_ms: int  # when training started and ended, ms since the epoch
    end_ms: int
    model: ModelFile | None  # a run with results: its model.pt, logged as an MLflow model with the artifacts


def initialize_store(settings: TrackingSettings, experiments: Sequence[str]) -> list[str]:
    """Create the store (its schema) and the experiments; the experiment ids, in order."""
    if (path := settings.sqlite_path()) is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return _on_store(settings, lambda client: [_experiment_id(client, name, settings.artifact_root()) for name in experiments])


def sync(settings: TrackingSettings, experiment: str, runs: Sequence[MirroredRun]) -> dict[str, str]:
    """Mirror ``runs`` into ``experiment``: key → MLflow run id.

    A run whose key and digest are in the store is kept; every other MLflow run of that key is
    deleted, and the run is created afresh. MLflow runs of keys not in ``runs`` are left alone.
    """
    path = settings.sqlite_path()
    if path is not None and not path.is_file():
        raise StacklmError(
            f"the MLflow store {path} does not exist: `stacklm tracking init` (the rule `tracking`) creates it first; "
            "the Parquet records are complete, and rerunning the rule mirrors them"
        )
    return _on_store(settings, lambda client: _sync(client, settings, experiment, runs))


def _on_store(settings: TrackingSettings, action: Callable[[Any], Result]) -> Result:
    """``action(client)`` on the settings' store; a store that cannot be used is a ``StacklmError`` naming its URI."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(settings.request_timeout_s))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(settings.request_retries))
    # imported here: MLflow takes seconds to import, and only these commands use it
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:
        raise StacklmError(
            "MLflow is not installed: pip install -e '.[tracking]' -c constraints.txt, or set tracking.enabled: false "
            "(the Parquet records are complete, and rerunning the rule mirrors them)"
        ) from None

    uri = settings.resolved_uri()
    try:
        return action(MlflowClient(tracking_uri=uri))
    except (MlflowException, SQLAlchemyError, OSError) as error:
        reason = str(error).splitlines()[0] if str(error) else ""
        raise StacklmError(
            f"the MLflow store at {uri} cannot be used ({type(error).__name__}: {reason}); "
            "the Parquet records are complete, and rerunning the rule mirrors them"
        ) from error


def _experiment_id(client: Any, name: str, artifact_root: Path | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    location = (artifact_root / name).resolve().as_uri() if artifact_root is not None else None
    return client.create_experiment(name, artifact_location=location)


def _sync(client: Any, settings: TrackingSettings, experiment: str, runs: Sequence[MirroredRun]) -> dict[str, str]:
    from tqdm import tqdm

    experiment_id = _experiment_id(client, experiment, settings.artifact_root())
    existing = _runs_by_key(client, experiment_id)
    manifest: dict[str, str] = {}
    created = 0
    models = settings.artifacts and any(run.model is not None for run in runs)
    code: ContextManager[Path | None] = package_code() if models else nullcontext()
    with code as package:
        for run in tqdm(runs, desc=experiment, unit="run", file=sys.stderr, mininterval=10):
            # the files and the model, or the folder tag alone: a changed choice (or a run mirrored before models were) replaces the run
            digest = f"{run.digest}+artifacts+model" if settings.artifacts else run.digest
            found = existing.get(run.key, [])
            kept = next((old for old in found if old.data.tags.get(DIGEST_TAG) == digest), None)
            for old in found:
                if old is not kept:
                    _delete(client, experiment_id, old.info.run_id)
            if kept is None:
                manifest[run.key] = _create(client, experiment_id, run, digest, package)
                created += 1
            else:
                manifest[run.key] = kept.info.run_id
    print(f"{experiment}: {created} runs created, {len(runs) - created} unchanged, in {client.tracking_uri}", file=sys.stderr)
    return manifest


def _runs_by_key(client: Any, experiment_id: str) -> dict[str, list[Any]]:
    """The experiment's active runs by their ``stacklm.run`` tag, from one paginated search."""
    found: dict[str, list[Any]] = defaultdict(list)
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=SEARCH_PAGE_RUNS, page_token=token)
        for run in page:
            if KEY_TAG in run.data.tags:
                found[run.data.tags[KEY_TAG]].append(run)
        token = page.token
        if not token:
            return found


@contextmanager
def package_code() -> Iterator[Path]:
    """A copy of the ``stacklm`` package without its bytecode caches: the code logged with each model."""
    with tempfile.TemporaryDirectory(prefix="stacklm-code-") as folder:
        copy = Path(folder) / "stacklm"
        shutil.copytree(Path(__file__).resolve().parents[1], copy, ignore=shutil.ignore_patterns("__pycache__"))
        yield copy


def _delete(client: Any, experiment_id: str, run_id: str) -> None:
    """Delete the run and the models logged from it (else the Models tab keeps listing them)."""
    for model in client.search_logged_models([experiment_id], filter_string=f"source_run_id = '{run_id}'"):
        client.delete_logged_model(model.model_id)
    client.delete_run(run_id)


def _create(client: Any, experiment_id: str, run: MirroredRun, digest: str, code: Path | None) -> str:
    """Create the MLflow run of ``run``; with ``code`` (the artifacts are on: :func:`package_code`),
    its files as artifacts and its model, where it has one, as an MLflow model."""
    from mlflow.entities import Metric, Param

    tags = {KEY_TAG: run.key, FOLDER_TAG: str(run.folder.resolve()), **run.tags}
    run_id = client.create_run(experiment_id, start_time=run.start_ms, tags=tags, run_name=run.name).info.run_id
    metrics = [Metric(name, float(value), run.end_ms, 0) for name, value in run.metrics.items()]
    metrics += [Metric(name, float(value), run.end_ms, step) for name, points in run.curves.items() for step, value in points]
    params = [Param(name, value) for name, value in run.params.items()]
    for start in range(0, len(params), 100):  # MLflow's limits per batch: 100 params, 1000 metrics
        client.log_batch(run_id, params=params[start : start + 100])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000])
    for path, folder in run.files if code is not None else ():
        client.log_artifact(run_id, str(path), folder or None)
    if code is not None and run.model is not None:
        from stacklm.tracking.logged_model import log_trained_model  # imports torch: only for a model to log

        log_trained_model(client.tracking_uri, run_id, run.model, code, {KEY_TAG: run.key})
    client.set_tag(run_id, DIGEST_TAG, digest)  # last: a run cut short has no digest, and the next sync replaces it
    client.set_terminated(run_id, end_time=run.end_ms)
    return run_id
