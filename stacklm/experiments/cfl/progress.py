"""``stacklm cfl progress``: where the CFL training runs of a pipeline run stand, read while they
train (DuSell & Chiang (2022) §4, App. 8).

    stacklm cfl progress [--markdown PAGE.md] RUN_DIR

One row per grid run (:mod:`stacklm.experiments.cfl.search`) with a file under
``RUN_DIR/results/cfl``: an ended run from its ``train.parquet`` (``CFL_RUN_CURVE``, validation Δ
per epoch as training wrote it), a run in training, or stopped and resumable, from its state beside
``CFL_CHECKPOINT`` (``<setting>.<fingerprint>.pt``). A row gives the run's state as
:mod:`stacklm.report.progress` reads it (unfinished; converged (stopped early) or max epochs, by
the schedule's own stopping rule), its epochs and training hours so far, and its best epoch so far
(the lowest validation cross-entropy, as the selection takes it:
:func:`~stacklm.experiments.cfl.search.best_epoch`) with validation
Δ = H(S_val, p_M) − H(S_val, p_true) there and whether Δ ≤ ``NEAR_OPTIMAL`` (0.05 nats per
symbol, the claim of Figure 1). The first line says how many runs of the grid have a file, the
grid of the settings the runs train with (``results/settings/cfl_train.json``), and when the
newest file read was written.

A state holds H(S_val, p_M) per epoch but not H(S_val, p_true): the run's data is sampled and its
validation set scored again from its grid point and those settings, as training does
(:func:`~stacklm.experiments.cfl.training.run_inputs`; seconds per run on one core, half a minute
on padded reversal). The run's state is the one at the fingerprint of those inputs, where training
resumes; a state at another fingerprint (an earlier config's, or one this stacklm would not
resume) is a warning naming it, and no row.

Made to run beside a live pipeline: it only reads (a training process replaces its state
atomically), takes no lock and writes nothing under RUN_DIR.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from stacklm.atomic import write_text_atomically
from stacklm.errors import StacklmError, located
from stacklm.evaluation.cfl_metric import DELTA, NEAR_OPTIMAL
from stacklm.experiments.cfl.dag import CFL_CHECKPOINT, CFL_RUN_CURVE
from stacklm.experiments.cfl.search import CflRun, best_epoch, language_runs, parse_setting
from stacklm.experiments.cfl.settings import PDA_SIZES, CflSettings
from stacklm.experiments.cfl.training import RunInputs, run_inputs
from stacklm.experiments.common import architecture_name
from stacklm.models.cfl_names import CFL_MODELS
from stacklm.models.registry import get_architecture
from stacklm.report.progress import RunProgress, ended_state, markdown, matches, newest_file_time, number, read_curve, training_run
from stacklm.settings_file import SETTINGS_FILE, read_settings
from stacklm.tracking.records import CHECKPOINT_SCHEMA
from stacklm.training.checkpoint import fingerprint, keyed_path

# What each wildcard of the DAG's paths may hold here (as in workflow/rules/cfl.smk).
WILDCARDS = {"language": r"[a-z0-9-]+", "model": r"cfl-[^/]+", "setting": r"lr[^/]+", "fingerprint": r"[0-9a-f]{16}"}
STATE = str(keyed_path(CFL_CHECKPOINT, "{fingerprint}"))  # results/cfl/checkpoints/{language}/{model}/{setting}.{fingerprint}.pt
HEADER = ["language", "model", "learning rate", "m", "restart", "epochs", "state", "training h", "best val. Δ", "at epoch", f"Δ ≤ {NEAR_OPTIMAL}"]
RIGHT = ("learning rate", "m", "restart", "epochs", "training h", "best val. Δ", "at epoch")


@dataclass(frozen=True)
class CflProgress:
    """A grid run as its files hold it."""

    run: CflRun
    progress: RunProgress  # its curve: CHECKPOINT_SCHEMA's columns and DELTA, an epoch a row, by epoch

    def best(self) -> tuple[int, float] | None:
        """The best epoch so far and validation Δ there; None before the first epoch ends."""
        if self.progress.curve.empty:
            return None
        best = best_epoch(self.progress.curve)
        return int(best["epoch"]), float(best[DELTA])


def find_runs(run_dir: Path) -> tuple[list[CflProgress], list[CflRun], list[str]]:
    """Every grid run with a file under ``run_dir/results/cfl``, in the table's order; every run of
    the settings' grid; and a warning naming each file not read."""
    if not (run_dir / "results/cfl").is_dir():
        raise located(run_dir / "results/cfl", None, "no such folder: RUN_DIR is the folder the workflow runs in, with results/cfl inside once a CFL job has run")
    settings = run_dir / SETTINGS_FILE.format(reader="cfl_train")  # the settings the grid runs train with
    cfl = read_settings(settings).section("cfl", CflSettings)
    runs: dict[CflRun, CflProgress] = {}
    warnings: list[str] = []
    for path, wildcards in matches(run_dir, CFL_RUN_CURVE, WILDCARDS):
        try:
            run = grid_run(path, wildcards)
            runs[run] = ended_run(run, path)
        except StacklmError as error:
            warnings.append(str(error))
    states: dict[CflRun, tuple[Path, list[Path]]] = {}  # a run still training: where its state goes, and the states there
    for path, wildcards in matches(run_dir, STATE, WILDCARDS):
        try:
            run = grid_run(path, wildcards)
        except StacklmError as error:
            warnings.append(str(error))
            continue
        if run not in runs:  # an ended run keeps its state: its train.parquet is read instead
            states.setdefault(run, (run_dir / CFL_CHECKPOINT.format(**wildcards), []))[1].append(path)
    for run, (base, paths) in states.items():
        try:
            inputs = run_inputs(run, cfl)
        except StacklmError as error:
            warnings.append(f"{paths[0]}: {error}")
            continue
        own = keyed_path(base, fingerprint(inputs.fingerprint_source))
        warnings += [f"{path}: the state of another config than {settings}'s (training would not resume it); not read" for path in paths if path != own]
        if own in paths:
            try:
                runs[run] = run_in_training(run, own, inputs)
            except StacklmError as error:
                warnings.append(str(error))
    grid = [run for language in cfl.languages for run in language_runs(cfl, language)]
    order = {run: position for position, run in enumerate(grid)}
    return sorted(runs.values(), key=lambda row: table_order(row.run, order)), grid, warnings


