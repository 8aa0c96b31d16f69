"""The MLflow mirror's commands (rules ``tracking`` and ``tracking_sync``).

    stacklm tracking init --settings results/settings/tracking.json
    stacklm tracking sync --settings results/settings/tracking.json --experiment E
        --curves RUN_DIR/train.parquet ... [--metrics METRICS.parquet ...]
        [--curve-logs LOG ... --metrics-logs LOG ...] --out results/tracking/E.json

``init`` creates the MLflow store and one experiment per task, per CFL language and for PTB, once and
serially, before the workflow fans out (a fresh SQLite store written by parallel jobs breaks in
its schema migration, ``ecosystem.md`` §3). ``sync`` mirrors one experiment's runs from their
Parquet files alone (``stacklm.tracking.runs``): for a task, every run's ``train.parquet`` and
the final runs' ``metrics.parquet``; for a CFL language, every grid run's ``train.parquet`` and
each model's evaluation Parquet; for ``ptb``, every restart's ``train.parquet`` and
``metrics.parquet``; with the logs of the jobs that wrote them (one per file, in the
same order) among the run's artifacts. It writes the manifest, run key → MLflow run id, as JSON; with
``tracking.enabled: false`` an empty one, touching no store. Neither imports torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from stacklm.atomic import write_text_atomically
from stacklm.errors import StacklmError
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


def sync_command(args: argparse.Namespace) -> int:
    settings = read_tracked_settings(args.settings)
    tracking = settings.tracking
    if args.experiment in settings.cfl.languages:
        runs = cfl_runs(args.experiment, args.curves, args.metrics, args.curve_logs, args.metrics_logs)
    elif args.experiment in settings.tasks:
        runs = task_runs(args.experiment, args.curves, args.metrics, args.curve_logs, args.metrics_logs)
    elif args.experiment == ptb.EXPERIMENT and settings.ptb.models:
        runs = ptb_runs(args.experiment, args.curves, args.metrics, args.curve_logs, args.metrics_logs)
    else:
        raise StacklmError(f"--experiment {args.experiment!r} is neither a task, a CFL language nor the PTB experiment of {args.settings}")
    if tracking.enabled:
        manifest = sync(tracking, args.experiment, runs)
    else:
        manifest = {}
        print("tracking is disabled (tracking.enabled: false); no run mirrored", file=sys.stderr)
    write_text_atomically(args.out, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tracking")
    actions = parser.add_subparsers(dest="tracking_command", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="create the MLflow store and the experiments (run once, before the fan-out)")
    init.add_argument("--settings", required=True, type=Path)
    init.set_defaults(func=init_command)

    mirror = actions.add_parser("sync", help="mirror one experiment's runs into MLflow from their Parquet files")
    mirror.add_argument("--settings", required=True, type=Path)
    mirror.add_argument("--experiment", required=True, help="a task, a CFL language or ptb")
    mirror.add_argument("--curves", required=True, nargs="+", type=Path, help="every run's train.parquet")
    mirror.add_argument("--metrics", default=[], nargs="*", type=Path, help="final runs' metrics.parquet; a CFL language's evaluation files; the PTB restarts' metrics.parquet")
    mirror.add_argument("--curve-logs", default=[], nargs="*", type=Path, help="the log of the job that wrote each --curves file")
    mirror.add_argument("--metrics-logs", default=[], nargs="*", type=Path, help="the log of the job that wrote each --metrics file")
    mirror.add_argument("--out", required=True, type=Path, help="the manifest to write: run key → MLflow run id (JSON)")
    mirror.set_defaults(func=sync_command)
