"""``stacklm progress``: where a pipeline run stands, read from its results while it trains.

    stacklm progress [--markdown PAGE.md] [--figure CURVES.png]... RUN_DIR

One row per training run under ``RUN_DIR/results/`` (the folder the workflow runs in): every run
whose ``train.parquet`` is written (``RUN_CURVE``, and ``RUN_METRICS`` once evaluated), and every
run still training, from its resumable state beside ``CHECKPOINT`` (``1.<fingerprint>.pt``; the
newest where an earlier config left another) with its ``HP.json`` (the trial's draw, or the
selected one for a final run). What a row shows is ``stacklm.report.progress``'s. The table goes
to stdout, or to a Markdown page with every run's checkpoints (``--markdown``); ``--figure``
draws the curves so far, as ``stacklm curves`` draws a task's final runs.

Made to run beside a live pipeline: it only reads (a training process replaces its state
atomically), takes no lock and writes nothing under RUN_DIR. A file it cannot read (a
truncated state, a run of another stacklm) is a warning naming it; the other runs are shown.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from stacklm.atomic import write_text_atomically
from stacklm.errors import StacklmError, located
from stacklm.experiments.common import architecture_name
from stacklm.experiments.transformations.dag import CHECKPOINT, PHASES, RUN_CURVE, RUN_METRICS, hparams_path
from stacklm.report.progress import RunProgress, ended_run, markdown_table, matches, plot_progress, render_page, training_run
from stacklm.settings_file import build, read_json
from stacklm.training.checkpoint import keyed_path
from stacklm.training.config import Hyperparameters

# What each wildcard of the DAG's paths may hold here.
WILDCARDS = {"task": r"[^/]+", "architecture": r"[^/]+", "phase": "|".join(PHASES), "index": r"[0-9]+", "fingerprint": r"[0-9a-f]{16}"}
STATE = str(keyed_path(CHECKPOINT, "{fingerprint}"))  # results/checkpoints/{task}/{architecture}/{phase}/{index}.{fingerprint}.pt
RunKey = tuple[str, str, str, int]  # task, architecture slug, phase, index


def run_key(wildcards: dict[str, str]) -> RunKey:
    return wildcards["task"], wildcards["architecture"], wildcards["phase"], int(wildcards["index"])


def find_runs(run_dir: Path) -> tuple[list[RunProgress], list[str]]:
    """Every training run under ``run_dir/results``, in the table's order, and a warning naming each file not read."""
    if not (run_dir / "results").is_dir():
        raise located(run_dir / "results", None, "no such folder: RUN_DIR is the folder the workflow runs in, with results/ inside")
    runs: dict[RunKey, RunProgress] = {}
    warnings: list[str] = []
    for path, wildcards in matches(run_dir, RUN_CURVE, WILDCARDS):
        metrics = run_dir / RUN_METRICS.format(**wildcards)
        try:
            runs[run_key(wildcards)] = ended_run(path, metrics if metrics.is_file() else None)
        except StacklmError as error:
            warnings.append(str(error))
    states: dict[RunKey, Path] = {}
    for path, wildcards in matches(run_dir, STATE, WILDCARDS):
        key = run_key(wildcards)
        if key not in runs and (key not in states or modified(path) > modified(states[key])):
            states[key] = path
    for key, path in states.items():
        try:
            runs[key] = run_in_training(run_dir, key, path)
        except StacklmError as error:
            warnings.append(str(error))
    return sorted(runs.values(), key=table_order), warnings


def modified(path: Path) -> float:
    """``path``'s modification time; -inf for a file gone since it was listed (a finished run deletes its other states)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return float("-inf")


def run_in_training(run_dir: Path, key: RunKey, state: Path) -> RunProgress:
    """A run from its training state, with its learning rate and B from its ``HP.json``."""
    task, slug, phase, index = key
    try:
        architecture = architecture_name(slug)
    except StacklmError as error:
        raise located(state, None, str(error)) from None
    source = run_dir / hparams_path(task, slug, phase, index)
    hyperparameters = build(Hyperparameters, read_json(source), source=source)
    return training_run(state, task, architecture, phase, index, hyperparameters.learning_rate, hyperparameters.tokens_per_batch)


def table_order(run: RunProgress) -> tuple[str, int, str, int, int]:
    """By task, then architecture in the registry's order (the papers'), search before final, trial or seed."""
    from stacklm.models.registry import ARCHITECTURES

    names = list(ARCHITECTURES)
    rank = names.index(run.architecture) if run.architecture in names else len(names)
    return run.task, rank, run.architecture, PHASES.index(run.phase), run.index


def progress_command(args: argparse.Namespace) -> int:
    runs, warnings = find_runs(args.run_dir)
    for warning in warnings:
        print(f"stacklm: warning: {warning}", file=sys.stderr)
    figures: list[Path] = args.figure
    if figures and not any(len(run.curve) for run in runs):
        print(f"stacklm: warning: no run has a checkpoint yet: {', '.join(map(str, figures))} not drawn", file=sys.stderr)
        figures = []
    if figures:
        plot_progress(runs, figures)
    if args.markdown is None:
        print(markdown_table(runs), end="")
        return 0
    figure = os.path.relpath(figures[0], args.markdown.parent) if figures else None
    write_text_atomically(args.markdown, render_page(runs, args.run_dir / "results", warnings, figure))
    print(f"{len(runs)} runs, {sum(len(run.curve) for run in runs)} checkpoints -> {', '.join(map(str, [args.markdown, *figures]))}")
    return 0


