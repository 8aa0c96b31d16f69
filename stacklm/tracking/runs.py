"""What MLflow shows of each run, built from the run's files alone.

A task run (``stacklm train``, ``stacklm evaluate``) is mirrored from its ``train.parquet`` and,
for a final run, its ``metrics.parquet``:

- params: the metadata columns but the timings and ``config``; the built model's config
  (``model.width`` …, from ``config``'s ``built_model``); the run's other settings flattened as
  ``settings.training.max_epochs`` … (``settings.model.*`` are the options it was built under);
- metrics: ``best_validation_cross_entropy``, ``steps`` and ``epochs`` (of the last checkpoint),
  ``wall_time_s``, ``tokens_per_s``; every metric of ``metrics.parquet`` by its
  :func:`metric_name` (``test/full_accuracy``);
- curves by examples seen, each named :func:`curve_name` (``curve/validation_cross_entropy``):
  every number ``train.parquet`` holds per checkpoint (validation cross-entropy, training loss,
  learning rate, the generalization curves' accuracies where scored);
- tags: task, architecture, phase, trial or seed, and the source tags.

A CFL run (``stacklm cfl train``) is mirrored from its ``train.parquet`` and, for the selected
run of a (language, model) pair, the pair's evaluation Parquet (``stacklm cfl evaluate``):

- params: as a task run's (``model.*`` built, ``settings.*`` the rest);
- metrics: ``best_validation_cross_entropy_above_truth`` (Δ), ``epochs``, ``wall_time_s``,
  ``test_cross_entropy_above_truth``;
- curves: validation Δ by epoch, test Δ by length (``curve/…``);
- tags: language, model, setting and the source tags.

A PTB restart (``stacklm ptb train``, ``stacklm ptb evaluate``; DuSell & Chiang (2022) §5.2) is
mirrored from its ``train.parquet`` and ``metrics.parquet``:

- params: as a task run's (the draw is ``settings.draw.*``);
- metrics: ``best_validation_perplexity``, ``epochs``, ``wall_time_s``, ``tokens_per_s``,
  ``validation/perplexity``, ``test/perplexity``, ``syntaxgym/sg_score``, each suite's accuracy
  (``syntaxgym/suite/<suite>``) and each circuit's score (``syntaxgym/circuit/<circuit>``);
- curves by epoch: ``curve/validation_perplexity``, ``curve/train_loss``, ``curve/learning_rate``
  (a diverged epoch's non-finite values left out);
- tags: model, restart and the source tags.

One name per quantity: a curve's name starts with ``curve/``, so that no curve (whose last point
the MLflow runs table shows) stands beside a final metric of a similar name
(``validation/perplexity``, the best epoch's, against the curve's last epoch). The source tags
are those the MLflow UI shows as the run's Source and Version: ``mlflow.source.name`` (the
command that trained it, ``stacklm train``), ``mlflow.source.type`` (``LOCAL``) and
``mlflow.source.git.commit`` (where the run's ``code_version`` names one).

Each run carries its key (:func:`task_run_key`, :func:`cfl_run_key`, :func:`ptb_run_key`), a short name without the
experiment's, the sha256 of the bytes of the Parquet files it was built from (so that
``stacklm tracking sync`` skips runs whose files did not change), and its files as artifacts:
``model.pt`` and the Parquet files, and the jobs' logs where given; a run with results (a task's
final run, a CFL language's selected run, an evaluated PTB restart) names its ``model.pt`` as the
model to log as an MLflow model (``stacklm.tracking.logged_model``). Training ended when
``train.parquet`` was written (its modification time) and started ``wall_time_s`` before.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from stacklm.errors import StacklmError
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.tracking.mlflow_mirror import MirroredRun, ModelFile, ModelKind
from stacklm.tracking.records import BUILT_MODEL, METADATA_SCHEMA, commit

Row = dict[str, Any]
TIMINGS = ("wall_time_s", "tokens_per_s")
# Columns of train.parquet that place a checkpoint rather than measure it; every other number is a curve.
CHECKPOINT_PLACE = ("checkpoint", "epoch", "step", "examples_seen", "is_best")
CURVE_NAMES = {"learning_rate_used": "learning_rate"}  # the MLflow names of before
CURVE_PREFIX = "curve/"
MODEL_FILE = "model.pt"
SOURCE_TYPE = "LOCAL"  # MLflow's source type of a run started on this machine
SOURCE_COMMANDS: dict[ModelKind, str] = {"task": "stacklm train", "cfl": "stacklm cfl train", "ptb": "stacklm ptb train"}
Build = Callable[[str, "Records", "Records | None", Sequence[tuple[Path, str]]], MirroredRun]


@dataclass(frozen=True)
class Records:
    """One Parquet file of a run: its rows, its bytes' digest, when it was written."""

    path: Path
    rows: list[Row]
    digest: str
    written_s: float  # modification time, s since the epoch


