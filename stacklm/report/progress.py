"""Where training runs stand, read from their files while they train (``stacklm progress``).

A run has ended when its ``train.parquet`` is written (one row per checkpoint, then the run's
metadata: ``stacklm.tracking.records``), and ``stacklm evaluate`` may have scored it since
(``metrics.parquet``). Until then its resumable state (``stacklm.training.checkpoint``) holds
the curve so far, as ``CheckpointRecord``s; ``checkpoint_table`` turns both into the same
columns, so that one table, one page and one figure (``stacklm.report.curves``) serve both.

Per run: its state (``UNFINISHED``: training, or stopped and resumable from its state — a
reader of the files cannot tell which; ended: ``CONVERGED``, when the last checkpoints brought no new
best, as ``stacklm.training.schedule.should_stop`` decides, else ``MAX_EPOCHS``; ``EVALUATED``),
its best validation cross-entropy so far and, at that checkpoint (the parameters the run keeps),
the generalization curves' FA and PA on the curve sample: the test set, and the generalization
set under the hierarchical and the linear rule (DuSell & Cotterell (2025) §5). An evaluated
run shows its whole-set values (``metrics.parquet``) instead, and says so.

Nothing here writes or locks a run's file: a training process replaces its state atomically,
so a reader sees the previous complete file or the next one. ``stacklm cfl progress``
(``stacklm.experiments.cfl.progress``) reads the CFL runs with the same pieces: a state's curve
(``training_run``), an ended run's (``read_curve``) and how it ended (``ended_state``), the
files a DAG's pattern names (``matches``) and the Markdown table (``markdown``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Collection, Iterable, Iterator, Mapping, Sequence

import pandas as pd

from stacklm.parquet_file import read_parquet
from stacklm.errors import StacklmError, located
from stacklm.report.aggregate import partial_metric, read_run_metrics
from stacklm.settings_file import build
from stacklm.tracking.records import CHECKPOINT_SCHEMA, CURVE_SCHEMA, CURVE_SCORES, CURVE_SETS, checkpoint_table, curve_score
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.config import TrainConfig
from stacklm.training.run_state import CheckpointRecord
from stacklm.training.schedule import ScheduleState, should_stop

UNFINISHED = "unfinished"  # training, or stopped: its files cannot tell
CONVERGED = "converged (stopped early)"
MAX_EPOCHS = "max epochs"
EVALUATED = "evaluated"
TITLES = {"test": "test", "hierarchical": "gen. hier.", "linear": "gen. lin."}  # a column per CURVE_SETS
HEADER = ["task", "architecture", "run", "learning rate", "B", "checkpoints", "state", "training h", "best val. CE", "scored at",
          *(f"{TITLES[name]} FA / PA" for name in CURVE_SETS)]  # fmt: skip


@dataclass(frozen=True)
class RunProgress:
    task: str
    architecture: str  # the papers' name (Tf+Nd)
    phase: str  # "search" or "final"
    index: int  # the trial (search) or the seed (final)
    learning_rate: float | None  # the run's initial learning rate; None where its HP.json was not read
    tokens_per_batch: int | None  # B
    state: str  # UNFINISHED, CONVERGED, MAX_EPOCHS or EVALUATED
    training_s: float  # training time so far (at the last save of a run in training)
    curve: pd.DataFrame = field(repr=False)  # CHECKPOINT_SCHEMA's columns, one row per checkpoint so far
    whole_sets: dict[str, float] | None = None  # CURVE_SCORES name → its value on the whole set (metrics.parquet)
    source: Path | None = None  # the file read last: train.parquet, metrics.parquet or the training state

    @property
    def name(self) -> str:
        """``Tf+Nd, search trial 2`` or ``Tf+Nd, final seed 1``."""
        return f"{self.architecture}, {self.phase} {'trial' if self.phase == 'search' else 'seed'} {self.index}"

    def best(self) -> pd.Series | None:
        """The checkpoint whose parameters the run keeps: its last new best (lowest validation cross-entropy)."""
        best = self.curve[self.curve["is_best"]]
        return None if best.empty else best.iloc[-1]


def ended_run(curve_path: Path, metrics_path: Path | None = None) -> RunProgress:
    """A run whose ``train.parquet`` is written, with its ``metrics.parquet`` once evaluated."""
    frame, config = read_curve(curve_path)
    first = frame.iloc[0]
    curve = frame[CHECKPOINT_SCHEMA.names]
    whole_sets = whole_set_scores(read_run_metrics(metrics_path)) if metrics_path is not None else None
    phase = str(first["phase"])
    return RunProgress(
        task=str(first["task"]),
        architecture=str(first["architecture"]),
        phase=phase,
        index=int(first["trial"] if phase == "search" else first["seed"]),
        learning_rate=float(first["learning_rate"]),
        tokens_per_batch=None if pd.isna(first["tokens_per_batch"]) else int(first["tokens_per_batch"]),
        state=EVALUATED if whole_sets is not None else ended_state(curve, config),
        training_s=float(first["wall_time_s"]),
        curve=curve,
        whole_sets=whole_sets,
        source=metrics_path if metrics_path is not None else curve_path,
    )


def read_curve(curve_path: Path) -> tuple[pd.DataFrame, TrainConfig]:
    """An ended run's ``train.parquet``, every column, by checkpoint (refused, naming it, without
    ``CURVE_SCHEMA``'s columns or a checkpoint), and the schedule the run trained with."""
    frame = read_parquet(curve_path, "the run's curve")
    missing = [name for name in CURVE_SCHEMA.names if name not in frame.columns]
    if missing:
        raise located(curve_path, None, f"missing curve column(s) {', '.join(missing)}")
    if frame.empty:
        raise located(curve_path, None, "the run's curve has no checkpoint")
    try:
        config = build(TrainConfig, json.loads(frame["config"].iloc[0])["train_config"], "train_config", source=curve_path)
    except (ValueError, KeyError, TypeError) as error:
        raise located(curve_path, None, f"no train_config in the run's config ({error})") from None
    return frame.sort_values("checkpoint").reset_index(drop=True), config


