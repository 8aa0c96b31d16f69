"""The DAG of the syntactic transformations (DuSell & Cotterell (2025) §5, App. D): its paths,
lookups and targets, for ``workflow/rules/{search,train,evaluate,report}.smk``.

Per task T and architecture A:

- ``hparams``: trial k = 1..K draws B and a learning rate (``search``) — a pure function of
  (salt, T, A, k), so the DAG is static;
- ``train`` (phase ``search``, index k): at most ``search.max_epochs`` epochs (null: to
  convergence, as the authors' search script trains its trials), a seed derived from k (``run_seed``) — when K > 1: a search
  of one trial has nothing to compare, and trains no search model;
- ``select``: the trial with the lowest validation cross-entropy (the only one when K = 1),
  ``max_epochs`` set to ``final.max_epochs`` (null: to convergence);
- ``train`` (phase ``final``, index s) for every seed s, then ``evaluate``;
- with ``resources.runs_per_job`` K > 1, the runs of a task's phase (architecture × index) train
  and evaluate K to a job instead: rules per group of runs (``run_groups``: ``train_final_group1``,
  ``evaluate_final_group1``, …) whose outputs are every run's files; and the trials of K
  architectures are drawn in one job and selected among in one (``architecture_groups``:
  ``hparams_group1``, ``select_group1``, …) whose outputs are every trial's and architecture's files;
- with ``resources.runs_per_step`` K > 1 (for a GPU), each group holds K runs of one architecture
  instead, and its training job asks for a GPU, where its runs train in one step;
- ``aggregate`` → ``results/metrics.parquet`` → ``report`` (tables and figures), and ``curves``
  per task.

The data stage before them is ``stacklm.experiments.transformations.data``.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from stacklm.errors import StacklmError
from stacklm.experiments.common import FIGURE_EXTENSIONS, architecture_name, architecture_slug, derived_seed, job_groups, one_per_job
from stacklm.experiments.transformations.settings import JobSize, ResourceFamily, ResourceSettings, SearchSettings, TransformationsSettings, check_tasks

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
TRAIN_GROUP_LOG = "logs/train/{task}/{phase}/group{number}.log"  # a job of several runs; each run's lines are in its TRAIN_LOG
EVALUATE_LOG = "logs/evaluate/{task}/{architecture}/{phase}/{index}.log"
EVALUATE_GROUP_LOG = "logs/evaluate/{task}/{phase}/group{number}.log"  # each run's lines are in its EVALUATE_LOG
HPARAMS_LOG = "logs/hparams/{task}/{architecture}.log"
HPARAMS_GROUP_LOG = "logs/hparams/{task}/group{number}.log"  # a job of several architectures' draws
SELECT_LOG = "logs/select/{task}/{architecture}.log"
SELECT_GROUP_LOG = "logs/select/{task}/group{number}.log"  # a job of several architectures' selections
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


SEARCH_SEEDS = 2**31  # search trials' seeds lie in [2³¹, 2³²), final seeds below (the schema)


def run_seed(phase: str, index: str | int) -> int:
    """The ``--seed`` of a run: a final run's index is its seed; search trial k trains from a seed
    derived from k, in [2³¹, 2³²), so that no final run repeats a trial's initial parameters,
    dropout and shuffling (the authors' final runs take fresh seeds). With seed k for trial k,
    final seed k was the selected trial itself whenever the selection was trial k."""
    if phase == "final":
        return int(index)
    return SEARCH_SEEDS + derived_seed("search trial", int(index)) % SEARCH_SEEDS


@dataclass(frozen=True)
class RunGroup:
    """Runs of one phase of a task that one process trains (rule ``train_<phase>_group<n>``) and,
    final runs, evaluates (rule ``evaluate_final_group<n>``) one after another, for every task:
    rules of their own, whose outputs are every run's files (the DAG keeps one output per run).
    A run is an (architecture registry name, index) pair; paths keep ``{task}`` as a wildcard."""

    phase: Phase
    number: int  # the group's place among its phase's, from 1
    runs: tuple[tuple[str, int], ...]

    def rule(self, command: Literal["train", "evaluate"]) -> str:
        return f"{command}_{self.phase}_group{self.number}"

    def paths(self, pattern: str) -> list[str]:
        """``pattern`` (a run's path: ``RUN_MODEL``, ``CHECKPOINT``, …) of each run, in order."""
        return [pattern.format(task="{task}", architecture=architecture_slug(name), phase=self.phase, index=index) for name, index in self.runs]

    def log(self, pattern: str) -> str:
        """The process's own output, ``pattern`` ``TRAIN_GROUP_LOG`` or ``EVALUATE_GROUP_LOG`` (each
        run's lines go to its own log)."""
        return pattern.format(task="{task}", phase=self.phase, number=self.number)

    @property
    def train_options(self) -> str:
        """The runs of ``stacklm train``: ``--architecture``, ``--seed`` (``run_seed``) and, for
        search trials, ``--trial``, one per run."""
        architectures = " ".join(shlex.quote(name) for name, _ in self.runs)
        seeds = " ".join(str(run_seed(self.phase, index)) for _, index in self.runs)
        indices = " ".join(str(index) for _, index in self.runs)
        return f"--architecture {architectures} --seed {seeds}" + (f" --trial {indices}" if self.phase == "search" else "")

    def hparams(self, wildcards: Any) -> list[str]:
        """The ``HP.json`` of each run, in order: its trial's, or its architecture's selection."""
        return [hparams_path(wildcards.task, architecture_slug(name), self.phase, index) for name, index in self.runs]

    def hparams_inputs(self, wildcards: Any) -> list[str]:
        """The ``HP.json`` files the runs read, each once."""
        return list(dict.fromkeys(self.hparams(wildcards)))

    def resources(self, resources: ResourceSettings, attempt: int) -> JobResources:
        """Time and memory of the group's job: the sum of its runs' times (they train one after
        another), the most memory any of them takes."""
        each = [train_resources(resources, architecture_slug(name), attempt) for name, _ in self.runs]
        return JobResources(runtime_min=sum(run.runtime_min for run in each), mem_mb=max(run.mem_mb for run in each))


def run_groups(settings: TransformationsSettings) -> list[RunGroup]:
    """The trained search trials and the final seeds of a task, ``resources.runs_per_job`` to a
    group, in the order architecture (``architectures``) × index, so that a group may hold runs of
    several architectures; with ``resources.runs_per_step`` K > 1, K runs of one architecture to a
    group instead (a GPU job trains them in one step); none when both are 1 (the rules ``train``
    and ``evaluate``, a job per run)."""
    resources = settings.resources
    if not grouped(resources):
        return []
    indices: dict[Phase, list[int]] = {"search": trained_trials(settings.search), "final": list(settings.final.seeds)}
    groups = []
    for phase in PHASES:
        if resources.runs_per_step > 1:
            cut = [runs for name in settings.architectures for _, runs in job_groups([(name, index) for index in indices[phase]], resources.runs_per_step)]
        else:
            cut = [runs for _, runs in job_groups([(name, index) for name in settings.architectures for index in indices[phase]], resources.runs_per_job)]
        groups += [RunGroup(phase, number, runs) for number, runs in enumerate(cut, start=1)]
    return groups


def grouped(resources: ResourceSettings) -> bool:
    """Whether runs train and evaluate in groups (``run_groups``) rather than a job each."""
    return resources.runs_per_job > 1 or resources.runs_per_step > 1


def group_gpus(resources: ResourceSettings) -> int:
    """The GPUs a group's training job asks for: one when its runs train in one step (``resources.runs_per_step`` > 1)."""
    return 1 if resources.runs_per_step > 1 else 0


def evaluation_groups(settings: TransformationsSettings) -> list[RunGroup]:
    """The groups of final runs (``run_groups``), which are evaluated together as they trained."""
    return [group for group in run_groups(settings) if group.phase == "final"]


def single_run_phases(resources: ResourceSettings) -> str:
    """The phases whose runs the rules ``train`` and ``evaluate`` train and evaluate, a job each, as
    a wildcard constraint: both when runs are not grouped (``grouped``), none otherwise (a regular
    expression matching nothing)."""
    return one_per_job("|".join(PHASES), 2 if grouped(resources) else 1)


@dataclass(frozen=True)
class ArchitectureGroup:
    """Architectures of a task whose trials one process draws (rule ``hparams_group<n>``) and one
    process selects among (rule ``select_group<n>``), one architecture after another, for every
    task: rules of their own, whose outputs are every trial's ``trial<k>.json`` and every
    architecture's ``best.json`` (the DAG keeps one output per trial and per architecture). Paths
    keep ``{task}`` as a wildcard."""

    number: int  # the group's place, from 1
    architectures: tuple[str, ...]  # registry names
    trials: tuple[int, ...]  # every drawn trial (``trials``)
    trained: tuple[int, ...]  # the trials trained to be compared (``trained_trials``: none for a single trial)

    def rule(self, command: Literal["hparams", "select"]) -> str:
        return f"{command}_group{self.number}"

    def trial_paths(self) -> list[str]:
        """Every trial's ``HP.json``, in the order architecture × trial (``stacklm hparams``' ``--out``)."""
        return [TRIAL_HPARAMS.format(task="{task}", architecture=architecture_slug(name), trial=trial)
                for name in self.architectures for trial in self.trials]

    def curve_paths(self) -> list[str]:
        """Every trained trial's ``train.parquet``, in the order architecture × trial."""
        return [RUN_CURVE.format(task="{task}", architecture=architecture_slug(name), phase="search", index=trial)
                for name in self.architectures for trial in self.trained]

    def best_paths(self) -> list[str]:
        """Every architecture's selection, in order (``stacklm select``'s ``--out``)."""
        return [BEST_HPARAMS.format(task="{task}", architecture=architecture_slug(name)) for name in self.architectures]

    def log(self, pattern: str) -> str:
        """The process's output, ``pattern`` ``HPARAMS_GROUP_LOG`` or ``SELECT_GROUP_LOG``."""
        return pattern.format(task="{task}", number=self.number)

    @property
    def architecture_options(self) -> str:
        """``--architecture`` of ``stacklm hparams``: every architecture, in order."""
        return shlex.join(["--architecture", *self.architectures])

    def select_options(self, wildcards: Any) -> str:
        """``--hparams`` (and ``--curves`` when trials are trained) of ``stacklm select``, once per architecture."""
        options = []
        for name in self.architectures:
            slug = architecture_slug(name)
            hparams = [TRIAL_HPARAMS.format(task=wildcards.task, architecture=slug, trial=trial) for trial in self.trials]
            curves = [RUN_CURVE.format(task=wildcards.task, architecture=slug, phase="search", index=trial) for trial in self.trained]
            options += ["--hparams", *hparams, *(["--curves", *curves] if curves else [])]
        return shlex.join(options)


def architecture_groups(settings: TransformationsSettings) -> list[ArchitectureGroup]:
    """The architectures (``architectures``), ``resources.runs_per_job`` to a group, whose trials
    are drawn and selected among together; none when it is 1 (the rules ``hparams`` and ``select``,
    a job per architecture)."""
    size = settings.resources.runs_per_job
    if size == 1:
        return []
    trial_numbers, trained = tuple(trials(settings.search)), tuple(trained_trials(settings.search))
    return [ArchitectureGroup(number, names, trial_numbers, trained) for number, names in job_groups(settings.architectures, size)]


def single_architectures(resources: ResourceSettings) -> str:
    """The architectures whose trials the rules ``hparams`` and ``select`` draw and select among, a
    job each, as a wildcard constraint: every one when ``resources.runs_per_job`` is 1, none
    otherwise (a regular expression matching nothing)."""
    return one_per_job(r"[^/]+", resources.runs_per_job)


@dataclass(frozen=True)
class JobResources:
    runtime_min: int
    mem_mb: int


def train_resources(resources: ResourceSettings, architecture: str, attempt: int) -> JobResources:
    """Time and memory of a training job of one run: its family's base values × growth^(attempt − 1).

    An architecture belongs to the first family in ``resources.families`` that lists its stack
    (the model registry's ``stack_name``: ``Nd``, ``Sup``); otherwise to ``resources.default``.
    """
    from stacklm.models.registry import get_architecture

    stack = get_architecture(architecture_name(architecture)).stack_name
    families = [family for family in resources.families if stack in family.stacks]
    return job_resources(resources, families[0] if families else resources.default, attempt)


def job_resources(resources: ResourceSettings, size: JobSize | ResourceFamily, attempt: int, runs: int = 1) -> JobResources:
    """Time and memory of a job of ``runs`` runs of ``size`` each, trained one after another (the
    CFL and PTB training rules: ``resources.cfl``, ``resources.ptb``): ``runs`` × its time and its
    memory, both × growth^(attempt − 1)."""
    factor = resources.growth_per_retry ** (attempt - 1)
    return JobResources(runtime_min=math.ceil(runs * size.runtime_min * factor), mem_mb=math.ceil(size.mem_mb * factor))


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
    """The metrics, the report, its pages and every task's curves (the data stage has its own);
    none without a task."""
    if not settings.tasks:
        return []
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