def read_records(path: str | Path) -> Records:
    """The rows of one run's Parquet file; an empty or unreadable file is a ``StacklmError`` naming it."""
    try:
        data = Path(path).read_bytes()
        rows = pq.read_table(pa.BufferReader(data)).to_pylist()
        written_s = os.stat(path).st_mtime
    except (OSError, pa.ArrowException) as error:
        raise StacklmError(f"{path}: cannot read the run's records: {error}") from None
    if not rows:
        raise StacklmError(f"{path}: the run's records have no row")
    return Records(Path(path), rows, hashlib.sha256(data).hexdigest(), written_s)


def task_run_key(task: str, architecture: str, phase: str, trial: int | None, seed: int) -> str:
    """The key of a task run in MLflow (tag ``stacklm.run``)."""
    return f"{task}/{architecture}/{phase}/" + (f"trial-{trial}" if phase == "search" else f"seed-{seed}")


def task_run_identity(task: str, architecture: str, phase: str, trial: int | None, seed: int) -> tuple[str, str, dict[str, str]]:
    """A task run's key, its short name (``Tf+Nd final seed-1``: the experiment names the task) and its tags."""
    index = ("trial", trial) if phase == "search" else ("seed", seed)
    tags = {"task": task, "architecture": architecture, "phase": phase, index[0]: str(index[1])}
    return task_run_key(task, architecture, phase, trial, seed), f"{architecture} {phase} {index[0]}-{index[1]}", tags


def cfl_run_key(language: str, model: str, setting: str) -> str:
    """The key of a CFL grid run in MLflow (tag ``stacklm.run``)."""
    return f"{language}/{model}/{setting}"


def ptb_run_key(model: str, restart: int) -> str:
    """The key of a PTB restart in MLflow (tag ``stacklm.run``)."""
    return f"ptb/{model}/restart-{restart}"