def ended_state(curve: pd.DataFrame, config: TrainConfig) -> str:
    """How a run with this whole ``curve`` (by checkpoint) ended: ``CONVERGED`` when its last
    checkpoints brought no new best, as ``stacklm.training.schedule.should_stop`` decides, else ``MAX_EPOCHS``."""
    schedule = ScheduleState(config.learning_rate, checkpoints_without_best=checkpoints_without_best(curve))
    return CONVERGED if should_stop(schedule, config) else MAX_EPOCHS


def checkpoints_without_best(curve: pd.DataFrame) -> int:
    """The checkpoints after the last new best (the schedule's ``checkpoints_without_best``)."""
    is_best = curve["is_best"].tolist()
    return len(is_best) - 1 - max((position for position, best in enumerate(is_best) if best), default=-1)


def training_run(state_path: Path, task: str, architecture: str, phase: str, index: int,
                 learning_rate: float | None, tokens_per_batch: int | None) -> RunProgress:  # fmt: skip
    """A run still training (or stopped, to be resumed): its state file's curve so far."""
    payload = checkpoint_file.load(state_path)
    try:
        curve = checkpoint_table([CheckpointRecord(**record) for record in payload["curve"]]).to_pandas()
        counters = payload["counters"]
        stopped_early, training_s = bool(counters["stopped_early"]), float(counters["wall_time_s"])
    except (KeyError, TypeError, ValueError) as error:
        raise located(state_path, None, f"not a training state of this stacklm ({type(error).__name__}: {error})") from None
    return RunProgress(task, architecture, phase, index, learning_rate, tokens_per_batch, CONVERGED if stopped_early else UNFINISHED,
                       training_s, curve, source=state_path)  # fmt: skip


def whole_set_scores(metrics: pd.DataFrame) -> dict[str, float]:
    """The curve scores' values on the whole sets: ``test_full_accuracy`` is the test set's FA,
    ``hierarchical_partial_accuracy`` the generalization set's PA under the hierarchical rule
    (exact where evaluated, else sampled, as the curves and the tables take it)."""
    partial = partial_metric(metrics)
    values: dict[str, float] = {}
    for name in CURVE_SETS:
        split, rule = ("test", None) if name == "test" else ("generalization", name)
        for kind, metric in (("full", "full_accuracy"), ("partial", partial)):
            rows = metrics[(metrics["split"] == split) & (metrics["metric"] == metric)]
            rows = rows[rows["rule"].isna()] if rule is None else rows[rows["rule"] == rule]
            values[curve_score(name, kind)] = float(rows["value"].iloc[0]) if not rows.empty else math.nan
    return values


def number(value: float | int | None, form: str) -> str:
    return "—" if value is None or pd.isna(value) else format(value, form)


def table_row(run: RunProgress) -> list[str]:
    """The run's cells under ``HEADER``."""
    best = run.best()
    scores = run.whole_sets if run.whole_sets is not None else ({name: best[name] for name in CURVE_SCORES} if best is not None else {})
    if best is None:
        scored_at = "—"
    elif run.whole_sets is not None:
        scored_at = f"checkpoint {best['checkpoint']}; whole sets (metrics.parquet)"
    else:
        scored_at = f"checkpoint {best['checkpoint']}; curve sample"
    pairs = [f"{number(scores.get(curve_score(name, 'full')), '.3f')} / {number(scores.get(curve_score(name, 'partial')), '.3f')}" for name in CURVE_SETS]
    index = f"{run.phase} {'trial' if run.phase == 'search' else 'seed'} {run.index}"
    return [run.task, run.architecture, index, number(run.learning_rate, ".3g"), number(run.tokens_per_batch, "d"), str(len(run.curve)), run.state,
            number(run.training_s / 3600, ".1f"), number(best["validation_cross_entropy"] if best is not None else None, ".4f"), scored_at, *pairs]  # fmt: skip


