"""A mirror of each run's Parquet records in MLflow, for browsing; never the source of truth.

One MLflow experiment per task; one MLflow run per stacklm run, found again by its tag
``stacklm.run`` (``task/architecture/phase/trial-or-seed``), so that ``train`` logs the
parameters and learning curve and ``evaluate`` adds the final metrics to the same run.

MLflow 3.17 pitfalls (``ecosystem.md`` §3): the tracking URI is always explicit (a relative
SQLite path is made absolute here); a fresh SQLite store written by parallel jobs breaks in
its schema migration, so ``stacklm tracking init`` creates the store and the experiments once,
serially, before the fan-out. A failure to reach the store warns once and is otherwise
ignored: the Parquet files are written before anything is sent to MLflow.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from stacklm.models.config import from_dict


class TrackingWarning(UserWarning):
    """MLflow could not be reached or refused a write; the Parquet records are complete."""


@dataclass(frozen=True)
class TrackingSettings:
    """The ``tracking`` section of the settings."""

    enabled: bool = True
    uri: str = "sqlite:///results/mlflow/mlflow.db"  # a relative SQLite path is taken from the working directory
    request_timeout_s: int = 30  # per HTTP request to a tracking server
    request_retries: int = 2  # HTTP retries before giving up (MLflow's default of 7 waits minutes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "tracking") -> TrackingSettings:
        return from_dict(cls, data, path)

    def resolved_uri(self) -> str:
        """The URI with a relative SQLite path made absolute (MLflow stores paths absolute anyway)."""
        prefix = "sqlite:///"
        if self.uri.startswith(prefix) and not self.uri.startswith(prefix + "/"):
            return prefix + str(Path(self.uri[len(prefix) :]).resolve())
        return self.uri


def _client(settings: TrackingSettings) -> Any:
    """An ``MlflowClient`` on the settings' store (imported late: MLflow takes seconds to import)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(settings.request_timeout_s))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(settings.request_retries))
    from mlflow.tracking import MlflowClient

    uri = settings.resolved_uri()
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri)


def _experiment_id(client: Any, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name)


def initialize_store(settings: TrackingSettings, experiments: Sequence[str]) -> list[str]:
    """Create the store (its schema) and the experiments; the experiment ids, in order."""
    client = _client(settings)
    return [_experiment_id(client, name) for name in experiments]


@dataclass(frozen=True)
class MirroredRun:
    """What one command sends to MLflow about one run."""

    experiment: str  # the task
    key: str  # the stacklm.run tag
    params: Mapping[str, str]
    metrics: Mapping[str, float]  # logged at step 0
    curves: Mapping[str, Sequence[tuple[int, float]]]  # name → (step, value) points
    replace: bool  # delete an earlier MLflow run of the same key first (a rerun of train)


def mirror(settings: TrackingSettings, run: MirroredRun) -> str | None:
    """Send ``run`` to MLflow; its run id, or None after one ``TrackingWarning`` on failure."""
    if not settings.enabled:
        return None
    try:
        return _send(_client(settings), run)
    except Exception as error:  # the store is a mirror: any failure of it must not fail the run
        warnings.warn(
            f"MLflow mirror at {settings.resolved_uri()} failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
            "the Parquet records are complete",
            TrackingWarning,
            stacklevel=2,
        )
        return None


def _send(client: Any, run: MirroredRun) -> str:
    from mlflow.entities import Metric, Param

    experiment_id = _experiment_id(client, run.experiment)
    found = client.search_runs([experiment_id], filter_string=f"tags.`stacklm.run` = '{run.key}'")
    if found and run.replace:
        for old in found:
            client.delete_run(old.info.run_id)
        found = []
    if found:
        run_id = found[0].info.run_id
    else:
        run_id = client.create_run(experiment_id, run_name=run.key, tags={"stacklm.run": run.key}).info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric(name, float(value), now, 0) for name, value in run.metrics.items()]
    metrics += [Metric(name, float(value), now, step) for name, points in run.curves.items() for step, value in points]
    params = [Param(name, value) for name, value in run.params.items()]
    for start in range(0, len(params), 100):  # MLflow's limits per batch: 100 params, 1000 metrics
        client.log_batch(run_id, params=params[start : start + 100])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000])
    client.set_terminated(run_id)
    return run_id
