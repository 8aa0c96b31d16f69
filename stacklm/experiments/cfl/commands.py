"""``stacklm cfl``: the command line of the CFL experiments of DuSell & Chiang (2022) (the rules
``cfl_generate``, ``cfl_train``, ``cfl_select``, ``cfl_evaluate``, ``cfl_figures`` and
``cfl_actions``; ``progress``, run by hand, reads where the training runs stand).

    stacklm cfl generate --language L --split test --seed 0 --out TEST.tsv
    stacklm cfl train --language L --architecture cfl/X... (--setting lr0.001-m20-r3... |
        --learning-rate LR [--vector-size M] --restart K) --settings results/settings/cfl_train.json
        --checkpoint CKPT... --out RUN_DIR... [--actions RUN_DIR/actions.parquet...] [--log LOG...]
        (--actions: NS+S and NS+S+U on marked reversal, Figure 2's log)
    stacklm cfl select --curves RUN_DIR/train.parquet ... --out SELECTED.parquet
    stacklm cfl evaluate --selection SELECTED.parquet... --runs RUNS_DIR... --test TEST.tsv
        --settings results/settings/cfl_evaluate.json --out METRICS.parquet... [--log LOG...]
    stacklm cfl figures --curves SELECTED.parquet ... --metrics METRICS.parquet ...
        --out-curves results/cfl/curves.parquet --out-metrics results/cfl/metrics.parquet
        --validation-figures F1.png F1.pdf --test-figures T.png T.pdf --summary results/cfl/summary.md
    stacklm cfl actions --selections SELECTED.parquet... --runs RUNS_DIR... --out ACTIONS.parquet --figures F2.png
    stacklm cfl progress [--markdown PAGE.md] RUN_DIR   (run by hand, beside a live pipeline)

Several ``--setting`` values are several runs of one language, trained one after another in one
process (the rule ``cfl_train_<language>_group<n>`` when ``resources.runs_per_job`` > 1), and
several ``--selection`` values several models' selected runs, evaluated one after another (rule
``cfl_evaluate_<language>_group<n>``); each run takes its files in the same order and equals the
run trained or evaluated alone (the loop of :func:`stacklm.experiments.common.run_each`).

Building the parser imports no torch, pandas or matplotlib: each command's function is imported
when it runs (:func:`stacklm.experiments.common.deferred`): ``generate`` from
:mod:`~stacklm.experiments.cfl.data`, ``train`` from :mod:`~stacklm.experiments.cfl.training`,
``select`` from :mod:`~stacklm.experiments.cfl.search` (pandas only), ``evaluate`` from
:mod:`~stacklm.experiments.cfl.evaluation`, ``figures`` and ``actions`` from
:mod:`~stacklm.experiments.cfl.figures`, ``progress`` from :mod:`~stacklm.experiments.cfl.progress`; so ``stacklm cfl select``, a job per (language, model),
starts without the seconds torch costs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stacklm.cfl.languages import LANGUAGES
from stacklm.cfl.splits import SPLIT_LENGTHS
from stacklm.experiments.cfl.settings import PDA_SIZES
from stacklm.experiments.common import add_backend_arguments, add_cadence_argument, add_resource_arguments, deferred

UNIT = "stacklm.experiments.cfl"


def register(subparsers: argparse._SubParsersAction) -> None:
    cfl = subparsers.add_parser("cfl")
    commands = cfl.add_subparsers(dest="cfl_command", required=True, metavar="COMMAND")
    generate = commands.add_parser(
        "generate",
        help="sample one split and score each string's true log-probability",
        description="Sample one split (DuSell & Chiang (2022) App. 8) and write tokens, ln p_true(w) and ln p_G(w | |w|) as TSV.",
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
    generate.set_defaults(func=deferred(f"{UNIT}.data", "generate_command"))

    train = commands.add_parser(
        "train",
        help="train runs of the CFL grid (App. 8 schedule), one after another; each resumes from its --checkpoint",
        description="Several --setting values are several runs, trained one after another in this process, each with its own "
        "--architecture (or one for all), --checkpoint, --out, --actions and --log, in the order of the settings; each equals "
        "the run trained alone. One run's error stops none of the others: the command fails after the last.",
    )
    train.add_argument("--language", required=True, choices=sorted(PDA_SIZES))
    train.add_argument("--architecture", required=True, nargs="+", help="CFL registry name, e.g. cfl/NS+S+U: one for every run, or one per run")
    grid_point = train.add_mutually_exclusive_group(required=True)
    grid_point.add_argument("--setting", nargs="+", help="grid points as their folder names, lr0.001-m20-r3: a run each")
    grid_point.add_argument("--learning-rate", type=float, help="one run, by hand (with --restart and, for Gref and JM, --vector-size)")
    train.add_argument("--vector-size", type=int, default=None, help="with --learning-rate: stack vector size m (Gref and JM only)")
    train.add_argument("--restart", type=int, default=None, help="with --learning-rate: restart number, 1-based")
    train.add_argument("--settings", required=True, type=Path)
    add_cadence_argument(train)
    train.add_argument("--checkpoint", required=True, nargs="+", type=Path, help="resumable training state, one per run")
    train.add_argument("--out", required=True, nargs="+", type=Path, help="run directory (model.pt, train.parquet), one per run")
    train.add_argument(
        "--actions",
        type=Path,
        nargs="+",
        default=None,
        help="NS+S and NS+S+U on marked reversal: log the stack actions on one fixed string every cfl.action_log_every updates "
        "to this Parquet file, one per run (Figure 2)",
    )
    train.add_argument("--log", type=Path, nargs="+", default=None, help="a file per run for its progress lines; default: stderr")
    add_resource_arguments(train)
    add_backend_arguments(train, training=True)
    train.set_defaults(func=deferred(f"{UNIT}.training", "train_command"))

    select = commands.add_parser(
        "select",
        help="the run with the lowest validation Δ at its best epoch",
        description="Each --curves names one model's runs; several --curves are several selections, one after another, "
        "each written to its --out, in the same order.",
    )
    select.add_argument("--curves", required=True, nargs="+", action="append", help="one model's runs' train.parquet files; again for the next model")
    select.add_argument("--out", required=True, nargs="+", help="the selected run's curve (its train.parquet rows), one per --curves")
    select.set_defaults(func=deferred(f"{UNIT}.search", "select_command"))

    evaluate = commands.add_parser(
        "evaluate",
        help="test Δ overall and per length of selected runs",
        description="Several --selection values are several models' selected runs of one language, evaluated one after "
        "another, each with its own --runs, --out and --log, in the same order.",
    )
    evaluate.add_argument("--selection", required=True, nargs="+", type=Path, help="written by `stacklm cfl select`, one per model")
    evaluate.add_argument("--runs", required=True, nargs="+", type=Path, help="the folder of the runs of this language and each model")
    evaluate.add_argument("--test", required=True, type=Path, help="the seed-0 test set (`stacklm cfl generate`)")
    evaluate.add_argument("--settings", required=True, type=Path)
    evaluate.add_argument("--out", required=True, nargs="+", type=Path, help="metrics Parquet, one per selection")
    evaluate.add_argument("--log", type=Path, nargs="+", default=None, help="a file per selection for its lines; default: stderr")
    add_resource_arguments(evaluate)
    add_backend_arguments(evaluate, training=False)
    evaluate.set_defaults(func=deferred(f"{UNIT}.evaluation", "evaluate_command"))

    figures = commands.add_parser("figures", help="validation Δ per epoch (Figure 1) and test Δ by length, from Parquet")
    figures.add_argument("--curves", required=True, nargs="+", help="selected curves (`stacklm cfl select`)")
    figures.add_argument("--metrics", required=True, nargs="+", help="metrics (`stacklm cfl evaluate`)")
    figures.add_argument("--out-curves", required=True, type=Path, help="all selected curves, one Parquet")
    figures.add_argument("--out-metrics", required=True, type=Path, help="all CFL metrics, one Parquet")
    figures.add_argument("--validation-figures", required=True, nargs="+", help="Figure 1 files (.png, .pdf)")
    figures.add_argument("--test-figures", required=True, nargs="+", help="test Δ by length files (.png, .pdf)")
    figures.add_argument("--summary", required=True, type=Path, help="the Markdown table of each model's selected run: validation and test Δ")
    figures.set_defaults(func=deferred(f"{UNIT}.figures", "figures_command"))

    actions = commands.add_parser(
        "actions", help="the stack actions of NS+S and NS+S+U over training (Figure 2), from the selected runs' logs"
    )
    actions.add_argument("--selections", required=True, nargs="+", type=Path, help="selected curves (`stacklm cfl select`), one per model")
    actions.add_argument("--runs", required=True, nargs="+", type=Path, help="the folder of each model's runs, in the same order")
    actions.add_argument("--out", required=True, type=Path, help="the selected runs' action logs, one Parquet")
    actions.add_argument("--figures", required=True, nargs="+", help="Figure 2 files (.png, .pdf)")
    actions.set_defaults(func=deferred(f"{UNIT}.figures", "actions_command"))

    progress = commands.add_parser(
        "progress",
        help="where the CFL training runs of a pipeline run stand, read while they train: epochs, state, hours, best validation Δ",
        description="A row per grid run with a file under RUN_DIR/results/cfl: ended runs from their train.parquet, the others from "
        "their resumable state (their validation set's true cross-entropy computed again: seconds per run). Only reads: no lock, "
        "nothing written under RUN_DIR.",
    )
    progress.add_argument("--markdown", type=Path, help="a Markdown page: what the table shows, the table, the files not read; default: the table on stdout")
    progress.add_argument("run_dir", type=Path, help="the folder the workflow runs in (results/cfl and results/settings/cfl_train.json inside); only read")
    progress.set_defaults(func=deferred(f"{UNIT}.progress", "progress_command"))
