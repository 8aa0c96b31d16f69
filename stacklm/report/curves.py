"""``stacklm curves``: the generalization curves of one task's final runs (the rule ``curves``).

    stacklm curves --out results/curves/T.parquet --figures results/report/figures/curves-T.png
        results/report/figures/curves-T.pdf -- RUN/train.parquet ...

At every checkpoint a run of a syntactic-transformation task scores a fixed sample of the test
set and of the generalization set under both rules (``TaskEvaluator.checkpoint_scores``): full
accuracy FA and the task's partial accuracy PA (DuSell & Cotterell, 2025, §5). This command
concatenates those curves into one Parquet file (one row per run and checkpoint) and draws them:
one row of panels per architecture — test, hierarchical generalization, linear generalization —
FA (solid) and PA (dashed) against the training examples seen, one colour per seed, a dot on the
checkpoint whose parameters the run keeps (its lowest validation cross-entropy). ``stacklm
progress`` draws the checkpoints of runs still training with the same code.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from stacklm.parquet_file import read_parquet
from stacklm.atomic import write_bytes_atomically
from stacklm.errors import StacklmError
from stacklm.report.figure_files import save_figure
from stacklm.tracking.records import CURVE_SCORES, CURVE_SETS, curve_score

IDENTITY = ["task", "architecture", "phase", "trial", "seed", "learning_rate", "tokens_per_batch", "parameters", "code_version"]
CHECKPOINT = ["checkpoint", "epoch", "examples_seen", "learning_rate_used", "train_loss", "validation_cross_entropy", "is_best"]
TITLE_MARGIN_IN = 0.1  # the figure's title below the top edge
TITLE_HEIGHT_IN = 0.45  # room for that title above the first row of panels
TITLES = {"test": "test", "hierarchical": "generalization, hierarchical rule", "linear": "generalization, linear rule"}  # a panel per CURVE_SETS


def read_curves(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The runs' curves, one row per checkpoint, in the order given; an error names a file
    that is not a curve of one task's runs with generalization scores."""
    frames = []
    for path in paths:
        frame = read_parquet(path, "the run's curve")
        missing = [column for column in IDENTITY + CHECKPOINT + list(CURVE_SCORES) if column not in frame.columns]
        if missing:
            raise StacklmError(f"{path}: missing curve column(s) {', '.join(missing)}")
        frames.append(frame[IDENTITY + CHECKPOINT + list(CURVE_SCORES)])
    if not frames:
        raise StacklmError("no run curves given")
    curves = pd.concat(frames, ignore_index=True)
    if curves["task"].nunique() != 1:
        raise StacklmError(f"the curves belong to several tasks ({', '.join(sorted(curves['task'].unique()))}): one task per call")
    return curves


def run_names(curves: pd.DataFrame) -> pd.Series:
    """Each checkpoint's run as the figure names it within its row: ``seed s`` for a final run,
    ``trial k`` for a search trial (whose seed is derived from k)."""
    names = [f"trial {trial:.0f}" if phase == "search" else f"seed {seed:.0f}" for phase, trial, seed in zip(curves["phase"], curves["trial"], curves["seed"])]
    return pd.Series(names, index=curves.index)


def name_order(name: str) -> tuple[str, int]:
    """``seed 2`` before ``seed 10``, seeds before trials."""
    kind, number = name.split()[:2]
    return kind, int(number)


