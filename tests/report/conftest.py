"""Synthetic run metrics that follow the metrics.parquet contract, with known values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

# (metric, split, rule) of every row one final run reports for a question-formation task.
ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("cross_entropy", "validation", None),
    ("cross_entropy", "test", None),
    ("full_accuracy", "test", None),
    ("full_accuracy", "generalization", "hierarchical"),
    ("full_accuracy", "generalization", "linear"),
    ("partial_accuracy", "generalization", "hierarchical"),
    ("partial_accuracy", "generalization", "linear"),
    ("log_ratio", "generalization", None),
    ("partial_log_ratio", "generalization", None),
    ("mean_log_ratio", "generalization", None),
)


def run_metrics(task: str, architecture: str, seed: int, value: Callable[[str, str, str | None], float]) -> pd.DataFrame:
    """One final run's metrics.parquet rows; ``value(metric, split, rule)`` gives each value."""
    rows = [
        {
            "task": task,
            "architecture": architecture,
            "phase": "final",
            "trial": None,
            "seed": seed,
            "split": split,
            "rule": rule,
            "metric": metric,
            "value": float(value(metric, split, rule)),
            "learning_rate": 3e-4,
            "tokens_per_batch": 1024,
            "parameters": 200_000,
            "data_version": "sha256:0",
            "code_version": "0.1.0",
            "wall_time_s": 1.0,
            "tokens_per_s": 100.0,
            "config": json.dumps({"seed": seed}),
        }
        for metric, split, rule in ROWS
    ]
    frame = pd.DataFrame(rows)
    frame["trial"] = frame["trial"].astype("Int64")
    return frame


@pytest.fixture
def write_run(tmp_path: Path) -> Callable[..., Path]:
    def write(task: str, architecture: str, seed: int, value: Callable[[str, str, str | None], float]) -> Path:
        path = tmp_path / "runs" / task / architecture.lower() / str(seed) / "metrics.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        run_metrics(task, architecture, seed, value).to_parquet(path, index=False)
        return path

    return write
