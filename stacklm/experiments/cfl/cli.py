"""``stacklm cfl``: the command line of the CFL experiments (``generate``, ``train``, ``select``,
``evaluate``, ``figures``, ``actions``).

Building it imports no torch, pandas or matplotlib: each command loads them when it runs
(:mod:`stacklm.experiments.cfl.commands`; ``actions`` is
:func:`stacklm.experiments.cfl.figures.actions_command`; ``select`` is
:func:`stacklm.experiments.cfl.experiment.select_command`, which needs pandas only), so that
``stacklm cfl select``, a job per (language, model), starts without the seconds torch costs.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Callable

from stacklm.cfl.languages import LANGUAGES
from stacklm.cfl.splits import SPLIT_LENGTHS
from stacklm.experiments.cfl.experiment import PDA_SIZES, select_command
from stacklm.experiments.common import add_resource_arguments


def deferred(name: str, module: str = "stacklm.experiments.cfl.commands") -> Callable[[argparse.Namespace], int]:
    """The command ``name`` of ``module``, imported when it runs."""

    def command(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)

    return command


def register(subparsers: argparse._SubParsersAction) -> None:
    cfl = subparsers.add_parser("cfl")
    commands = cfl.add_subparsers(dest="cfl_command", required=True, metavar="COMMAND")
    generate = commands.add_parser(
        "generate",
        help="sample one split and score each string's true log-probability",
        description="Sample one split (spec §1.4) and write tokens, ln p_true(w) and ln p_G(w | |w|) as TSV.",
    )
    generate.add_argument("--language", required=True, choices=sorted(LANGUAGES))
    generate.add_argument("--split", required=True, choices=list(SPLIT_LENGTHS))
    generate.add_argument("--seed", required=True, type=int, help="seed of the generator (the paper's test sets use 0)")
    generate.add_argument("--out", required=True, help="the TSV file to write")
    generate.add_argument(
        "--strings-per-length",
        type=int,
        default=None,
        help="test split only: keep the first K strings of each length (the same as in the whole split); default: all 100",
    )
    generate.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: the inside algorithm runs many small tensor operations, "
        "and extra threads mostly wait on each other)",
    )
    generate.set_defaults(func=deferred("generate_command"))

    train = commands.add_parser("train", help="train one run of the CFL grid (App. 8 schedule); resumes from --checkpoint")
    train.add_argument("--language", required=True, choices=sorted(PDA_SIZES))
    train.add_argument("--architecture", required=True, help="CFL registry name, e.g. cfl/NS+S+U")
    train.add_argument("--learning-rate", required=True, type=float)
    train.add_argument("--vector-size", type=int, default=None, help="stack vector size m (Gref and JM only)")
    train.add_argument("--restart", required=True, type=int, help="restart number, 1-based")
    train.add_argument("--settings", required=True, type=Path)
    train.add_argument("--checkpoint", required=True, type=Path, help="resumable training state")
    train.add_argument("--out", required=True, type=Path, help="run directory (model.pt, train.parquet)")
    train.add_argument(
        "--actions",
        type=Path,
        default=None,
        help="NS models on marked reversal: log the stack actions on one fixed string every cfl.action_log_every updates "
        "to this Parquet file (Figure 2)",
    )
    add_resource_arguments(train)
    train.set_defaults(func=deferred("train_command"))

    select = commands.add_parser("select", help="the run with the lowest validation Δ at its best epoch")
    select.add_argument("--curves", required=True, nargs="+", help="the runs' train.parquet files")
    select.add_argument("--out", required=True, help="the selected run's curve (its train.parquet rows)")
    select.set_defaults(func=select_command)

    evaluate = commands.add_parser("evaluate", help="test Δ overall and per length of a selected run")
    evaluate.add_argument("--selection", required=True, type=Path, help="written by `stacklm cfl select`")
    evaluate.add_argument("--runs", required=True, type=Path, help="the folder of the runs of this language and model")
    evaluate.add_argument("--test", required=True, type=Path, help="the seed-0 test set (`stacklm cfl generate`)")
    evaluate.add_argument("--settings", required=True, type=Path)
    evaluate.add_argument("--out", required=True, type=Path, help="metrics Parquet")
    add_resource_arguments(evaluate)
    evaluate.set_defaults(func=deferred("evaluate_command"))

    figures = commands.add_parser("figures", help="validation Δ per epoch (Figure 1) and test Δ by length, from Parquet")
    figures.add_argument("--curves", required=True, nargs="+", help="selected curves (`stacklm cfl select`)")
    figures.add_argument("--metrics", required=True, nargs="+", help="metrics (`stacklm cfl evaluate`)")
    figures.add_argument("--out-curves", required=True, type=Path, help="all selected curves, one Parquet")
    figures.add_argument("--out-metrics", required=True, type=Path, help="all CFL metrics, one Parquet")
    figures.add_argument("--validation-figures", required=True, nargs="+", help="Figure 1 files (.png, .pdf)")
    figures.add_argument("--test-figures", required=True, nargs="+", help="test Δ by length files (.png, .pdf)")
    figures.set_defaults(func=deferred("figures_command"))

    actions = commands.add_parser(
        "actions", help="the stack actions of NS+S and NS+S+U over training (Figure 2), from the selected runs' logs"
    )
    actions.add_argument("--selections", required=True, nargs="+", type=Path, help="selected curves (`stacklm cfl select`), one per model")
    actions.add_argument("--runs", required=True, nargs="+", type=Path, help="the folder of each model's runs, in the same order")
    actions.add_argument("--out", required=True, type=Path, help="the selected runs' action logs, one Parquet")
    actions.add_argument("--figures", required=True, nargs="+", help="Figure 2 files (.png, .pdf)")
    actions.set_defaults(func=deferred("actions_command", "stacklm.experiments.cfl.figures"))