def plot_curves(curves: pd.DataFrame, paths: Sequence[str | Path], rows: Sequence[str] = ("architecture",), dot: str = "the checkpoint kept") -> None:
    """One row of panels per value of the columns ``rows`` (in order of appearance), one panel per
    set, one colour per run (``run_names``); a dot on each run's last best checkpoint, which the
    title calls ``dot``; saved to every path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row_names = curves[list(rows)].astype(str).agg(" ".join, axis=1)
    runs = run_names(curves)
    row_order = list(dict.fromkeys(row_names))
    run_order = sorted(runs.unique(), key=name_order)
    colours = plt.get_cmap("tab10")
    figure, axes = plt.subplots(len(row_order), len(CURVE_SETS), figsize=(4.2 * len(CURVE_SETS), 2.4 * len(row_order) + 0.6), squeeze=False)
    for row, row_name in enumerate(row_order):
        for column, name in enumerate(CURVE_SETS):
            axis = axes[row][column]
            for run_name in run_order:
                run = curves[(row_names == row_name) & (runs == run_name)].sort_values("examples_seen")
                if run.empty:
                    continue
                colour = colours(run_order.index(run_name) % colours.N)
                marker = "o" if len(run) == 1 else None  # a line of one checkpoint draws nothing
                axis.plot(run["examples_seen"], run[curve_score(name, "full")], color=colour, marker=marker, label=f"{run_name} FA")
                axis.plot(
                    run["examples_seen"], run[curve_score(name, "partial")], color=colour, linestyle="--", marker=marker, markerfacecolor="none", label=f"{run_name} PA"
                )
                best = run[run["is_best"]].tail(1)
                axis.plot(best["examples_seen"], best[curve_score(name, "full")], "o", color=colour, markersize=4)
            axis.set_ylim(-0.02, 1.02)
            axis.grid(alpha=0.3)
            if row == 0:
                axis.set_title(TITLES[name])
            if column == 0:
                axis.set_ylabel(f"{row_name}\naccuracy")
            if row == len(row_order) - 1:
                axis.set_xlabel("training examples seen")
    share_examples_axis(axes)
    legend = {label: handle for axis in axes.flat for handle, label in zip(*axis.get_legend_handles_labels())}
    legend = dict(sorted(legend.items(), key=lambda item: (name_order(item[0]), item[0])))
    figure.legend(list(legend.values()), list(legend), loc="lower center", ncol=min(len(legend), 6), fontsize="small")
    tasks = ", ".join(dict.fromkeys(curves["task"]))
    # the title and its room measured in inches from the top: in figure fractions, a tall figure (17 rows) drew it over the first row
    height_in = figure.get_figheight()
    figure.suptitle(f"{tasks}: FA (solid) and PA (dashed) at every checkpoint; dot: {dot}", y=1 - TITLE_MARGIN_IN / height_in, va="top")
    figure.tight_layout(rect=(0, 0.06, 1, 1 - TITLE_HEIGHT_IN / height_in))
    save_figure(figure, paths, dpi=120)
    plt.close(figure)


def share_examples_axis(axes: np.ndarray) -> None:
    """Give every panel the x-limits that ``sharex`` would autoscale to (the data of all panels
    plus the margin) and keep tick labels on the outer panels only, as ``sharex``/``sharey`` do.
    Panels shared through matplotlib check all their siblings at every limit lookup: with the 51
    panels of 17 architectures, about a fifth of the drawing's CPU time. The files are the same."""
    examples = [value for axis in axes.flat for value in axis.dataLim.intervalx if np.isfinite(value)]
    first = axes.flat[0]
    low, high = first.xaxis.get_major_locator().nonsingular(min(examples), max(examples))
    margin = (high - low) * first.margins()[0]
    for axis in axes.flat:
        axis.set_xlim(low - margin, high + margin)
        axis.label_outer()


def curves_command(args: argparse.Namespace) -> int:
    curves = read_curves(args.runs)
    buffer = io.BytesIO()
    curves.to_parquet(buffer, index=False)
    write_bytes_atomically(args.out, buffer.getvalue())
    plot_curves(curves, args.figures)
    print(f"{len(args.runs)} runs, {len(curves)} checkpoints -> {args.out}, {', '.join(map(str, args.figures))}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("curves")
    parser.add_argument("--out", required=True, type=Path, help="the task's curves: results/curves/T.parquet")
    parser.add_argument("--figures", required=True, nargs="+", type=Path, help="the figure's files (.png, .pdf)")
    parser.add_argument("runs", nargs="+", type=Path, help="the task's final runs' train.parquet")
    parser.set_defaults(func=curves_command)
