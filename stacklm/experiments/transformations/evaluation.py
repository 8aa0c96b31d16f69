"""``stacklm evaluate``: every metric of trained runs of a task (the rule ``evaluate``, or a rule
``evaluate_final_group<n>`` for several runs).

    stacklm evaluate --task T --run RUN_DIR... --data-dir results/data/T
        --settings results/settings/evaluate.json --out RUN_DIR/metrics.parquet... [--log LOG...]
        [--other-data] [--device cpu|cuda] [--threads N]

Reads ``RUN_DIR/model.pt`` (written by ``stacklm train``), scores the validation, test and
generalization splits (``stacklm.evaluation.metrics``) and writes ``metrics.parquet``, the
source of truth; MLflow never sees the job (``stacklm tracking sync`` mirrors the file later).

The data must be the data the run was trained on (their data versions agree), unless
``--other-data`` asks to score it on other data (e.g. a model trained on generated data on
McCoy et al.'s generalization set): then every row's ``config`` records the scored data
(``scored_data``: its folder and data version). The data pass the task's checks, so every
token is in the model's vocabulary (the task's).

Several ``--run``s are evaluated one after another in this process, which reads torch, the
settings and the data once: each with its own ``--out`` and ``--log`` (a file for its errors;
default stderr), in the order of the runs. Each equals the run evaluated alone (the model is
rebuilt from its own file, sampling is seeded per evaluation). A run that fails does not stop
the others: the command fails after the last, naming the failed runs.
"""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TextIO

import torch

from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import StacklmError
from stacklm.evaluation.metrics import PartialAccuracy, TaskEvaluator
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.common import EvaluatedRun, evaluated_runs, run_each
from stacklm.kernels import backend as backends
from stacklm.settings_file import read_settings
from stacklm.tasks import Task, get_task
from stacklm.tasks.example import Example
from stacklm.tracking.records import RunMetadata, data_version, metrics_table, write_table
from stacklm.training.run_files import SavedModel, choose_device, load_model, read_splits, rebuild_model, set_threads, split_paths


def evaluate_command(args: argparse.Namespace) -> int:
    runs = evaluated_runs(args)
    settings = read_settings(args.settings)
    evaluation = settings.section("evaluation", EvaluationSettings)
    device = choose_device(args.device)
    set_threads(args.threads)
    data = TaskData(get_task(args.task), args.data_dir, args.other_data)
    backend = backends.resolve(args.backend, device)

    def evaluate(run: EvaluatedRun, stream: TextIO | None) -> None:
        evaluate_run(run.run, run.out, data, evaluation, device, backend)

    run_each(runs, evaluate)
    return 0


@dataclass(frozen=True)
class TaskData:
    """The task and its data directory, whose files are read once, when a run first needs them
    (after its ``model.pt``, so that a bad model file is named before missing data);
    ``other_data``: runs trained on other data may be scored on it."""

    task: Task
    directory: Path
    other_data: bool = False

    @functools.cached_property
    def version(self) -> str:
        return data_version(split_paths(self.directory))

    @functools.cached_property
    def splits(self) -> dict[str, list[Example]]:
        return read_splits(self.directory, self.task)

    def check_version(self, run_dir: Path, trained_on: str) -> None:
        """That ``run_dir`` was trained on this data (``trained_on``: its data version), unless
        ``other_data``."""
        if self.version != trained_on and not self.other_data:
            raise StacklmError(f"the data in {self.directory} differs from the data {run_dir} was trained on"
                               f" (sha256 {self.version[:12]} ≠ {trained_on[:12]}); --other-data scores it all the same")

    def scored_data(self) -> dict[str, str]:
        """What the rows record of the data scored, with ``--other-data``."""
        return {"directory": str(self.directory), "data_version": self.version}


def evaluate_run(
    run_dir: Path, out: Path, data: TaskData, evaluation: EvaluationSettings, device: torch.device, backend: backends.Backend
) -> None:
    """Score one run's ``model.pt`` on ``backend`` and write its ``metrics.parquet``."""
    task = data.task
    saved = load_model(run_dir / "model.pt")
    if saved.task != task.name:
        raise StacklmError(f"{run_dir / 'model.pt'} was trained on {saved.task!r}, not on --task {task.name!r}")
    if saved.metadata.get("phase") != "final":
        raise StacklmError(f"{run_dir / 'model.pt'}: a run of the hyperparameter search (trial {saved.metadata.get('trial')}), not a final run; "
                           "evaluate scores final runs, whose metrics make the tables")
    # the run's settings, with the evaluation settings this command used
    metadata = RunMetadata(**saved.metadata)
    data.check_version(run_dir, metadata.data_version)
    recorded = {"evaluation": asdict(evaluation), "evaluation_backend": backends.record(backend)}
    if data.other_data:
        recorded["scored_data"] = data.scored_data()
    metadata = replace(metadata, config=json.dumps(json.loads(metadata.config) | recorded, sort_keys=True))
    evaluator = task_evaluator(saved, task, evaluation, device, backend)
    rows = evaluator.evaluate(data.splits["validation"], data.splits["test"], data.splits["generalization"])
    write_table(metrics_table(rows, metadata), out)


def task_evaluator(
    saved: SavedModel, task: Task, evaluation: EvaluationSettings, device: torch.device, backend: backends.Backend
) -> TaskEvaluator:
    """The evaluator of a saved model, rebuilt on ``device`` and ``backend``, with the task's partial accuracy."""
    model = backends.accelerate(rebuild_model(saved, task).to(device), backend)
    partial = PartialAccuracy.of(task)
    return TaskEvaluator(model, Vocabulary(saved.vocabulary), partial, evaluation, device)
