"""The CFL figures of DuSell & Chiang (2022), drawn from the Parquet records alone.

- Figure 1: validation Δ (cross-entropy above the true distribution's, nats per symbol) against
  the epoch, one curve per model (its selected run), one panel per language;
- test Δ by length: one curve per model over the test lengths ℓ, one panel per language, each
  bin scored with p_true conditioned on ℓ;
- Figure 2: the stack actions of NS+S and NS+S+U on marked reversal over training, a heat map
  per model (rows: updates, columns: positions t of the fixed string, colour: the probability
  of the correct action type), from the selected runs' ``actions.parquet``
  (:mod:`stacklm.experiments.cfl.actions`); ``stacklm cfl actions`` (:func:`actions_command`)
  gathers them into one Parquet and draws it;
- the summary: per language and model, the selected run, its validation Δ at its best epoch (the
  paper's claim: NS+S+U within 0.05 nats on every language, §4), its test Δ and its training time,
  a Markdown table (:func:`summary_markdown`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from stacklm.atomic import write_text_atomically
from stacklm.parquet_file import read_parquet
from stacklm.errors import StacklmError  # noqa: E402
from stacklm.evaluation.cfl_metric import DELTA, NEAR_OPTIMAL  # noqa: E402
from stacklm.experiments.cfl.actions import ACTIONS_SCHEMA, MARKER  # noqa: E402
from stacklm.experiments.cfl.search import best_delta, best_epoch  # noqa: E402
from stacklm.experiments.cfl.settings import PDA_SIZES  # noqa: E402
from stacklm.models.cfl_names import CFL_MODELS  # noqa: E402
from stacklm.models.registry import get_architecture  # noqa: E402
from stacklm.report.figure_files import save_figure  # noqa: E402
from stacklm.tracking.records import write_table  # noqa: E402


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
            marker = "o" if len(curve) == 1 else "."  # one epoch: a dot that shows, not a pixel
            axis.plot(curve["epoch"], curve[DELTA], marker=marker, label=get_architecture(model).label, color=colour)
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


def summary_markdown(curves: pd.DataFrame, metrics: pd.DataFrame) -> str:
    """A Markdown table, a row per (language, model) of the selected curves: the run (its setting),
    its epochs, its best epoch (:func:`~stacklm.experiments.cfl.search.best_epoch`), validation Δ
    there, whether that is within :data:`~stacklm.evaluation.cfl_metric.NEAR_OPTIMAL`, test Δ over
    the whole test set, and the run's training time in hours. A model without a test Δ in
    ``metrics`` is refused."""
    test = metrics[(metrics["split"] == "test") & (metrics["metric"] == DELTA) & metrics["length"].isna()]
    lines = [
        "| language | model | run | epochs | best epoch | validation Δ | within 0.05 | test Δ | hours |",
        "|---|---|---|---:|---:|---:|:---:|---:|---:|",
    ]
    for language in _ordered(curves["task"].unique().tolist(), list(PDA_SIZES)):
        rows = curves[curves["task"] == language]
        for model in _ordered(rows["architecture"].unique().tolist(), CFL_MODELS):
            curve = rows[rows["architecture"] == model].sort_values("epoch")
            delta = best_delta(curve)
            value = test[(test["task"] == language) & (test["architecture"] == model)]["value"]
            if len(value) != 1:
                raise StacklmError(f"the metrics hold {len(value)} whole-set test Δ values for {model} on {language}; one was expected")
            lines.append(
                f"| {language} | {get_architecture(model).label} | {curve['setting'].iloc[0]} | {int(curve['epoch'].max())} | {int(best_epoch(curve)['epoch'])} "
                f"| {delta:.3f} | {'yes' if delta <= NEAR_OPTIMAL else 'no'} | {float(value.iloc[0]):.3f} "
                f"| {float(curve['wall_time_s'].iloc[0]) / 3600:.2f} |"
            )
    return "\n".join(lines) + "\n"


def read_actions(path: str | Path) -> pd.DataFrame:
    """An ``actions.parquet`` (or the gathered one), refused with its name when it is not one."""
    frame = read_parquet(path, "the run's stack actions")
    missing = [name for name in ACTIONS_SCHEMA.names if name not in frame.columns]
    if missing:
        raise StacklmError(f"{path}: not a stack-action log: no column {', '.join(missing)}")
    if frame.empty:
        raise StacklmError(f"{path}: no stack actions logged")
    return frame


def plot_stack_actions(actions: pd.DataFrame, paths: Sequence[str | Path]) -> None:
    """Figure 2 from the selected runs' action logs (columns of ``ACTIONS_SCHEMA``): per model, the
    probability of the correct action type by update (rows, training time downwards) and position t."""
    models = _ordered(actions["architecture"].unique().tolist(), CFL_MODELS)  # NS+S, then NS+S+U
    figure, axes = plt.subplots(1, len(models), figsize=(4.8 * len(models) + 1, 4.2), squeeze=False)
    image = None
    for axis, model in zip(axes.flat, models):
        rows = actions[actions["architecture"] == model]
        grid = rows.pivot(index="update", columns="position", values="correct_probability").sort_index().sort_index(axis=1)
        updates, positions = grid.index.to_numpy(), grid.columns.to_numpy()
        image = axis.imshow(
            grid.to_numpy(dtype=float),
            aspect="auto",
            interpolation="nearest",
            cmap="viridis",
            vmin=0.0,
            vmax=1.0,
            extent=(positions[0] - 0.5, positions[-1] + 0.5, updates[-1], updates[0] - (updates[1] - updates[0] if len(updates) > 1 else 1)),
        )
        symbols = rows.drop_duplicates("position").set_index("position")["symbol"]
        marker = [position for position, symbol in symbols.items() if symbol == MARKER]
        if marker:
            axis.axvline(marker[0], color="white", linewidth=0.8, linestyle=":")
        setting = ", ".join(sorted(rows["setting"].unique()))
        axis.set_title(f"{get_architecture(model).label} ({setting})")
        axis.set_xlabel("position t (dotted: #; push before, pop after)")
        axis.set_ylabel("updates")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    assert image is not None
    figure.colorbar(image, ax=list(axes.flat), label="P(correct action)")
    save_figure(figure, paths)
    plt.close(figure)


def actions_command(args: argparse.Namespace) -> int:
    """``stacklm cfl actions``: each selected run's ``actions.parquet`` (the run of ``--selections[i]``
    in ``--runs[i]``), gathered into ``--out``, and Figure 2 drawn from it."""
    if len(args.selections) != len(args.runs):
        raise StacklmError(f"--selections gives {len(args.selections)} files and --runs {len(args.runs)} folders; one each per model")
    frames = []
    for selection_path, runs in zip(args.selections, args.runs):
        selection = read_parquet(selection_path, "the selected run")
        if selection.empty:
            raise StacklmError(f"{selection_path}: no selected run")
        architecture, setting = str(selection["architecture"].iloc[0]), str(selection["setting"].iloc[0])
        path = Path(runs) / setting / "actions.parquet"
        frame = read_actions(path)
        if set(frame["architecture"]) != {architecture} or set(frame["setting"]) != {setting}:
            raise StacklmError(f"{path}: holds the actions of another run than the one {selection_path} selected ({architecture}, {setting})")
        frames.append(frame)
    gathered = pd.concat(frames, ignore_index=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_table(pa.Table.from_pandas(gathered, schema=ACTIONS_SCHEMA, preserve_index=False), args.out)
    plot_stack_actions(read_actions(args.out), args.figures)
    print(f"{len(frames)} selected runs' stack actions -> {args.out} and figures")
    return 0


def figures_command(args: argparse.Namespace) -> int:
    """``stacklm cfl figures``: the selected curves and the metrics, each into one Parquet file, and
    the figures and the summary table drawn from them."""
    curves = pd.concat([read_parquet(path, "the selected run's curve") for path in args.curves], ignore_index=True)
    metrics = pd.concat([read_parquet(path, "the model's evaluation") for path in args.metrics], ignore_index=True)
    for frame, path in ((curves, args.out_curves), (metrics, args.out_metrics)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    plot_validation_curves(read_parquet(args.out_curves, "the curves"), args.validation_figures)
    plot_test_by_length(read_parquet(args.out_metrics, "the metrics"), args.test_figures)
    write_text_atomically(args.summary, summary_markdown(curves, metrics))
    print(f"{len(args.curves)} selected runs -> {args.out_curves}, {args.out_metrics} and figures")
    return 0
