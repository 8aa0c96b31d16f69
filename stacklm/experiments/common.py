"""What every experiment shares: one seed derivation, one selection rule, the figure formats,
the JSON files the rules write, the torch device of a job and its command-line options, the
loop of a command that runs several runs in one process, and the architectures' path slugs."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import json
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence, TextIO, TypeVar

from stacklm.atomic import write_text_atomically
from stacklm.errors import StacklmError, UsageError
from stacklm.settings_file import SettingsT, read_settings

if TYPE_CHECKING:
    from stacklm.training.loop import StopRequest

FIGURE_EXTENSIONS: tuple[str, ...] = ("png", "pdf")  # every figure is written in both


def derived_seed(*parts: str | int | float | None) -> int:
    """A 64-bit seed that depends on every part and on nothing else (not on PYTHONHASHSEED)."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def select_lowest(scores: Sequence[float], candidates: str) -> int:
    """Index of the lowest finite validation score (the first on ties): a search trial by its
    cross-entropy, a CFL run by its Δ. A NaN or ∞ never wins; ``candidates`` names them in
    the error raised when none is finite."""
    finite = [(score, position) for position, score in enumerate(scores) if math.isfinite(score)]
    if not finite:
        raise StacklmError(f"no {candidates} reached a finite validation score")
    return min(finite)[1]


def write_json(path: str | Path, data: Any) -> None:
    """``data`` as sorted, indented JSON at ``path``, written atomically."""
    write_text_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def device(gpus: int) -> str:
    """The torch device of a job given its ``gpu`` resource."""
    return "cuda" if gpus > 0 else "cpu"


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``minimum``; anything else is argparse's usage error (exit status 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def deferred(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command function ``name`` of ``module``, imported when the command runs: a unit's
    ``commands`` registers every command without importing the modules (and torch) they need."""

    def command(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)

    return command


def add_cadence_argument(parser: argparse.ArgumentParser) -> None:
    """``--cadence``: the workflow's file of the settings that only say how often a job reports
    (``stacklm.workflow.settings.CADENCE``), which its reader's settings file and its options leave out."""
    parser.add_argument("--cadence", type=Path, help="the workflow's results/settings/cadence.json (how often progress lines come); "
                                                     "default: the --settings file's, where the command takes one, or the default's")


def with_cadence(settings: SettingsT, section: str, cadence: Path | None) -> SettingsT:
    """``settings``, the settings section ``section``, with the values that the file ``cadence``
    (``--cadence``) holds for that section, when given; an error names the file and the key."""
    if cadence is None:
        return settings
    read = read_settings(cadence)
    values = read.section(section, type(settings))
    return dataclasses.replace(settings, **{key: getattr(values, key) for key in read.get(section, {})})


def add_resource_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--threads`` of a command that runs a model (``stacklm.training.run_files``'
    ``choose_device`` and ``set_threads`` read them)."""
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when visible, else cpu")
    parser.add_argument("--threads", type=integer_at_least(1), default=None, help="torch threads; default: the cores this job may use")


def add_backend_arguments(parser: argparse.ArgumentParser, training: bool) -> None:
    """``--backend`` of a command that runs a model of ``stacklm.models`` (``stacklm.kernels.backend``),
    and for one that trains, ``--resume-other-backend``."""
    parser.add_argument("--backend", choices=("auto", "torch", "cpu-compiled", "cuda-triton"), default="auto",
                        help="the models' implementation: auto (default) is cpu-compiled on the CPU where its kernels build, else torch;"
                             " cuda-triton (asked for by name) runs the dVPDA's Triton kernel on CUDA")
    if training:
        parser.add_argument("--resume-other-backend", action="store_true",
                            help="resume a state saved under another backend (its runs continue with other dropout masks and rounding)")


# Several runs in one process (``stacklm train``, ``stacklm evaluate``): each run's options are
# given one per run, in the same order; the runs go one after another, each writing its lines to
# its own log; one run's error stops none of the others, and the command fails after the last.

Value = TypeVar("Value")


def per_run(option: str, values: Sequence[Value] | None, count: int, leader: str,
            default: Sequence[Value] = (), allow_one: bool = False) -> list[Value]:
    """The values of the per-run ``option``, one for each of the ``count`` values of ``leader``
    (``--seed``, ``--run``), in their order: ``default`` when the option is not given; with
    ``allow_one``, one value serves every run. Any other count is a :class:`UsageError`."""
    if values is None:
        return list(default)
    if allow_one and len(values) == 1:
        return list(values) * count
    if len(values) != count:
        raise UsageError(f"{option}: {len(values)} given for {count} {leader}: one per {leader.lstrip('-')}, in the same order"
                         + (" (or one for all)" if allow_one else ""))
    return list(values)


Item = TypeVar("Item")


def job_groups(items: Sequence[Item], size: int, first: int = 1) -> list[tuple[int, tuple[Item, ...]]]:
    """``items`` cut ``size`` at a time, in order, each with its number (from ``first``): the runs,
    trials, models or experiments of one job when ``resources.runs_per_job`` is ``size``."""
    return [(number, tuple(items[start : start + size])) for number, start in enumerate(range(0, len(items), size), start=first)]


def one_per_job(pattern: str, runs_per_job: int) -> str:
    """The wildcard constraint of a rule of one run (trial, model, experiment) a job: ``pattern``
    when ``resources.runs_per_job`` is 1, otherwise a regular expression matching nothing (the
    group rules take every one)."""
    return pattern if runs_per_job == 1 else "(?!)"


class OneRun(Protocol):
    """A run of a command's several: what names it, where it writes, where its lines go."""

    @property
    def label(self) -> str: ...

    @property
    def out(self) -> Path: ...

    @property
    def log(self) -> Path | None: ...


