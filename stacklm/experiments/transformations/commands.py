"""The command line of the syntactic transformations of DuSell & Cotterell (2025): ``stacklm
train``, ``evaluate``, ``hparams``, ``select``, ``aggregate``, ``report``, ``constructions`` and
``progress``, each the command of the workflow rule of the same name (``constructions`` and
``progress`` are run by hand).

``register`` adds every command with its options; each command's function is imported when it
runs (:func:`stacklm.experiments.common.deferred`), from the module named for what it does:
:mod:`~stacklm.experiments.transformations.training`,
:mod:`~stacklm.experiments.transformations.evaluation`,
:mod:`~stacklm.experiments.transformations.search`,
:mod:`~stacklm.experiments.transformations.report`,
:mod:`~stacklm.experiments.transformations.constructions` and
:mod:`~stacklm.experiments.transformations.progress`. So ``stacklm hparams`` and ``stacklm select``,
a job each per task and architecture, start without torch, and ``stacklm train --help`` answers at once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stacklm.experiments.common import (
    add_backend_arguments,
    add_cadence_argument,
    add_resource_arguments,
    deferred,
    integer_at_least,
)
from stacklm.tasks import TASK_NAMES

UNIT = "stacklm.experiments.transformations"


def register(subparsers: argparse._SubParsersAction) -> None:
    for add in (add_train, add_evaluate, add_search, add_report, add_constructions, add_progress):
        add(subparsers)


def add_train(subparsers: argparse._SubParsersAction) -> None:
    """``stacklm train`` (rule ``train``): :func:`stacklm.experiments.transformations.training.train_command`."""
    parser = subparsers.add_parser("train")
    parser.add_argument("--task", required=True, help=f"one of {', '.join(TASK_NAMES)}")
    parser.add_argument("--architecture", required=True, nargs="+", help="registry name, e.g. Tf+Nd: one for every run, or one per seed")
    parser.add_argument("--data-dir", required=True, type=Path, help="the task's {train,validation,test,generalization}.tsv")
    parser.add_argument("--out", required=True, type=Path, nargs="+", help="run directory, one per seed: model.pt, train.parquet")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hparams", type=Path, nargs="+",
                        help='a trial\'s JSON, {"learning_rate", "tokens_per_batch", "max_epochs"}: one for every run, or one per seed')
    source.add_argument("--learning-rate", type=float, help="initial learning rate of Adam (with --tokens-per-batch)")
    parser.add_argument("--tokens-per-batch", type=integer_at_least(1), help="B, the token budget of a batch (with --learning-rate)")
    parser.add_argument("--max-epochs", type=integer_at_least(1), help="with --learning-rate; default: training.max_epochs, early stopping ends the run")
    parser.add_argument("--seed", type=integer_at_least(0), nargs="+", default=[1], help="parameters, dropout and shuffling (default: 1); several: a run each")
    parser.add_argument("--settings", type=Path, help="the workflow's resolved settings; default: the paper's")
    add_cadence_argument(parser)
    parser.add_argument("--checkpoint", type=Path, nargs="+", help="resumable training state, one per seed; default: RUN_DIR/checkpoint.pt")
    parser.add_argument("--phase", choices=("search", "final"), default="final",
                        help="search: a trial of the hyperparameter search (with --trial); final: a run with the chosen hyperparameters (default)")
    parser.add_argument("--trial", type=integer_at_least(1), nargs="+", default=None, help="trial number of a search run, one per seed")
    parser.add_argument("--log", type=Path, nargs="+", help="a file per seed for its run's progress lines; default: stderr")
    add_resource_arguments(parser)
    add_backend_arguments(parser, training=True)
    parser.set_defaults(func=deferred(f"{UNIT}.training", "train_command"))


def add_evaluate(subparsers: argparse._SubParsersAction) -> None:
    """``stacklm evaluate`` (rule ``evaluate``): :func:`stacklm.experiments.transformations.evaluation.evaluate_command`."""
    parser = subparsers.add_parser("evaluate")
    parser.add_argument("--task", required=True)
    parser.add_argument("--run", required=True, type=Path, nargs="+", help="run directory holding model.pt; several: evaluated in turn")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--settings", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, nargs="+", help="metrics.parquet to write, one per run")
    parser.add_argument("--log", type=Path, nargs="+", help="a file per run for its errors; default: stderr")
    add_other_data_argument(parser)
    add_resource_arguments(parser)
    add_backend_arguments(parser, training=False)
    parser.set_defaults(func=deferred(f"{UNIT}.evaluation", "evaluate_command"))


def add_search(subparsers: argparse._SubParsersAction) -> None:
    """``stacklm hparams`` and ``stacklm select`` (rules ``hparams``, ``select``): :mod:`stacklm.experiments.transformations.search`."""
    hparams = subparsers.add_parser("hparams")
    hparams.add_argument("--task", required=True)
    hparams.add_argument("--architecture", required=True, nargs="+", help="registry name, e.g. Tf+Nd; several: each one's trials in turn")
    hparams.add_argument("--settings", required=True)
    hparams.add_argument("--out", required=True, nargs="+", help="one HP.json per trial, trial 1 first; per architecture, in order")
    hparams.set_defaults(func=deferred(f"{UNIT}.search", "hparams_command"))

    select = subparsers.add_parser(
        "select",
        description="Each --hparams names one architecture's trials; several --hparams are several selections, one after another, "
        "each with its --curves and its --out.",
    )
    select.add_argument("--settings", required=True)
    select.add_argument("--hparams", required=True, nargs="+", action="append", help="one architecture's trials' HP.json files, trial 1 first; again for the next")
    select.add_argument("--curves", default=None, nargs="*", action="append",
                        help="the trials' train.parquet files, same order, once per --hparams (none for single trials, not trained)")
    select.add_argument("--out", required=True, nargs="+", help="the chosen HP.json, with final.max_epochs: one per --hparams")
    select.set_defaults(func=deferred(f"{UNIT}.search", "select_command"))


def add_report(subparsers: argparse._SubParsersAction) -> None:
    """``stacklm aggregate`` and ``stacklm report`` (rules ``aggregate``, ``report``): :mod:`stacklm.experiments.transformations.report`."""
    aggregate_parser = subparsers.add_parser("aggregate")
    aggregate_parser.add_argument("--out", required=True, help="results/metrics.parquet")
    aggregate_parser.add_argument("runs", nargs="+", help="every final run's metrics.parquet")
    aggregate_parser.set_defaults(func=deferred(f"{UNIT}.report", "aggregate_command"))

    report = subparsers.add_parser("report")
    report.add_argument("--metrics", required=True, help="results/metrics.parquet")
    report.add_argument("--settings", required=True, help="results/settings/report.json")
    report.add_argument("--tables", required=True, nargs="+", help="one .tex per task, in the settings' task order")
    report.add_argument("--markdown", required=True, nargs="+", help="the same tables in Markdown, same order, with every seed's own values")
    report.add_argument("--markdown-means", nargs="+", default=[], help="optional: the same tables in Markdown as the .tex has them (the mean and the paper's; a README's), same order")
    report.add_argument("--document", required=True, help="the standalone .tex that includes the tables and the figure")
    report.add_argument("--figures", required=True, nargs="+", help="Figure 3 files (.png, .pdf)")
    report.add_argument("--scale", default="", help="the runs' scale (preset, data, examples, epochs, seeds), which ends every caption;"
                        " the workflow always states it (stacklm.workflow.document)")
    report.add_argument("--parts", default="[]", help="the document's other parts, JSON (stacklm.workflow.document.document_parts)")
    report.set_defaults(func=deferred(f"{UNIT}.report", "report_command"))


def add_constructions(subparsers: argparse._SubParsersAction) -> None:
    """``stacklm constructions``: :func:`stacklm.experiments.transformations.constructions.constructions_command`."""
    parser = subparsers.add_parser("constructions")
    parser.add_argument("--data-dir", required=True, type=Path, help="the data the runs were trained on (results/data/TASK)")
    parser.add_argument("--markdown", required=True, type=Path, help="the Markdown page to write")
    parser.add_argument("--parquet", type=Path, help="the rows, written as Parquet too")
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders of one task, each with its model.pt")
    add_other_data_argument(parser)
    add_resource_arguments(parser)
    add_backend_arguments(parser, training=False)
    parser.set_defaults(func=deferred(f"{UNIT}.constructions", "constructions_command"))


def add_progress(subparsers: argparse._SubParsersAction) -> None:
    """``stacklm progress``: :func:`stacklm.experiments.transformations.progress.progress_command`."""
    parser = subparsers.add_parser("progress")
    parser.add_argument("--markdown", type=Path, help="a Markdown page: the table, then every run's checkpoints; default: the table on stdout")
    parser.add_argument("--figure", action="append", type=Path, default=[],
                        help="the curves so far (.png or .pdf; repeat for both): a row per architecture and phase")
    parser.add_argument("run_dir", type=Path, help="the folder the workflow runs in (results/ inside); only read")
    parser.set_defaults(func=deferred(f"{UNIT}.progress", "progress_command"))


def add_other_data_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--other-data", action="store_true",
                        help="score on --data-dir although the runs were trained on other data (recorded in the results)")
