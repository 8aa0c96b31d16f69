"""The CFL figures of DuSell & Chiang (2022), drawn from the Parquet records alone.

- Figure 1: validation Δ (cross-entropy above the true distribution's, nats per symbol) against
  the epoch, one curve per model (its selected run), one panel per language;
- test Δ by length: one curve per model over the test lengths ℓ, one panel per language, each
  bin scored with p_true conditioned on ℓ.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from stacklm.evaluation.cfl_metric import DELTA  # noqa: E402
from stacklm.experiments.cfl.experiment import CFL_MODELS, PDA_SIZES  # noqa: E402
from stacklm.models.registry import get_architecture  # noqa: E402
from stacklm.report.figure_files import save_figure  # noqa: E402


def _ordered(values: Sequence[str], order: Sequence[str]) -> list[str]:
    return [value for value in order if value in set(values)]


def _panels(languages: list[str]) -> tuple[Figure, list[plt.Axes]]:
    columns = min(len(languages), 3)
    rows = math.ceil(len(languages) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.2 * rows), squeeze=False)
    for axis in list(axes.flat)[len(languages) :]:
        axis.set_visible(False)
    return figure, list(axes.flat)[: len(languages)]


def _save(figure: Figure, paths: Sequence[str | Path]) -> None:
    figure.tight_layout()
    save_figure(figure, paths)
    plt.close(figure)


def plot_validation_curves(curves: pd.DataFrame, paths: Sequence[str | Path]) -> None:
    """Figure 1 from the selected runs' curves (columns task, architecture, epoch, ``DELTA``)."""
    languages = _ordered(curves["task"].unique().tolist(), list(PDA_SIZES))
    figure, axes = _panels(languages)
    for axis, language in zip(axes, languages):
        rows = curves[curves["task"] == language]
        for model in _ordered(rows["architecture"].unique().tolist(), CFL_MODELS):
            curve = rows[rows["architecture"] == model].sort_values("epoch")
            colour = f"C{CFL_MODELS.index(model)}"
            axis.plot(curve["epoch"], curve[DELTA], marker=".", label=get_architecture(model).label, color=colour)
        axis.set_title(language)
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_ylabel("validation Δ (nats/symbol)")
        axis.legend(fontsize="small")
    _save(figure, paths)


def plot_test_by_length(metrics: pd.DataFrame, paths: Sequence[str | Path]) -> None:
    """Test Δ per length from the evaluation metrics (rows with split "test" and a length)."""
    rows = metrics[(metrics["split"] == "test") & (metrics["metric"] == DELTA) & metrics["length"].notna()]
    languages = _ordered(rows["task"].unique().tolist(), list(PDA_SIZES))
    figure, axes = _panels(languages)
    for axis, language in zip(axes, languages):
        bins = rows[rows["task"] == language]
        for model in _ordered(bins["architecture"].unique().tolist(), CFL_MODELS):
            points = bins[bins["architecture"] == model].sort_values("length")
            axis.plot(points["length"], points["value"], label=get_architecture(model).label, color=f"C{CFL_MODELS.index(model)}")
        axis.set_title(language)
        axis.set_xlabel("length")
        axis.set_ylabel("test Δ (nats/symbol)")
        axis.legend(fontsize="small")
    _save(figure, paths)