Run = TypeVar("Run", bound=OneRun)


def run_each(runs: Sequence[Run], work: Callable[[Run, TextIO | None], None], *,
             before: Callable[[int, Run], None] | None = None, fatal: tuple[type[StacklmError], ...] = ()) -> None:
    """``work(run, stream)`` for each run in turn, ``stream`` its log opened afresh (None:
    stderr). With several runs, each is announced on stderr, and a :class:`StacklmError` of one
    goes to its log and stops none of the others: after the last, one error names every failed
    run. A lone run's error, and an error of a ``fatal`` kind, is raised as it is.
    ``before(number, run)`` is called before run ``number`` (from 1) starts."""
    failed: list[str] = []
    for number, run in enumerate(runs, start=1):
        if before is not None:
            before(number, run)
        if len(runs) > 1:
            print(f"run {number} of {len(runs)}: {run.label} -> {run.out}" + (f" (log: {run.log})" if run.log else ""), file=sys.stderr, flush=True)
        with progress_stream(run.log) as stream:
            try:
                work(run, stream)
            except StacklmError as error:
                if len(runs) == 1 or isinstance(error, fatal):
                    raise
                print(f"error: {error}", file=stream or sys.stderr, flush=True)
                failed.append(f"{run.label}: {error}")
    if failed:
        raise StacklmError(f"{len(failed)} of {len(runs)} runs failed; the others are written. " + "; ".join(failed))


@dataclass(frozen=True)
class EvaluatedRun:
    """One ``--run`` (a trained run's directory) of an ``evaluate`` command, with its ``--out``
    and ``--log``."""

    run: Path
    out: Path
    log: Path | None

    @property
    def label(self) -> str:
        return str(self.run)


def evaluated_runs(args: argparse.Namespace) -> list[EvaluatedRun]:
    """The runs of an ``evaluate`` command: its ``--run`` directories with their ``--out`` files
    and ``--log`` files (one each, in the same order; no ``--log``: stderr)."""
    count = len(args.run)
    outs = per_run("--out", args.out, count, "--run")
    logs = per_run("--log", args.log, count, "--run", [None] * count)
    return [EvaluatedRun(run, out, log) for run, out, log in zip(args.run, outs, logs)]


def train_each(runs: Sequence[Run], work: Callable[[Run, StopRequest, TextIO | None], None]) -> None:
    """:func:`run_each` for training runs, ``work(run, stop_request, stream)``: a SIGTERM sets the
    stop request, the run in training saves its state and stops (``TrainingInterrupted``, which
    ends the command), and one that comes between two runs starts no other."""
    from stacklm.training.loop import StopRequest, TrainingInterrupted  # torch: imported by the commands that train

    stop_request = StopRequest()
    stop_request.install()

    def unless_stopped(number: int, run: Run) -> None:
        if stop_request.reason is not None:
            raise TrainingInterrupted(f"{stop_request.reason} before run {number} of {len(runs)} ({run.label}) started")

    run_each(runs, lambda run, stream: work(run, stop_request, stream), before=unless_stopped, fatal=(TrainingInterrupted,))


@contextlib.contextmanager
def progress_stream(log: Path | None) -> Iterator[TextIO | None]:
    """The run's log file, written afresh, or None (stderr) when it has none. While it is open,
    Python warnings go to it too: in a job of several runs each run's log holds its own."""
    if log is None:
        yield None
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as stream, warnings.catch_warnings():
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: print(
            warnings.formatwarning(message, category, filename, lineno, line), end="", file=stream, flush=True
        )
        yield stream


# Architecture names (tables, config) and slugs (paths), from the model registry. The registry
# imports torch, so it is imported where needed: `stacklm hparams` and `select` start quickly.


def architecture_slug(name: str) -> str:
    from stacklm.models.registry import ARCHITECTURES

    return ARCHITECTURES[name].slug


@functools.cache
def architecture_name(slug: str) -> str:
    """The registry name whose path slug is ``slug`` (asked for every job of the DAG: cached)."""
    from stacklm.models.registry import ARCHITECTURES

    for name, entry in ARCHITECTURES.items():
        if entry.slug == slug:
            return name
    raise StacklmError(f"no architecture has the path slug {slug!r}")
