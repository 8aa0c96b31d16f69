"""The DAG of the PTB experiment of DuSell & Chiang (2022) (§5.2, App. 10–11), for
``workflow/rules/ptb.smk``. Per model M of ``ptb.models`` and restart k = 1 … ``ptb.restarts``:

- ``ptb_download`` and ``ptb_suites`` (when ``ptb.mirror`` is null): the PTB splits and the
  SyntaxGym files under ``resources/``, downloaded and checked against their sha256; the jobs
  below take them (or the mirror's) as inputs;
- ``ptb_train``: ``results/ptb/runs/M/k/{model.pt,train.parquet}`` (the draw and the initial
  parameters derived from (salt, M, k); the resumable state under ``results/ptb/checkpoints``);
- ``ptb_evaluate``: ``results/ptb/runs/M/k/metrics.parquet``: validation and test perplexity
  and the SG score (every restart is scored: App. 11's figure shows them all);
- ``ptb_select``: ``results/ptb/selected/M.json``, the restart of lowest validation perplexity;

then ``ptb_report``: ``results/ptb/metrics.parquet`` (every restart's rows: the source of the
tables) and from it the PTB table, the circuit table and the figure of SG score against test
perplexity (``results/ptb/report/``). ``tracking_sync`` mirrors the runs as the experiment
``ptb``. With ``resources.runs_per_job`` K > 1, the restarts (model × restart) train K to a job
and are evaluated K to a job instead (``run_groups``: rules ``ptb_train_group<n>`` and
``ptb_evaluate_group<n>`` whose outputs are every restart's files). The settings reach the jobs as options (``train_options``, ``evaluate_options``), so a
job reruns when one of its options changes (Snakemake's params trigger), and no other; but
``ptb.progress_interval_s``, which says only how often progress lines come, reaches the training
jobs through the cadence file (``stacklm.workflow.settings.CADENCE``), and a change of it reruns none.

No torch here: the Snakefile asks this module for every lookup.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stacklm.experiments.common import FIGURE_EXTENSIONS, job_groups, one_per_job
from stacklm.experiments.ptb.settings import DOWNLOADS, PTB_FOLDER, SYNTAXGYM_FOLDER, PtbSettings, ptb_files, syntaxgym_files

EXPERIMENT = "ptb"  # the MLflow experiment, and the runs' task
# {ptb_model} is a model's name (rns-2-3), {restart} 1-based.
RUN_DIR = "results/ptb/runs/{ptb_model}/{restart}"
RUN_MODEL = RUN_DIR + "/model.pt"
RUN_CURVE = RUN_DIR + "/train.parquet"
RUN_METRICS = RUN_DIR + "/metrics.parquet"
CHECKPOINT = "results/ptb/checkpoints/{ptb_model}/{restart}.pt"
TRAIN_LOG = "logs/ptb/train/{ptb_model}/{restart}.log"
EVALUATE_LOG = "logs/ptb/evaluate/{ptb_model}/{restart}.log"
TRAIN_GROUP_LOG = "logs/ptb/train/group{number}.log"  # a job of several restarts; each one's lines are in its TRAIN_LOG
EVALUATE_GROUP_LOG = "logs/ptb/evaluate/group{number}.log"  # each restart's lines are in its EVALUATE_LOG
SELECTED = "results/ptb/selected/{ptb_model}.json"
METRICS = "results/ptb/metrics.parquet"
TABLE_NAMES = ("ptb", "circuits")  # DuSell & Chiang (2022) §5.2; App. 11
TABLES = tuple(f"results/ptb/report/{name}.tex" for name in TABLE_NAMES)
MARKDOWN_TABLE = "results/ptb/report/{table}.md"
MARKDOWN = tuple(MARKDOWN_TABLE.format(table=name) for name in TABLE_NAMES)
PAGE = "results/ptb/report/{table}.html"  # a Markdown table as a page of `snakemake --report`
FIGURE = "results/ptb/report/sg-against-perplexity.{extension}"  # App. 11


DOWNLOAD_LOG = "logs/ptb/download.log"
SUITES_LOG = "logs/ptb/suites.log"


def data_dir(ptb: PtbSettings) -> str:
    return str(Path(ptb.data_root) / PTB_FOLDER)


def syntaxgym_dir(ptb: PtbSettings) -> str:
    return str(Path(ptb.data_root) / SYNTAXGYM_FOLDER)


def downloaded_ptb() -> list[str]:
    """What ``ptb_download`` writes: the PTB splits under ``resources/``."""
    return ptb_files(DOWNLOADS)


def downloaded_suites(ptb: PtbSettings) -> list[str]:
    """What ``ptb_suites`` writes: the circuit map and the suites scored, under ``resources/``."""
    return syntaxgym_files(DOWNLOADS, ptb.suites)


def suites_options(ptb: PtbSettings) -> str:
    """``--suites`` (the suites scored; none: all 33) and ``--out`` of ``stacklm ptb suites``."""
    suites = [] if ptb.suites is None else ["--suites", *ptb.suites]
    return shlex.join([*suites, "--out", str(Path(DOWNLOADS) / SYNTAXGYM_FOLDER)])


def download_options() -> str:
    """``--out`` of ``stacklm ptb download``."""
    return shlex.join(["--out", str(Path(DOWNLOADS) / PTB_FOLDER)])


def runs(ptb: PtbSettings) -> list[dict[str, str | int]]:
    """Wildcards of every restart: model × restart."""
    return [{"ptb_model": model, "restart": restart} for model in ptb.models for restart in range(1, ptb.restarts + 1)]


def run_files(ptb: PtbSettings, pattern: str, model: str | None = None) -> list[str]:
    """``pattern`` for every restart (of ``model`` only, when given)."""
    return [pattern.format(**run) for run in runs(ptb) if model is None or run["ptb_model"] == model]


@dataclass(frozen=True)
class PtbRunGroup:
    """Restarts that one process trains (rule ``ptb_train_group<n>``) and one process evaluates
    (rule ``ptb_evaluate_group<n>``), one after another: rules of their own, whose outputs are
    every restart's files (the DAG keeps one output per restart)."""

    number: int  # the group's place, from 1
    runs: tuple[tuple[str, int], ...]  # (model, restart)

    def rule(self, command: Literal["train", "evaluate"]) -> str:
        return f"ptb_{command}_group{self.number}"

    def paths(self, pattern: str) -> list[str]:
        """``pattern`` (a restart's path: ``RUN_MODEL``, ``CHECKPOINT``, ``TRAIN_LOG`` …) of each restart, in order."""
        return [pattern.format(ptb_model=model, restart=restart) for model, restart in self.runs]

    def log(self, pattern: str) -> str:
        """The process's own output, ``pattern`` ``TRAIN_GROUP_LOG`` or ``EVALUATE_GROUP_LOG``."""
        return pattern.format(number=self.number)

    @property
    def train_options(self) -> str:
        """The restarts of ``stacklm ptb train``: ``--model`` and ``--restart``, one per restart."""
        return shlex.join(["--model", *(model for model, _ in self.runs), "--restart", *(str(restart) for _, restart in self.runs)])


