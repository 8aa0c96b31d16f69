"""The search of the CFL experiments (DuSell & Chiang (2022) §4, App. 8; ``docs/design/cfl-and-ptb.md``):
the grid of runs and the selection among them.

The grid, per language L and model X (``cfl/LSTM`` … ``cfl/NS+S+U``):

- every learning rate of ``learning_rates`` × (for Gref and JM) every stack vector size m of
  ``vector_sizes`` × restarts 1 … R; a run's data, parameter and shuffle seeds are derived from
  (L, X, learning rate, m, restart) alone (:func:`run_seeds`), so the DAG is static and a rerun
  reproduces the run;
- each run samples its own training and validation sets with its data seed
  (:mod:`stacklm.experiments.cfl.data`) and trains with the App. 8 schedule
  (:mod:`stacklm.experiments.cfl.training`); after every epoch its validation Δ is
  H(S_val, p_M) − H(S_val, p_true) in nats per symbol;
- selection: per (L, X), the run whose validation Δ at its best epoch is the lowest
  (:func:`select_run`); Δ rather than the cross-entropy, since each run has its own
  validation set;
- test: the selected run on the fixed seed-0 test set (:mod:`stacklm.experiments.cfl.evaluation`).

This module imports no torch: the Snakefile and ``stacklm.workflow`` read the grid from it,
and ``stacklm cfl select`` (:func:`select_command`, a job per language and model) runs without
the seconds of start-up that torch costs.
"""

from __future__ import annotations

import argparse
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from stacklm.parquet_file import read_parquet
from stacklm.atomic import write_bytes_atomically
from stacklm.errors import StacklmError, UsageError
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.experiments.cfl.settings import VECTOR_MODELS, CflSettings
from stacklm.experiments.common import derived_seed, select_lowest

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class CflRun:
    """One point of the grid."""

    language: str
    model: str  # registry name, cfl/…
    learning_rate: float
    vector_size: int | None  # Gref and JM only
    restart: int  # 1-based

    @property
    def setting(self) -> str:
        """The run's folder name: ``lr0.001-m20-r3`` (no ``-m`` part without a vector size)."""
        size = f"-m{self.vector_size}" if self.vector_size is not None else ""
        return f"lr{self.learning_rate!r}{size}-r{self.restart}"


def parse_setting(setting: str) -> tuple[float, int | None, int]:
    """(learning rate, vector size or None, restart) of a folder name made by ``CflRun.setting``."""
    parts = setting.split("-")
    try:
        if len(parts) == 3 and parts[0].startswith("lr") and parts[1].startswith("m") and parts[2].startswith("r"):
            return float(parts[0][2:]), int(parts[1][1:]), int(parts[2][1:])
        if len(parts) == 2 and parts[0].startswith("lr") and parts[1].startswith("r"):
            return float(parts[0][2:]), None, int(parts[1][1:])
    except ValueError:
        pass
    raise StacklmError(f"{setting!r} is not a CFL run setting (lr<rate>[-m<size>]-r<restart>)")


def grid(settings: CflSettings, language: str, model: str) -> list[CflRun]:
    """Every run of (language, model): learning rates × (vector sizes for Gref/JM) × restarts."""
    sizes: Sequence[int | None] = settings.vector_sizes if model in VECTOR_MODELS else (None,)
    return [
        CflRun(language, model, rate, size, restart)
        for rate in settings.learning_rates
        for size in sizes
        for restart in range(1, settings.restarts + 1)
    ]


def language_runs(settings: CflSettings, language: str) -> list[CflRun]:
    """Every run of ``language``: each model's grid (:func:`grid`), in the order of ``settings.models``."""
    return [run for model in settings.models for run in grid(settings, language, model)]


@dataclass(frozen=True)
class RunSeeds:
    data: int
    parameters: int
    shuffle: int


def run_seeds(run: CflRun) -> RunSeeds:
    """Seeds in [0, 2⁶³) that depend on the run's grid point and nothing else (not on PYTHONHASHSEED)."""

    def seed(purpose: str) -> int:
        return derived_seed("cfl", run.language, run.model, run.learning_rate, run.vector_size, run.restart, purpose) >> 1

    return RunSeeds(data=seed("data"), parameters=seed("parameters"), shuffle=seed("shuffle"))


def best_epoch(curve: pd.DataFrame) -> pd.Series:
    """A run's best epoch, its row of ``curve``: the lowest validation cross-entropy (the first on ties)."""
    if curve.empty:
        raise StacklmError("a learning curve has no checkpoint")
    return curve.iloc[curve["validation_cross_entropy"].to_numpy(dtype=float).argmin()]


def best_delta(curve: pd.DataFrame) -> float:
    """A run's validation Δ at its best epoch (:func:`best_epoch`)."""
    return float(best_epoch(curve)[DELTA])


def select_run(curves: Sequence[pd.DataFrame]) -> int:
    """Index of the run with the lowest finite validation Δ at its best epoch (the first on ties)."""
    return select_lowest([best_delta(curve) for curve in curves], "CFL run")


def select_command(args: argparse.Namespace) -> int:
    """``stacklm cfl select``: for each ``--curves`` (one model's runs), write the selected run's
    ``train.parquet`` rows to its ``--out``."""

    if len(args.out) != len(args.curves):
        raise UsageError(f"--out: {len(args.out)} given for {len(args.curves)} --curves: one per --curves, in the same order")
    for paths, out in zip(args.curves, args.out):
        curves = [read_parquet(path, "the run's curve") for path in paths]
        best = select_run(curves)
        buffer = io.BytesIO()
        curves[best].to_parquet(buffer, index=False)
        write_bytes_atomically(out, buffer.getvalue())
        print(f"selected {paths[best]} of {len(curves)} runs (validation Δ {best_delta(curves[best]):.6f}) -> {out}")
    return 0
