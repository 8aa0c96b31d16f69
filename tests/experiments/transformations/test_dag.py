"""stacklm.experiments.transformations.dag: the paths, lookups, resources and targets of the
transformations experiment's DAG."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

import stacklm.experiments.common as shared
import stacklm.experiments.transformations.dag as transformations
import stacklm.workflow.dag as pipeline
from stacklm.errors import StacklmError
from stacklm.experiments.transformations.settings import FinalSettings, ResourceSettings, SearchSettings
from stacklm.workflow.settings import ResolvedSettings


def test_hparams_path_by_phase() -> None:
    assert transformations.hparams_path("qf", "tf", "search", "3") == "results/search/qf/tf/trial3.json"
    assert transformations.hparams_path("qf", "tf", "final", "2") == "results/search/qf/tf/best.json"
    with pytest.raises(StacklmError, match="unknown phase"):
        transformations.hparams_path("qf", "tf", "warmup", "1")


def test_train_resources_by_family_grow_with_each_attempt(settings: ResolvedSettings) -> None:
    slug = shared.architecture_slug
    assert transformations.train_resources(settings.resources, slug("Tf+Nd"), 1) == transformations.JobResources(1440, 16000)
    assert transformations.train_resources(settings.resources, slug("LSTM+Sup+R"), 1) == transformations.JobResources(480, 8000)
    assert transformations.train_resources(settings.resources, slug("RNN"), 1) == transformations.JobResources(240, 4000)
    assert transformations.train_resources(settings.resources, slug("Tf+Nd"), 3) == transformations.JobResources(4 * 1440, 4 * 16000)


def test_only_search_runs_name_their_trial() -> None:
    assert transformations.trial_option("search", "7") == " --trial 7"
    assert transformations.trial_option("final", "2") == ""


def test_targets_cover_every_final_run_and_the_report(settings: ResolvedSettings) -> None:
    runs = transformations.final_runs(settings)
    assert len(runs) == 7 * len(settings.architectures) * 5
    assert "results/runs/question-formation/tf+nd/final/3/metrics.parquet" in transformations.final_metrics(settings)
    targets = pipeline.all_targets(settings)
    assert transformations.METRICS in targets and transformations.REPORT_DOCUMENT in targets
    assert "results/report/tables/german-passivization.tex" in targets
    assert {"results/report/figures/figure3.png", "results/report/figures/figure3.pdf"} <= set(targets)


def test_runs_per_job_groups_the_trained_trials_and_the_seeds_in_order() -> None:
    search, final = SearchSettings(trials=5), FinalSettings(seeds=(1, 7, 9))
    assert transformations.run_groups(search, final, ResourceSettings()) == []  # 1: the rule `train`, a job per run
    assert transformations.single_run_phases(ResourceSettings()) == "search|final"
    groups = transformations.run_groups(search, final, ResourceSettings(runs_per_job=2))
    assert [(group.phase, group.indices) for group in groups] == [("search", (1, 2)), ("search", (3, 4)), ("search", (5,)), ("final", (1, 7)), ("final", (9,))]
    assert [group.rule for group in groups] == ["train_search_1_2", "train_search_3_4", "train_search_5", "train_final_1_7", "train_final_9"]
    assert not re.fullmatch(transformations.single_run_phases(ResourceSettings(runs_per_job=2)), "final")  # the rule `train` trains none
    assert transformations.run_groups(SearchSettings(trials=1), final, ResourceSettings(runs_per_job=5)) == [transformations.RunGroup("final", (1, 7, 9))]


def test_a_group_names_every_runs_files_and_options() -> None:
    search, final = transformations.RunGroup("search", (3, 4)), transformations.RunGroup("final", (1, 7))
    assert search.paths(transformations.RUN_MODEL) == ["results/runs/{task}/{architecture}/search/3/model.pt", "results/runs/{task}/{architecture}/search/4/model.pt"]
    assert final.paths(transformations.CHECKPOINT) == ["results/checkpoints/{task}/{architecture}/final/1.pt", "results/checkpoints/{task}/{architecture}/final/7.pt"]
    assert final.log == "logs/train/{task}/{architecture}/final/1+7.log"
    assert search.options == "--seed 3 4 --trial 3 4" and final.options == "--seed 1 7"
    wildcards = SimpleNamespace(task="qf", architecture="tf")
    assert search.hparams(wildcards) == ["results/search/qf/tf/trial3.json", "results/search/qf/tf/trial4.json"]
    assert final.hparams(wildcards) == ["results/search/qf/tf/best.json"]


def test_a_job_of_several_runs_has_their_time(settings: ResolvedSettings) -> None:
    resources = transformations.train_resources(settings.resources, shared.architecture_slug("Tf+Nd"), 2, runs=3)
    assert resources == transformations.JobResources(3 * 2 * 1440, 2 * 16000)  # one after another: the time adds up, the memory does not