def grid_run(path: Path, wildcards: dict[str, str]) -> CflRun:
    """The run whose file ``path`` is, from its path's wildcards; refused, naming it, where they name none."""
    try:
        if wildcards["language"] not in PDA_SIZES:
            raise StacklmError(f"no CFL language {wildcards['language']!r}")
        return CflRun(wildcards["language"], architecture_name(wildcards["model"]), *parse_setting(wildcards["setting"]))
    except StacklmError as error:
        raise located(path, None, f"not a file of a CFL grid run ({error})") from None


def paper_name(run: CflRun) -> str:
    return get_architecture(run.model).label


def ended_run(run: CflRun, path: Path) -> CflProgress:
    """A run from its ``train.parquet``."""
    frame, config = read_curve(path)
    if DELTA not in frame.columns:
        raise located(path, None, f"no {DELTA} column: not a CFL run's curve")
    curve = frame[[*CHECKPOINT_SCHEMA.names, DELTA]]
    progress = RunProgress(run.language, paper_name(run), "search", run.restart, run.learning_rate, None, ended_state(curve, config),
                           float(frame["wall_time_s"].iloc[0]), curve, source=path)  # fmt: skip
    return CflProgress(run, progress)


def run_in_training(run: CflRun, state: Path, inputs: RunInputs) -> CflProgress:
    """A run from its resumable state, validation Δ of each epoch against its validation set's H(S_val, p_true)."""
    progress = training_run(state, run.language, paper_name(run), "search", run.restart, run.learning_rate, None)
    curve = progress.curve.assign(**{DELTA: [inputs.delta(value) for value in progress.curve["validation_cross_entropy"]]})
    return CflProgress(run, replace(progress, curve=curve))


