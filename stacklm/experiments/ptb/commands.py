"""``stacklm ptb``: the commands of the rules ``ptb_download``, ``ptb_suites``, ``ptb_train``,
``ptb_evaluate``, ``ptb_select`` and ``ptb_report`` (DuSell & Chiang (2022) §5.2, App. 10–11).

    stacklm ptb download --out resources/ptb
    stacklm ptb suites [--suites NAME ...] --out resources/sg-test-suites

    stacklm ptb train --model M... --restart K... --data MIRROR/ptb [--salt S] [--lines N] [--max-epochs E]
        [--cadence CADENCE.json] --checkpoint CKPT... --out RUN_DIR... [--log LOG...]
    stacklm ptb evaluate --run RUN_DIR... --data MIRROR/ptb --syntaxgym MIRROR/sg-test-suites
        [--lines N] [--suites NAME ...] --out RUN_DIR/metrics.parquet... [--log LOG...]
    stacklm ptb select --curves RUN_DIR/train.parquet ... --out SELECTED.json
    stacklm ptb report --metrics RUN_DIR/metrics.parquet ... --selected SELECTED.json ...
        --figure-models lstm rns-2-3 --out-metrics results/ptb/metrics.parquet
        --tables ptb.tex circuits.tex --markdown ptb.md circuits.md --figures F.png F.pdf --scale TEXT

The workflow passes the ``ptb`` settings as these options (``stacklm.experiments.ptb.dag``), so
that a job reruns when an option it takes changes, and only then; ``ptb.progress_interval_s``
alone, which changes no result, comes in the cadence file (``--cadence``). By hand, every default
is the paper's. ``download`` fetches Mikolov's ``simple-examples.tgz`` and writes its three PTB files,
``suites`` the authors' circuit map and suites (all 33 by default), each file checked against
its pinned sha256 before it is written. Building the parser imports no
torch: each command's function is imported when it runs (:func:`stacklm.experiments.common.deferred`):
``download`` and ``suites`` from :mod:`~stacklm.experiments.ptb.data`, ``train`` from
:mod:`~stacklm.experiments.ptb.training`, ``evaluate`` from :mod:`~stacklm.experiments.ptb.evaluation`,
``select`` from :mod:`~stacklm.experiments.ptb.search` and ``report`` from
:mod:`~stacklm.experiments.ptb.report`; ``select``, ``report`` and ``suites`` never import torch. No command touches MLflow: ``stacklm tracking sync`` mirrors the Parquet files.

Several ``--restart`` values are several restarts trained one after another in one process (the
rule ``ptb_train_group<n>`` when ``resources.runs_per_job`` > 1), each with its own ``--model`` (or
one for all), ``--checkpoint``, ``--out`` and ``--log`` in the same order; several ``--run`` values
several restarts evaluated one after another (rule ``ptb_evaluate_group<n>``), each with its
``--out`` and ``--log``. Each equals the restart trained or evaluated alone (the loop of
:func:`stacklm.experiments.common.run_each`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stacklm.experiments.common import add_cadence_argument, add_resource_arguments, deferred, integer_at_least

UNIT = "stacklm.experiments.ptb"


def register(subparsers: argparse._SubParsersAction) -> None:
    ptb = subparsers.add_parser("ptb")
    commands = ptb.add_subparsers(dest="ptb_command", required=True, metavar="COMMAND")

    download = commands.add_parser("download", help="fetch Mikolov's simple-examples.tgz and write its PTB files (sha256 checked)")
    download.add_argument("--out", required=True, type=Path, help="the folder of ptb.{train,valid,test}.txt to write")
    download.set_defaults(func=deferred(f"{UNIT}.data", "download_command"))

    suites = commands.add_parser("suites", help="fetch the SyntaxGym suites and circuit map the authors scored (sha256 checked)")
    suites.add_argument("--suites", nargs="*", default=None, help="the suites to fetch (default: all 33)")
    suites.add_argument("--out", required=True, type=Path, help="the folder of circuits.json and syntaxgym-format/ to write")
    suites.set_defaults(func=deferred(f"{UNIT}.data", "suites_command"))

    train = commands.add_parser("train", help="train random restarts of PTB models (App. 10); each resumes from its --checkpoint")
    train.add_argument("--model", required=True, nargs="+", help="lstm, lstm-H, jm-hidden, jm-learned, ns-Q-S or rns-Q-S: one for all, or one per restart")
    train.add_argument("--restart", required=True, nargs="+", type=integer_at_least(1), help="the restart, 1-based: its draw and initial parameters; several: a run each")
    train.add_argument("--data", required=True, type=Path, help="the folder of ptb.{train,valid,test}.txt (checked against their sha256)")
    train.add_argument("--salt", type=int, default=0, help="another salt draws another set of restarts")
    train.add_argument("--lines", type=integer_at_least(1), default=None, help="train and validate on each split's first lines only (default: all)")
    train.add_argument("--max-epochs", type=integer_at_least(1), default=100)
    add_cadence_argument(train)
    train.add_argument("--checkpoint", required=True, nargs="+", type=Path, help="resumable training state, one per restart")
    train.add_argument("--out", required=True, nargs="+", type=Path, help="run folder (model.pt, train.parquet), one per restart")
    train.add_argument("--log", nargs="+", type=Path, default=None, help="a file per restart for its progress lines; default: stderr")
    add_resource_arguments(train)
    train.set_defaults(func=deferred(f"{UNIT}.training", "train_command"))

    evaluate = commands.add_parser("evaluate", help="test perplexity and SG score of trained restarts")
    evaluate.add_argument("--run", required=True, nargs="+", type=Path, help="the run folder (`stacklm ptb train`); several: each in turn")
    evaluate.add_argument("--data", required=True, type=Path, help="the folder of ptb.{train,valid,test}.txt")
    evaluate.add_argument("--syntaxgym", required=True, type=Path, help="the folder of circuits.json and syntaxgym-format/")
    evaluate.add_argument("--lines", type=integer_at_least(1), default=None, help="test on the test split's first lines only (default: all)")
    evaluate.add_argument("--suites", nargs="*", default=None, help="the suites scored (default: all 33)")
    evaluate.add_argument("--out", required=True, nargs="+", type=Path, help="metrics Parquet, one per --run")
    evaluate.add_argument("--log", nargs="+", type=Path, default=None, help="a file per --run for its lines; default: stderr")
    add_resource_arguments(evaluate)
    evaluate.set_defaults(func=deferred(f"{UNIT}.evaluation", "evaluate_command"))

    select = commands.add_parser("select", help="the restart of one model with the lowest validation perplexity")
    select.add_argument("--curves", required=True, nargs="+", help="the restarts' train.parquet files")
    select.add_argument("--out", required=True, help="the selection (JSON): model, restart, its validation perplexity, every restart's")
    select.set_defaults(func=deferred(f"{UNIT}.search", "select_command"))

    report = commands.add_parser("report", help="the PTB table, the circuit table and the SG-against-perplexity figure")
    report.add_argument("--metrics", required=True, nargs="+", type=Path, help="every restart's metrics.parquet")
    report.add_argument("--selected", required=True, nargs="+", type=Path, help="each model's selection, in the tables' row order")
    report.add_argument("--figure-models", required=True, nargs="+", help="the models whose every restart the figure shows")
    report.add_argument("--out-metrics", required=True, type=Path, help="every restart's metrics in one Parquet file (the tables' source)")
    report.add_argument("--tables", required=True, nargs=2, type=Path, metavar=("PTB_TEX", "CIRCUITS_TEX"))
    report.add_argument("--markdown", required=True, nargs=2, type=Path, metavar=("PTB_MD", "CIRCUITS_MD"))
    report.add_argument("--figures", required=True, nargs="+", type=Path, help="the figure's files (.png, .pdf)")
    report.add_argument("--scale", required=True, help="the runs' scale (preset, lines, restarts, epochs, suites): ends every caption")
    report.set_defaults(func=deferred(f"{UNIT}.report", "report_command"))

