"""The aggregate ``results/metrics.parquet`` and the per-seed summaries the tables show.

A run's ``metrics.parquet`` is long: one row per (split, rule, metric). A table column of
DuSell & Cotterell (2025), Tables 1–7, is one (metric, split, rule) selection; a cell is the
mean and the standard deviation of that value over the final runs' seeds. Where the paper's
text and its authors' table scripts differ, the tables follow the scripts, which printed the
paper's numbers (``docs/design/authors-code.md#log-ratio``, ``docs/design/authors-code.md#tables``),
and ``report.log_ratio`` offers an older script's:

- the standard deviation is the population one (ddof = 0), as ``print_mean_table.py`` computes
  it (the paper does not say); one seed has none;
- the FA log ratio is, by default (``"of_means"``), App. E's log(FA(M, D_hier) / FA(M, D_lin))
  per seed (the metric ``log_ratio``), as ``print_mean_table.py`` computes it;
  ``"per_example"`` takes the mean over examples of log p(y_hier | x) − log p(y_lin | x)
  (``mean_log_ratio``), as an older script of the authors (``generalization_ratio.py``) did.
  The PA log ratio is App. E's in both cases: the code has no other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import pandas as pd

from stacklm.parquet_file import read_parquet
from stacklm.errors import StacklmError

# The per-run metrics.parquet schema shared with `stacklm evaluate` (column -> pandas kind).
METRICS_COLUMNS: dict[str, str] = {
    "task": "string",
    "architecture": "string",
    "phase": "string",
    "trial": "integer",
    "seed": "integer",
    "split": "string",
    "rule": "string",
    "metric": "string",
    "value": "floating",
    "learning_rate": "floating",
    "tokens_per_batch": "integer",
    "parameters": "integer",
    "data_version": "string",
    "code_version": "string",
    "wall_time_s": "floating",
    "tokens_per_s": "floating",
    "config": "string",
}
SORT_KEYS: list[str] = ["task", "architecture", "phase", "trial", "seed", "split", "rule", "metric"]


def read_run_metrics(path: str | Path) -> pd.DataFrame:
    """One run's metrics, checked against the shared schema (an error names file and column)."""
    frame = read_parquet(path, "the run's metrics")
    missing = [column for column in METRICS_COLUMNS if column not in frame.columns]
    if missing:
        raise StacklmError(f"{path}: missing metrics column(s) {', '.join(missing)}")
    extra = [column for column in frame.columns if column not in METRICS_COLUMNS]
    if extra:
        raise StacklmError(f"{path}: unknown metrics column(s) {', '.join(extra)}")
    if frame.empty:
        raise StacklmError(f"{path}: the run has no metrics")
    return frame[list(METRICS_COLUMNS)]


def aggregate(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The concatenation of the runs' metrics in a fixed order (the same runs → the same file)."""
    if not paths:
        raise StacklmError("no run metrics to aggregate")
    frames = [read_run_metrics(path) for path in paths]
    combined = pd.concat(frames, ignore_index=True)
    combined = combined.sort_values(SORT_KEYS, na_position="first", kind="stable").reset_index(drop=True)
    duplicated = combined.duplicated(SORT_KEYS)
    if duplicated.any():
        row = combined[duplicated].iloc[0]
        key = ", ".join(f"{name}={row[name]}" for name in SORT_KEYS)
        raise StacklmError(f"two runs report the same metric ({key})")
    return combined


@dataclass(frozen=True)
class Column:
    """One numeric column of a results table of DuSell & Cotterell (2025)."""

    key: str  # the column's name in paper_results.csv
    group: str  # "Full Accuracy" or "Partial Accuracy"
    label: str  # header text: Test, Hier., Linear, Log Ratio
    metric: str
    split: str
    rule: str | None
    higher_is_better: bool


COLUMNS: tuple[Column, ...] = (
    Column("full_test", "Full Accuracy", "Test", "full_accuracy", "test", None, True),
    Column("full_hierarchical", "Full Accuracy", "Hier.", "full_accuracy", "generalization", "hierarchical", True),
    Column("full_linear", "Full Accuracy", "Linear", "full_accuracy", "generalization", "linear", False),
    Column("full_log_ratio", "Full Accuracy", "Log Ratio", "mean_log_ratio", "generalization", None, True),
    Column("partial_hierarchical", "Partial Accuracy", "Hier.", "partial_accuracy", "generalization", "hierarchical", True),
    Column("partial_linear", "Partial Accuracy", "Linear", "partial_accuracy", "generalization", "linear", False),
    Column("partial_log_ratio", "Partial Accuracy", "Log Ratio", "partial_log_ratio", "generalization", None, True),
)
LogRatio = Literal["per_example", "of_means"]
FULL_LOG_RATIO: dict[LogRatio, str] = {"per_example": "mean_log_ratio", "of_means": "log_ratio"}  # the metric of the FA Log Ratio column
EXACT_PARTIAL = "partial_accuracy"
SAMPLED_PARTIAL = "partial_accuracy_sampled"


def partial_metric(task_metrics: pd.DataFrame) -> str:
    """The partial accuracy a table shows for one task: exact where evaluated, else sampled.

    Question formation (first word) and passivization (second word) have an exact expectation;
    tense reinflection only the paper's 10-sample estimate (DuSell & Cotterell (2025) §5).
    """
    names = set(task_metrics["metric"])
    if EXACT_PARTIAL in names:
        return EXACT_PARTIAL
    if SAMPLED_PARTIAL in names:
        return SAMPLED_PARTIAL
    return EXACT_PARTIAL


def final_values(metrics: pd.DataFrame, task: str, column: Column) -> pd.DataFrame:
    """One row per (architecture, seed) of the final runs: that column's value."""
    rows = metrics[(metrics["task"] == task) & (metrics["phase"] == "final")]
    metric = partial_metric(rows) if column.metric == EXACT_PARTIAL else column.metric
    selected = rows[(rows["metric"] == metric) & (rows["split"] == column.split)]
    if column.rule is None:
        selected = selected[selected["rule"].isna()]
    else:
        selected = selected[selected["rule"] == column.rule]
    return selected[["architecture", "seed", "value"]]


@dataclass(frozen=True)
class Cell:
    mean: float  # NaN when no run reported the value
    std: float  # NaN with fewer than two seeds
    runs: int


def summarize(metrics: pd.DataFrame, task: str, architectures: Sequence[str], log_ratio: LogRatio = "of_means") -> dict[tuple[str, str], Cell]:
    """``(architecture, column key) → Cell`` for every architecture and column of ``task``."""
    cells: dict[tuple[str, str], Cell] = {}
    for column in COLUMNS:
        if column.key == "full_log_ratio":
            column = replace(column, metric=FULL_LOG_RATIO[log_ratio])
        values = final_values(metrics, task, column)
        for architecture in architectures:
            seeds = values[values["architecture"] == architecture]["value"].to_numpy(dtype=float)
            cells[(architecture, column.key)] = summarize_values(seeds)
    return cells


def summarize_values(values: np.ndarray) -> Cell:
    """Mean and population standard deviation (ddof = 0, as the authors' table script) over seeds."""
    if len(values) == 0:
        return Cell(mean=float("nan"), std=float("nan"), runs=0)
    std = float(np.std(values, ddof=0)) if len(values) > 1 else float("nan")
    return Cell(mean=float(np.mean(values)), std=std, runs=len(values))