def markdown_table(runs: Sequence[RunProgress]) -> str:
    return markdown(HEADER, [table_row(run) for run in runs], right=("learning rate", "B", "checkpoints", "training h", "best val. CE"))


def markdown(header: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] = ()) -> str:
    """A Markdown table: ``header``, then a line per row of cells; the columns named in ``right`` aligned right."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if name in right else "---" for name in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def checkpoint_line(row: pd.Series) -> str:
    """One checkpoint as the training log writes it (``CheckpointRecord.describe``), with the examples seen."""
    scores = "".join(f" {name} {row[name]:.3f}" for name in CURVE_SCORES if not pd.isna(row[name]))
    return (f"checkpoint {row['checkpoint']}: epoch {row['epoch']} step {row['step']} examples {row['examples_seen']} train loss {row['train_loss']:.4f}"
            f" validation cross-entropy {row['validation_cross_entropy']:.4f}{' (best)' if row['is_best'] else ''}"
            f" learning rate {row['learning_rate_used']:.3g}{scores}")  # fmt: skip


def matches(root: Path, pattern: str, wildcards: Mapping[str, str]) -> Iterator[tuple[Path, dict[str, str]]]:
    """The files under ``root`` that a DAG's ``pattern`` (``results/runs/{task}/…``) names, with
    its wildcards' values; ``wildcards`` gives the regular expression each may match."""
    regex = re.compile(re.sub(r"\\\{(\w+)\\\}", lambda match: f"(?P<{match[1]}>{wildcards[match[1]]})", re.escape(pattern)))
    for path in sorted(root.glob(re.sub(r"\{\w+\}", "*", pattern))):
        found = regex.fullmatch(path.relative_to(root).as_posix())
        if found is not None and path.is_file():
            yield path, found.groupdict()


def newest_file_time(runs: Sequence[RunProgress]) -> str:
    """When the newest file read was written (UTC): the page's date, the same for the same files."""
    times = [run.source.stat().st_mtime for run in runs if run.source is not None and run.source.exists()]
    return datetime.fromtimestamp(max(times), timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if times else "—"


def render_page(runs: Sequence[RunProgress], results: Path, warnings: Sequence[str], figure: str | None) -> str:
    """The Markdown page: what it shows, the table, the figure (a path relative to the page), the
    files that could not be read, then every run's checkpoints."""
    parts = [
        f"# Training progress of `{results}`\n",
        f"{len(runs)} training runs, as of their newest file ({newest_file_time(runs)}), written by `stacklm progress`. Ended runs are read from"
        " `train.parquet` (and `metrics.parquet` once evaluated), unfinished runs (in training, or stopped and resumable: the files"
        " cannot tell which) from their state, as of their last checkpoint (a checkpoint every"
        " `training.examples_per_checkpoint` examples). FA and PA are at each run's best checkpoint (lowest validation cross-entropy),"
        " on the generalization curves' sample of the test and generalization sets, or on the whole sets once `stacklm evaluate`"
        " has scored the run (DuSell & Cotterell (2025) §5).\n",
        markdown_table(runs),
    ]
    if figure is not None:
        parts.append(f"![FA (solid) and PA (dashed) at every checkpoint so far]({figure})\n")
    if warnings:
        parts.append("Not read:\n\n" + "".join(f"- {warning}\n" for warning in warnings))
    for run in runs:
        lines = "\n".join(checkpoint_line(row) for _, row in run.curve.iterrows()) or "no checkpoint yet"
        rate = f"learning rate {number(run.learning_rate, '.3g')}, B = {number(run.tokens_per_batch, 'd')}"
        hours = f"{run.training_s / 3600:.1f} h" + (" so far" if run.state == UNFINISHED else "")
        parts.append(f"## {run.name} ({rate}; {run.state}, {hours})\n\n```\n{lines}\n```\n")
    return "\n".join(parts)


def figure_curves(runs: Sequence[RunProgress]) -> pd.DataFrame:
    """The runs' checkpoints with the identity columns ``stacklm.report.curves.plot_curves`` reads."""
    frames = [
        run.curve.assign(task=run.task, architecture=run.architecture, phase=run.phase, trial=run.index if run.phase == "search" else None,
                         seed=run.index if run.phase == "final" else None)  # fmt: skip
        for run in runs
        if not run.curve.empty
    ]
    if not frames:
        raise StacklmError("no run has a checkpoint yet: no curve to draw")
    return pd.concat(frames, ignore_index=True)


def plot_progress(runs: Sequence[RunProgress], paths: Sequence[str | Path]) -> None:
    """One row per architecture and phase (and task, when several), one colour per trial or seed."""
    from stacklm.report.curves import plot_curves

    curves = figure_curves(runs)
    rows = ("task", "architecture", "phase") if curves["task"].nunique() > 1 else ("architecture", "phase")
    plot_curves(curves, paths, rows=rows, dot="each run's best checkpoint so far")
