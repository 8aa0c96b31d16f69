"""PTB restarts trained (the rule ``ptb_train``; DuSell & Chiang (2022) §5.2, App. 10).

A restart (``train_restart``): the vocabulary of the whole training file, the splits' chunks
(:mod:`stacklm.experiments.ptb.data`), restart k's draw of η and c and its initial parameters
(:mod:`stacklm.experiments.ptb.search`), then the shared training loop on the chunks
(``stacklm.training.chunks.ChunkData``) with the schedule of App. 10
(``stacklm.training.config.ptb_train_config``), resumable (``stacklm.training.resumable``).
Written: ``model.pt`` (the best epoch's parameters and their validation cross-entropy,
``stacklm.training.run_files.save_model``) and ``train.parquet`` (one row per epoch,
``stacklm.tracking.records.ptb_curve_table``).

Several ``--restart`` values are several restarts trained one after another in one process (the
rule ``ptb_train_group<n>`` when ``resources.runs_per_job`` > 1), each with its own ``--model``
(or one for all), ``--checkpoint``, ``--out`` and ``--log`` in the same order; each equals the
restart trained alone (the loop of :func:`stacklm.experiments.common.train_each`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

import torch

from stacklm.data.ptb import build_vocabulary, first_lines, ptb_file_name, read_split
from stacklm.errors import StacklmError, UsageError
from stacklm.experiments.common import per_run, train_each, with_cadence
from stacklm.experiments.ptb.dag import EXPERIMENT
from stacklm.experiments.ptb.data import BATCH_SIZE, BPTT, data_version, split_chunks, split_tokens
from stacklm.experiments.ptb.search import restart_draw, restart_seeds
from stacklm.experiments.ptb.settings import PtbSettings
from stacklm.models.ptb import PtbLanguageModel, ptb_config, ptb_config_fields
from stacklm.tracking.records import BUILT_MODEL, RunMetadata, code_version, ptb_curve_table, write_table
from stacklm.training.chunks import ChunkData
from stacklm.training.config import ptb_train_config
from stacklm.training.loop import StopRequest
from stacklm.training.progress import Progress
from stacklm.training.resumable import resumable_training
from stacklm.training.run_files import SavedModel, choose_device, save_model, set_threads


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


def device_and_threads(args: argparse.Namespace) -> torch.device:
    """The job's torch device, with torch's threads set (``--device``, ``--threads``)."""
    set_threads(args.threads)
    return choose_device(args.device)


def train_command(args: argparse.Namespace) -> int:
    """``stacklm ptb train``: each restart of ``--restart`` in turn, a progress line every
    ``ptb.progress_interval_s`` of the ``--cadence`` file (without it, the default's)."""
    planned = planned_restarts(args)
    progress_interval_s = with_cadence(PtbSettings(), "ptb", args.cadence).progress_interval_s
    device = device_and_threads(args)
    train_each(planned, lambda run, stop_request, stream: train_restart(
        run.model, run.restart, args.data, run.out, run.checkpoint,
        salt=args.salt, lines=args.lines, max_epochs=args.max_epochs, progress_interval_s=progress_interval_s, device=device,
        stop_request=stop_request, stream=stream,
    ))
    return 0


def train_restart(
    model_name: str,
    restart: int,
    data: Path,
    out: Path,
    checkpoint: Path,
    *,
    salt: int,
    lines: int | None,
    max_epochs: int,
    progress_interval_s: float,
    device: torch.device,
    stop_request: StopRequest | None = None,
    stream: TextIO | None = None,
) -> None:
    """Train restart ``restart`` of ``model_name`` into ``out``, resumable at ``checkpoint``;
    ``stop_request``: the command's (default: one installed for this run); progress lines go to
    ``stream`` (default stderr)."""
    config = ptb_config(model_name)
    seeds = restart_seeds(salt, model_name, restart)
    draw = restart_draw(salt, model_name, restart)
    train_file = read_split(data, "train")
    vocabulary = build_vocabulary(train_file)
    if len(vocabulary) != config.vocabulary_size:
        raise StacklmError(f"{data / ptb_file_name('train')}: a vocabulary of {len(vocabulary)} types, the model reads {config.vocabulary_size}")
    train_chunks = split_chunks(first_lines(train_file, lines), vocabulary, str(data / ptb_file_name("train")))
    valid_chunks = split_chunks(split_tokens(data, "valid", lines), vocabulary, str(data / ptb_file_name("valid")))
    version = data_version(lines)
    train_config = ptb_train_config(draw.learning_rate, draw.clip_per_target, max_epochs)
    run_settings = {
        "model": model_name,
        "restart": restart,
        "salt": salt,
        "lines": lines,
        "max_epochs": max_epochs,
        "batch_size": BATCH_SIZE,
        "bptt": BPTT,
        "seeds": asdict(seeds),
        "draw": asdict(draw),
        "train_config": train_config.record(),
    }
    model = PtbLanguageModel(config)
    model.initialize(torch.Generator().manual_seed(seeds.parameters))
    model = model.to(device)
    Progress(stream=stream, interval_s=progress_interval_s).line(
        f"{model_name} restart {restart}: learning rate {draw.learning_rate:.4g}, clipping {draw.clip_per_target:.4g} per target;"
        f" {len(train_chunks)} training and {len(valid_chunks)} validation chunks"
    )
    result = resumable_training(
        model,
        ChunkData(train_chunks, valid_chunks),
        train_config,
        fingerprint_source={"model": ptb_config_fields(config), "seeds": asdict(seeds), "train_config": train_config.record(), "data_version": version},
        checkpoint=checkpoint,
        device=device,
        progress_interval_s=progress_interval_s,
        stop_request=stop_request,
        progress_stream=stream,
    )
    metadata = RunMetadata(
        task=EXPERIMENT,  # the runs' task column names their MLflow experiment
        architecture=model_name,
        phase="search",
        trial=None,
        seed=restart,
        learning_rate=draw.learning_rate,
        tokens_per_batch=None,
        parameters=sum(parameter.numel() for parameter in model.parameters()),
        data_version=version,
        code_version=code_version(),
        wall_time_s=result.wall_time_s,
        tokens_per_s=result.tokens_per_s,
        config=json.dumps(run_settings | {BUILT_MODEL: ptb_config_fields(config)}, sort_keys=True),
    )
    save_model(
        out / "model.pt",
        SavedModel(
            task=EXPERIMENT,
            architecture=model_name,
            vocabulary=vocabulary.tokens,
            model_config=config,
            parameters={name: tensor.detach().cpu() for name, tensor in model.state_dict().items()},
            metadata=asdict(metadata),
            settings=run_settings,
            validation_cross_entropy=result.best_validation_cross_entropy,
        ),
    )
    write_table(ptb_curve_table(result.curve, metadata, draw.clip_per_target), out / "train.parquet")
