"""The commands of the CFL rules ``cfl_generate``, ``cfl_train``, ``cfl_evaluate`` and ``cfl_figures``
(their options: :mod:`stacklm.experiments.cfl.cli`; ``cfl_select``'s command is
:func:`stacklm.experiments.cfl.experiment.select_command`).

    stacklm cfl generate --language L --split test --seed 0 --out TEST.tsv
    stacklm cfl train --language L --architecture cfl/X... (--setting lr0.001-m20-r3... |
        --learning-rate LR [--vector-size M] --restart K) --settings results/settings/cfl_train.json
        --checkpoint CKPT... --out RUN_DIR... [--actions RUN_DIR/actions.parquet...] [--log LOG...]
        (--actions: NS+S and NS+S+U on marked reversal, Figure 2's log)
    stacklm cfl select --curves RUN_DIR/train.parquet ... --out SELECTED.parquet
    stacklm cfl evaluate --selection SELECTED.parquet... --runs RUNS_DIR... --test TEST.tsv
        --settings results/settings/cfl_evaluate.json --out METRICS.parquet... [--log LOG...]

Several ``--setting`` values are several runs of one language, trained one after another in one
process (the rule ``cfl_train_<language>_group<n>`` when ``resources.runs_per_job`` > 1), and
several ``--selection`` values several models' selected runs, evaluated one after another (rule
``cfl_evaluate_<language>_group<n>``); each run takes its files in the same order and equals the
run trained or evaluated alone (the loop of :func:`stacklm.experiments.common.run_each`).
    stacklm cfl figures --curves SELECTED.parquet ... --metrics METRICS.parquet ...
        --out-curves results/cfl/curves.parquet --out-metrics results/cfl/metrics.parquet
        --validation-figures F1.png F1.pdf --test-figures T.png T.pdf

``train.parquet`` of a CFL run has the columns of every run's learning curve
(``stacklm.tracking.records.CURVE_SCHEMA``: task = the language, architecture = the registry
name, phase "search", trial null, seed = the restart, tokens_per_batch null) and, per epoch,
``setting`` (the run's folder name), ``vector_size`` (null but for Gref and JM),
``true_cross_entropy`` (H(S_val, p_true), one value per run) and ``cross_entropy_above_truth``
(validation Δ). The evaluation's metrics Parquet has the columns of every run's metrics
(``METRICS_SCHEMA``; split "validation" or "test", rule null, metric
``cross_entropy_above_truth``) and ``length``: null for Δ over the whole set, ℓ for the test
bin of length ℓ (p_true conditioned on ℓ); plus ``setting`` and ``vector_size`` of the run.
No command here touches MLflow: ``stacklm tracking sync`` mirrors these files (``stacklm.tracking.runs``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import pyarrow as pa
import torch

from stacklm.cfl.datasets import CflDataset, generate_split, read_split, true_cross_entropy, write_split
from stacklm.cfl.languages import LANGUAGES
from stacklm.errors import StacklmError, UsageError
from stacklm.evaluation.cfl import score_cfl_dataset
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.evaluation.metrics import MetricValue
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.cfl.actions import ActionLog, actions_table, check_logged_run, logged_string
from stacklm.experiments.cfl.experiment import PDA_SIZES, VECTOR_MODELS, CflRun, CflSettings, best_delta, parse_setting, run_seeds
from stacklm.experiments.cfl.run_data import first_strings_per_length, sample_run_data
from stacklm.experiments.common import per_run, run_each, train_each, with_cadence
from stacklm.kernels import backend as backends
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model, get_architecture, model_for_config
from stacklm.settings_file import read_settings
from stacklm.tracking.finished_run import run_metadata, save_trained_model
from stacklm.tracking.records import RunMetadata, curve_table, metrics_table, write_table
from stacklm.training.checkpoint import load_parameters
from stacklm.training.config import TrainingSettings, cfl_train_config
from stacklm.training.loop import StopRequest
from stacklm.training.resumable import resumable_training
from stacklm.training.run_files import choose_device, load_model, set_threads


def generate_command(args: argparse.Namespace) -> int:
    if args.threads < 1:
        raise StacklmError(f"--threads must be at least 1, not {args.threads}")
    torch.set_num_threads(args.threads)
    write_split(generate_split(LANGUAGES[args.language], args.split, args.seed, args.strings_per_length), args.out)
    return 0


def model_options(language: str, model: str, vector_size: int | None) -> ModelOptions:
    """The CFL sizes of ``model`` on ``language``: m for Gref and JM, the PDA of App. 8 for NS."""
    if (model in VECTOR_MODELS) != (vector_size is not None):
        raise StacklmError(f"--vector-size is required for {', '.join(VECTOR_MODELS)} and refused for {model}")
    states, symbols = PDA_SIZES[language]
    sizes: dict[str, Any] = {"cfl_num_states": states, "cfl_num_symbols": symbols}
    if vector_size is not None:
        sizes["cfl_stack_vector_size"] = vector_size
    return ModelOptions(**sizes)


@dataclass(frozen=True)
class PlannedRun:
    """One run of ``stacklm cfl train``: its grid point and the files given for it."""

    run: CflRun
    out: Path
    checkpoint: Path
    actions: Path | None
    log: Path | None

    @property
    def label(self) -> str:
        return f"{self.run.model} {self.run.setting}"


def planned_runs(args: argparse.Namespace) -> list[PlannedRun]:
    """A run per ``--setting`` (or the one run of ``--learning-rate``), with the per-run options in
    the same order (each checked for its count)."""
    if args.setting is not None:
        if args.vector_size is not None or args.restart is not None:
            raise UsageError("--vector-size and --restart go with --learning-rate; a --setting names both")
        points = [parse_setting(setting) for setting in args.setting]
    else:
        if args.restart is None:
            raise UsageError("--learning-rate needs --restart")
        points = [(args.learning_rate, args.vector_size, args.restart)]
    count = len(points)
    architectures: list[str] = per_run("--architecture", args.architecture, count, "--setting", allow_one=True)
    for architecture in dict.fromkeys(architectures):
        if get_architecture(architecture).family != "rns-rnn":
            raise StacklmError(f"--architecture {architecture!r} is not a CFL model (cfl/LSTM, cfl/Gref, …)")
    runs = [CflRun(args.language, architecture, *point) for architecture, point in zip(architectures, points)]
    if len(set(runs)) < count:
        raise UsageError("--setting: a model's grid point is given twice (" + ", ".join(f"{run.model} {run.setting}" for run in runs) + "): each is one run")
    outs = per_run("--out", args.out, count, "--setting")
    checkpoints = per_run("--checkpoint", args.checkpoint, count, "--setting")
    actions = per_run("--actions", args.actions, count, "--setting", [None] * count)
    logs = per_run("--log", args.log, count, "--setting", [None] * count)
    return [PlannedRun(*fields) for fields in zip(runs, outs, checkpoints, actions, logs)]


def train_command(args: argparse.Namespace) -> int:
    planned = planned_runs(args)
    settings = read_settings(args.settings)
    cfl = settings.section("cfl", CflSettings)
    training = with_cadence(settings.section("training", TrainingSettings), args.cadence)
    device = choose_device(args.device)
    set_threads(args.threads)
    placement = Placement(device, backends.resolve(args.backend, device), args.resume_other_backend)
    train_each(planned, lambda run_plan, stop_request, stream: train_run(run_plan, cfl, training, placement, stop_request, stream))
    return 0


@dataclass(frozen=True)
class Placement:
    """Where a command's models run: the device, the backend (``stacklm.kernels.backend``) and
    whether a state saved under another backend resumes."""

    device: torch.device
    backend: backends.Backend
    resume_other_backend: bool = False


def train_run(
    planned: PlannedRun, cfl: CflSettings, training: TrainingSettings, placement: Placement, stop_request: StopRequest, stream: TextIO | None
) -> None:
    """Train one grid run and write its ``model.pt``, ``train.parquet`` and, when asked, ``actions.parquet``."""
    run = planned.run
    options = model_options(run.language, run.model, run.vector_size)
    seeds = run_seeds(run)
    config = replace(cfl_train_config(run.learning_rate), max_epochs=cfl.max_epochs)

    language = LANGUAGES[run.language]
    training_strings, validation = sample_run_data(language, seeds.data, cfl.train_batches, cfl.validation_batches)
    true_validation = true_cross_entropy(validation)
    data_version = hashlib.sha256(json.dumps([training_strings, validation.strings]).encode()).hexdigest()
    run_settings: dict[str, Any] = {
        "language": run.language,
        "architecture": run.model,
        "learning_rate": run.learning_rate,
        "vector_size": run.vector_size,
        "restart": run.restart,
        "seeds": asdict(seeds),
        "model": asdict(options),
        "train_config": asdict(config),
        "cfl": asdict(cfl),
    } | backends.record(placement.backend)
    determining = ("language", "architecture", "seeds", "model", "train_config")
    fingerprint_source = {key: run_settings[key] for key in determining} | {"data_version": data_version}

    model = build_model(run.model, language.vocabulary_size, options=options, generator=torch.Generator().manual_seed(seeds.parameters))
    backends.accelerate(model, placement.backend)
    action_log = None
    if planned.actions is not None:  # Figure 2: the stack actions on one fixed string, every cfl.action_log_every updates
        check_logged_run(run)
        action_log = ActionLog(model, logged_string(run.language), language.terminal_names, cfl.action_log_every)
    result = resumable_training(
        model,
        training_strings,
        validation.strings,
        config,
        fingerprint_source=fingerprint_source,
        seed=seeds.shuffle,
        eos_index=language.eos,
        checkpoint=planned.checkpoint,
        device=placement.device,
        progress_interval_s=training.progress_interval_s,
        after_step=action_log,
        stop_request=stop_request,
        progress_stream=stream,
        backend=backends.record(placement.backend),
        resume_other_backend=placement.resume_other_backend,
    )
    if planned.actions is not None:
        write_table(actions_table(result.step_rows, run), planned.actions)
    metadata = run_metadata(
        model,
        result,
        run_settings,
        task=run.language,
        architecture=run.model,
        phase="search",
        trial=None,
        seed=run.restart,
        learning_rate=run.learning_rate,
        tokens_per_batch=None,
        data_version=data_version,
    )
    save_trained_model(planned.out / "model.pt", model, language.terminal_names, metadata, run_settings)
    curve = curve_table(result.curve, metadata)
    deltas = [record.validation_cross_entropy - true_validation for record in result.curve]
    curve = with_run_columns(curve, run)
    curve = curve.append_column("true_cross_entropy", pa.array([true_validation] * len(deltas), pa.float64()))
    curve = curve.append_column(DELTA, pa.array(deltas, pa.float64()))
    write_table(curve, planned.out / "train.parquet")


def with_run_columns(table: pa.Table, run: CflRun) -> pa.Table:
    rows = table.num_rows
    table = table.append_column("setting", pa.array([run.setting] * rows, pa.string()))
    return table.append_column("vector_size", pa.array([run.vector_size] * rows, pa.int64()))


@dataclass(frozen=True)
class EvaluatedSelection:
    """One ``--selection`` with its ``--runs``, ``--out`` and ``--log``."""

    selection: Path
    runs: Path
    out: Path
    log: Path | None

    @property
    def label(self) -> str:
        return str(self.selection)


def evaluate_command(args: argparse.Namespace) -> int:
    count = len(args.selection)
    runs = per_run("--runs", args.runs, count, "--selection")
    outs = per_run("--out", args.out, count, "--selection")
    logs = per_run("--log", args.log, count, "--selection", [None] * count)
    evaluated = [EvaluatedSelection(*fields) for fields in zip(args.selection, runs, outs, logs)]
    settings = read_settings(args.settings)
    cfl = settings.section("cfl", CflSettings)
    evaluation = settings.section("evaluation", EvaluationSettings)
    device = choose_device(args.device)
    set_threads(args.threads)
    test = first_strings_per_length(read_split(args.test), cfl.test_strings_per_length)
    placement = Placement(device, backends.resolve(args.backend, device))
    run_each(evaluated, lambda run, stream: evaluate_run(run, test, cfl, evaluation, placement, stream))
    return 0


def evaluate_run(
    evaluated: EvaluatedSelection, test: CflDataset, cfl: CflSettings, evaluation: EvaluationSettings, placement: Placement, stream: TextIO | None
) -> None:
    """Score one model's selected run on the test set and write its metrics Parquet."""
    selection = pd.read_parquet(evaluated.selection)
    setting = str(selection["setting"].iloc[0])
    saved = load_model(evaluated.runs / setting / "model.pt")
    if (saved.task, saved.architecture) != (selection["task"].iloc[0], selection["architecture"].iloc[0]):
        raise StacklmError(f"{evaluated.runs / setting} holds a {saved.architecture} run on {saved.task}, not the selected run of {evaluated.selection}")
    # the run's settings, with those this command used
    metadata = RunMetadata(**saved.metadata)
    used = {"evaluation": asdict(evaluation), "test_strings_per_length": cfl.test_strings_per_length,
            "evaluation_backend": backends.record(placement.backend)}
    metadata = replace(metadata, config=json.dumps(json.loads(metadata.config) | used, sort_keys=True))
    language = LANGUAGES[saved.task]
    model = model_for_config(saved.model_config)
    load_parameters(model, saved.parameters, saved.source)
    model = backends.accelerate(model.eval().to(placement.device), placement.backend)
    scores = score_cfl_dataset(model, test, eos_index=language.eos, tokens_per_batch=evaluation.tokens_per_batch, device=placement.device)
    rows = [
        MetricValue("validation", None, DELTA, best_delta(selection)),  # on the run's own validation set
        MetricValue("test", None, DELTA, scores.overall),
        *(MetricValue("test", None, DELTA, value) for value in scores.by_length.values()),
    ]
    lengths: list[int | None] = [None, None, *scores.by_length]
    table = metrics_table(rows, metadata)
    run = CflRun(saved.task, saved.architecture, metadata.learning_rate, saved.settings["vector_size"], metadata.seed)
    table = with_run_columns(table, run).append_column("length", pa.array(lengths, pa.int64()))
    write_table(table, evaluated.out)
    print(f"{run.model} {run.setting}: test Δ {scores.overall:.6f} -> {evaluated.out}", file=stream or sys.stderr, flush=True)


def figures_command(args: argparse.Namespace) -> int:
    curves = pd.concat([pd.read_parquet(path) for path in args.curves], ignore_index=True)
    metrics = pd.concat([pd.read_parquet(path) for path in args.metrics], ignore_index=True)
    for frame, path in ((curves, args.out_curves), (metrics, args.out_metrics)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    # matplotlib loads here, not at import: every other `stacklm` command stays quick to start.
    from stacklm.experiments.cfl.figures import plot_test_by_length, plot_validation_curves

    plot_validation_curves(pd.read_parquet(args.out_curves), args.validation_figures)
    plot_test_by_length(pd.read_parquet(args.out_metrics), args.test_figures)
    print(f"{len(args.curves)} selected runs -> {args.out_curves}, {args.out_metrics} and figures")
    return 0

