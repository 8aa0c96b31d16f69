"""stacklm.report.aggregate: the aggregate Parquet and the per-seed summaries."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from stacklm.errors import StacklmError
from stacklm.report.aggregate import COLUMNS, aggregate, partial_metric, summarize, summarize_values


def by_seed(seed: int) -> Callable[[str, str, str | None], float]:
    """Values that differ by metric, rule and seed, so that a mix-up shows."""
    offsets = {"hierarchical": 0.1, "linear": 0.2, None: 0.0}
    return lambda metric, split, rule: 0.1 * seed + offsets[rule] + (0.01 if metric.startswith("partial") else 0.0)


def test_aggregate_is_the_sorted_concatenation(write_run: Callable[..., Path]) -> None:
    paths = [write_run("question-formation", name, seed, by_seed(seed)) for name in ("Tf", "LSTM") for seed in (1, 2)]
    forward = aggregate(paths)
    backward = aggregate(list(reversed(paths)))
    pd.testing.assert_frame_equal(forward, backward)
    assert len(forward) == sum(len(pd.read_parquet(path)) for path in paths)
    assert list(forward["architecture"].unique()) == ["LSTM", "Tf"]


def test_aggregate_names_the_file_and_the_missing_column(write_run: Callable[..., Path]) -> None:
    path = write_run("question-formation", "Tf", 1, by_seed(1))
    pd.read_parquet(path).drop(columns=["data_version"]).to_parquet(path)
    with pytest.raises(StacklmError, match=rf"{path}: missing metrics column\(s\) data_version"):
        aggregate([path])


def test_aggregate_rejects_a_run_reported_twice(write_run: Callable[..., Path], tmp_path: Path) -> None:
    path = write_run("question-formation", "Tf", 1, by_seed(1))
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(path.read_bytes())
    with pytest.raises(StacklmError, match="two runs report the same metric"):
        aggregate([path, copy])


def test_summary_is_mean_and_population_std_over_seeds(write_run: Callable[..., Path]) -> None:
    paths = [write_run("question-formation", "Tf", seed, by_seed(seed)) for seed in (1, 2, 3)]
    cells = summarize(aggregate(paths), "question-formation", ["Tf", "LSTM"])
    test = cells[("Tf", "full_test")]
    # 0.1, 0.2, 0.3: population std sqrt(((0.1)^2 + 0 + (0.1)^2) / 3), as the authors' print_mean_table.py
    assert test.runs == 3 and test.mean == pytest.approx(0.2) and test.std == pytest.approx((0.02 / 3) ** 0.5)
    assert cells[("Tf", "full_linear")].mean == pytest.approx(0.4)
    assert cells[("Tf", "partial_hierarchical")].mean == pytest.approx(0.31)
    assert cells[("Tf", "partial_log_ratio")].mean == pytest.approx(0.21)
    assert cells[("Tf", "full_log_ratio")].mean == pytest.approx(0.2)
    assert cells[("LSTM", "full_test")].runs == 0 and math.isnan(cells[("LSTM", "full_test")].mean)
    assert {key for _, key in cells} == {column.key for column in COLUMNS}


def test_the_full_log_ratio_is_app_es_log_of_means_or_an_older_scripts_mean_of_example_log_ratios(write_run: Callable[..., Path]) -> None:
    def values(seed: int) -> Callable[[str, str, str | None], float]:
        return lambda metric, split, rule: {"log_ratio": 1.0 * seed, "mean_log_ratio": 10.0 * seed}.get(metric, 0.5)

    metrics = aggregate([write_run("question-formation", "Tf", seed, values(seed)) for seed in (1, 3)])
    assert summarize(metrics, "question-formation", ["Tf"])[("Tf", "full_log_ratio")].mean == pytest.approx(2.0)
    assert summarize(metrics, "question-formation", ["Tf"], log_ratio="per_example")[("Tf", "full_log_ratio")].mean == pytest.approx(20.0)
    assert summarize(metrics, "question-formation", ["Tf"], log_ratio="of_means")[("Tf", "partial_log_ratio")].mean == pytest.approx(0.5)


def test_one_seed_has_no_std() -> None:
    cell = summarize_values(np.array([0.5]))
    assert cell.mean == 0.5 and math.isnan(cell.std)


def test_partial_accuracy_is_exact_where_evaluated_else_sampled() -> None:
    assert partial_metric(pd.DataFrame({"metric": ["partial_accuracy", "partial_accuracy_sampled"]})) == "partial_accuracy"
    assert partial_metric(pd.DataFrame({"metric": ["full_accuracy", "partial_accuracy_sampled"]})) == "partial_accuracy_sampled"


def test_sampled_partial_accuracy_fills_the_column_of_tense_tasks(write_run: Callable[..., Path]) -> None:
    path = write_run("tense-reinflection", "Tf", 1, by_seed(1))
    frame = pd.read_parquet(path)
    frame.loc[frame["metric"] == "partial_accuracy", "metric"] = "partial_accuracy_sampled"
    frame.to_parquet(path)
    cells = summarize(aggregate([path]), "tense-reinflection", ["Tf"])
    assert cells[("Tf", "partial_linear")].mean == pytest.approx(0.31)
