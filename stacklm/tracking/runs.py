"""What MLflow shows of each run, built from the run's Parquet files alone.

A task run (``stacklm train``, ``stacklm evaluate``) is mirrored from its ``train.parquet`` and,
for a final run, its ``metrics.parquet``:

- params: the metadata columns but the timings and ``config``, and the run's settings (the
  ``config`` JSON) flattened as ``settings.training.max_epochs`` …;
- metrics: ``best_validation_cross_entropy``, ``steps`` and ``epochs`` (of the last checkpoint),
  ``wall_time_s``, ``tokens_per_s``; every metric of ``metrics.parquet`` by its
  :func:`metric_name` (``test/full_accuracy``);
- curves by examples seen: ``validation_cross_entropy``, ``train_loss``, ``learning_rate``.

A CFL run (``stacklm cfl train``) is mirrored from its ``train.parquet`` and, for the selected
run of a (language, model) pair, the pair's evaluation Parquet (``stacklm cfl evaluate``):

- params: its settings (the ``config`` JSON) flattened;
- metrics: ``best_validation_cross_entropy_above_truth`` (Δ), ``epochs``, ``wall_time_s``,
  ``test_cross_entropy_above_truth``;
- curves: validation Δ by epoch, test Δ by length.

Each run is named by its key (:func:`task_run_key`, :func:`cfl_run_key`) and carries the sha256
of the bytes of the files it was built from, so that ``stacklm tracking sync`` skips runs whose
files did not change.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from stacklm.cfl.experiment import DELTA
from stacklm.errors import StacklmError
from stacklm.tracking.mlflow_mirror import MirroredRun
from stacklm.tracking.records import METADATA_SCHEMA

Row = dict[str, Any]
TIMINGS = ("wall_time_s", "tokens_per_s")


@dataclass(frozen=True)
class Records:
    """One Parquet file of a run: its rows and its bytes' digest."""

    path: Path
    rows: list[Row]
    digest: str


def read_records(path: str | Path) -> Records:
    """The rows of one run's Parquet file; an empty or unreadable file is a ``StacklmError`` naming it."""
    try:
        data = Path(path).read_bytes()
        rows = pq.read_table(pa.BufferReader(data)).to_pylist()
    except (OSError, pa.ArrowException) as error:
        raise StacklmError(f"{path}: cannot read the run's records: {error}") from None
    if not rows:
        raise StacklmError(f"{path}: the run's records have no row")
    return Records(Path(path), rows, hashlib.sha256(data).hexdigest())


def task_run_key(task: str, architecture: str, phase: str, trial: int | None, seed: int) -> str:
    """The name of a task run in MLflow (tag ``stacklm.run``)."""
    return f"{task}/{architecture}/{phase}/" + (f"trial-{trial}" if phase == "search" else f"seed-{seed}")


def cfl_run_key(language: str, model: str, setting: str) -> str:
    """The name of a CFL grid run in MLflow (tag ``stacklm.run``)."""
    return f"{language}/{model}/{setting}"


