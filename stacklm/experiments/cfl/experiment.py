"""The RNS-RNN CFL experiments (DuSell & Chiang (2022) §4, App. 8; ``docs/design/cfl-and-ptb.md``).

The grid, per language L and model X (``cfl/LSTM`` … ``cfl/NS+S+U``):

- every learning rate of ``learning_rates`` × (for Gref and JM) every stack vector size m of
  ``vector_sizes`` × restarts 1 … R; a run's data, parameter and shuffle seeds are derived from
  (L, X, learning rate, m, restart) alone (:func:`run_seeds`), so the DAG is static and a rerun
  reproduces the run;
- each run samples its own training and validation sets with its data seed (the procedure of
  :mod:`stacklm.cfl.datasets`, with ``train_batches`` and ``validation_batches`` batches of 10)
  and trains with the App. 8 schedule (:func:`stacklm.training.config.cfl_train_config`,
  capped at ``max_epochs``); after every epoch its validation Δ is
  H(S_val, p_M) − H(S_val, p_true) in nats per symbol;
- selection: per (L, X), the run whose validation Δ at its best epoch is the lowest
  (:func:`select_run`); Δ rather than the cross-entropy, since each run has its own
  validation set;
- test: the selected run on the fixed seed-0 test set (the first ``test_strings_per_length``
  strings of each valid length; the paper uses all 100), Δ overall (length term included) and
  per length (conditioned on the length).

PDA sizes of the NS models (App. 8): |Q| = 2, |Γ| = 3 for the reversal and Dyck languages,
|Q| = 3, |Γ| = 3 for padded reversal and the hardest CFL.

This module imports no torch: the Snakefile and ``stacklm.workflow`` read the grid from it,
and ``stacklm cfl select`` (:func:`select_command`, a job per language and model) runs without
the seconds of start-up that torch costs.
A run's data are sampled by :mod:`stacklm.experiments.cfl.run_data`.
"""

from __future__ import annotations

import argparse
import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from stacklm.atomic import write_bytes_atomically
from stacklm.errors import StacklmError, UsageError
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.experiments.common import derived_seed, select_lowest
from stacklm.models.cfl_names import CFL_MODELS

if TYPE_CHECKING:
    import pandas as pd

VECTOR_MODELS: tuple[str, ...] = ("cfl/Gref", "cfl/JM")  # searched over the stack vector size m
ACTION_LANGUAGE = "marked-reversal"  # Figure 2: the stack actions of NS+S and NS+S+U over training
ACTION_MODELS: tuple[str, ...] = ("cfl/NS+S", "cfl/NS+S+U")  # normalized, unnormalized
PDA_SIZES: dict[str, tuple[int, int]] = {  # language → (|Q|, |Γ|), App. 8; in the paper's order
    "marked-reversal": (2, 3),
    "unmarked-reversal": (2, 3),
    "padded-reversal": (3, 3),
    "dyck-2": (2, 3),
    "hardest-cfl": (3, 3),
}


@dataclass(frozen=True)
class CflSettings:
    """The ``cfl`` section of the settings; an empty ``languages`` runs no CFL job."""

    languages: tuple[str, ...] = tuple(PDA_SIZES)
    models: tuple[str, ...] = CFL_MODELS
    learning_rates: tuple[float, ...] = (0.01, 0.005, 0.001, 0.0005)
    vector_sizes: tuple[int, ...] = (2, 20, 40)  # m of Gref and JM
    restarts: int = 5
    max_epochs: int = 200
    train_batches: int = 1_000  # batches of 10 strings of one length
    validation_batches: int = 100
    test_strings_per_length: int = 100  # of the fixed test set's 100 per length
    action_log_every: int = 100  # updates between the stack-action rows of Figure 2 (10 per epoch of 1,000 batches)

    def __post_init__(self) -> None:
        for position, language in enumerate(self.languages):
            if language not in PDA_SIZES:
                raise StacklmError(f"config key 'cfl.languages[{position}]': unknown language {language!r}; known: {', '.join(PDA_SIZES)}")
        for position, model in enumerate(self.models):
            if model not in CFL_MODELS:
                raise StacklmError(f"config key 'cfl.models[{position}]': unknown CFL model {model!r}; known: {', '.join(CFL_MODELS)}")
        if self.languages and not self.models:
            raise StacklmError("config key 'cfl.models': at least one model is needed")
        if self.languages and not self.learning_rates:
            raise StacklmError("config key 'cfl.learning_rates': at least one learning rate is needed")
        for position, rate in enumerate(self.learning_rates):
            if not (math.isfinite(rate) and rate > 0):
                raise StacklmError(f"config key 'cfl.learning_rates[{position}]': must be positive, got {rate!r}")
        if any(model in VECTOR_MODELS for model in self.models) and not self.vector_sizes:
            raise StacklmError("config key 'cfl.vector_sizes': Gref and JM need at least one stack vector size")
        for position, size in enumerate(self.vector_sizes):
            if size < 1:
                raise StacklmError(f"config key 'cfl.vector_sizes[{position}]': must be at least 1, got {size!r}")
        for name in ("restarts", "max_epochs", "train_batches", "validation_batches", "action_log_every"):
            if getattr(self, name) < 1:
                raise StacklmError(f"config key 'cfl.{name}': must be at least 1, got {getattr(self, name)!r}")
        if not 1 <= self.test_strings_per_length <= 100:
            raise StacklmError(f"config key 'cfl.test_strings_per_length': must lie in 1..100, got {self.test_strings_per_length!r}")


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


def best_delta(curve: pd.DataFrame) -> float:
    """A run's validation Δ at its best epoch (the lowest validation cross-entropy)."""
    if curve.empty:
        raise StacklmError("a learning curve has no checkpoint")
    best = curve["validation_cross_entropy"].to_numpy(dtype=float).argmin()
    return float(curve[DELTA].to_numpy(dtype=float)[best])


def select_run(curves: Sequence[pd.DataFrame]) -> int:
    """Index of the run with the lowest finite validation Δ at its best epoch (the first on ties)."""
    return select_lowest([best_delta(curve) for curve in curves], "CFL run")


def select_command(args: argparse.Namespace) -> int:
    """``stacklm cfl select``: for each ``--curves`` (one model's runs), write the selected run's
    ``train.parquet`` rows to its ``--out``."""
    import pandas as pd  # here, not at the top: the workflow's every lookup imports this module

    if len(args.out) != len(args.curves):
        raise UsageError(f"--out: {len(args.out)} given for {len(args.curves)} --curves: one per --curves, in the same order")
    for paths, out in zip(args.curves, args.out):
        curves = [pd.read_parquet(path) for path in paths]
        best = select_run(curves)
        buffer = io.BytesIO()
        curves[best].to_parquet(buffer, index=False)
        write_bytes_atomically(out, buffer.getvalue())
        print(f"selected {paths[best]} of {len(curves)} runs (validation Δ {best_delta(curves[best]):.6f}) -> {out}")
    return 0

