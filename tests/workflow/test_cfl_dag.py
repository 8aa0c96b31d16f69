"""The CFL part of the DAG: its lookups in stacklm.workflow, the presets, and a dry-run of the full config.

The small preset's CFL part (35 runs, five test sets; minutes on 2 cores) is too slow for a
test; its DAG is checked here, and one real run of a two-model CFL config is in the report.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest
import yaml

import stacklm.experiments.cfl.dag as cfl_dag
import stacklm.experiments.common as shared
import stacklm.workflow.dag as pipeline
import stacklm.workflow.settings as resolution
from stacklm.experiments.cfl.settings import VECTOR_MODELS, CflSettings
from stacklm.models.cfl_names import CFL_MODELS
from stacklm.errors import StacklmError
from stacklm.settings_file import build

from tests.workflow.snakemake_runs import ROOT, run_snakemake
from tests.workflow.test_dag import job_counts


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def resolve(config: dict[str, Any], preset: str | None) -> resolution.ResolvedSettings:
    return resolution.resolve({**copy.deepcopy(config), "preset": preset})


def test_the_full_config_runs_the_papers_grid(config: dict[str, Any]) -> None:
    assert resolve(config, None).cfl == CflSettings()


def test_the_cfl_two_languages_preset_runs_the_papers_grid_once_on_two_languages_and_nothing_else(config: dict[str, Any]) -> None:
    """No task (no data, training or report of the transformations), no PTB; marked and padded
    reversal with DuSell & Chiang (2022) App. 8's grid, one restart per point: 4 learning rates for
    the LSTM and each of the four NS models, 4 x 3 vector sizes for Gref and JM, 44 runs a language."""
    settings = resolve(config, "cfl-two-languages")
    assert not settings.tasks and not settings.ptb.models
    assert settings.cfl.languages == ("marked-reversal", "padded-reversal")
    targets = pipeline.all_targets(settings)
    assert targets and all(target.startswith(("results/cfl/", "results/tracking/")) for target in targets), targets
    runs = [path for pair in cfl_dag.cfl_pairs(settings.cfl) for path in cfl_dag.cfl_run_files(settings.cfl, pair["language"], pair["model"], cfl_dag.CFL_RUN_CURVE)]
    assert len(runs) == len(set(runs)) == 2 * (4 + 4 * 3 + 4 * 3 + 4 * 4)
    assert pipeline.tracking_experiments(settings) == ["marked-reversal", "padded-reversal"]
    message = pipeline.finished_message(settings)
    assert "results/cfl/" in message and "results/report" not in message and "results/metrics.parquet" not in message


def test_small_runs_every_language_and_model_once_and_ci_none(config: dict[str, Any]) -> None:
    small = resolve(config, "small")
    pairs = cfl_dag.cfl_pairs(small.cfl)
    assert len(pairs) == 5 * 7 and {pair["model"] for pair in pairs} == {shared.architecture_slug(name) for name in CFL_MODELS}
    for pair in pairs:
        assert len(cfl_dag.cfl_run_files(small.cfl, pair["language"], pair["model"], cfl_dag.CFL_RUN_CURVE)) == 1
    assert cfl_dag.CFL_METRICS in pipeline.all_targets(small)
    assert pipeline.tracking_experiments(small) == [*small.tasks, *small.cfl.languages, "ptb"]
    assert {pipeline.TRACKING_MANIFEST.format(experiment=name) for name in pipeline.tracking_experiments(small)} <= set(pipeline.all_targets(small))
    records = pipeline.tracking_records(small, "dyck-2")  # every grid run's curve, every model's evaluation
    assert records["curves"] == [path for pair in pairs if pair["language"] == "dyck-2" for path in cfl_dag.cfl_run_files(small.cfl, "dyck-2", pair["model"], cfl_dag.CFL_RUN_CURVE)]
    assert records["metrics"] == [cfl_dag.CFL_EVALUATION.format(language="dyck-2", model=pair["model"]) for pair in pairs if pair["language"] == "dyck-2"]
    assert len(records["curves"]) == len(records["metrics"]) == 7
    ci = resolve(config, "ci")
    assert cfl_dag.targets(ci.cfl) == [] and cfl_dag.cfl_pairs(ci.cfl) == []
    assert not any(target.startswith("results/cfl/") for target in pipeline.all_targets(ci))


def test_run_files_follow_the_grid(config: dict[str, Any]) -> None:
    settings = resolve(config, None)
    files = cfl_dag.cfl_run_files(settings.cfl, "dyck-2", "cfl-jm", cfl_dag.CFL_RUN_MODEL)
    assert len(files) == 4 * 3 * 5
    assert "results/cfl/runs/dyck-2/cfl-jm/lr0.0005-m40-r5/model.pt" in files
    assert len(cfl_dag.cfl_run_files(settings.cfl, "dyck-2", "cfl-ns+s+u", cfl_dag.CFL_RUN_MODEL)) == 4 * 5
    assert cfl_dag.cfl_figures("validation") == ["results/cfl/figures/validation.png", "results/cfl/figures/validation.pdf"]


def test_runs_per_job_groups_a_languages_runs_in_model_order_with_the_logging_runs_apart(config: dict[str, Any]) -> None:
    settings = resolve(config, None)
    assert cfl_dag.run_groups(settings.cfl, 1) == [] and cfl_dag.model_groups(settings.cfl, 1) == []
    small = resolve(config, "small")
    groups = cfl_dag.run_groups(small.cfl, small.resources.runs_per_job)
    assert [(group.rule, len(group.runs), group.actions) for group in groups] == [
        ("cfl_train_marked_reversal_group1", 5, False), ("cfl_train_marked_reversal_group2", 2, True),
        *((f"cfl_train_{language}_group1", 7, False) for language in ("unmarked_reversal", "padded_reversal", "dyck_2", "hardest_cfl")),
    ]
    assert [run.model for run in groups[0].runs] == ["cfl/LSTM", "cfl/Gref", "cfl/JM", "cfl/NS", "cfl/NS+U"]
    assert groups[1].paths(cfl_dag.CFL_RUN_ACTIONS) == cfl_dag.cfl_action_runs(small.cfl)
    assert groups[0].train_options == "--architecture cfl/LSTM cfl/Gref cfl/JM cfl/NS cfl/NS+U --setting lr0.01-r1 lr0.01-m2-r1 lr0.01-m2-r1 lr0.01-r1 lr0.01-r1"
    assert groups[0].log == "logs/cfl/train/marked-reversal/group1.log"
    # every run of every language once, across 3 jobs a language at 3 runs a job (Gref and JM: 2 vector sizes)
    wider = dataclasses.replace(small.cfl, vector_sizes=(2, 20))
    grouped = cfl_dag.run_groups(wider, 3)
    assert sorted(path for group in grouped for path in group.paths(cfl_dag.CFL_RUN_CURVE)) == sorted(
        path for pair in cfl_dag.cfl_pairs(wider) for path in cfl_dag.cfl_run_files(wider, pair["language"], pair["model"], cfl_dag.CFL_RUN_CURVE)
    )
    assert [len(group.runs) for group in grouped if group.language == "dyck-2"] == [3, 3, 3]
    models = cfl_dag.model_groups(small.cfl, 3)
    assert [(group.rule("evaluate"), group.models) for group in models if group.language == "dyck-2"] == [
        ("cfl_evaluate_dyck_2_group1", ("cfl/LSTM", "cfl/Gref", "cfl/JM")), ("cfl_evaluate_dyck_2_group2", ("cfl/NS", "cfl/NS+S", "cfl/NS+U")),
        ("cfl_evaluate_dyck_2_group3", ("cfl/NS+S+U",)),
    ]
    assert models[0].rule("select") == "cfl_select_marked_reversal_group1"
    assert models[0].paths(cfl_dag.CFL_EVALUATION)[0] == "results/cfl/evaluation/marked-reversal/cfl-lstm.parquet"
    assert models[0].run_files(wider, cfl_dag.CFL_RUN_MODEL)[1:3] == [
        "results/cfl/runs/marked-reversal/cfl-gref/lr0.01-m2-r1/model.pt", "results/cfl/runs/marked-reversal/cfl-gref/lr0.01-m20-r1/model.pt"]
    assert models[0].select_options(wider) == (
        "--curves results/cfl/runs/marked-reversal/cfl-lstm/lr0.01-r1/train.parquet"
        " --curves results/cfl/runs/marked-reversal/cfl-gref/lr0.01-m2-r1/train.parquet results/cfl/runs/marked-reversal/cfl-gref/lr0.01-m20-r1/train.parquet"
        " --curves results/cfl/runs/marked-reversal/cfl-jm/lr0.01-m2-r1/train.parquet results/cfl/runs/marked-reversal/cfl-jm/lr0.01-m20-r1/train.parquet"
    )


@pytest.mark.e2e
def test_the_small_presets_grouped_cfl_jobs_name_each_runs_files(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({"preset": "small"})
    result = run_snakemake(directory, "-n", "-p", "--workflow-profile", "none", "--configfile", "test.yaml", "--", cfl_dag.CFL_METRICS, cfl_dag.CFL_ACTIONS)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    commands = [line for line in output.splitlines() if line.startswith("Shell command: stacklm cfl ")]
    logging = next(line for line in commands if "group2.log" in line)
    assert logging.startswith("Shell command: stacklm cfl train --language marked-reversal --architecture cfl/NS+S cfl/NS+S+U --setting lr0.01-r1 lr0.01-r1 ")
    assert (" --out results/cfl/runs/marked-reversal/cfl-ns+s/lr0.01-r1 results/cfl/runs/marked-reversal/cfl-ns+s+u/lr0.01-r1"
            " --actions results/cfl/runs/marked-reversal/cfl-ns+s/lr0.01-r1/actions.parquet results/cfl/runs/marked-reversal/cfl-ns+s+u/lr0.01-r1/actions.parquet"
            " --log logs/cfl/train/marked-reversal/cfl-ns+s/lr0.01-r1.log logs/cfl/train/marked-reversal/cfl-ns+s+u/lr0.01-r1.log ") in logging
    plain = next(line for line in commands if "stacklm cfl train --language dyck-2 " in line)
    assert "--actions" not in plain and plain.endswith("> logs/cfl/train/dyck-2/group1.log 2>&1")
    evaluation = next(line for line in commands if "stacklm cfl evaluate" in line and "/dyck-2/" in line)
    assert "--selection " + " ".join(f"results/cfl/selected/dyck-2/{shared.architecture_slug(model)}.parquet" for model in CFL_MODELS) in evaluation
    assert " --log " + " ".join(f"logs/cfl/evaluate/dyck-2/{shared.architecture_slug(model)}.log" for model in CFL_MODELS) in evaluation
    selection = next(line for line in commands if "stacklm cfl select" in line and "/dyck-2/" in line)
    assert " --out " + " ".join(f"results/cfl/selected/dyck-2/{shared.architecture_slug(model)}.parquet" for model in CFL_MODELS) in selection
    assert selection.count("--curves ") == len(CFL_MODELS) and selection.endswith("> logs/cfl/select/dyck-2/group1.log 2>&1")


def test_figure_2_is_a_target_only_with_marked_reversal_and_both_ns_s_models(config: dict[str, Any]) -> None:
    small = resolve(config, "small")
    figure = [cfl_dag.CFL_ACTIONS, "results/cfl/figures/stack-actions.png", "results/cfl/figures/stack-actions.pdf"]
    assert set(figure) <= set(pipeline.all_targets(small))
    assert cfl_dag.cfl_action_runs(small.cfl) == [
        "results/cfl/runs/marked-reversal/cfl-ns+s/lr0.01-r1/actions.parquet",
        "results/cfl/runs/marked-reversal/cfl-ns+s+u/lr0.01-r1/actions.parquet",
    ]
    for cfl in (dataclasses.replace(small.cfl, models=("cfl/LSTM", "cfl/NS+S+U")), dataclasses.replace(small.cfl, languages=("dyck-2",))):
        assert cfl_dag.targets(cfl) and not set(figure) & set(cfl_dag.targets(cfl))


def test_a_preset_with_an_unknown_cfl_model_is_rejected_naming_the_key(config: dict[str, Any]) -> None:
    broken = copy.deepcopy(config)
    broken["presets"]["small"]["cfl"]["models"] = ["cfl/LSTM", "LSTM"]
    with pytest.raises(StacklmError, match=r"config key 'cfl.models\[1\]'"):
        resolve(broken, "small")


@pytest.mark.e2e
def test_dry_run_of_the_full_config_lists_every_cfl_job(workflow_copy: Callable[[dict[str, Any]], Path], config: dict[str, Any]) -> None:
    directory = workflow_copy({})
    start = time.perf_counter()
    result = run_snakemake(directory, "-n", "--workflow-profile", "none", cfl_dag.CFL_METRICS)
    elapsed_s = time.perf_counter() - start
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    cfl = build(CflSettings, config["cfl"], "cfl")
    pairs = len(cfl.languages) * len(cfl.models)
    runs_per_language = sum(
        len(cfl.learning_rates) * cfl.restarts * (len(cfl.vector_sizes) if model in VECTOR_MODELS else 1) for model in cfl.models
    )
    logging_runs = len(cfl_dag.cfl_action_runs(cfl))  # NS+S and NS+S+U on marked reversal log their stack actions
    expected = {
        "cfl_generate": len(cfl.languages),
        "cfl_train": len(cfl.languages) * runs_per_language - logging_runs,
        "cfl_train_actions": logging_runs,
        "cfl_select": pairs,
        "cfl_evaluate": pairs,
        "cfl_figures": 1,
    }
    assert {rule: counts.get(rule) for rule in expected} == expected == {
        "cfl_generate": 5,
        "cfl_train": 1060,
        "cfl_train_actions": 40,
        "cfl_select": 35,
        "cfl_evaluate": 35,
        "cfl_figures": 1,
    }
    assert len(re.findall(r"^(?:local)?rule cfl_train:$", output, flags=re.MULTILINE)) == 1060
    logging = re.findall(r"^(?:local)?rule cfl_train_actions:\n(?:.*\n)*?\s+output: (.*)$", output, flags=re.MULTILINE)
    assert sorted(path for outputs in logging for path in outputs.split(", ") if path.endswith("actions.parquet")) == sorted(cfl_dag.cfl_action_runs(cfl))
    print(f"\nsnakemake -n {cfl_dag.CFL_METRICS} of the full config: {counts['total']} jobs ({expected}) in {elapsed_s:.1f} s")


@pytest.mark.e2e
def test_each_grouped_cfl_job_trains_its_own_languages_runs(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    """A real run of two languages' groups: a rule made in the Snakefile's loop runs its shell line
    after the loop has ended, so the line must name its own group's language, not the last one's."""
    languages = ("marked-reversal", "dyck-2")
    cfl = {"languages": list(languages), "models": ["cfl/LSTM", "cfl/NS"], "learning_rates": [0.01], "restarts": 1,
           "vector_sizes": [2], "max_epochs": 1, "train_batches": 1, "validation_batches": 1}
    directory = workflow_copy({"preset": "small", "cfl": cfl})
    curves = [cfl_dag.CFL_RUN_CURVE.format(language=language, model=model, setting="lr0.01-r1") for language in languages for model in ("cfl-lstm", "cfl-ns")]
    result = run_snakemake(directory, "--cores", "1", "--workflow-profile", "none", "--configfile", "test.yaml", "--", *curves)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "cfl_train_marked_reversal_group1" in output and "cfl_train_dyck_2_group1" in output
    for path in curves:
        assert set(pd.read_parquet(directory / path)["task"]) == {path.split("/")[3]}


@pytest.mark.e2e
def test_a_test_set_is_generated_with_only_the_strings_per_length_that_are_scored(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({})
    target = cfl_dag.CFL_TEST.format(language="hardest-cfl")
    for config, expected in (([], 100), (["--config", "preset=small"], 2)):
        result = run_snakemake(directory, "-n", "-p", "--workflow-profile", "none", *config, "--", target)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        assert re.search(rf"stacklm cfl generate --language hardest-cfl --split test --seed 0 --strings-per-length {expected} ", output), output[-3000:]
