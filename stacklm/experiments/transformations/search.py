"""The random search of DuSell & Cotterell (2025) App. D: ``stacklm hparams`` draws each trial's
hyperparameters, ``stacklm select`` keeps the trial with the lowest validation cross-entropy.

Neither imports torch: the DAG runs one such job per task and architecture, or per task and
group of architectures (``resources.runs_per_job``): several ``--architecture`` values draw each
one's trials in turn, several ``--hparams`` select for each in turn, writing the same files as
a job each.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from stacklm.parquet_file import read_parquet
from stacklm.errors import StacklmError, UsageError
from stacklm.experiments.common import derived_seed, select_lowest, write_json
from stacklm.experiments.transformations.settings import FinalSettings, SearchSettings
from stacklm.settings_file import read_settings
from stacklm.training.config import Hyperparameters

if TYPE_CHECKING:
    import pandas as pd


def draw_hyperparameters(search: SearchSettings, task: str, architecture: str, trial: int) -> Hyperparameters:
    """Trial ``trial``'s hyperparameters: B ~ U{low..high}, learning rate ~ log-U[low, high],
    from a seed derived from (salt, task, architecture, trial)."""
    generator = random.Random(derived_seed(search.salt, task, architecture, trial))
    tokens_per_batch = generator.randint(search.tokens_per_batch.low, search.tokens_per_batch.high)
    rate = search.learning_rate
    learning_rate = math.exp(generator.uniform(math.log(rate.low), math.log(rate.high)))
    return Hyperparameters(learning_rate=learning_rate, tokens_per_batch=tokens_per_batch, max_epochs=search.max_epochs)


def lowest_validation_cross_entropy(curve: pd.DataFrame) -> float:
    """The best checkpoint's validation cross-entropy per token in one ``train.parquet``."""
    values = curve["validation_cross_entropy"].to_numpy(dtype=float)
    if len(values) == 0:
        raise StacklmError("a learning curve has no checkpoint")
    return float(values.min())


def hparams_command(args: argparse.Namespace) -> int:
    search = read_settings(args.settings).section("search", SearchSettings)
    expected = search.trials * len(args.architecture)
    if len(args.out) != expected:
        raise StacklmError(f"--out: {len(args.out)} files given for {search.trials} trials (search.trials) of {len(args.architecture)} architectures")
    paths = iter(args.out)
    for architecture in args.architecture:
        for trial in range(1, search.trials + 1):
            write_json(next(paths), asdict(draw_hyperparameters(search, args.task, architecture, trial)))
    return 0


def select_trial(final: FinalSettings, hparams: list[str], curves: list[str], out: str) -> None:
    """Write to ``out`` the trial of ``hparams`` (one architecture's, trial 1 first) whose curve
    (``curves``, same order; none for a single trial) has the lowest validation cross-entropy,
    with ``final.max_epochs``."""
    if len(hparams) == 1 and not curves:
        best, reason = 0, "the only trial, not trained: nothing to compare it with"
    elif len(hparams) != len(curves):
        raise StacklmError(f"--hparams and --curves differ in length ({len(hparams)} and {len(curves)})")
    else:
        scores = [lowest_validation_cross_entropy(read_parquet(path, "the trial's curve")) for path in curves]
        best = select_lowest(scores, "search trial")
        reason = f"validation cross-entropy {scores[best]:.6f}, the lowest of {len(scores)} trials"
    chosen = json.loads(Path(hparams[best]).read_text())
    chosen["max_epochs"] = final.max_epochs
    write_json(out, chosen)
    print(f"selected trial {best + 1} ({reason}): {hparams[best]} -> {out}")


def select_command(args: argparse.Namespace) -> int:
    final = read_settings(args.settings).section("final", FinalSettings)
    curves = args.curves if args.curves is not None else [[] for _ in args.hparams]
    if len(curves) != len(args.hparams):
        raise UsageError(f"--curves: given {len(curves)} times for {len(args.hparams)} --hparams: once per --hparams, in the same order"
                         " (or never, for single trials)")
    if len(args.out) != len(args.hparams):
        raise UsageError(f"--out: {len(args.out)} given for {len(args.hparams)} --hparams: one per --hparams, in the same order")
    for hparams, trial_curves, out in zip(args.hparams, curves, args.out):
        select_trial(final, hparams, trial_curves, out)
    return 0


