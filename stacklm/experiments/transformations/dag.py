"""The DAG of the syntactic transformations (DuSell & Cotterell (2025) §5, App. D): its paths,
lookups and targets, for ``workflow/rules/{search,train,evaluate,report}.smk``.

Per task T and architecture A:

- ``hparams``: trial k = 1..K draws B and a learning rate (``search``) — a pure function of
  (salt, T, A, k), so the DAG is static;
- ``train`` (phase ``search``, index k): at most ``search.max_epochs`` epochs (null: to
  convergence, as the authors' search script trains its trials), seed k — when K > 1: a search
  of one trial has nothing to compare, and trains no search model;
- ``select``: the trial with the lowest validation cross-entropy (the only one when K = 1),
  ``max_epochs`` set to ``final.max_epochs`` (null: to convergence);
- ``train`` (phase ``final``, index s) for every seed s, then ``evaluate``;
- with ``resources.runs_per_job`` K > 1, the runs of a phase train K to a job instead: a rule per
  group of runs (``run_groups``: ``train_final_1_2``, …) whose outputs are every run's files;
- ``aggregate`` → ``results/metrics.parquet`` → ``report`` (tables and figures), and ``curves``
  per task.

The data stage before them is ``stacklm.experiments.transformations.data``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from stacklm.errors import StacklmError
from stacklm.experiments.common import FIGURE_EXTENSIONS, architecture_name, architecture_slug
from stacklm.experiments.transformations.settings import FinalSettings, ResourceSettings, SearchSettings, TransformationsSettings, check_tasks

Phase = Literal["search", "final"]
PHASES: tuple[Phase, ...] = ("search", "final")

# Every file of the DAG, as Snakemake patterns: {architecture} is the registry's path slug.
TRIAL_HPARAMS = "results/search/{task}/{architecture}/trial{trial}.json"
BEST_HPARAMS = "results/search/{task}/{architecture}/best.json"
RUN_DIR = "results/runs/{task}/{architecture}/{phase}/{index}"
RUN_MODEL = RUN_DIR + "/model.pt"
RUN_CURVE = RUN_DIR + "/train.parquet"
RUN_METRICS = RUN_DIR + "/metrics.parquet"
CHECKPOINT = "results/checkpoints/{task}/{architecture}/{phase}/{index}.pt"
TRAIN_LOG = "logs/train/{task}/{architecture}/{phase}/{index}.log"  # among a run's artifacts in MLflow
TRAIN_GROUP_LOG = "logs/train/{task}/{architecture}/{phase}/{indices}.log"  # a job of several runs; each run's lines are in its TRAIN_LOG
EVALUATE_LOG = "logs/evaluate/{task}/{architecture}/{phase}/{index}.log"
METRICS = "results/metrics.parquet"
REPORT_TABLE = "results/report/tables/{task}.tex"
REPORT_MARKDOWN = "results/report/tables/{task}.md"
REPORT_HTML = "results/report/tables/{task}.html"  # the Markdown table as a page of `snakemake --report`
REPORT_DOCUMENT = "results/report/report.tex"
REPORT_FIGURE = "results/report/figures/figure3.{extension}"
CURVES = "results/curves/{task}.parquet"  # the generalization curves of a task's final runs
CURVE_FIGURE = "results/report/figures/curves-{task}.{extension}"


# ---------------------------------------------------------------------------------------------
# The architectures of the tables, from the model registry (it imports torch: imported where needed).


def known_architectures() -> tuple[str, ...]:
    """The registry names a task table can carry (the CFL models have a grid of their own)."""
    from stacklm.models.registry import ARCHITECTURES

    return tuple(name for name, entry in ARCHITECTURES.items() if entry.family == "bearing-syntactic-fruit")


# ---------------------------------------------------------------------------------------------
# Lookups of the rules.


def trials(search: SearchSettings) -> list[int]:
    return list(range(1, search.trials + 1))


def trained_trials(search: SearchSettings) -> list[int]:
    """The trials whose search model is trained: all of them, or none when there is one (its
    draw is the selection whatever its validation cross-entropy; the small preset's case)."""
    drawn = trials(search)
    return drawn if len(drawn) > 1 else []


def hparams_path(task: str, architecture: str, phase: str, index: str | int) -> str:
    """The ``HP.json`` a run trains with: its trial's draw (search) or the selected one (final)."""
    if phase == "search":
        return TRIAL_HPARAMS.format(task=task, architecture=architecture, trial=index)
    if phase == "final":
        return BEST_HPARAMS.format(task=task, architecture=architecture)
    raise StacklmError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")


def trial_option(phase: str, index: str | int) -> str:
    """The ``--trial`` option of a search run's ``stacklm train`` (empty for a final run)."""
    return f" --trial {index}" if phase == "search" else ""


@dataclass(frozen=True)
class RunGroup:
    """Runs of one phase that one ``stacklm train`` process trains one after another, for every
    task x architecture: a rule of their own, whose outputs are every run's files (the DAG keeps
    one output per run). Paths keep ``{task}`` and ``{architecture}`` as wildcards."""

    phase: Phase
    indices: tuple[int, ...]

    @property
    def rule(self) -> str:
        return "_".join(["train", self.phase, *map(str, self.indices)])

    def paths(self, pattern: str) -> list[str]:
        """``pattern`` (a run's path: ``RUN_MODEL``, ``CHECKPOINT``, …) of each run, in order."""
        return [pattern.format(task="{task}", architecture="{architecture}", phase=self.phase, index=index) for index in self.indices]

    @property
    def log(self) -> str:
        """The process's own output (the runs' progress goes to their ``TRAIN_LOG``)."""
        return TRAIN_GROUP_LOG.format(task="{task}", architecture="{architecture}", phase=self.phase, indices="+".join(map(str, self.indices)))

    @property
    def options(self) -> str:
        """The runs of ``stacklm train``: ``--seed`` and, for search trials, ``--trial`` (seed k for trial k)."""
        indices = " ".join(map(str, self.indices))
        return f"--seed {indices}" + (f" --trial {indices}" if self.phase == "search" else "")

    def hparams(self, wildcards: Any) -> list[str]:
        """The ``HP.json`` files of the runs, each once: every trial's, or the selected one."""
        paths = (hparams_path(wildcards.task, wildcards.architecture, self.phase, index) for index in self.indices)
        return list(dict.fromkeys(paths))


def run_groups(search: SearchSettings, final: FinalSettings, resources: ResourceSettings) -> list[RunGroup]:
    """The trained search trials and the final seeds, ``resources.runs_per_job`` to a group, in
    order; none when it is 1 (the rule ``train``, a job per run, trains them all)."""
    size = resources.runs_per_job
    if size == 1:
        return []
    runs: dict[Phase, list[int]] = {"search": trained_trials(search), "final": list(final.seeds)}
    return [RunGroup(phase, tuple(indices[start : start + size])) for phase, indices in runs.items() for start in range(0, len(indices), size)]


def single_run_phases(resources: ResourceSettings) -> str:
    """The phases whose runs the rule ``train`` trains, a job each, as a wildcard constraint: both
    when ``resources.runs_per_job`` is 1, none otherwise (a regular expression matching nothing)."""
    return "|".join(PHASES) if resources.runs_per_job == 1 else "(?!)"


@dataclass(frozen=True)
class JobResources:
    runtime_min: int
    mem_mb: int


def train_resources(resources: ResourceSettings, architecture: str, attempt: int, runs: int = 1) -> JobResources:
    """Time and memory of a training job of ``runs`` runs, trained one after another: its family's
    base values × growth^(attempt − 1), the time × ``runs``.

    An architecture belongs to the first family in ``resources.families`` that lists its stack
    (the model registry's ``stack_name``: ``Nd``, ``Sup``); otherwise to ``resources.default``.
    """
    from stacklm.models.registry import get_architecture

    stack = get_architecture(architecture_name(architecture)).stack_name
    families = [family for family in resources.families if stack in family.stacks]
    base = families[0] if families else resources.default
    factor = resources.growth_per_retry ** (attempt - 1)
    return JobResources(runtime_min=math.ceil(base.runtime_min * factor * runs), mem_mb=math.ceil(base.mem_mb * factor))


# ---------------------------------------------------------------------------------------------
# Targets.


def final_runs(settings: TransformationsSettings) -> list[dict[str, str | int]]:
    """Wildcards of every final run: task × architecture slug × seed."""
    return [
        {"task": task, "architecture": architecture_slug(name), "phase": "final", "index": seed}
        for task in settings.tasks
        for name in settings.architectures
        for seed in settings.final.seeds
    ]


def final_metrics(settings: TransformationsSettings) -> list[str]:
    return [RUN_METRICS.format(**run) for run in final_runs(settings)]


def final_curves(settings: TransformationsSettings, task: str) -> list[str]:
    return [RUN_CURVE.format(**run) for run in final_runs(settings) if run["task"] == task]


def curve_figures(task: str) -> list[str]:
    return [CURVE_FIGURE.format(task=task, extension=extension) for extension in FIGURE_EXTENSIONS]


def report_outputs(settings: TransformationsSettings) -> dict[str, list[str]]:
    return {
        "tables": [REPORT_TABLE.format(task=task) for task in settings.tasks],
        "markdown": [REPORT_MARKDOWN.format(task=task) for task in settings.tasks],
        "document": [REPORT_DOCUMENT],
        "figures": [REPORT_FIGURE.format(extension=extension) for extension in FIGURE_EXTENSIONS],
    }


def targets(settings: TransformationsSettings) -> list[str]:
    """The metrics, the report, its pages and every task's curves (the data stage has its own)."""
    outputs = report_outputs(settings)
    return [
        METRICS,
        *(path for paths in outputs.values() for path in paths),
        *(REPORT_HTML.format(task=task) for task in settings.tasks),
        *(path for task in settings.tasks for path in [CURVES.format(task=task), *curve_figures(task)]),
    ]


def tracking_records(settings: TransformationsSettings, task: str) -> dict[str, list[str]]:
    """The files ``stacklm tracking sync`` mirrors for ``task``: ``curves``, every run's
    ``train.parquet``; ``metrics``, the final runs' ``metrics.parquet``; ``curve_logs`` and
    ``metrics_logs``, the logs of the jobs that wrote them, in the same order."""
    searched = [
        {"task": task, "architecture": architecture_slug(name), "phase": "search", "index": trial}
        for name in settings.architectures
        for trial in trained_trials(settings.search)
    ]
    final = [run for run in final_runs(settings) if run["task"] == task]
    return {
        "curves": [RUN_CURVE.format(**run) for run in searched + final],
        "metrics": [RUN_METRICS.format(**run) for run in final],
        "curve_logs": [TRAIN_LOG.format(**run) for run in searched + final],
        "metrics_logs": [EVALUATE_LOG.format(**run) for run in final],
    }


def check_settings(settings: TransformationsSettings) -> None:
    """Raise a ``StacklmError`` naming the key of the first setting of this experiment that its
    types cannot judge: task names and registry names (the registry imports torch)."""
    check_tasks(settings.tasks)
    known = known_architectures()
    for position, name in enumerate(settings.architectures):
        if name not in known:
            raise StacklmError(
                f"config key 'architectures[{position}]': unknown architecture {name!r}; known: {', '.join(known)}"
            )
