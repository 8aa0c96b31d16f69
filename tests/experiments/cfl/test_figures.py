"""stacklm.experiments.cfl.figures: a curve of one epoch shows (the small preset trains one)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

import stacklm.experiments.cfl.figures as figures
from stacklm.errors import StacklmError
from stacklm.evaluation.cfl_metric import DELTA


def test_a_validation_curve_of_one_epoch_is_drawn_with_a_visible_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list = []
    monkeypatch.setattr(figures, "_save", lambda figure, paths: drawn.append(figure))
    curves = pd.DataFrame({"task": ["marked-reversal"] * 3, "architecture": ["cfl/LSTM", "cfl/NS", "cfl/NS"], "epoch": [1, 1, 2], DELTA: [0.5, 0.4, 0.3]})
    figures.plot_validation_curves(curves, [tmp_path / "validation.png"])
    (figure,) = drawn
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert lines["LSTM"].get_marker() == "o" and lines["LSTM"].get_markersize() >= 4  # one epoch: a dot that shows
    assert lines["NS"].get_marker() == "."  # a line of several epochs keeps its small markers
    plt.close(figure)


def test_the_summary_gives_each_selected_run_its_best_epochs_delta_against_the_papers_bound() -> None:
    def curve(language: str, model: str, setting: str, cross_entropies: list[float], deltas: list[float], hours: float) -> pd.DataFrame:
        return pd.DataFrame({
            "task": language, "architecture": model, "setting": setting, "epoch": range(1, len(deltas) + 1),
            "validation_cross_entropy": cross_entropies, DELTA: deltas, "wall_time_s": hours * 3600,
        })

    curves = pd.concat([
        curve("padded-reversal", "cfl/NS+S+U", "lr0.005-r1", [1.2, 1.0, 1.1], [0.3, 0.1, 0.2], 2.0),
        curve("marked-reversal", "cfl/NS+S+U", "lr0.01-r1", [0.9, 0.7, 0.8], [0.2, 0.04, 0.1], 1.25),  # best at epoch 2: 0.04
        curve("marked-reversal", "cfl/LSTM", "lr0.001-r1", [1.5, 1.4], [0.5, 0.45], 0.25),
    ])
    test = [("marked-reversal", "cfl/LSTM", 0.61), ("marked-reversal", "cfl/NS+S+U", 0.032), ("padded-reversal", "cfl/NS+S+U", 0.125)]
    metrics = pd.DataFrame(
        [{"task": language, "architecture": model, "split": "test", "metric": DELTA, "length": None, "value": value} for language, model, value in test]
        + [{"task": "marked-reversal", "architecture": "cfl/LSTM", "split": "test", "metric": DELTA, "length": 40.0, "value": 9.0}]
    )
    assert figures.summary_markdown(curves, metrics).splitlines()[2:] == [
        "| marked-reversal | LSTM | lr0.001-r1 | 2 | 2 | 0.450 | no | 0.610 | 0.25 |",
        "| marked-reversal | NS+S+U | lr0.01-r1 | 3 | 2 | 0.040 | yes | 0.032 | 1.25 |",
        "| padded-reversal | NS+S+U | lr0.005-r1 | 3 | 2 | 0.100 | no | 0.125 | 2.00 |",
    ]
    with pytest.raises(StacklmError, match="0 whole-set test Δ values for cfl/LSTM on marked-reversal"):
        figures.summary_markdown(curves, metrics[metrics["architecture"] != "cfl/LSTM"])