def run_groups(ptb: PtbSettings, runs_per_job: int) -> list[PtbRunGroup]:
    """Every restart, ``runs_per_job`` to a group, in the order model (``ptb.models``) × restart;
    none when it is 1 (the rules ``ptb_train`` and ``ptb_evaluate``, a job per restart)."""
    if runs_per_job == 1:
        return []
    every = [(str(run["ptb_model"]), int(run["restart"])) for run in runs(ptb)]
    return [PtbRunGroup(number, group) for number, group in job_groups(every, runs_per_job)]


def single_restarts(runs_per_job: int) -> str:
    """The wildcard constraint on ``restart`` of the rules of one restart a job (``ptb_train``,
    ``ptb_evaluate``): every restart when ``resources.runs_per_job`` is 1, none otherwise (a
    regular expression matching nothing)."""
    return one_per_job(r"[1-9][0-9]*", runs_per_job)


def selected_files(ptb: PtbSettings) -> list[str]:
    """Every model's selection, in ``ptb.models``' order (the tables' rows)."""
    return [SELECTED.format(ptb_model=model) for model in ptb.models]


def figures() -> list[str]:
    return [FIGURE.format(extension=extension) for extension in FIGURE_EXTENSIONS]


def train_options(ptb: PtbSettings) -> str:
    """The options of ``stacklm ptb train`` from the ``ptb`` section: all but its cadence
    setting, ``progress_interval_s`` (``--cadence``)."""
    lines = [] if ptb.lines is None else ["--lines", str(ptb.lines)]
    return shlex.join(["--data", data_dir(ptb), "--salt", str(ptb.salt), *lines, "--max-epochs", str(ptb.max_epochs)])


def evaluate_options(ptb: PtbSettings) -> str:
    """The options of ``stacklm ptb evaluate`` from the ``ptb`` section."""
    lines = [] if ptb.lines is None else ["--lines", str(ptb.lines)]
    suites = [] if ptb.suites is None else ["--suites", *ptb.suites]
    return shlex.join(["--data", data_dir(ptb), "--syntaxgym", syntaxgym_dir(ptb), *lines, *suites])


def report_options(ptb: PtbSettings) -> str:
    """``--figure-models`` of ``stacklm ptb report``."""
    return shlex.join(["--figure-models", *ptb.figure_models])


def targets(ptb: PtbSettings) -> list[str]:
    """The PTB records, tables and figure; none when ``ptb.models`` is empty."""
    if not ptb.models:
        return []
    return [METRICS, *TABLES, *MARKDOWN, *figures(), *(PAGE.format(table=name) for name in TABLE_NAMES)]


def tracking_records(ptb: PtbSettings) -> dict[str, list[str]]:
    """The files ``stacklm tracking sync`` mirrors for the experiment ``ptb``: every restart's
    ``train.parquet`` (``curves``) and ``metrics.parquet`` (``metrics``), and the logs of the
    jobs that wrote them, in the same order."""
    return {
        "curves": run_files(ptb, RUN_CURVE),
        "metrics": run_files(ptb, RUN_METRICS),
        "curve_logs": run_files(ptb, TRAIN_LOG),
        "metrics_logs": run_files(ptb, EVALUATE_LOG),
    }
