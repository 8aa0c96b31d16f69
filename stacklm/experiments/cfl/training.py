"""One CFL run trained (the rule ``cfl_train``; DuSell & Chiang (2022) App. 8): its grid point's
model sizes, seeds and data, the App. 8 schedule (:func:`stacklm.training.config.cfl_train_config`,
capped at ``cfl.max_epochs``) through the shared resumable loop
(:func:`stacklm.training.resumable.resumable_training`), and the run's files.

``train.parquet`` of a CFL run has the columns of every run's learning curve
(``stacklm.tracking.records.CURVE_SCHEMA``: task = the language, architecture = the registry
name, phase "search", trial null, seed = the restart, tokens_per_batch null) and, per epoch,
``setting`` (the run's folder name), ``vector_size`` (null but for Gref and JM),
``true_cross_entropy`` (H(S_val, p_true), one value per run) and ``cross_entropy_above_truth``
(validation Δ). No command here touches MLflow: ``stacklm tracking sync`` mirrors these files
(``stacklm.tracking.runs``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import torch

from stacklm.cfl.datasets import CflDataset, true_cross_entropy
from stacklm.cfl.languages import LANGUAGES
from stacklm.errors import StacklmError, UsageError
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.experiments.cfl.actions import ActionLog, actions_table, check_logged_run, logged_string
from stacklm.experiments.cfl.data import sample_run_data
from stacklm.experiments.cfl.search import CflRun, RunSeeds, parse_setting, run_seeds
from stacklm.experiments.cfl.settings import PDA_SIZES, VECTOR_MODELS, CflSettings
from stacklm.experiments.common import per_run, train_each, with_cadence
from stacklm.kernels import backend as backends
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model, get_architecture
from stacklm.settings_file import read_settings
from stacklm.tracking.finished_run import run_metadata, save_trained_model
from stacklm.tracking.records import curve_table, write_table
from stacklm.training.config import TrainConfig, TrainingSettings, cfl_train_config
from stacklm.training.loop import StopRequest
from stacklm.training.resumable import resumable_training
from stacklm.training.run_files import choose_device, set_threads
from stacklm.training.strings import StringData


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
    training = with_cadence(settings.section("training", TrainingSettings), "training", args.cadence)
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


@dataclass(frozen=True)
class RunInputs:
    """What a grid run trains on and what determines its parameters, derived from its grid point and
    the ``cfl`` settings alone: the same in every session of the run, and for a reader of its state
    (``stacklm cfl progress``)."""

    run: CflRun
    cfl: CflSettings
    seeds: RunSeeds
    options: ModelOptions
    config: TrainConfig  # the App. 8 schedule, capped at cfl.max_epochs
    training_strings: list[list[int]]
    validation: CflDataset  # S_val, each string with ln p_true(w)
    true_cross_entropy: float  # H(S_val, p_true), nats per symbol
    data_version: str  # sha256 of the training and validation strings

    @property
    def settings(self) -> dict[str, Any]:
        """The run's record in ``model.pt`` and ``train.parquet``'s config, but the backend."""
        run = self.run
        return {
            "language": run.language,
            "architecture": run.model,
            "learning_rate": run.learning_rate,
            "vector_size": run.vector_size,
            "restart": run.restart,
            "seeds": asdict(self.seeds),
            "model": asdict(self.options),
            "train_config": self.config.record(),
            "cfl": asdict(self.cfl),
        }

    @property
    def fingerprint_source(self) -> dict[str, Any]:
        """What determines the trained parameters: its fingerprint keys the run's resumable state
        (:func:`stacklm.training.checkpoint.keyed_path`)."""
        settings = self.settings
        return {key: settings[key] for key in ("language", "architecture", "seeds", "model", "train_config")} | {"data_version": self.data_version}

    def delta(self, validation_cross_entropy: float) -> float:
        """Validation Δ = H(S_val, p_M) − H(S_val, p_true) of an epoch whose validation cross-entropy is H(S_val, p_M)."""
        return validation_cross_entropy - self.true_cross_entropy


def run_inputs(run: CflRun, cfl: CflSettings) -> RunInputs:
    """``run``'s sizes, seeds, schedule and data (its training and validation sets sampled and the
    validation set scored: seconds on one core, a run's whole validation set through the inside algorithm)."""
    seeds = run_seeds(run)
    training_strings, validation = sample_run_data(LANGUAGES[run.language], seeds.data, cfl.train_batches, cfl.validation_batches)
    return RunInputs(
        run=run,
        cfl=cfl,
        seeds=seeds,
        options=model_options(run.language, run.model, run.vector_size),
        config=replace(cfl_train_config(run.learning_rate), max_epochs=cfl.max_epochs),
        training_strings=training_strings,
        validation=validation,
        true_cross_entropy=true_cross_entropy(validation),
        data_version=hashlib.sha256(json.dumps([training_strings, validation.strings]).encode()).hexdigest(),
    )


def train_run(
    planned: PlannedRun, cfl: CflSettings, training: TrainingSettings, placement: Placement, stop_request: StopRequest, stream: TextIO | None
) -> None:
    """Train one grid run and write its ``model.pt``, ``train.parquet`` and, when asked, ``actions.parquet``."""
    run = planned.run
    inputs = run_inputs(run, cfl)
    language = LANGUAGES[run.language]
    run_settings = inputs.settings | backends.record(placement.backend)
    model = build_model(run.model, language.vocabulary_size, options=inputs.options, generator=torch.Generator().manual_seed(inputs.seeds.parameters))
    backends.accelerate(model, placement.backend)
    action_log = None
    if planned.actions is not None:  # Figure 2: the stack actions on one fixed string, every cfl.action_log_every updates
        check_logged_run(run)
        action_log = ActionLog(model, logged_string(run.language), language.terminal_names, cfl.action_log_every)
    result = resumable_training(
        model,
        StringData(inputs.training_strings, inputs.validation.strings, inputs.config, seed=inputs.seeds.shuffle, eos_index=language.eos),
        inputs.config,
        fingerprint_source=inputs.fingerprint_source,
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
        data_version=inputs.data_version,
    )
    save_trained_model(planned.out / "model.pt", model, language.terminal_names, metadata, run_settings)
    curve = curve_table(result.curve, metadata)
    deltas = [inputs.delta(record.validation_cross_entropy) for record in result.curve]
    curve = with_run_columns(curve, run)
    curve = curve.append_column("true_cross_entropy", pa.array([inputs.true_cross_entropy] * len(deltas), pa.float64()))
    curve = curve.append_column(DELTA, pa.array(deltas, pa.float64()))
    write_table(curve, planned.out / "train.parquet")


def with_run_columns(table: pa.Table, run: CflRun) -> pa.Table:
    rows = table.num_rows
    table = table.append_column("setting", pa.array([run.setting] * rows, pa.string()))
    return table.append_column("vector_size", pa.array([run.vector_size] * rows, pa.int64()))
