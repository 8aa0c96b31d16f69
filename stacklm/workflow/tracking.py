"""The MLflow mirror's commands (rules ``tracking`` and ``tracking_sync``).

    stacklm tracking init --settings results/settings/tracking.json
    stacklm tracking sync --settings results/settings/tracking.json --experiment E
        --curves RUN_DIR/train.parquet ... [--metrics METRICS.parquet ...]
        [--curve-logs LOG ... --metrics-logs LOG ...] [--experiment E2 --curves ...] --out results/tracking/E.json ...

``init`` creates the MLflow store and one experiment per task, per CFL language and for PTB, once and
serially, before the workflow fans out (a fresh SQLite store written by parallel jobs breaks in
its schema migration, ``docs/design/mlflow.md#mlflow-3-pitfalls``). ``sync`` mirrors one experiment's runs from their
Parquet files alone (``stacklm.tracking.runs``): for a task, every run's ``train.parquet`` and
the final runs' ``metrics.parquet``; for a CFL language, every grid run's ``train.parquet`` and
each model's evaluation Parquet; for ``ptb``, every restart's ``train.parquet`` and
``metrics.parquet``; with the logs of the jobs that wrote them (one per file, in the
same order) among the run's artifacts. It writes the manifest, run key → MLflow run id, as JSON; with
``tracking.enabled: false`` an empty one, touching no store. Each ``--experiment`` takes the
files after it (``--curves`` …) until the next: several are mirrored one after another, each
into its ``--out`` (the rule ``tracking_sync_group<n>``, ``resources.runs_per_job`` > 1), as a
job each would. ``init`` never imports torch; ``sync`` imports it only to log a run's model as an
MLflow model (a run with results, with ``tracking.artifacts``: ``stacklm.tracking.logged_model``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from stacklm.atomic import write_text_atomically
from stacklm.errors import StacklmError, UsageError
from stacklm.tracking.mlflow_mirror import initialize_store, sync
from stacklm.tracking.runs import cfl_runs, ptb_runs, task_runs
from stacklm.experiments.ptb import dag as ptb
from stacklm.settings_file import build, read_settings
from stacklm.workflow.dag import tracking_experiments
from stacklm.workflow.settings import ResolvedSettings


def read_tracked_settings(path: Path) -> ResolvedSettings:
    """The tracking jobs' settings file (its sections: tasks, cfl, ptb, tracking) as the settings tree."""
    return build(ResolvedSettings, dict(read_settings(path)), source=path)


def init_command(args: argparse.Namespace) -> int:
    settings = read_tracked_settings(args.settings)
    tracking = settings.tracking
    if not tracking.enabled:
        print("tracking is disabled (tracking.enabled: false); nothing to create", file=sys.stderr)
        return 0
    names = tracking_experiments(settings)
    for name, identifier in zip(names, initialize_store(tracking, names)):
        print(f"experiment {identifier}: {name}", file=sys.stderr)
    print(f"MLflow store ready at {tracking.resolved_uri()}", file=sys.stderr)
    return 0


def per_experiment(option: str, values: list[list[Path]] | None, count: int) -> list[list[Path]]:
    """The files of ``option``, one list per ``--experiment`` (none given: empty lists)."""
    if values is None:
        return [[] for _ in range(count)]
    if len(values) != count:
        raise UsageError(f"{option}: given {len(values)} times for {count} --experiment: once after each, or never")
    return values


def sync_command(args: argparse.Namespace) -> int:
    settings = read_tracked_settings(args.settings)
    count = len(args.experiment)
    files = [per_experiment(option, getattr(args, option[2:].replace("-", "_")), count)
             for option in ("--curves", "--metrics", "--curve-logs", "--metrics-logs")]
    if len(args.out) != count:
        raise UsageError(f"--out: {len(args.out)} given for {count} --experiment: one per --experiment, in the same order")
    for experiment, curves, metrics, curve_logs, metrics_logs, out in zip(args.experiment, *files, args.out):
        sync_experiment(settings, experiment, curves, metrics, curve_logs, metrics_logs, out, args.settings)
    return 0


def sync_experiment(settings: ResolvedSettings, experiment: str, curves: list[Path], metrics: list[Path],
                    curve_logs: list[Path], metrics_logs: list[Path], out: Path, source: Path) -> None:
    """Mirror ``experiment``'s runs (its Parquet files and their jobs' logs) and write its manifest to ``out``."""
    tracking = settings.tracking
    if experiment in settings.cfl.languages:
        runs = cfl_runs(experiment, curves, metrics, curve_logs, metrics_logs)
    elif experiment in settings.tasks:
        runs = task_runs(experiment, curves, metrics, curve_logs, metrics_logs)
    elif experiment == ptb.EXPERIMENT and settings.ptb.models:
        runs = ptb_runs(experiment, curves, metrics, curve_logs, metrics_logs)
    else:
        raise StacklmError(f"--experiment {experiment!r} is neither a task, a CFL language nor the PTB experiment of {source}")
    if tracking.enabled:
        manifest = sync(tracking, experiment, runs)
    else:
        manifest = {}
        print(f"tracking is disabled (tracking.enabled: false); no run of {experiment} mirrored", file=sys.stderr)
    write_text_atomically(out, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tracking")
    actions = parser.add_subparsers(dest="tracking_command", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="create the MLflow store and the experiments (run once, before the fan-out)")
    init.add_argument("--settings", required=True, type=Path)
    init.set_defaults(func=init_command)

    mirror = actions.add_parser("sync", help="mirror experiments' runs into MLflow from their Parquet files",
                                description="Each --experiment takes the --curves, --metrics, --curve-logs and --metrics-logs after it;"
                                " several are mirrored one after another, each into its --out.")
    mirror.add_argument("--settings", required=True, type=Path)
    mirror.add_argument("--experiment", required=True, action="append", help="a task, a CFL language or ptb; again for the next")
    mirror.add_argument("--curves", required=True, nargs="+", type=Path, action="append", help="every run's train.parquet")
    mirror.add_argument("--metrics", nargs="*", type=Path, action="append",
                        help="final runs' metrics.parquet; a CFL language's evaluation files; the PTB restarts' metrics.parquet")
    mirror.add_argument("--curve-logs", nargs="*", type=Path, action="append", help="the log of the job that wrote each --curves file")
    mirror.add_argument("--metrics-logs", nargs="*", type=Path, action="append", help="the log of the job that wrote each --metrics file")
    mirror.add_argument("--out", required=True, nargs="+", type=Path, help="the manifest to write, run key → MLflow run id (JSON): one per --experiment")
    mirror.set_defaults(func=sync_command)
