"""The DAG of the CFL experiments of DuSell & Chiang (2022) (``stacklm.experiments.cfl.experiment``),
for ``workflow/rules/cfl.smk``. Per language L and model X: ``cfl_generate`` (the seed-0 test
set of L), ``cfl_train`` for every grid point (learning rate × m for Gref/JM × restart),
``cfl_select`` (lowest validation Δ), ``cfl_evaluate`` (test Δ overall and per length), then
``cfl_figures`` → ``results/cfl/{curves,metrics}.parquet`` and the figures. The runs of NS+S and
NS+S+U on marked reversal log their stack actions (``cfl_train_actions``: ``cfl_train`` with
``actions.parquet``), and ``cfl_actions`` draws Figure 2 from their selected runs' logs, when
the settings hold that language and both models.
"""

from __future__ import annotations

import re
import shlex

from stacklm.experiments.cfl.experiment import ACTION_LANGUAGE, ACTION_MODELS, CflSettings, grid, parse_setting
from stacklm.experiments.common import FIGURE_EXTENSIONS, architecture_name, architecture_slug

# {language}, {model} (the registry's path slug, cfl-ns+s+u) and {setting} (a grid point, lr0.001-m20-r3).
CFL_TEST = "results/cfl/data/{language}/test.tsv"
CFL_RUNS = "results/cfl/runs/{language}/{model}"
CFL_RUN_DIR = CFL_RUNS + "/{setting}"
CFL_RUN_MODEL = CFL_RUN_DIR + "/model.pt"
CFL_RUN_CURVE = CFL_RUN_DIR + "/train.parquet"
CFL_RUN_ACTIONS = CFL_RUN_DIR + "/actions.parquet"  # NS+S and NS+S+U on marked reversal only
CFL_CHECKPOINT = "results/cfl/checkpoints/{language}/{model}/{setting}.pt"
CFL_TRAIN_LOG = "logs/cfl/train/{language}/{model}/{setting}.log"
CFL_EVALUATE_LOG = "logs/cfl/evaluate/{language}/{model}.log"
CFL_SELECTED = "results/cfl/selected/{language}/{model}.parquet"
CFL_EVALUATION = "results/cfl/evaluation/{language}/{model}.parquet"
CFL_CURVES = "results/cfl/curves.parquet"
CFL_METRICS = "results/cfl/metrics.parquet"
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


def cfl_train_options(setting: str) -> str:
    """The grid point's options of ``stacklm cfl train``."""
    learning_rate, vector_size, restart = parse_setting(setting)
    size = ["--vector-size", str(vector_size)] if vector_size is not None else []
    return shlex.join(["--learning-rate", repr(learning_rate), *size, "--restart", str(restart)])


def cfl_figures(figure: str) -> list[str]:
    return [CFL_FIGURE.format(figure=figure, extension=extension) for extension in FIGURE_EXTENSIONS]


def targets(cfl: CflSettings) -> list[str]:
    """The CFL records and figures (Figure 2 when ``action_figure``); none when ``cfl.languages`` is empty."""
    if not cfl.languages:
        return []
    actions = [CFL_ACTIONS, *cfl_figures(CFL_ACTIONS_FIGURE)] if action_figure(cfl) else []
    return [CFL_CURVES, CFL_METRICS, *(path for figure in CFL_FIGURES for path in cfl_figures(figure)), *actions]


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