def flat_params(settings: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``settings`` flattened to MLflow params (``training.max_epochs`` → "1000")."""
    params: dict[str, str] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            params |= flat_params(value, f"{prefix}{key}.")
        else:
            params[f"{prefix}{key}"] = json.dumps(value) if not isinstance(value, str) else value
    return params


def curve_name(column: str) -> str:
    """The MLflow name of the curve of ``train.parquet``'s ``column`` (``curve/learning_rate``)."""
    return CURVE_PREFIX + CURVE_NAMES.get(column, column)


def source_tags(kind: ModelKind, code_version: str) -> dict[str, str]:
    """The tags the MLflow UI shows as a run's Source and Version; the commit where ``code_version`` names one."""
    source = commit(code_version)
    return {"mlflow.source.name": SOURCE_COMMANDS[kind], "mlflow.source.type": SOURCE_TYPE} | (
        {"mlflow.source.git.commit": source} if source is not None else {}
    )


def metric_name(row: Row) -> str:
    """``test/full_accuracy``, ``generalization/linear/partial_accuracy``, ``generalization/log_ratio``."""
    return "/".join(part for part in (row["split"], row["rule"], row["metric"]) if part is not None)


def task_runs(
    experiment: str,
    curves: Sequence[str | Path],
    metrics: Sequence[str | Path],
    curve_logs: Sequence[str | Path] = (),
    metric_logs: Sequence[str | Path] = (),
) -> list[MirroredRun]:
    """The task ``experiment``'s runs from their ``train.parquet`` and final ``metrics.parquet``
    files, with the logs of the jobs that wrote them (``curve_logs[i]`` wrote ``curves[i]``)."""
    return _runs(experiment, curves, metrics, curve_logs, metric_logs, _task_key, _task_run)


def cfl_runs(
    language: str,
    curves: Sequence[str | Path],
    evaluations: Sequence[str | Path],
    curve_logs: Sequence[str | Path] = (),
    evaluation_logs: Sequence[str | Path] = (),
) -> list[MirroredRun]:
    """The CFL ``language``'s grid runs from their ``train.parquet`` files and the pairs'
    evaluation Parquet files, with the logs of the jobs that wrote them."""
    return _runs(language, curves, evaluations, curve_logs, evaluation_logs, _cfl_key, _cfl_run)


def ptb_runs(
    experiment: str,
    curves: Sequence[str | Path],
    metrics: Sequence[str | Path],
    curve_logs: Sequence[str | Path] = (),
    metric_logs: Sequence[str | Path] = (),
) -> list[MirroredRun]:
    """The PTB restarts from their ``train.parquet`` and ``metrics.parquet`` files (``experiment``
    is their task, ``ptb``), with the logs of the jobs that wrote them."""
    return _runs(experiment, curves, metrics, curve_logs, metric_logs, _ptb_key, _ptb_run)


def _task_key(row: Row) -> str:
    return task_run_key(row["task"], row["architecture"], row["phase"], row["trial"], row["seed"])


def _ptb_key(row: Row) -> str:
    return ptb_run_key(row["architecture"], row["seed"])


def _cfl_key(row: Row) -> str:
    return cfl_run_key(row["task"], row["architecture"], row["setting"])


def _runs(
    experiment: str,
    curves: Sequence[str | Path],
    metrics: Sequence[str | Path],
    curve_logs: Sequence[str | Path],
    metric_logs: Sequence[str | Path],
    key: Callable[[Row], str],
    build: Build,
) -> list[MirroredRun]:
    """One run per curve file, with the metrics file of the same key; in the order of ``curves``."""
    curve_records, logs = _by_key(experiment, curves, curve_logs, "curve", "logs/train", key)
    metric_records, more_logs = _by_key(experiment, metrics, metric_logs, "metric", "logs/evaluate", key)
    for name, records in metric_records.items():
        if name not in curve_records:
            raise StacklmError(f"{records.path}: the metrics of run {name}, whose train.parquet is not among the curves")
    return [
        build(name, records, metric_records.get(name), [*logs.get(name, []), *more_logs.get(name, [])])
        for name, records in curve_records.items()
    ]


def _by_key(
    experiment: str, paths: Sequence[str | Path], logs: Sequence[str | Path], kind: str, folder: str, key: Callable[[Row], str]
) -> tuple[dict[str, Records], dict[str, list[tuple[Path, str]]]]:
    """Each file's records by run key, and the logs given beside them that exist (a log deleted
    since is no reason to fail a mirror), each with its artifact folder."""
    if logs and len(logs) != len(paths):
        raise StacklmError(f"{len(logs)} {kind} logs given for {len(paths)} {kind} files: one log per file, in the same order")
    found: dict[str, Records] = {}
    found_logs: dict[str, list[tuple[Path, str]]] = {}
    for position, path in enumerate(paths):
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
        found_logs[name] = [(Path(logs[position]), folder)] if logs and Path(logs[position]).is_file() else []
    return found, found_logs


def _digest(curve: Records, metrics: Records | None) -> str:
    return hashlib.sha256(curve.digest.encode() + (metrics.digest.encode() if metrics is not None else b"")).hexdigest()


def _mirrored(
    kind: ModelKind,
    name: str,
    short_name: str,
    tags: dict[str, str],
    curve: Records,
    results: Records | None,
    logs: Sequence[tuple[Path, str]],
    **shown: Any,
) -> MirroredRun:
    """What every run shares: params from the config, the source tags, times and files;
    ``results`` are the run's metrics (a task's final run, a PTB restart) or evaluation (a
    selected CFL run), and a run with results has its ``model.pt`` logged as a model."""
    first = curve.rows[0]
    config = json.loads(first["config"])
    details = {column: first[column] for column in METADATA_SCHEMA.names if column not in (*TIMINGS, "config")}
    built = config.pop(BUILT_MODEL, {})
    model = curve.path.parent / MODEL_FILE
    files = [model, curve.path, *([results.path] if results is not None else [])]
    end_ms = round(curve.written_s * 1000)
    return MirroredRun(
        key=name,
        name=short_name,
        digest=_digest(curve, results),
        params=flat_params(details) | flat_params(built, "model.") | flat_params(config, "settings."),
        tags=tags | source_tags(kind, first["code_version"]),
        folder=curve.path.parent,
        files=[(path, "") for path in files if path.is_file()] + list(logs),
        model=ModelFile(model, kind) if results is not None and model.is_file() else None,
        start_ms=end_ms - round(first["wall_time_s"] * 1000),
        end_ms=end_ms,
        **shown,
    )


def _task_run(name: str, curve: Records, metrics: Records | None, logs: Sequence[tuple[Path, str]]) -> MirroredRun:
    first, last = curve.rows[0], curve.rows[-1]
    _, short_name, tags = task_run_identity(first["task"], first["architecture"], first["phase"], first["trial"], first["seed"])
    measured = [column for column in first if column not in METADATA_SCHEMA.names and column not in CHECKPOINT_PLACE]
    final = {metric_name(row): row["value"] for row in metrics.rows} if metrics is not None else {}
    return _mirrored(
        "task",
        name,
        short_name,
        tags,
        curve,
        metrics,
        logs,
        metrics={
            "best_validation_cross_entropy": min(row["validation_cross_entropy"] for row in curve.rows),
            "steps": last["step"],
            "epochs": last["epoch"],
            **{column: first[column] for column in TIMINGS},
            **final,
        },
        curves={
            curve_name(column): [(row["examples_seen"], row[column]) for row in curve.rows if row[column] is not None]
            for column in measured
            if any(row[column] is not None for row in curve.rows)
        },
    )


def _cfl_run(name: str, curve: Records, evaluation: Records | None, logs: Sequence[tuple[Path, str]]) -> MirroredRun:
    first, last = curve.rows[0], curve.rows[-1]
    test = [row for row in evaluation.rows if row["split"] == "test"] if evaluation is not None else []
    overall = {"test_" + DELTA: row["value"] for row in test if row["length"] is None}
    tags = {"language": first["task"], "model": first["architecture"], "setting": first["setting"]}
    return _mirrored(
        "cfl",
        name,
        f"{first['architecture'].removeprefix('cfl/')} {first['setting']}",
        tags,
        curve,
        evaluation,
        logs,
        metrics={
            "best_validation_" + DELTA: min(row[DELTA] for row in curve.rows),
            "epochs": last["epoch"],
            "wall_time_s": first["wall_time_s"],
            **overall,
        },
        curves={
            curve_name("validation_" + DELTA): [(row["epoch"], row[DELTA]) for row in curve.rows],
            curve_name("test_" + DELTA + "_by_length"): [(row["length"], row["value"]) for row in test if row["length"] is not None],
        },
    )


def ptb_metric_name(row: Row) -> str:
    """``test/perplexity``, ``syntaxgym/sg_score``, ``syntaxgym/suite/number_src``, ``syntaxgym/circuit/Agreement``."""
    if row["suite"] is not None:
        return f"{row['split']}/suite/{row['suite']}"
    if row["circuit"] is not None:
        return f"{row['split']}/circuit/{row['circuit']}"
    return f"{row['split']}/{row['metric']}"


def _ptb_run(name: str, curve: Records, metrics: Records | None, logs: Sequence[tuple[Path, str]]) -> MirroredRun:
    first, last = curve.rows[0], curve.rows[-1]
    perplexities = [row["validation_perplexity"] for row in curve.rows if math.isfinite(row["validation_perplexity"])]
    scores = {ptb_metric_name(row): row["value"] for row in metrics.rows} if metrics is not None else {}
    return _mirrored(
        "ptb",
        name,
        f"{first['architecture']} restart-{first['seed']}",
        {"model": first["architecture"], "restart": str(first["seed"])},
        curve,
        metrics,
        logs,
        metrics={
            **({"best_validation_perplexity": min(perplexities)} if perplexities else {}),
            "epochs": last["epoch"],
            **{column: first[column] for column in TIMINGS},
            **scores,
        },
        curves={
            curve_name(column): [(row["epoch"], row[column]) for row in curve.rows if math.isfinite(row[column])]
            for column in ("validation_perplexity", "train_loss", "learning_rate_used")
        },
    )
