"""The PTB outputs of DuSell & Chiang (2022) §5.2 and App. 11, rendered from the runs' metrics
Parquet alone (the PTB rows of ``stacklm.tracking.records``, every restart of every model):

- the PTB table: per model, its selected random restart (the one of lowest validation
  perplexity, the paper's selection, made by the experiment and given here as model → restart),
  with its parameter count, validation and test perplexity and SG score;
- the circuit table (App. 11): the same restarts' score per circuit, then the SG score;
- the figure (App. 11): SG score against test perplexity of every restart, a colour per model,
  the selected restart ringed.

In both tables the best value of each column is bold (the lowest perplexity, the highest
score), judged on the printed values: every row printing the best value is bold. LaTeX goes
through the report's Jinja environment (``stacklm.report.tables.environment``), Markdown too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from stacklm.errors import StacklmError
from stacklm.report.tables import MISSING, environment, escape_latex
from stacklm.tracking.records import PERPLEXITY, SG_CIRCUIT_SCORE, SG_SCORE, SG_SPLIT

TASK = "ptb"


@dataclass(frozen=True)
class PtbRun:
    """One trained restart of one model, as its metrics rows give it."""

    architecture: str
    seed: int  # the restart
    parameters: int
    validation_perplexity: float
    test_perplexity: float
    sg_score: float  # NaN when the run was not scored on SyntaxGym
    circuits: tuple[tuple[str, float], ...]  # (circuit, score) in the rows' order; empty when not scored


@dataclass(frozen=True)
class PtbColumn:
    label: str
    higher_is_better: bool | None  # None: never bold (the parameter count)
    decimals: int  # 0: an integer with thousands separators


def ptb_runs(metrics: pd.DataFrame, source: str) -> list[PtbRun]:
    """Every PTB run in ``metrics`` (the rows of task "ptb"), in the order of first appearance."""
    rows = metrics[metrics["task"] == TASK]
    if rows.empty:
        raise StacklmError(f"{source}: no rows of task {TASK!r}")
    runs: list[PtbRun] = []
    for (architecture, seed), run in rows.groupby(["architecture", "seed"], sort=False):
        where = f"{source}: architecture {architecture!r}, seed {seed}"

        def single(split: str, metric: str) -> float:
            values = run[(run["split"] == split) & (run["metric"] == metric)]["value"]
            if len(values) > 1:
                raise StacklmError(f"{where}: {len(values)} rows of {split} {metric}, expected one")
            if values.empty and split != SG_SPLIT:
                raise StacklmError(f"{where}: no {split} {metric} row")
            return float(values.iloc[0]) if len(values) else math.nan

        circuits = run[(run["split"] == SG_SPLIT) & (run["metric"] == SG_CIRCUIT_SCORE)]
        runs.append(
            PtbRun(
                architecture=str(architecture),
                seed=int(seed),
                parameters=int(run["parameters"].iloc[0]),
                validation_perplexity=single("validation", PERPLEXITY),
                test_perplexity=single("test", PERPLEXITY),
                sg_score=single(SG_SPLIT, SG_SCORE),
                circuits=tuple((str(name), float(value)) for name, value in zip(circuits["circuit"], circuits["value"])),
            )
        )
    return runs


def selected_runs(runs: Sequence[PtbRun], selection: Mapping[str, int]) -> list[PtbRun]:
    """The run of each model of ``selection`` (model → selected restart), in its order."""
    found = {(run.architecture, run.seed): run for run in runs}
    missing = [f"{model} restart {seed}" for model, seed in selection.items() if (model, seed) not in found]
    if missing:
        raise StacklmError(f"no PTB run of {', '.join(missing)}")
    return [found[model, seed] for model, seed in selection.items()]


PTB_COLUMNS = (
    PtbColumn("Params.", None, 0),
    PtbColumn("Val. Perplexity", False, 2),
    PtbColumn("Test Perplexity", False, 2),
    PtbColumn("SG Score", True, 3),
)


def _printed(value: float, column: PtbColumn) -> str:
    if math.isnan(value):
        return MISSING
    return f"{int(value):,}" if column.decimals == 0 else f"{value:.{column.decimals}f}"


def _cells(values: Sequence[Sequence[float]], columns: Sequence[PtbColumn], markdown: bool) -> list[list[str]]:
    """The printed cells of each row, the best printed value of each column bold (none in a column
    whose rows all print the same value)."""
    printed = [[_printed(value, column) for value, column in zip(row, columns)] for row in values]
    best: list[str | None] = []
    for index, column in enumerate(columns):
        shown = [row[index] for row in printed if row[index] != MISSING]
        if column.higher_is_better is None or len({float(text) for text in shown}) < 2:  # none, or nothing stands out: no bold
            best.append(None)
        else:
            best.append((max if column.higher_is_better else min)(shown, key=float))
    result = []
    for row in printed:
        cells = []
        for text, column, top in zip(row, columns, best):
            bold = top is not None and text != MISSING and float(text) == float(top)
            if markdown or text == MISSING:
                cells.append(f"**{text}**" if bold else text)
            elif column.decimals == 0:
                cells.append(text)
            else:
                cells.append(rf"$\mathbf{{{text}}}$" if bold else f"${text}$")
        result.append(cells)
    return result


def _render(
    label: str,
    caption: str,
    columns: Sequence[PtbColumn],
    runs: Sequence[PtbRun],
    values: Sequence[Sequence[float]],
    source: str,
    markdown: bool,
    scale: str,
) -> str:
    rows = [{"label": run.architecture, "cells": cells} for run, cells in zip(runs, _cells(values, columns, markdown))]
    headers = [column.label + ("" if column.higher_is_better is None else (" ↑" if column.higher_is_better else " ↓")) for column in columns]
    latex_headers = [
        escape_latex(column.label) + ("" if column.higher_is_better is None else (r" $\uparrow$" if column.higher_is_better else r" $\downarrow$"))
        for column in columns
    ]
    template = environment().get_template("ptb_table.md.j2" if markdown else "ptb_table.tex.j2")
    return template.render(label=label, caption=f"{caption} {scale}".strip(), headers=headers if markdown else latex_headers, rows=rows, source=source)


def render_ptb_table(runs: Sequence[PtbRun], selection: Mapping[str, int], source: str, markdown: bool = False, scale: str = "") -> str:
    """The PTB table (LaTeX, or Markdown): a row per model of ``selection``, its selected restart;
    ``scale`` (``stacklm.workflow.document.ptb_scale``) ends the caption."""
    best = selected_runs(runs, selection)
    counts = [sum(run.architecture == model for run in runs) for model in selection]
    restarts = str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"
    caption = (
        "Penn Treebank language models: parameters, validation and test perplexity and SG score of each model's "
        f"random restart with the lowest validation perplexity (of {restarts} restarts)."
    )
    values = [(run.parameters, run.validation_perplexity, run.test_perplexity, run.sg_score) for run in best]
    return _render("ptb", caption, PTB_COLUMNS, best, values, source, markdown, scale)


def render_circuit_table(runs: Sequence[PtbRun], selection: Mapping[str, int], source: str, markdown: bool = False, scale: str = "") -> str:
    """The circuit table of App. 11: the selected restarts' score per circuit, then the SG score;
    ``scale`` ends the caption."""
    best = selected_runs(runs, selection)
    names = list(dict.fromkeys(name for run in best for name, _ in run.circuits))
    if not names:
        raise StacklmError(f"{source}: no selected run was scored on SyntaxGym")
    columns = [PtbColumn(name, True, 3) for name in names] + [PtbColumn("SG Score", True, 3)]
    values = [[dict(run.circuits).get(name, math.nan) for name in names] + [run.sg_score] for run in best]
    caption = "SG score per circuit of each model's random restart with the lowest validation perplexity, and the SG score."
    return _render("circuits", caption, columns, best, values, source, markdown, scale)


def scatter_points(runs: Sequence[PtbRun], models: Sequence[str]) -> dict[str, list[tuple[float, float]]]:
    """(test perplexity, SG score) of every scored restart of each model, in the runs' order."""
    return {model: [(run.test_perplexity, run.sg_score) for run in runs if run.architecture == model and not math.isnan(run.sg_score)] for model in models}


