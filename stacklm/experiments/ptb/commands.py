"""``stacklm ptb``: the commands of the rules ``ptb_download``, ``ptb_suites``, ``ptb_train``,
``ptb_evaluate``, ``ptb_select`` and ``ptb_report`` (DuSell & Chiang (2022) §5.2, App. 10–11).

    stacklm ptb download --out resources/ptb
    stacklm ptb suites [--suites NAME ...] --out resources/sg-test-suites

    stacklm ptb train --model M... --restart K... --data MIRROR/ptb [--salt S] [--lines N] [--max-epochs E]
        [--progress-interval-s T] --checkpoint CKPT... --out RUN_DIR... [--log LOG...]
    stacklm ptb evaluate --run RUN_DIR... --data MIRROR/ptb --syntaxgym MIRROR/sg-test-suites
        [--lines N] [--suites NAME ...] --out RUN_DIR/metrics.parquet... [--log LOG...]
    stacklm ptb select --curves RUN_DIR/train.parquet ... --out SELECTED.json
    stacklm ptb report --metrics RUN_DIR/metrics.parquet ... --selected SELECTED.json ...
        --figure-models lstm rns-2-3 --out-metrics results/ptb/metrics.parquet
        --tables ptb.tex circuits.tex --markdown ptb.md circuits.md --figures F.png F.pdf --scale TEXT

The workflow passes the ``ptb`` settings as these options (``stacklm.experiments.ptb.dag``), so
that a job reruns when an option it takes changes, and only then; by hand, every default is the
paper's. ``download`` fetches Mikolov's ``simple-examples.tgz`` and writes its three PTB files,
``suites`` the authors' circuit map and suites (all 33 by default), each file checked against
its pinned sha256 before it is written. ``train`` and ``evaluate`` import torch when they run;
``select``, ``report`` and ``suites`` never do. No command touches MLflow: ``stacklm tracking sync`` mirrors the Parquet files.

Several ``--restart`` values are several restarts trained one after another in one process (the
rule ``ptb_train_group<n>`` when ``resources.runs_per_job`` > 1), each with its own ``--model`` (or
one for all), ``--checkpoint``, ``--out`` and ``--log`` in the same order; several ``--run`` values
several restarts evaluated one after another (rule ``ptb_evaluate_group<n>``), each with its
``--out`` and ``--log``. Each equals the restart trained or evaluated alone (the loop of
:func:`stacklm.experiments.common.run_each`).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacklm.errors import StacklmError, UsageError, located
from stacklm.experiments.common import add_resource_arguments, evaluated_runs, per_run, run_each, select_lowest, train_each, write_json
from stacklm.settings_file import read_json

SELECTION_KEYS = ("model", "restart", "validation_perplexity", "restarts")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _device_and_threads(args: argparse.Namespace) -> Any:
    """The job's torch device, with torch's threads set (``--device``, ``--threads``)."""
    from stacklm.training.run_files import choose_device, set_threads

    set_threads(args.threads)
    return choose_device(args.device)


@dataclass(frozen=True)
class PlannedRestart:
    """One restart of ``stacklm ptb train``, with the files given for it."""

    model: str
    restart: int
    checkpoint: Path
    out: Path
    log: Path | None

    @property
    def label(self) -> str:
        return f"{self.model} restart {self.restart}"


def planned_restarts(args: argparse.Namespace) -> list[PlannedRestart]:
    """A restart per ``--restart``, with the per-restart options in the same order (each checked for its count)."""
    count = len(args.restart)
    models = per_run("--model", args.model, count, "--restart", allow_one=True)
    pairs = list(zip(models, args.restart))
    if len(set(pairs)) < count:
        raise UsageError("--restart: a model's restart is given twice (" + ", ".join(f"{model} {restart}" for model, restart in pairs) + "): each is one run")
    checkpoints = per_run("--checkpoint", args.checkpoint, count, "--restart")
    outs = per_run("--out", args.out, count, "--restart")
    logs = per_run("--log", args.log, count, "--restart", [None] * count)
    return [PlannedRestart(model, restart, checkpoint, out, log) for (model, restart), checkpoint, out, log in zip(pairs, checkpoints, outs, logs)]


def train_command(args: argparse.Namespace) -> int:
    from stacklm.experiments.ptb.runs import train_restart

    planned = planned_restarts(args)
    device = _device_and_threads(args)
    train_each(planned, lambda run, stop_request, stream: train_restart(
        run.model, run.restart, args.data, run.out, run.checkpoint,
        salt=args.salt, lines=args.lines, max_epochs=args.max_epochs, progress_interval_s=args.progress_interval_s, device=device,
        stop_request=stop_request, stream=stream,
    ))
    return 0


def evaluate_command(args: argparse.Namespace) -> int:
    from stacklm.experiments.ptb.runs import evaluate_restart

    planned = evaluated_runs(args)
    device = _device_and_threads(args)
    suites = tuple(args.suites) if args.suites else None
    run_each(planned, lambda run, stream: evaluate_restart(run.run, args.data, args.syntaxgym, run.out, lines=args.lines, suites=suites, device=device, stream=stream))
    return 0


def download_command(args: argparse.Namespace) -> int:
    from stacklm.data.ptb import download_ptb

    download_ptb(args.out)
    print(f"PTB: {args.out}/ptb.{{train,valid,test}}.txt, each checked against its pinned sha256")
    return 0


def suites_command(args: argparse.Namespace) -> int:
    from stacklm.evaluation.syntaxgym.sources import SUITE_SHA256, download_suites

    suites = tuple(args.suites) if args.suites else tuple(SUITE_SHA256)
    download_suites(args.out, suites)
    print(f"SyntaxGym: {args.out}: circuits.json and {len(suites)} suites, each checked against its pinned sha256")
    return 0


def best_validation_perplexity(curve: Any) -> float:
    """A restart's lowest finite validation perplexity over its epochs; ∞ when it has none (it diverged)."""
    values = [float(value) for value in curve["validation_perplexity"] if math.isfinite(float(value))]
    return min(values, default=math.inf)


