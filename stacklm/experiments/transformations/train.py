"""``stacklm train``: one training run of a syntactic-transformation task (the rule ``train``).

    stacklm train --task T --architecture A --data-dir results/data/T --out RUN_DIR
        (--hparams HP.json | --learning-rate LR --tokens-per-batch B [--max-epochs N])
        [--seed S] [--settings results/settings/train.json] [--checkpoint CKPT_PATH]
        [--phase search|final] [--trial N] [--device cpu|cuda] [--threads N]

The workflow gives a trial's ``HP.json`` and the resolved settings; by hand, the flags do, and
without ``--settings`` every section takes its defaults, the paper's (App. D schedule, 200k
parameters). Reads the sections ``training``, ``evaluation`` and ``model`` (the
``ModelOptions`` of ``stacklm.models``: dropout, the reference's departures) of the settings. Writes
``RUN_DIR/model.pt`` (best parameters and model config) and ``RUN_DIR/train.parquet`` (the
learning curve, one row per checkpoint, with the run's metadata); MLflow never sees the job
(``stacklm tracking sync`` mirrors the Parquet files later). The resumable state lives at
CKPT_PATH (default ``RUN_DIR/checkpoint.pt``): the same command after a kill continues; on
SIGTERM the state of the current step is saved first (exit status 1).
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import UsageError
from stacklm.evaluation.metrics import PartialAccuracy, TaskEvaluator, curve_subset
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.common import add_resource_arguments
from stacklm.models.options import ModelSettings
from stacklm.models.registry import build_model
from stacklm.settings_file import build, read_json, read_settings
from stacklm.tasks import get_task
from stacklm.tracking import live
from stacklm.tracking.finished_run import run_metadata, save_trained_model
from stacklm.tracking.records import curve_table, data_version, write_table
from stacklm.tracking.runs import task_run_identity
from stacklm.training.config import Hyperparameters, TrainingSettings
from stacklm.training.resumable import resumable_training
from stacklm.training.run_files import choose_device, read_splits, set_threads, split_paths, token_features


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train")
    parser.add_argument("--task", required=True)
    parser.add_argument("--architecture", required=True, help="registry name, e.g. Tf+Nd")
    parser.add_argument("--data-dir", required=True, type=Path, help="the task's {train,validation,test,generalization}.tsv")
    parser.add_argument("--out", required=True, type=Path, help="run directory: model.pt, train.parquet")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hparams", type=Path, help='a trial\'s JSON: {"learning_rate", "tokens_per_batch", "max_epochs"}')
    source.add_argument("--learning-rate", type=float, help="initial learning rate of Adam (with --tokens-per-batch)")
    parser.add_argument("--tokens-per-batch", type=int, help="B, the token budget of a batch (with --learning-rate)")
    parser.add_argument("--max-epochs", type=int, help="with --learning-rate; default: training.max_epochs, early stopping ends the run")
    parser.add_argument("--seed", type=int, default=1, help="parameters, dropout and shuffling (default: 1)")
    parser.add_argument("--settings", type=Path, help="the workflow's resolved settings; default: the paper's")
    parser.add_argument("--checkpoint", type=Path, help="resumable training state; default: RUN_DIR/checkpoint.pt")
    parser.add_argument("--phase", choices=("search", "final"), default="final")
    parser.add_argument("--trial", type=int, default=None, help="trial number of a search run")
    add_resource_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = read_settings(args.settings) if args.settings is not None else None
    training = settings.section("training", TrainingSettings) if settings is not None else TrainingSettings()
    evaluation = settings.section("evaluation", EvaluationSettings) if settings is not None else EvaluationSettings()
    options = (settings.section("model", ModelSettings) if settings is not None else ModelSettings()).options()
    hyperparameters = chosen_hyperparameters(args)
    config = training.train_config(hyperparameters)
    checkpoint = args.checkpoint if args.checkpoint is not None else args.out / "checkpoint.pt"
    device = choose_device(args.device)
    set_threads(args.threads)

    task = get_task(args.task)
    vocabulary = Vocabulary(task.vocabulary())
    splits = read_splits(args.data_dir, task)
    version = data_version(split_paths(args.data_dir))
    run_settings: dict[str, Any] = {
        "task": args.task,
        "architecture": args.architecture,
        "phase": args.phase,
        "trial": args.trial,
        "seed": args.seed,
        "hyperparameters": asdict(hyperparameters),
        "model": asdict(options),
        "train_config": asdict(config),
        "training": asdict(training),
        "evaluation": asdict(evaluation),
    }
    determining = ("task", "architecture", "seed", "hyperparameters", "model", "train_config")
    fingerprint_source = {key: run_settings[key] for key in determining} | {"parameter_budget": training.parameter_budget, "data_version": version}

    model = build_model(
        args.architecture,
        len(vocabulary),
        parameter_budget=training.parameter_budget,
        token_features=token_features(args.architecture, task, vocabulary.tokens),
        options=options,
        generator=torch.Generator().manual_seed(args.seed),
    )
    torch.manual_seed(args.seed)  # dropout
    checkpoint_scores = None
    if evaluation.curve_examples > 0:
        evaluator = TaskEvaluator(model, vocabulary, PartialAccuracy(task.partial_accuracy_kind, task.partial_match, task.partial_decided_by), evaluation, device)
        test, generalization = (curve_subset(splits[name], evaluation.curve_examples) for name in ("test", "generalization"))
        checkpoint_scores = functools.partial(evaluator.checkpoint_scores, test, generalization)
    result = resumable_training(
        model,
        [vocabulary.encode(example.language_model_string()) for example in splits["train"]],
        [vocabulary.encode(example.language_model_string()) for example in splits["validation"]],
        config,
        fingerprint_source=fingerprint_source,
        seed=args.seed,
        eos_index=vocabulary.eos_index,
        checkpoint=checkpoint,
        device=device,
        progress_interval_s=training.progress_interval_s,
        checkpoint_scores=checkpoint_scores,
        on_state=lambda state: live.start(state, args.task, *task_run_identity(args.task, args.architecture, args.phase, args.trial, args.seed)),
    )
    metadata = run_metadata(
        model,
        result,
        run_settings,
        task=args.task,
        architecture=args.architecture,
        phase=args.phase,
        trial=args.trial,
        seed=args.seed,
        learning_rate=hyperparameters.learning_rate,
        tokens_per_batch=hyperparameters.tokens_per_batch,
        data_version=version,
    )
    save_trained_model(args.out / "model.pt", model, vocabulary.tokens, metadata, run_settings)
    write_table(curve_table(result.curve, metadata), args.out / "train.parquet")
    return 0


def chosen_hyperparameters(args: argparse.Namespace) -> Hyperparameters:
    """A trial's ``--hparams`` file, or ``--learning-rate`` with ``--tokens-per-batch`` (and ``--max-epochs``)."""
    if args.hparams is not None:
        if args.tokens_per_batch is not None or args.max_epochs is not None:
            raise UsageError("--hparams holds tokens_per_batch and max_epochs: leave out --tokens-per-batch and --max-epochs")
        return build(Hyperparameters, read_json(args.hparams), source=args.hparams)
    if args.tokens_per_batch is None:
        raise UsageError("--learning-rate needs --tokens-per-batch (or give a trial's --hparams HP.json)")
    return Hyperparameters(learning_rate=args.learning_rate, tokens_per_batch=args.tokens_per_batch, max_epochs=args.max_epochs)

