"""The whole DAG: every experiment's targets, the MLflow mirror's experiments and records, and
what Snakemake prints when a run succeeds.

``tracking_sync`` (per task, per CFL language, and for the PTB experiment) mirrors every run's
Parquet files into MLflow: a mirror for browsing that the report never reads. With
``resources.runs_per_job`` K > 1, the experiments of each kind (the tasks, the CFL languages, PTB)
are mirrored K to a job instead (``tracking_groups``: rules ``tracking_sync_group<n>``, whose
outputs are every experiment's manifest).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from stacklm.errors import StacklmError
from stacklm.experiments.cfl import dag as cfl
from stacklm.experiments.common import job_groups, one_per_job
from stacklm.experiments.ptb import dag as ptb
from stacklm.experiments.transformations import dag as transformations
from stacklm.experiments.transformations.data import data_targets
from stacklm.workflow.settings import ResolvedSettings

TRACKING_MARKER = "results/tracking/initialised"
TRACKING_MANIFEST = "results/tracking/{experiment}.json"  # an experiment's runs in MLflow: key → run id
TRACKING_LOG = "logs/tracking/{experiment}.log"
TRACKING_GROUP_LOG = "logs/tracking/group{number}.log"  # a job of several experiments' mirrors


def all_targets(settings: ResolvedSettings) -> list[str]:
    return [
        *data_targets(settings),
        *transformations.targets(settings),
        *cfl.targets(settings.cfl),
        *ptb.targets(settings.ptb),
        *(TRACKING_MANIFEST.format(experiment=name) for name in tracking_experiments(settings)),
    ]


def finished_message(settings: ResolvedSettings) -> str:
    """What Snakemake prints when a run succeeds: where the results are and how to open them."""
    tables = transformations.REPORT_TABLE.format(task="<task>").removesuffix(".tex")
    figure = transformations.REPORT_FIGURE.format(extension="png")
    lines = [
        "stacklm: the results are in",
        *([f"  {tables}.{{tex,md,html}}, {transformations.REPORT_DOCUMENT}, {figure}",
           f"  {transformations.METRICS} (every final run's metrics), {transformations.RUN_DIR.split('/{')[0]}/ (models and curves)"]
          if settings.tasks else []),
        *([f"  {cfl.CFL_FIGURE.split('/{')[0]}/ (the CFL figures), {cfl.CFL_METRICS}"] if cfl.targets(settings.cfl) else []),
        *([f"  {ptb.TABLES[0].rsplit('/', 1)[0]}/ (the PTB tables and figure), {ptb.METRICS}"] if ptb.targets(settings.ptb) else []),
        "  logs/ (one log per job)",
        "Every table and figure in one page: snakemake --report report.html (with this run's --config or --configfile)",
    ]
    tracking = settings.tracking
    if tracking.enabled and tracking.sqlite_path() is not None:
        lines += [
            f"The runs in MLflow: mlflow server --backend-store-uri {tracking.resolved_uri()} --host 127.0.0.1 --port 5000 --workers 1",
            "  then open http://127.0.0.1:5000/#/experiments/1/runs (or switch MLflow's top-left toggle to 'Model training')",
        ]
    elif tracking.enabled:
        lines.append(f"The runs in MLflow: {tracking.uri}")
    return "\n".join(lines)


def tracking_experiments(settings: ResolvedSettings) -> list[str]:
    """The MLflow experiments: every task, then every CFL language (the CFL runs' ``task``), then ``ptb`` when it has models."""
    ptb_experiment = [ptb.EXPERIMENT] if settings.ptb.models else []
    return [*settings.tasks, *settings.cfl.languages, *ptb_experiment]


def tracking_records(settings: ResolvedSettings, experiment: str) -> dict[str, list[str]]:
    """The files ``stacklm tracking sync`` mirrors for ``experiment`` (a task, a CFL language or
    ``ptb``), from the experiment that owns it."""
    if experiment in settings.cfl.languages:
        return cfl.tracking_records(settings.cfl, experiment)
    if experiment == ptb.EXPERIMENT and settings.ptb.models:
        return ptb.tracking_records(settings.ptb)
    if experiment not in settings.tasks:
        raise StacklmError(f"no task, CFL language or PTB experiment is named {experiment!r}")
    return transformations.tracking_records(settings, experiment)


def tracking_inputs(settings: ResolvedSettings, experiment: str) -> dict[str, list[str]]:
    """The Parquet files of ``tracking_records``: the rule's inputs (a log is no rule's output)."""
    records = tracking_records(settings, experiment)
    return {"curves": records["curves"], "metrics": records["metrics"]}


def tracking_log_options(settings: ResolvedSettings, experiment: str) -> str:
    """``--curve-logs … --metrics-logs …`` of ``stacklm tracking sync``: the jobs' logs, artifacts of their runs."""
    records = tracking_records(settings, experiment)
    return shlex.join(["--curve-logs", *records["curve_logs"], "--metrics-logs", *records["metrics_logs"]])


@dataclass(frozen=True)
class TrackingGroup:
    """Experiments of one kind that one ``stacklm tracking sync`` mirrors, one after another
    (rule ``tracking_sync_group<n>``), each into its own manifest."""

    number: int  # the group's place, from 1
    experiments: tuple[str, ...]

    @property
    def rule(self) -> str:
        return f"tracking_sync_group{self.number}"

    @property
    def manifests(self) -> list[str]:
        """Each experiment's manifest, in order (``stacklm tracking sync``'s ``--out``)."""
        return [TRACKING_MANIFEST.format(experiment=name) for name in self.experiments]

    @property
    def log(self) -> str:
        return TRACKING_GROUP_LOG.format(number=self.number)


def tracking_groups(settings: ResolvedSettings) -> list[TrackingGroup]:
    """The experiments of each kind (``tracking_experiments``: the tasks, the CFL languages, PTB),
    ``resources.runs_per_job`` to a group, so that a group waits only for runs of its kind; none
    when it is 1 (the rule ``tracking_sync``, a job per experiment)."""
    size = settings.resources.runs_per_job
    if size == 1:
        return []
    kinds = [settings.tasks, settings.cfl.languages, [ptb.EXPERIMENT] if settings.ptb.models else []]
    groups: list[TrackingGroup] = []
    for kind in kinds:
        groups += [TrackingGroup(number, experiments) for number, experiments in job_groups(kind, size, first=len(groups) + 1)]
    return groups


def single_experiments(settings: ResolvedSettings) -> str:
    """The experiments the rule ``tracking_sync`` mirrors, a job each, as a wildcard constraint:
    every one when ``resources.runs_per_job`` is 1, none otherwise (a regular expression matching nothing)."""
    return one_per_job(r"[a-z0-9-]+", settings.resources.runs_per_job)


def tracking_group_inputs(settings: ResolvedSettings, group: TrackingGroup) -> dict[str, list[str]]:
    """The Parquet files of every experiment of ``group`` (``tracking_inputs``), in order."""
    inputs = [tracking_inputs(settings, name) for name in group.experiments]
    return {"curves": [path for files in inputs for path in files["curves"]], "metrics": [path for files in inputs for path in files["metrics"]]}


def tracking_group_options(settings: ResolvedSettings, group: TrackingGroup) -> str:
    """``--experiment E --curves … --metrics … --curve-logs … --metrics-logs …`` of ``stacklm tracking
    sync``, once per experiment of ``group``."""
    options = []
    for name in group.experiments:
        records = tracking_records(settings, name)
        options += ["--experiment", name, "--curves", *records["curves"], "--metrics", *records["metrics"],
                    "--curve-logs", *records["curve_logs"], "--metrics-logs", *records["metrics_logs"]]
    return shlex.join(options)
