"""The random search of DuSell & Cotterell (2025) App. D: ``stacklm hparams`` draws each trial's
hyperparameters, ``stacklm select`` keeps the trial with the lowest validation cross-entropy.

Neither imports torch: the DAG runs one such job per task and architecture.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from stacklm.errors import StacklmError
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
    if len(args.out) != search.trials:
        raise StacklmError(f"--out: {len(args.out)} files given for {search.trials} trials (search.trials)")
    for trial, path in enumerate(args.out, start=1):
        write_json(path, asdict(draw_hyperparameters(search, args.task, args.architecture, trial)))
    return 0


def select_command(args: argparse.Namespace) -> int:
    final = read_settings(args.settings).section("final", FinalSettings)
    if len(args.hparams) == 1 and not args.curves:
        best, reason = 0, "the only trial, not trained: nothing to compare it with"
    elif len(args.hparams) != len(args.curves):
        raise StacklmError(f"--hparams and --curves differ in length ({len(args.hparams)} and {len(args.curves)})")
    else:
        import pandas as pd  # here, not at the top: hparams, hundreds of jobs, does without it

        scores = [lowest_validation_cross_entropy(pd.read_parquet(path)) for path in args.curves]
        best = select_lowest(scores, "search trial")
        reason = f"validation cross-entropy {scores[best]:.6f}, the lowest of {len(scores)} trials"
    chosen = json.loads(Path(args.hparams[best]).read_text())
    chosen["max_epochs"] = final.max_epochs
    write_json(args.out, chosen)
    print(f"selected trial {best + 1} ({reason}): {args.hparams[best]}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    hparams = subparsers.add_parser("hparams")
    hparams.add_argument("--task", required=True)
    hparams.add_argument("--architecture", required=True, help="registry name, e.g. Tf+Nd")
    hparams.add_argument("--settings", required=True)
    hparams.add_argument("--out", required=True, nargs="+", help="one HP.json per trial, trial 1 first")
    hparams.set_defaults(func=hparams_command)

    select = subparsers.add_parser("select")
    select.add_argument("--settings", required=True)
    select.add_argument("--hparams", required=True, nargs="+", help="the trials' HP.json files, trial 1 first")
    select.add_argument("--curves", default=[], nargs="*", help="the trials' train.parquet files, same order (none for a single trial)")
    select.add_argument("--out", required=True, help="the chosen HP.json, with final.max_epochs")
    select.set_defaults(func=select_command)
