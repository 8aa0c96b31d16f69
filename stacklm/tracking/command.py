"""``stacklm tracking init --settings results/settings.json``: create the MLflow store and one
experiment per task and per CFL language, once and serially, before the workflow fans out (a fresh SQLite store
written by parallel jobs breaks in its schema migration, ``ecosystem.md`` §3)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stacklm.cfl.experiment import CflSettings
from stacklm.tracking.mlflow_mirror import TrackingSettings, initialize_store
from stacklm.training.run_files import read_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tracking", help="the MLflow mirror of the runs")
    actions = parser.add_subparsers(dest="tracking_command", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="create the MLflow store and the experiments (run once, before the fan-out)")
    init.add_argument("--settings", required=True, type=Path)
    init.set_defaults(func=run_init)


def run_init(args: argparse.Namespace) -> int:
    settings = read_settings(args.settings)
    tracking = TrackingSettings.from_dict(settings.get("tracking", {}))
    if not tracking.enabled:
        print("tracking is disabled (tracking.enabled: false); nothing to create", file=sys.stderr)
        return 0
    # one experiment per task and per CFL language (the CFL runs' `task` is their language)
    tasks = list(settings.get("tasks", [])) + list(CflSettings.from_dict(settings.get("cfl", {})).languages)
    identifiers = initialize_store(tracking, tasks)
    for task, identifier in zip(tasks, identifiers):
        print(f"experiment {identifier}: {task}", file=sys.stderr)
    print(f"MLflow store ready at {tracking.resolved_uri()}", file=sys.stderr)
    return 0