def table_order(run: CflRun, grid: dict[CflRun, int]) -> tuple[int, int, int, float, int, int]:
    """The settings' runs in the DAG's order (language, model, grid point), then any other by language, model and grid point."""
    model = CFL_MODELS.index(run.model) if run.model in CFL_MODELS else len(CFL_MODELS)
    return grid.get(run, len(grid)), list(PDA_SIZES).index(run.language), model, run.learning_rate, run.vector_size or 0, run.restart


def table_row(row: CflProgress) -> list[str]:
    """The run's cells under ``HEADER``."""
    run, progress, best = row.run, row.progress, row.best()
    epochs = int(progress.curve["epoch"].max()) if not progress.curve.empty else 0
    delta = best[1] if best is not None else None
    within = "—" if delta is None else "yes" if delta <= NEAR_OPTIMAL else "no"
    return [run.language, paper_name(run), number(run.learning_rate, "g"), number(run.vector_size, "d"), str(run.restart), str(epochs),
            progress.state, number(progress.training_s / 3600, ".2f"), number(delta, ".3f"), str(best[0]) if best is not None else "—", within]  # fmt: skip


def markdown_table(runs: Sequence[CflProgress]) -> str:
    return markdown(HEADER, [table_row(row) for row in runs], RIGHT)


def summary_line(runs: Sequence[CflProgress], grid: Sequence[CflRun]) -> str:
    """How many of the grid's runs have a file, by state, and when the newest file read was written."""
    planned = set(grid)
    started = sum(row.run in planned for row in runs)
    outside = f", and {len(runs) - started} runs outside it" if len(runs) > started else ""
    states = ", ".join(f"{count} {state}" for state, count in Counter(row.progress.state for row in runs).items())
    return (f"{started} of {len(grid)} runs of the settings' grid started{outside}{f' ({states})' if states else ''}, "
            f"as of the newest file read ({newest_file_time([row.progress for row in runs])}).")  # fmt: skip


def render_page(runs: Sequence[CflProgress], grid: Sequence[CflRun], results: Path, warnings: Sequence[str]) -> str:
    """The Markdown page: what it shows, the table, and the files that could not be read."""
    parts = [
        f"# CFL training progress of `{results}`\n",
        f"{summary_line(runs, grid)} Written by `stacklm cfl progress`. Ended runs are read from `train.parquet`; unfinished runs"
        " (in training, or stopped and resumable: the files cannot tell which) from their state, as of their last epoch, with their"
        " validation set's true cross-entropy computed again from the run's grid point and the settings. Validation Δ = H(S_val, p_M) −"
        f" H(S_val, p_true) in nats per symbol at the best epoch so far (the lowest validation cross-entropy); Δ ≤ {NEAR_OPTIMAL} is the"
        " near-optimal bound of DuSell & Chiang (2022), Figure 1.\n",
        markdown_table(runs),
    ]
    if warnings:
        parts.append("Not read:\n\n" + "".join(f"- {warning}\n" for warning in warnings))
    return "\n".join(parts)


def progress_command(args: argparse.Namespace) -> int:
    runs, grid, warnings = find_runs(args.run_dir)
    for warning in warnings:
        print(f"stacklm: warning: {warning}", file=sys.stderr)
    if args.markdown is None:
        print(f"{summary_line(runs, grid)}\n\n{markdown_table(runs)}", end="")
        return 0
    write_text_atomically(args.markdown, render_page(runs, grid, args.run_dir / "results/cfl", warnings))
    print(f"{len(runs)} of {len(grid)} runs -> {args.markdown}")
    return 0