def flat_params(settings: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``settings`` flattened to MLflow params (``training.max_epochs`` → "1000")."""
    params: dict[str, str] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            params |= flat_params(value, f"{prefix}{key}.")
        else:
            params[f"{prefix}{key}"] = json.dumps(value) if not isinstance(value, str) else value
    return params


def metric_name(row: Row) -> str:
    """``test/full_accuracy``, ``generalization/linear/partial_accuracy``, ``generalization/log_ratio``."""
    return "/".join(part for part in (row["split"], row["rule"], row["metric"]) if part is not None)


def task_runs(experiment: str, curves: Sequence[str | Path], metrics: Sequence[str | Path]) -> list[MirroredRun]:
    """The task ``experiment``'s runs from their ``train.parquet`` and final ``metrics.parquet`` files."""
    return _runs(experiment, curves, metrics, _task_key, _task_run)


def cfl_runs(language: str, curves: Sequence[str | Path], evaluations: Sequence[str | Path]) -> list[MirroredRun]:
    """The CFL ``language``'s grid runs from their ``train.parquet`` files and the pairs' evaluation Parquet files."""
    return _runs(language, curves, evaluations, _cfl_key, _cfl_run)


def _task_key(row: Row) -> str:
    return task_run_key(row["task"], row["architecture"], row["phase"], row["trial"], row["seed"])


def _cfl_key(row: Row) -> str:
    return cfl_run_key(row["task"], row["architecture"], row["setting"])


def _runs(
    experiment: str,
    curves: Sequence[str | Path],
    metrics: Sequence[str | Path],
    key: Callable[[Row], str],
    build: Callable[[str, Records, Records | None], MirroredRun],
) -> list[MirroredRun]:
    """One run per curve file, with the metrics file of the same key; in the order of ``curves``."""
    curve_records = _by_key(experiment, curves, key)
    metric_records = _by_key(experiment, metrics, key)
    for name, records in metric_records.items():
        if name not in curve_records:
            raise StacklmError(f"{records.path}: the metrics of run {name}, whose train.parquet is not among the curves")
    return [build(name, records, metric_records.get(name)) for name, records in curve_records.items()]


def _by_key(experiment: str, paths: Sequence[str | Path], key: Callable[[Row], str]) -> dict[str, Records]:
    found: dict[str, Records] = {}
    for path in paths:
        records = read_records(path)
        names = {key(row) for row in records.rows}
        if len(names) != 1:
            raise StacklmError(f"{path}: rows of {len(names)} runs ({', '.join(sorted(names))}), not of one")
        (name,) = names
        if records.rows[0]["task"] != experiment:
            raise StacklmError(f"{path}: run {name} does not belong to the experiment {experiment!r}")
        if name in found:
            raise StacklmError(f"{path} and {found[name].path} both hold run {name}")
        found[name] = records
    return found


def _digest(curve: Records, metrics: Records | None) -> str:
    return hashlib.sha256(curve.digest.encode() + (metrics.digest.encode() if metrics is not None else b"")).hexdigest()


def _task_run(name: str, curve: Records, metrics: Records | None) -> MirroredRun:
    first, last = curve.rows[0], curve.rows[-1]
    details = {column: first[column] for column in METADATA_SCHEMA.names if column not in (*TIMINGS, "config")}
    final = {metric_name(row): row["value"] for row in metrics.rows} if metrics is not None else {}
    return MirroredRun(
        key=name,
        digest=_digest(curve, metrics),
        params=flat_params(details) | flat_params(json.loads(first["config"]), "settings."),
        metrics={
            "best_validation_cross_entropy": min(row["validation_cross_entropy"] for row in curve.rows),
            "steps": last["step"],
            "epochs": last["epoch"],
            **{column: first[column] for column in TIMINGS},
            **final,
        },
        curves={
            "validation_cross_entropy": [(row["examples_seen"], row["validation_cross_entropy"]) for row in curve.rows],
            "train_loss": [(row["examples_seen"], row["train_loss"]) for row in curve.rows],
            "learning_rate": [(row["examples_seen"], row["learning_rate_used"]) for row in curve.rows],
        },
    )


def _cfl_run(name: str, curve: Records, evaluation: Records | None) -> MirroredRun:
    first, last = curve.rows[0], curve.rows[-1]
    test = [row for row in evaluation.rows if row["split"] == "test"] if evaluation is not None else []
    overall = {"test_" + DELTA: row["value"] for row in test if row["length"] is None}
    return MirroredRun(
        key=name,
        digest=_digest(curve, evaluation),
        params=flat_params(json.loads(first["config"])),
        metrics={
            "best_validation_" + DELTA: min(row[DELTA] for row in curve.rows),
            "epochs": last["epoch"],
            "wall_time_s": first["wall_time_s"],
            **overall,
        },
        curves={
            "validation_" + DELTA: [(row["epoch"], row[DELTA]) for row in curve.rows],
            "test_" + DELTA + "_by_length": [(row["length"], row["value"]) for row in test if row["length"] is not None],
        },
    )