def plot_sg_against_perplexity(runs: Sequence[PtbRun], selection: Mapping[str, int], models: Sequence[str], paths: Sequence[str | Path]) -> None:
    """SG score against test perplexity, every scored restart of ``models``; each model's
    selected restart (``selection``: lowest validation perplexity) ringed in black. Saved to every path."""
    # matplotlib loads here: the tables need none of it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stacklm.report.figure_files import save_figure

    points = scatter_points(runs, models)
    selected = {run.architecture: run for run in selected_runs(runs, {model: selection[model] for model in models})}
    figure, axis = plt.subplots(figsize=(5.5, 4.0))
    ringed = [selected[model] for model in models if not math.isnan(selected[model].sg_score)]
    for index, model in enumerate(models):
        if points[model]:
            axis.scatter([x for x, _ in points[model]], [y for _, y in points[model]], color=f"C{index % 10}", label=model, s=24)
    if ringed:
        axis.scatter(
            [run.test_perplexity for run in ringed], [run.sg_score for run in ringed],
            facecolors="none", edgecolors="black", s=90, linewidths=1.2, label="selected (lowest val. perplexity)",
        )
    if not any(points.values()):
        axis.text(0.5, 0.5, "no run was scored on SyntaxGym", ha="center", va="center", transform=axis.transAxes)
    else:
        axis.legend(fontsize="small")
    axis.set_xlabel("test perplexity")
    axis.set_ylabel("SG score")
    figure.tight_layout()
    save_figure(figure, paths)
    plt.close(figure)
