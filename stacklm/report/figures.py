"""Figure 3 of DuSell & Cotterell (2025): full and partial accuracy on the hierarchical and linear
generalization sets, for the models whose mean test full accuracy reaches a threshold (90%).

One panel per task; in each, four groups of bars (FA Hier., FA Linear, PA Hier., PA Linear),
one bar per qualifying architecture: the mean over seeds, with an error bar of one standard
deviation when there are two seeds or more (with one, there is no deviation to show, and the
caption says so).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from stacklm.report.aggregate import Cell  # noqa: E402
from stacklm.report.figure_files import save_figure  # noqa: E402

BAR_GROUPS: tuple[tuple[str, str], ...] = (
    ("full_hierarchical", "FA Hier."),
    ("full_linear", "FA Linear"),
    ("partial_hierarchical", "PA Hier."),
    ("partial_linear", "PA Linear"),
)


def figure3_caption(threshold: float, seeds: int) -> str:
    """The caption of Figure 3 as plain text (the report escapes it for LaTeX and adds the scale);
    a threshold of 0 shows every model, and says so."""
    bars = "Bars: mean over seeds; error bars: one standard deviation." if seeds > 1 else "Bars: the single seed's values (no error bars)."
    models = "of every model (no threshold on test accuracy)" if threshold <= 0 else f"of the models whose mean test full accuracy is at least {threshold:.0%}"
    return f"Full and partial accuracy on the hierarchical and linear generalization sets {models}. {bars}"


def qualifying_architectures(cells: Mapping[tuple[str, str], Cell], architectures: Sequence[str], threshold: float) -> list[str]:
    """The architectures whose mean test full accuracy is at least ``threshold``, in order."""
    return [
        name
        for name in architectures
        if not math.isnan(cells[(name, "full_test")].mean) and cells[(name, "full_test")].mean >= threshold
    ]


def plot_figure3(
    panels: Sequence[tuple[str, Mapping[tuple[str, str], Cell]]],
    architectures: Sequence[str],
    threshold: float,
    paths: Sequence[str | Path],
) -> None:
    """Draw one panel per (task, cells) and save the figure to every path (PNG, PDF, …)."""
    columns = min(len(panels), 2)
    rows = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 3.2 * rows), squeeze=False)
    colours = plt.get_cmap("tab20")
    for axis, (task, cells) in zip(axes.flat, panels):
        shown = qualifying_architectures(cells, architectures, threshold)
        axis.set_title(task)
        axis.set_ylim(0, 1.05)
        axis.set_ylabel("accuracy")
        axis.set_xticks(range(len(BAR_GROUPS)), [label for _, label in BAR_GROUPS])
        if not shown:
            axis.text(
                0.5, 0.5, f"no model reached {threshold:.0%} test accuracy", ha="center", va="center", transform=axis.transAxes
            )
            continue
        width = 0.8 / len(shown)
        for position, name in enumerate(shown):
            means = np.array([cells[(name, key)].mean for key, _ in BAR_GROUPS])
            stds = np.array([cells[(name, key)].std for key, _ in BAR_GROUPS])
            offsets = np.arange(len(BAR_GROUPS)) - 0.4 + width * (position + 0.5)
            axis.bar(
                offsets,
                np.nan_to_num(means),
                width,
                yerr=np.nan_to_num(stds) if np.isfinite(stds).any() else None,  # one seed: no deviation
                capsize=2,
                label=name,
                color=colours(architectures.index(name) % colours.N),
            )
        axis.legend(fontsize="small", ncol=2)
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.tight_layout()
    save_figure(figure, paths)
    plt.close(figure)
