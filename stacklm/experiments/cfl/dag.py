"""The DAG of the CFL experiments of DuSell & Chiang (2022) (``stacklm.experiments.cfl.search``),
for ``workflow/rules/cfl.smk``. Per language L and model X: ``cfl_generate`` (the seed-0 test
set of L), ``cfl_train`` for every grid point (learning rate × m for Gref/JM × restart),
``cfl_select`` (lowest validation Δ), ``cfl_evaluate`` (test Δ overall and per length), then
``cfl_figures`` → ``results/cfl/{curves,metrics}.parquet``, the figures and ``summary.md``. The runs of NS+S and
NS+S+U on marked reversal log their stack actions (``cfl_train_actions``: ``cfl_train`` with
``actions.parquet``), and ``cfl_actions`` draws Figure 2 from their selected runs' logs, when
the settings hold that language and both models. With ``resources.runs_per_job`` K > 1, a
language's runs train K to a job, and its models' runs are selected among and the selected runs
evaluated K models to a job instead (``run_groups``, ``model_groups``: rules
``cfl_train_<language>_group<n>``, ``cfl_select_<language>_group<n>`` and
``cfl_evaluate_<language>_group<n>`` whose outputs are every run's or model's files).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

from stacklm.experiments.cfl.search import CflRun, grid, language_runs
from stacklm.experiments.cfl.settings import ACTION_LANGUAGE, ACTION_MODELS, CflSettings
from stacklm.experiments.common import FIGURE_EXTENSIONS, architecture_name, architecture_slug, job_groups, one_per_job

# {language}, {model} (the registry's path slug, cfl-ns+s+u) and {setting} (a grid point, lr0.001-m20-r3).
CFL_TEST = "results/cfl/data/{language}/test.tsv"
CFL_RUNS = "results/cfl/runs/{language}/{model}"
CFL_RUN_DIR = CFL_RUNS + "/{setting}"
CFL_RUN_MODEL = CFL_RUN_DIR + "/model.pt"
CFL_RUN_CURVE = CFL_RUN_DIR + "/train.parquet"
CFL_RUN_ACTIONS = CFL_RUN_DIR + "/actions.parquet"  # NS+S and NS+S+U on marked reversal only
CFL_CHECKPOINT = "results/cfl/checkpoints/{language}/{model}/{setting}.pt"
CFL_TRAIN_LOG = "logs/cfl/train/{language}/{model}/{setting}.log"
CFL_TRAIN_GROUP_LOG = "logs/cfl/train/{language}/group{number}.log"  # a job of several runs; each run's lines are in its CFL_TRAIN_LOG
CFL_SELECT_LOG = "logs/cfl/select/{language}/{model}.log"
CFL_SELECT_GROUP_LOG = "logs/cfl/select/{language}/group{number}.log"  # a job of several models' selections
CFL_EVALUATE_LOG = "logs/cfl/evaluate/{language}/{model}.log"
CFL_EVALUATE_GROUP_LOG = "logs/cfl/evaluate/{language}/group{number}.log"  # each model's lines are in its CFL_EVALUATE_LOG
CFL_SELECTED = "results/cfl/selected/{language}/{model}.parquet"
CFL_EVALUATION = "results/cfl/evaluation/{language}/{model}.parquet"
CFL_CURVES = "results/cfl/curves.parquet"
CFL_METRICS = "results/cfl/metrics.parquet"
CFL_SUMMARY = "results/cfl/summary.md"
CFL_FIGURE = "results/cfl/figures/{figure}.{extension}"
CFL_FIGURES: tuple[str, ...] = ("validation", "test-by-length")  # Figure 1; test Δ by length
CFL_ACTIONS = "results/cfl/actions.parquet"  # the selected runs' stack actions
CFL_ACTIONS_FIGURE = "stack-actions"  # Figure 2


def cfl_pairs(cfl: CflSettings) -> list[dict[str, str]]:
    """Wildcards of every (language, model slug) pair of the CFL experiments."""
    return [{"language": language, "model": architecture_slug(model)} for language in cfl.languages for model in cfl.models]


def cfl_pair_files(cfl: CflSettings, pattern: str) -> list[str]:
    """``pattern`` (CFL_SELECTED, CFL_EVALUATION) for every (language, model) pair."""
    return [pattern.format(**pair) for pair in cfl_pairs(cfl)]


def cfl_run_files(cfl: CflSettings, language: str, model: str, pattern: str) -> list[str]:
    """``pattern`` (CFL_RUN_MODEL, CFL_RUN_CURVE) for every grid run of ``language`` and the model slug ``model``."""
    runs = grid(cfl, language, architecture_name(model))
    return [pattern.format(language=language, model=model, setting=run.setting) for run in runs]


@dataclass(frozen=True)
class CflRunGroup:
    """Grid runs of one language that one process trains, one after another (rule
    ``cfl_train_<language>_group<n>``): a rule of its own, whose outputs are every run's files (the
    DAG keeps one output per run). The runs that log their stack actions (``cfl_train_actions``'s)
    train in groups of their own."""

    language: str
    number: int  # the group's place among its language's, from 1
    runs: tuple[CflRun, ...]
    actions: bool  # the runs log their stack actions (``--actions``)

    @property
    def rule(self) -> str:
        return f"cfl_train_{rule_name(self.language)}_group{self.number}"

    def paths(self, pattern: str) -> list[str]:
        """``pattern`` (a run's path: ``CFL_RUN_MODEL``, ``CFL_CHECKPOINT``, …) of each run, in order."""
        return [pattern.format(language=self.language, model=architecture_slug(run.model), setting=run.setting) for run in self.runs]

    @property
    def log(self) -> str:
        """The process's own output (each run's lines go to its ``CFL_TRAIN_LOG``)."""
        return CFL_TRAIN_GROUP_LOG.format(language=self.language, number=self.number)

    @property
    def train_options(self) -> str:
        """The runs of ``stacklm cfl train``: ``--architecture`` and ``--setting``, one per run."""
        return f"--architecture {shlex.join(run.model for run in self.runs)} --setting {shlex.join(run.setting for run in self.runs)}"


@dataclass(frozen=True)
class CflModelGroup:
    """Models of one language whose runs one process selects among (rule ``cfl_select_<language>_group<n>``)
    and whose selected runs one process evaluates (rule ``cfl_evaluate_<language>_group<n>``), one
    model after another, each writing its own selection, evaluation and log."""

    language: str
    number: int  # the group's place among its language's, from 1
    models: tuple[str, ...]  # registry names, cfl/…

    def rule(self, command: Literal["select", "evaluate"]) -> str:
        return f"cfl_{command}_{rule_name(self.language)}_group{self.number}"

    def paths(self, pattern: str) -> list[str]:
        """``pattern`` (``CFL_SELECTED``, ``CFL_RUNS``, ``CFL_EVALUATION``, ``CFL_EVALUATE_LOG``) of each model, in order."""
        return [pattern.format(language=self.language, model=architecture_slug(model)) for model in self.models]

    def log(self, pattern: str) -> str:
        """The process's own output, ``pattern`` ``CFL_SELECT_GROUP_LOG`` or ``CFL_EVALUATE_GROUP_LOG``
        (each model's evaluation lines go to its ``CFL_EVALUATE_LOG``)."""
        return pattern.format(language=self.language, number=self.number)

    def run_files(self, cfl: CflSettings, pattern: str) -> list[str]:
        """``pattern`` (``CFL_RUN_MODEL``, ``CFL_RUN_CURVE``) of every grid run of the group's models."""
        return [path for model in self.models for path in cfl_run_files(cfl, self.language, architecture_slug(model), pattern)]

    def select_options(self, cfl: CflSettings) -> str:
        """The ``--curves`` of ``stacklm cfl select``: one per model, its grid runs' curves."""
        return " ".join(
            shlex.join(["--curves", *cfl_run_files(cfl, self.language, architecture_slug(model), CFL_RUN_CURVE)]) for model in self.models
        )


def rule_name(language: str) -> str:
    """``language`` as a part of a rule's name (an identifier)."""
    return language.replace("-", "_")


def run_groups(cfl: CflSettings, runs_per_job: int) -> list[CflRunGroup]:
    """Each language's grid runs, ``runs_per_job`` to a group, in the order model (``cfl.models``)
    × grid point, the runs that log their stack actions apart; none when it is 1 (the rules
    ``cfl_train`` and ``cfl_train_actions``, a job per run)."""
    if runs_per_job == 1:
        return []
    groups = []
    for language in cfl.languages:
        runs = language_runs(cfl, language)
        for actions in (False, True):
            kept = [run for run in runs if logs_actions(run) == actions]
            first = 1 + sum(group.language == language for group in groups)
            groups += [CflRunGroup(language, number, runs, actions) for number, runs in job_groups(kept, runs_per_job, first)]
    return groups


def model_groups(cfl: CflSettings, runs_per_job: int) -> list[CflModelGroup]:
    """Each language's models, ``runs_per_job`` to a group, in the order of ``cfl.models``, for
    the selection and the evaluation; none when it is 1 (the rules ``cfl_select`` and
    ``cfl_evaluate``, a job per model)."""
    if runs_per_job == 1:
        return []
    return [CflModelGroup(language, number, models) for language in cfl.languages for number, models in job_groups(cfl.models, runs_per_job)]


def logs_actions(run: CflRun) -> bool:
    """Whether ``run`` logs its stack actions: NS+S and NS+S+U on marked reversal (Figure 2)."""
    return run.language == ACTION_LANGUAGE and run.model in ACTION_MODELS


def single_runs(runs_per_job: int, pattern: str) -> str:
    """The wildcard constraint of the rules of one run a job (``cfl_train``, ``cfl_evaluate``):
    ``pattern`` when ``resources.runs_per_job`` is 1, otherwise a regular expression matching nothing."""
    return one_per_job(pattern, runs_per_job)


def cfl_figures(figure: str) -> list[str]:
    return [CFL_FIGURE.format(figure=figure, extension=extension) for extension in FIGURE_EXTENSIONS]


def targets(cfl: CflSettings) -> list[str]:
    """The CFL records and figures (Figure 2 when ``action_figure``); none when ``cfl.languages`` is empty."""
    if not cfl.languages:
        return []
    actions = [CFL_ACTIONS, *cfl_figures(CFL_ACTIONS_FIGURE)] if action_figure(cfl) else []
    return [CFL_CURVES, CFL_METRICS, CFL_SUMMARY, *(path for figure in CFL_FIGURES for path in cfl_figures(figure)), *actions]


def action_figure(cfl: CflSettings) -> bool:
    """Figure 2 is drawn when the settings hold marked reversal and both NS+S and NS+S+U."""
    return ACTION_LANGUAGE in cfl.languages and all(model in cfl.models for model in ACTION_MODELS)


def cfl_action_files(pattern: str) -> list[str]:
    """``pattern`` (CFL_SELECTED, CFL_RUNS) for marked reversal and each of NS+S, NS+S+U, in that order."""
    return [pattern.format(language=ACTION_LANGUAGE, model=architecture_slug(model)) for model in ACTION_MODELS]


def cfl_action_runs(cfl: CflSettings) -> list[str]:
    """Every grid run's ``actions.parquet`` of NS+S and NS+S+U on marked reversal."""
    return [path for model in ACTION_MODELS for path in cfl_run_files(cfl, ACTION_LANGUAGE, architecture_slug(model), CFL_RUN_ACTIONS)]


def cfl_action_constraints() -> dict[str, str]:
    """The wildcards of the runs that log their actions (``cfl_train_actions``)."""
    return {"language": re.escape(ACTION_LANGUAGE), "model": "|".join(re.escape(architecture_slug(model)) for model in ACTION_MODELS)}


def tracking_records(cfl: CflSettings, language: str) -> dict[str, list[str]]:
    """The files ``stacklm tracking sync`` mirrors for ``language``: every grid run's
    ``train.parquet`` (``curves``), each model's evaluation (``metrics``), and the logs of the
    jobs that wrote them, in the same order."""
    pairs = [pair for pair in cfl_pairs(cfl) if pair["language"] == language]
    return {
        "curves": [path for pair in pairs for path in cfl_run_files(cfl, language, pair["model"], CFL_RUN_CURVE)],
        "metrics": [CFL_EVALUATION.format(**pair) for pair in pairs],
        "curve_logs": [path for pair in pairs for path in cfl_run_files(cfl, language, pair["model"], CFL_TRAIN_LOG)],
        "metrics_logs": [CFL_EVALUATE_LOG.format(**pair) for pair in pairs],
    }
