"""``stacklm train``: training runs of a syntactic-transformation task (the rule ``train``, or a
rule ``train_<phase>_group<n>`` for several runs).

    stacklm train --task T --architecture A... --data-dir results/data/T --out RUN_DIR...
        (--hparams HP.json... | --learning-rate LR --tokens-per-batch B [--max-epochs N])
        [--seed S...] [--settings results/settings/train.json] [--checkpoint CKPT_PATH...]
        [--phase search|final] [--trial N...] [--log LOG...] [--device cpu|cuda] [--threads N]

The workflow gives a trial's ``HP.json`` and the resolved settings; by hand, the flags do, and
without ``--settings`` every section takes its defaults, the paper's (App. D schedule, 200k
parameters). Reads the sections ``training``, ``evaluation`` and ``model`` (the
``ModelOptions`` of ``stacklm.models``: dropout, the reference's departures) of the settings. Writes
``RUN_DIR/model.pt`` (best parameters and model config) and ``RUN_DIR/train.parquet`` (the
learning curve, one row per checkpoint, with the run's metadata); MLflow never sees the job
(``stacklm tracking sync`` mirrors the Parquet files later). The resumable state lives at
CKPT_PATH (default ``RUN_DIR/checkpoint.pt``): the same command after a kill continues; on
SIGTERM the state of the current step is saved first (exit status 1).

Several ``--seed``s are several runs, trained one after another in this process, which reads
torch, the data and the vocabulary once: each with its own ``--out``, ``--checkpoint``,
``--trial`` (search runs), ``--log`` (its progress lines; default stderr), and ``--architecture``
and ``--hparams`` (or one for all), in the order of the seeds; a seed may recur for another
architecture. Each run equals the run trained alone (its own seeds, nothing it reads is changed
by another). After a kill each resumes from its own state; a
finished run's state holds its result, so it is written again without training. A run that
fails does not stop the others: the command fails after the last, naming the failed runs. On a
GPU, consecutive runs of one architecture train together, one step for all
(``stacklm.training.grouped``), each still equal to the run trained alone within float tolerance.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO

from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import StacklmError, UsageError
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.common import per_run, progress_stream, train_each, with_cadence
from stacklm.models.options import ModelOptions, ModelSettings
from stacklm.settings_file import build, read_json, read_settings
from stacklm.tasks import Task, get_task
from stacklm.training.config import Hyperparameters, TrainConfig, TrainingSettings

if TYPE_CHECKING:  # torch, the models and the Parquet records load when the command runs: `stacklm train --help` answers at once
    import torch

    from stacklm.kernels.backend import Backend
    from stacklm.tasks.example import Example
    from stacklm.training.loop import StopRequest
    from stacklm.training.run_state import CheckpointScores, TrainResult


@dataclass(frozen=True)
class PlannedRun:
    """One run of the command line: its architecture, its seed and the options given per run."""

    architecture: str
    seed: int
    trial: int | None
    hyperparameters: Hyperparameters
    out: Path
    checkpoint: Path
    log: Path | None

    @property
    def label(self) -> str:
        return f"{self.architecture}, seed {self.seed}"


@dataclass(frozen=True)
class SharedInputs:
    """What every run of the process reads, built once: settings, data and the device."""

    task: Task
    vocabulary: Vocabulary
    training: TrainingSettings
    evaluation: EvaluationSettings
    options: ModelOptions
    data_version: str
    data_origins: dict[str, str]  # split -> "upstream" (an upstream file) or "drawn" (by stacklm's grammars)
    training_strings: list[list[int]]
    validation_strings: list[list[int]]
    curve_sets: tuple[list[Example], list[Example]]  # the fixed test and generalization subsets of the curves
    device: torch.device
    backend: Backend  # the models' implementation (stacklm.kernels.backend)
    resume_other_backend: bool


def train_command(args: argparse.Namespace) -> int:
    from stacklm.evaluation.metrics import curve_subset
    from stacklm.kernels import backend
    from stacklm.tracking.records import data_version
    from stacklm.training.run_files import choose_device, read_splits, set_threads, split_paths

    planned = planned_runs(args)
    settings = read_settings(args.settings) if args.settings is not None else None
    evaluation = settings.section("evaluation", EvaluationSettings) if settings is not None else EvaluationSettings()
    device = choose_device(args.device)
    set_threads(args.threads)
    task = get_task(args.task)
    vocabulary = Vocabulary(task.vocabulary())
    splits = read_splits(args.data_dir, task)
    shared = SharedInputs(
        task=task,
        vocabulary=vocabulary,
        training=with_cadence(settings.section("training", TrainingSettings) if settings is not None else TrainingSettings(), "training", args.cadence),
        evaluation=evaluation,
        options=(settings.section("model", ModelSettings) if settings is not None else ModelSettings()).options(),
        data_version=data_version(split_paths(args.data_dir)),
        data_origins=data_origins(args.data_dir),
        training_strings=[vocabulary.encode(example.language_model_string()) for example in splits["train"]],
        validation_strings=[vocabulary.encode(example.language_model_string()) for example in splits["validation"]],
        curve_sets=(curve_subset(splits["test"], evaluation.curve_examples), curve_subset(splits["generalization"], evaluation.curve_examples)),
        device=device,
        backend=backend.resolve(args.backend, device),
        resume_other_backend=args.resume_other_backend,
    )
    check_budgets(planned, shared.training_strings, args.data_dir / "train.tsv")
    if shared.backend == "torch" and in_one_step(shared.device):
        train_in_steps(args.phase, planned, shared)
    else:
        train_each(planned, lambda run_plan, stop_request, stream: train_run(args.phase, run_plan, shared, stop_request, stream))
    return 0


def in_one_step(device: torch.device) -> bool:
    """Whether the runs of one architecture train together, one step for all (``stacklm.training.grouped``):
    on a GPU, where a step of these small models costs its kernel launches, not its arithmetic, and
    on the torch backend (``auto`` there; the Triton programs of ``cuda-triton`` do not vmap). On the
    CPU they train one after another."""
    return device.type == "cuda"


def step_groups(planned: list[PlannedRun]) -> list[list[PlannedRun]]:
    """The runs in order, consecutive runs of one architecture together: those trained in one step."""
    groups: list[list[PlannedRun]] = []
    for plan in planned:
        if groups and groups[-1][0].architecture == plan.architecture:
            groups[-1].append(plan)
        else:
            groups.append([plan])
    return groups


def train_in_steps(phase: str, planned: list[PlannedRun], shared: SharedInputs) -> None:
    """Each of ``step_groups`` trained together, and each run's files written. As with runs trained
    one after another (``train_each``): each run's lines go to its log, a run that fails stops no
    other and the command fails after the last, naming the failed runs; a SIGTERM saves the state
    of every run in training and ends the command."""
    from stacklm.kernels.backend import record
    from stacklm.training.grouped import GroupedRun
    from stacklm.training.loop import StopRequest, TrainingInterrupted
    from stacklm.training.progress import Progress
    from stacklm.training.resumable import resumable_group
    from stacklm.training.run_dropout import RunRandomness

    stop_request = StopRequest()
    stop_request.install()
    failed: list[str] = []
    number = 0
    for group in step_groups(planned):
        if stop_request.reason is not None:
            raise TrainingInterrupted(f"{stop_request.reason} before run {number + 1} of {len(planned)} ({group[0].label}) started")
        with contextlib.ExitStack() as logs:
            started: list[StartedRun] = []
            runs: list[GroupedRun] = []
            for plan in group:
                number += 1
                if len(planned) > 1:
                    print(f"run {number} of {len(planned)}: {plan.label} -> {plan.out}" + (f" (log: {plan.log})" if plan.log else "")
                          + (f", in one step with {len(group) - 1} other{'s' if len(group) > 2 else ''}" if len(group) > 1 else ""),
                          file=sys.stderr, flush=True)
                stream = logs.enter_context(progress_stream(plan.log))
                begun = start_run(phase, plan, shared)
                started.append(begun)
                runs.append(GroupedRun(
                    begun.model, shared.training_strings, shared.validation_strings, begun.config, plan.seed, shared.vocabulary.eos_index,
                    RunRandomness(shared.device),  # as start_run seeded it
                    checkpoint_path=plan.checkpoint,
                    progress=Progress(stream=stream, interval_s=shared.training.progress_interval_s),
                    checkpoint_scores=begun.checkpoint_scores,
                    backend=record(shared.backend),
                    resume_other_backend=shared.resume_other_backend,
                ))
            outcomes = resumable_group(runs, [begun.fingerprint_source for begun in started], device=shared.device,
                                       on_state=[begun.on_state for begun in started], stop_request=stop_request)
            for begun, run, outcome in zip(started, runs, outcomes):
                try:
                    if isinstance(outcome, StacklmError):
                        raise outcome
                    finish_run(phase, begun, outcome, shared)
                except StacklmError as error:
                    if len(planned) == 1:
                        raise
                    print(f"error: {error}", file=run.progress.stream, flush=True)
                    failed.append(f"{begun.planned.label}: {error}")
    if failed:
        raise StacklmError(f"{len(failed)} of {len(planned)} runs failed; the others are written. " + "; ".join(failed))


def check_budgets(planned: list[PlannedRun], training_strings: list[list[int]], source: Path) -> None:
    """Every run's token budget B holds the longest training string: a smaller B makes each
    longer string a batch of its own (B = 3 trained 200 batches of one example)."""
    longest = max((len(string) for string in training_strings), default=0)
    for plan in planned:
        if plan.hyperparameters.tokens_per_batch < longest:
            raise UsageError(f"tokens_per_batch {plan.hyperparameters.tokens_per_batch} ({plan.label}) is below the longest training string of "
                             f"{source} ({longest} tokens), which would each be a batch of its own: give at least {longest} (the search draws 512 to 2048)")


def train_run(phase: str, planned: PlannedRun, shared: SharedInputs, stop_request: StopRequest, stream: TextIO | None) -> None:
    """Train one run and write its ``model.pt`` and ``train.parquet``."""
    from stacklm.kernels.backend import record
    from stacklm.training.resumable import resumable_training
    from stacklm.training.strings import StringData

    started = start_run(phase, planned, shared)
    result = resumable_training(
        started.model,
        StringData(shared.training_strings, shared.validation_strings, started.config, seed=planned.seed, eos_index=shared.vocabulary.eos_index),
        started.config,
        fingerprint_source=started.fingerprint_source,
        checkpoint=planned.checkpoint,
        device=shared.device,
        progress_interval_s=shared.training.progress_interval_s,
        checkpoint_scores=started.checkpoint_scores,
        on_state=started.on_state,
        stop_request=stop_request,
        progress_stream=stream,
        backend=record(shared.backend),
        resume_other_backend=shared.resume_other_backend,
    )
    finish_run(phase, started, result, shared)


@dataclass(frozen=True)
class StartedRun:
    """A run about to train: its model (initialised, dropout seeded), schedule, settings and callbacks."""

    planned: PlannedRun
    model: torch.nn.Module
    config: TrainConfig
    settings: dict[str, Any]  # the run's resolved settings, as its files record them
    fingerprint_source: dict[str, Any]  # what determines its parameters
    checkpoint_scores: CheckpointScores | None
    on_state: Callable[[Path], None]  # the live mirror's watcher of its state file


def start_run(phase: str, planned: PlannedRun, shared: SharedInputs) -> StartedRun:
    """Build and seed ``planned``'s model, as ``stacklm train`` does before training it."""
    import torch

    from stacklm.evaluation.metrics import PartialAccuracy, TaskEvaluator
    from stacklm.kernels.backend import accelerate, record
    from stacklm.models.registry import build_model
    from stacklm.tracking import live
    from stacklm.tracking.runs import task_run_identity
    from stacklm.training.run_files import token_features

    architecture, hyperparameters = planned.architecture, planned.hyperparameters
    config = shared.training.train_config(hyperparameters)
    run_settings: dict[str, Any] = {
        "task": shared.task.name,
        "architecture": architecture,
        "phase": phase,
        "trial": planned.trial,
        "seed": planned.seed,
        "hyperparameters": asdict(hyperparameters),
        "model": asdict(shared.options),
        "train_config": config.record(),
        "training": asdict(shared.training),
        "evaluation": asdict(shared.evaluation),
        "data": shared.data_origins,
    } | record(shared.backend)
    determining = ("task", "architecture", "seed", "hyperparameters", "model", "train_config")
    fingerprint_source = {key: run_settings[key] for key in determining} | {
        "parameter_budget": shared.training.parameter_budget, "data_version": shared.data_version}

    vocabulary, task = shared.vocabulary, shared.task
    model = build_model(
        architecture,
        len(vocabulary),
        parameter_budget=shared.training.parameter_budget,
        token_features=token_features(architecture, task, vocabulary.tokens),
        options=shared.options,
        generator=torch.Generator().manual_seed(planned.seed),
    )
    accelerate(model, shared.backend)
    torch.manual_seed(planned.seed)  # dropout
    checkpoint_scores = None
    if shared.evaluation.curve_examples > 0:
        partial = PartialAccuracy.of(task)
        evaluator = TaskEvaluator(model, vocabulary, partial, shared.evaluation, shared.device)
        checkpoint_scores = functools.partial(evaluator.checkpoint_scores, *shared.curve_sets)
    identity = task_run_identity(task.name, architecture, phase, planned.trial, planned.seed)
    return StartedRun(planned, model, config, run_settings, fingerprint_source, checkpoint_scores,
                      lambda state: live.start(state, task.name, *identity))


