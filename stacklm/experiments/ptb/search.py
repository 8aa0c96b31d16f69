"""The random search of the PTB experiment (DuSell & Chiang (2022) App. 10): each restart's draw
and seeds, and the selection of a model's restart.

Restart k of a model M draws η ~ log-U[1, 100] (for the mean loss) and c ~ log-U[1e-5, 1e-3]
(the norm is clipped at c · the chunk's targets) with ``random.Random`` and initialises the
parameters with a ``torch.Generator``, both seeded from (salt, M, k) alone, so the DAG is static
and a rerun reproduces the restart. The selection (``stacklm ptb select``) keeps the restart of
lowest finite validation perplexity, the first on ties: a diverged restart (no finite
perplexity) is never selected.

No torch and no pandas at import: ``stacklm ptb select`` is a job per model.
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from stacklm.parquet_file import read_parquet
from stacklm.errors import StacklmError, located
from stacklm.experiments.common import derived_seed, select_lowest, write_json
from stacklm.settings_file import read_json

if TYPE_CHECKING:
    import pandas as pd

LEARNING_RATE_RANGE = (1.0, 100.0)  # η, log-uniform
CLIP_RANGE = (1e-5, 1e-3)  # c, log-uniform


@dataclass(frozen=True)
class SearchDraw:
    """A restart's hyperparameters."""

    learning_rate: float  # η for the mean loss
    clip_per_target: float  # c: the norm is clipped at c · targets in the chunk


def draw_hyperparameters(generator: random.Random) -> SearchDraw:
    """η ~ log-uniform [1, 100], c ~ log-uniform [1e-5, 1e-3]."""

    def log_uniform(low: float, high: float) -> float:
        return math.exp(generator.uniform(math.log(low), math.log(high)))

    return SearchDraw(log_uniform(*LEARNING_RATE_RANGE), log_uniform(*CLIP_RANGE))


@dataclass(frozen=True)
class RestartSeeds:
    draw: int  # η and c (random.Random)
    parameters: int  # the initial parameters (torch.Generator)


def restart_seeds(salt: int, model: str, restart: int) -> RestartSeeds:
    """Seeds that depend on (salt, model, restart) alone."""
    return RestartSeeds(draw=derived_seed("ptb", salt, model, restart, "draw"), parameters=derived_seed("ptb", salt, model, restart, "parameters"))


def restart_draw(salt: int, model: str, restart: int) -> SearchDraw:
    """Restart ``restart``'s learning rate and clipping factor (App. 10's log-uniform draws)."""
    return draw_hyperparameters(random.Random(restart_seeds(salt, model, restart).draw))


@dataclass(frozen=True)
class PtbSelection:
    """A model's selected restart, as ``stacklm ptb select`` writes it (JSON)."""

    model: str
    restart: int  # the selected restart
    validation_perplexity: float  # its lowest validation perplexity
    restarts: dict[int, float]  # every restart's lowest finite validation perplexity; ∞: it diverged (null in the file)

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "restart": self.restart,
            "validation_perplexity": self.validation_perplexity,
            "restarts": {str(restart): (score if math.isfinite(score) else None) for restart, score in self.restarts.items()},
        }

    @classmethod
    def read(cls, path: str | Path) -> PtbSelection:
        """The selection written at ``path``; a ``StacklmError`` naming the file for anything else."""
        data = read_json(path)
        try:
            if not isinstance(data["model"], str) or not isinstance(data["restart"], int) or not isinstance(data["restarts"], dict):
                raise TypeError("a key of the wrong type")
            restarts = {int(restart): math.inf if score is None else float(score) for restart, score in data["restarts"].items()}
            return cls(data["model"], data["restart"], float(data["validation_perplexity"]), restarts)
        except (KeyError, TypeError, ValueError):
            raise located(path, None, "not a PTB selection (a JSON object with the keys model, restart, validation_perplexity, restarts)") from None


def best_validation_perplexity(curve: pd.DataFrame) -> float:
    """A restart's lowest finite validation perplexity over its epochs; ∞ when it has none (it diverged)."""
    values = [float(value) for value in curve["validation_perplexity"] if math.isfinite(float(value))]
    return min(values, default=math.inf)


def select_restart(curves: Sequence[tuple[str | Path, pd.DataFrame]]) -> PtbSelection:
    """The restart of lowest finite validation perplexity (the first on ties) among one model's
    ``(path, train.parquet)`` curves."""
    restarts: dict[int, float] = {}
    models = set()
    for path, curve in curves:
        if curve.empty:
            raise located(path, None, "the curve has no epoch")
        models |= set(curve["architecture"])
        restart = int(curve["seed"].iloc[0])
        if restart in restarts:
            raise located(path, None, f"restart {restart} is given twice")
        restarts[restart] = best_validation_perplexity(curve)
    if len(models) != 1:
        raise StacklmError(f"--curves: restarts of {len(models)} models ({', '.join(sorted(models))}), not of one")
    (model,) = models
    chosen = list(restarts)[select_lowest(list(restarts.values()), f"restart of {model}")]
    return PtbSelection(model, chosen, restarts[chosen], restarts)


def select_command(args: argparse.Namespace) -> int:
    """``stacklm ptb select``: the selection among ``--curves``, written to ``--out``."""

    selection = select_restart([(path, read_parquet(path, "the restart's curve")) for path in args.curves])
    write_json(args.out, selection.as_json())
    print(f"{selection.model}: restart {selection.restart} of {len(selection.restarts)} "
          f"(validation perplexity {selection.validation_perplexity:.2f}, the lowest)")
    return 0
