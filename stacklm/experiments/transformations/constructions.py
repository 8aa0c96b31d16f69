"""``stacklm constructions``: the generalization metrics of trained runs, per construction.

    stacklm constructions --data-dir results/data/T --markdown OUT.md [--parquet OUT.parquet]
        [--device cpu|cuda] [--threads N] RUN_DIR...

A task's generalization set can mix constructions on which the two rules fare apart (question
formation: a subject or an object relative clause on the subject, ``Task.generalization_construction``),
which the whole set's metrics average away. For each run, this scores its ``model.pt`` (the best
checkpoint) on the generalization set of ``--data-dir``, checked to be the data it was trained
on as ``stacklm evaluate`` checks it, with the run's own evaluation settings, and gives the
expected full accuracy (FA) and the partial accuracy (PA) under each rule on each construction's
examples (``TaskEvaluator.construction_scores``): one row per run and construction, written as a
Markdown page and, with ``--parquet``, as Parquet. The count-weighted mean of a run's rows is its
FA and PA on the whole set, as in its ``metrics.parquet`` (up to rounding). It only reads the runs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import torch
from tqdm import tqdm

from stacklm.atomic import write_text_atomically
from stacklm.errors import located
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.transformations.evaluation import TaskData, task_evaluator
from stacklm.kernels import backend as backends
from stacklm.settings_file import build
from stacklm.tasks import get_task
from stacklm.tracking.records import RunMetadata, write_table
from stacklm.training.run_files import SavedModel, choose_device, load_model, set_threads

HEADER = ("architecture", "seed", "construction", "examples", "FA hier.", "FA lin.", "PA hier.", "PA lin.")


@dataclass(frozen=True)
class ConstructionRow:
    """One run's generalization metrics on the examples of one construction."""

    task: str
    architecture: str
    seed: int
    run: str  # the run's folder
    construction: str
    count: int  # its examples in the generalization set
    full_accuracy_hierarchical: float
    full_accuracy_linear: float
    partial_accuracy_hierarchical: float
    partial_accuracy_linear: float


def constructions_command(args: argparse.Namespace) -> int:
    device = choose_device(args.device)
    set_threads(args.threads)
    backend = backends.resolve(args.backend, device)
    rows: list[ConstructionRow] = []
    data: TaskData | None = None
    for folder in tqdm(args.runs, desc="scoring runs", unit="run", file=sys.stderr):
        saved, data = checked_run(folder, args.data_dir, data, args.other_data)
        rows += construction_rows(folder, saved, data, device, backend)
    assert data is not None  # argparse requires one run or more
    write_text_atomically(args.markdown, render_page(rows, data))
    if args.parquet is not None:
        write_rows(rows, args.parquet)
    return 0


def checked_run(folder: Path, data_dir: Path, data: TaskData | None, other_data: bool = False) -> tuple[SavedModel, TaskData]:
    """``folder/model.pt`` and the task's data (that of the first run, read when first needed):
    a run of another task than the first, or trained on other data (unless ``other_data``), is
    an error naming it."""
    saved = load_model(folder / "model.pt")
    if data is None:
        data = TaskData(get_task(saved.task), data_dir, other_data)
        if not data.task.generalization_constructions:
            raise located(folder / "model.pt", None, f"a run of {saved.task!r}, whose generalization set has no constructions"
                          " (question formation's have: the relative clause on the subject)")
    elif saved.task != data.task.name:
        raise located(folder / "model.pt", None, f"a run of {saved.task!r}, not of {data.task.name!r} as the first run: one task per command")
    data.check_version(folder, RunMetadata(**saved.metadata).data_version)
    return saved, data


def construction_rows(folder: Path, saved: SavedModel, data: TaskData, device: torch.device, backend: backends.Backend) -> list[ConstructionRow]:
    """The run's rows, in the order of the task's constructions."""
    generalization = data.splits["generalization"]
    labels = [data.task.generalization_construction(example.source) for example in generalization]
    metadata = RunMetadata(**saved.metadata)
    evaluation = build(EvaluationSettings, saved.settings.get("evaluation"), "evaluation", folder / "model.pt")
    evaluator = task_evaluator(saved, data.task, evaluation, device, backend)
    partial = "partial_accuracy" if evaluator.partial.exact else "partial_accuracy_sampled"
    order = list(data.task.generalization_constructions)
    rows = []
    for result in sorted(evaluator.construction_scores(generalization, labels), key=lambda result: order.index(result.construction)):
        values = {(row.rule, row.metric): row.value for row in result.rows}
        rows.append(ConstructionRow(
            task=data.task.name, architecture=metadata.architecture, seed=metadata.seed, run=str(folder),
            construction=result.construction, count=result.count,
            full_accuracy_hierarchical=values[("hierarchical", "full_accuracy")], full_accuracy_linear=values[("linear", "full_accuracy")],
            partial_accuracy_hierarchical=values[("hierarchical", partial)], partial_accuracy_linear=values[("linear", partial)],
        ))  # fmt: skip
    return rows


def markdown_table(rows: Sequence[ConstructionRow]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" if name in ("architecture", "construction") else "---:" for name in HEADER) + "|"]
    for row in rows:
        values = (row.full_accuracy_hierarchical, row.full_accuracy_linear, row.partial_accuracy_hierarchical, row.partial_accuracy_linear)
        lines.append("| " + " | ".join([row.architecture, str(row.seed), row.construction, f"{row.count:,}", *(f"{value:.3f}" for value in values)]) + " |")
    return "\n".join(lines) + "\n"


def render_page(rows: Sequence[ConstructionRow], data: TaskData) -> str:
    """The page: what the table shows, the constructions of the task, the table."""
    present = dict.fromkeys(row.construction for row in rows)
    legend = "".join(f"- {label}: {description}\n" for label, description in data.task.generalization_constructions.items() if label in present)
    return (
        f"# {data.task.name}: the generalization set by construction\n\n"
        f"Expected full accuracy (FA) and partial accuracy (PA) under the hierarchical and the linear rule (DuSell & Cotterell (2025) §5),"
        f" computed as `stacklm evaluate` computes them, on the examples of each construction of the generalization set of"
        f" `{data.directory}`{' (runs trained on other data)' if data.other_data else ''}, for each run's best model (written by"
        " `stacklm constructions`). PA is the task's partial accuracy"
        " (question formation: the probability of the reference's first word, the fronted auxiliary). A run's FA and PA on the"
        " whole set are the count-weighted means of its rows.\n\n"
        f"{legend}\n{markdown_table(rows)}"
    )


def write_rows(rows: Sequence[ConstructionRow], path: Path) -> None:
    write_table(pa.Table.from_pylist([asdict(row) for row in rows]), path)
