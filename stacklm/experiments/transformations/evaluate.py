"""``stacklm evaluate``: every metric of one trained run (the rule ``evaluate``).

    stacklm evaluate --task T --run RUN_DIR --data-dir results/data/T
        --settings results/settings/evaluate.json --out RUN_DIR/metrics.parquet [--device cpu|cuda] [--threads N]

Reads ``RUN_DIR/model.pt`` (written by ``stacklm train``), scores the validation, test and
generalization splits (``stacklm.evaluation.metrics``) and writes ``metrics.parquet``, the
source of truth; MLflow never sees the job (``stacklm tracking sync`` mirrors the file later).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path

from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import StacklmError
from stacklm.evaluation.metrics import PartialAccuracy, TaskEvaluator
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.common import add_resource_arguments
from stacklm.settings_file import read_settings
from stacklm.tasks import get_task
from stacklm.tracking.records import RunMetadata, data_version, metrics_table, write_table
from stacklm.training.run_files import choose_device, load_model, read_splits, rebuild_model, set_threads, split_paths


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate")
    parser.add_argument("--task", required=True)
    parser.add_argument("--run", required=True, type=Path, help="run directory holding model.pt")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--settings", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="metrics.parquet to write")
    add_resource_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = read_settings(args.settings)
    evaluation = settings.section("evaluation", EvaluationSettings)
    device = choose_device(args.device)
    set_threads(args.threads)
    saved = load_model(args.run / "model.pt")
    if saved.task != args.task:
        raise StacklmError(f"{args.run / 'model.pt'} was trained on {saved.task!r}, not on --task {args.task!r}")
    # the run's settings, with the evaluation settings this command used
    metadata = RunMetadata(**saved.metadata)
    metadata = replace(metadata, config=json.dumps(json.loads(metadata.config) | {"evaluation": asdict(evaluation)}, sort_keys=True))
    version = data_version(split_paths(args.data_dir))
    if version != metadata.data_version:
        raise StacklmError(f"the data in {args.data_dir} differs from the data {args.run} was trained on (sha256 {version[:12]} ≠ {metadata.data_version[:12]})")
    task = get_task(args.task)
    model = rebuild_model(saved, task).to(device)
    splits = read_splits(args.data_dir, task)
    evaluator = TaskEvaluator(model, Vocabulary(saved.vocabulary), PartialAccuracy(task.partial_accuracy_kind, task.partial_match, task.partial_decided_by), evaluation, device)
    rows = evaluator.evaluate(splits["validation"], splits["test"], splits["generalization"])
    write_table(metrics_table(rows, metadata), args.out)
    return 0