def finish_run(phase: str, started: StartedRun, result: TrainResult, shared: SharedInputs) -> None:
    """Write a trained run's ``model.pt`` and ``train.parquet``."""
    from stacklm.tracking.finished_run import run_metadata, save_trained_model
    from stacklm.tracking.records import curve_table, write_table

    planned = started.planned
    metadata = run_metadata(
        started.model,
        result,
        started.settings,
        task=shared.task.name,
        architecture=planned.architecture,
        phase=phase,
        trial=planned.trial,
        seed=planned.seed,
        learning_rate=planned.hyperparameters.learning_rate,
        tokens_per_batch=planned.hyperparameters.tokens_per_batch,
        data_version=shared.data_version,
    )
    save_trained_model(planned.out / "model.pt", started.model, shared.vocabulary.tokens, metadata, started.settings)
    write_table(curve_table(result.curve, metadata), planned.out / "train.parquet")


def data_origins(data_dir: Path) -> dict[str, str]:
    """Where each split of ``data_dir`` came from, as the run's settings record it."""
    from stacklm.data.dataset import drawn_splits
    from stacklm.data.splits import SPLITS

    drawn = drawn_splits(data_dir)
    return {split: "drawn" if split in drawn else "upstream" for split in SPLITS}


def planned_runs(args: argparse.Namespace) -> list[PlannedRun]:
    """A run per ``--seed``, with the per-run options in the same order (each checked for its count)."""
    seeds: list[int] = args.seed
    count = len(seeds)
    architectures: list[str] = per_run("--architecture", args.architecture, count, "--seed", allow_one=True)
    runs = list(zip(architectures, seeds))
    if len(set(runs)) < count:
        raise UsageError("--seed: an architecture's seed is given twice (" + ", ".join(f"{name} {seed}" for name, seed in runs) + "): each is one run")
    outs: list[Path] = per_run("--out", args.out, count, "--seed")
    for out in outs:
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: an existing file, not a run folder")
    hyperparameters = per_run("--hparams", chosen_hyperparameters(args), count, "--seed", allow_one=True)
    checkpoints = per_run("--checkpoint", args.checkpoint, count, "--seed", [out / "checkpoint.pt" for out in outs])
    trials = per_run("--trial", args.trial, count, "--seed", [None] * count)
    logs = per_run("--log", args.log, count, "--seed", [None] * count)
    return [PlannedRun(*fields) for fields in zip(architectures, seeds, trials, hyperparameters, outs, checkpoints, logs)]


def chosen_hyperparameters(args: argparse.Namespace) -> list[Hyperparameters]:
    """The trials' ``--hparams`` files, or ``--learning-rate`` with ``--tokens-per-batch`` (and ``--max-epochs``)."""
    if args.hparams is not None:
        if args.tokens_per_batch is not None or args.max_epochs is not None:
            raise UsageError("--hparams holds tokens_per_batch and max_epochs: leave out --tokens-per-batch and --max-epochs")
        return [build(Hyperparameters, read_json(path), source=path) for path in args.hparams]
    if args.tokens_per_batch is None:
        raise UsageError("--learning-rate needs --tokens-per-batch (or give a trial's --hparams HP.json)")
    return [Hyperparameters(learning_rate=args.learning_rate, tokens_per_batch=args.tokens_per_batch, max_epochs=args.max_epochs)]