def select_command(args: argparse.Namespace) -> int:
    """The restart of lowest finite validation perplexity (the first on ties) among ``--curves``."""
    import pandas as pd  # here: the DAG's lookups import this module

    curves = [pd.read_parquet(path) for path in args.curves]
    restarts: dict[int, float] = {}
    models = set()
    for path, curve in zip(args.curves, curves):
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
    scores = list(restarts.values())
    chosen = list(restarts)[select_lowest(scores, f"restart of {model}")]
    selection = {
        "model": model,
        "restart": chosen,
        "validation_perplexity": restarts[chosen],
        "restarts": {str(restart): (score if math.isfinite(score) else None) for restart, score in restarts.items()},  # null: diverged
    }
    write_json(args.out, selection)
    print(f"{model}: restart {chosen} of {len(scores)} (validation perplexity {restarts[chosen]:.2f}, the lowest)")
    return 0


def read_selection(path: str | Path) -> tuple[str, int]:
    """(model, restart) of a file ``stacklm ptb select`` wrote."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("model"), str) or not isinstance(data.get("restart"), int):
        raise located(path, None, f"not a PTB selection (a JSON object with the keys {', '.join(SELECTION_KEYS)})")
    return data["model"], data["restart"]


def report_command(args: argparse.Namespace) -> int:
    """Every restart's metrics into one Parquet file, and the tables and figure rendered from it."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stacklm.atomic import write_text_atomically
    from stacklm.report.ptb import plot_sg_against_perplexity, ptb_runs, render_circuit_table, render_ptb_table
    from stacklm.tracking.records import PTB_METRICS_SCHEMA, write_table

    selection: dict[str, int] = {}
    for path in args.selected:
        model, restart = read_selection(path)
        if model in selection:
            raise located(path, None, f"a second selection of {model}")
        selection[model] = restart
    unknown = [model for model in args.figure_models if model not in selection]
    if unknown:
        raise StacklmError(f"--figure-models: no selection of {', '.join(unknown)} among --selected")
    tables = []
    for path in args.metrics:
        try:
            tables.append(pq.read_table(path).select(PTB_METRICS_SCHEMA.names).cast(PTB_METRICS_SCHEMA))
        except (OSError, KeyError, pa.ArrowException) as error:
            raise located(path, None, f"not the metrics of a PTB restart ({error})") from None
    write_table(pa.concat_tables(tables), args.out_metrics)
    source = str(args.out_metrics)
    runs = ptb_runs(pd.read_parquet(args.out_metrics), source)
    latex = (render_ptb_table(runs, selection, source, scale=args.scale), render_circuit_table(runs, selection, source, scale=args.scale))
    for path, text in zip(args.tables, latex):
        write_text_atomically(path, text)
    markdown = (
        render_ptb_table(runs, selection, source, markdown=True, scale=args.scale),
        render_circuit_table(runs, selection, source, markdown=True, scale=args.scale),
    )
    for path, text in zip(args.markdown, markdown):
        write_text_atomically(path, text)
    plot_sg_against_perplexity(runs, selection, args.figure_models, args.figures)
    print(f"{len(runs)} PTB restarts of {len(selection)} models -> {args.out_metrics}, {', '.join(map(str, args.tables + args.markdown + args.figures))}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    ptb = subparsers.add_parser("ptb")
    commands = ptb.add_subparsers(dest="ptb_command", required=True, metavar="COMMAND")

    download = commands.add_parser("download", help="fetch Mikolov's simple-examples.tgz and write its PTB files (sha256 checked)")
    download.add_argument("--out", required=True, type=Path, help="the folder of ptb.{train,valid,test}.txt to write")
    download.set_defaults(func=download_command)

    suites = commands.add_parser("suites", help="fetch the SyntaxGym suites and circuit map the authors scored (sha256 checked)")
    suites.add_argument("--suites", nargs="*", default=None, help="the suites to fetch (default: all 33)")
    suites.add_argument("--out", required=True, type=Path, help="the folder of circuits.json and syntaxgym-format/ to write")
    suites.set_defaults(func=suites_command)

    train = commands.add_parser("train", help="train random restarts of PTB models (App. 10); each resumes from its --checkpoint")
    train.add_argument("--model", required=True, nargs="+", help="lstm, lstm-H, jm-hidden, jm-learned, ns-Q-S or rns-Q-S: one for all, or one per restart")
    train.add_argument("--restart", required=True, nargs="+", type=_positive, help="the restart, 1-based: its draw and initial parameters; several: a run each")
    train.add_argument("--data", required=True, type=Path, help="the folder of ptb.{train,valid,test}.txt (checked against their sha256)")
    train.add_argument("--salt", type=int, default=0, help="another salt draws another set of restarts")
    train.add_argument("--lines", type=_positive, default=None, help="train and validate on each split's first lines only (default: all)")
    train.add_argument("--max-epochs", type=_positive, default=100)
    train.add_argument("--progress-interval-s", type=float, default=60.0, help="seconds between progress lines")
    train.add_argument("--checkpoint", required=True, nargs="+", type=Path, help="resumable training state, one per restart")
    train.add_argument("--out", required=True, nargs="+", type=Path, help="run folder (model.pt, train.parquet), one per restart")
    train.add_argument("--log", nargs="+", type=Path, default=None, help="a file per restart for its progress lines; default: stderr")
    add_resource_arguments(train)
    train.set_defaults(func=train_command)

    evaluate = commands.add_parser("evaluate", help="test perplexity and SG score of trained restarts")
    evaluate.add_argument("--run", required=True, nargs="+", type=Path, help="the run folder (`stacklm ptb train`); several: each in turn")
    evaluate.add_argument("--data", required=True, type=Path, help="the folder of ptb.{train,valid,test}.txt")
    evaluate.add_argument("--syntaxgym", required=True, type=Path, help="the folder of circuits.json and syntaxgym-format/")
    evaluate.add_argument("--lines", type=_positive, default=None, help="test on the test split's first lines only (default: all)")
    evaluate.add_argument("--suites", nargs="*", default=None, help="the suites scored (default: all 33)")
    evaluate.add_argument("--out", required=True, nargs="+", type=Path, help="metrics Parquet, one per --run")
    evaluate.add_argument("--log", nargs="+", type=Path, default=None, help="a file per --run for its lines; default: stderr")
    add_resource_arguments(evaluate)
    evaluate.set_defaults(func=evaluate_command)

    select = commands.add_parser("select", help="the restart of one model with the lowest validation perplexity")
    select.add_argument("--curves", required=True, nargs="+", help="the restarts' train.parquet files")
    select.add_argument("--out", required=True, help="the selection (JSON): model, restart, its validation perplexity, every restart's")
    select.set_defaults(func=select_command)

    report = commands.add_parser("report", help="the PTB table, the circuit table and the SG-against-perplexity figure")
    report.add_argument("--metrics", required=True, nargs="+", type=Path, help="every restart's metrics.parquet")
    report.add_argument("--selected", required=True, nargs="+", type=Path, help="each model's selection, in the tables' row order")
    report.add_argument("--figure-models", required=True, nargs="+", help="the models whose every restart the figure shows")
    report.add_argument("--out-metrics", required=True, type=Path, help="every restart's metrics in one Parquet file (the tables' source)")
    report.add_argument("--tables", required=True, nargs=2, type=Path, metavar=("PTB_TEX", "CIRCUITS_TEX"))
    report.add_argument("--markdown", required=True, nargs=2, type=Path, metavar=("PTB_MD", "CIRCUITS_MD"))
    report.add_argument("--figures", required=True, nargs="+", type=Path, help="the figure's files (.png, .pdf)")
    report.add_argument("--scale", required=True, help="the runs' scale (preset, lines, restarts, epochs, suites): ends every caption")
    report.set_defaults(func=report_command)

