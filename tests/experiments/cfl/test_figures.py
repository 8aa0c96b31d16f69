"""stacklm.experiments.cfl.figures: a curve of one epoch shows (the small preset trains one)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

import stacklm.experiments.cfl.figures as figures
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
