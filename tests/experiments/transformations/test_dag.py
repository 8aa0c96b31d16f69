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


def test_search_trials_train_from_seeds_no_final_run_takes() -> None:
    """Trial k once trained with seed k: final seed k then repeated trial k's parameters, dropout and
    shuffling, and was the selected trial itself when trial k was selected (the table1 run's Tf+Nd
    final seed 2 equalled its trial 2 at every checkpoint). The authors' final runs take fresh seeds."""
    search_seeds = [transformations.run_seed("search", trial) for trial in range(1, 101)]
    assert len(set(search_seeds)) == 100
    assert all(transformations.SEARCH_SEEDS <= seed < 2 * transformations.SEARCH_SEEDS for seed in search_seeds)
    assert transformations.run_seed("final", "7") == 7
    assert transformations.run_seed("search", "7") == transformations.run_seed("search", 7) != 7


def test_targets_cover_every_final_run_and_the_report(settings: ResolvedSettings) -> None:
    runs = transformations.final_runs(settings)
    assert len(runs) == 7 * len(settings.architectures) * 5
    assert "results/runs/question-formation/tf+nd/final/3/metrics.parquet" in transformations.final_metrics(settings)
    targets = pipeline.all_targets(settings)
    assert transformations.METRICS in targets and transformations.REPORT_DOCUMENT in targets
    assert "results/report/tables/german-passivization.tex" in targets
    assert {"results/report/figures/figure3.png", "results/report/figures/figure3.pdf"} <= set(targets)


def grouping(runs_per_job: int, trials: int = 2, seeds: tuple[int, ...] = (1, 7, 9)) -> SimpleNamespace:
    """The settings ``run_groups`` reads: two architectures, ``trials`` search trials, ``seeds``."""
    return SimpleNamespace(architectures=("Tf", "LSTM+Nd"), search=SearchSettings(trials=trials), final=FinalSettings(seeds=seeds),
                           resources=ResourceSettings(runs_per_job=runs_per_job))


def test_runs_per_job_groups_a_tasks_runs_of_a_phase_in_the_order_architecture_by_index() -> None:
    assert transformations.run_groups(grouping(1)) == []  # 1: the rules `train` and `evaluate`, a job per run
    assert transformations.single_run_phases(ResourceSettings()) == "search|final"
    groups = transformations.run_groups(grouping(4))
    assert [(group.phase, group.number, group.runs) for group in groups] == [
        ("search", 1, (("Tf", 1), ("Tf", 2), ("LSTM+Nd", 1), ("LSTM+Nd", 2))),
        ("final", 1, (("Tf", 1), ("Tf", 7), ("Tf", 9), ("LSTM+Nd", 1))),  # a group may span architectures
        ("final", 2, (("LSTM+Nd", 7), ("LSTM+Nd", 9))),
    ]
    assert [group.rule("train") for group in groups] == ["train_search_group1", "train_final_group1", "train_final_group2"]
    assert transformations.evaluation_groups(grouping(4)) == groups[1:]
    assert not re.fullmatch(transformations.single_run_phases(ResourceSettings(runs_per_job=2)), "final")  # the rules of one run have none
    whole = transformations.run_groups(grouping(6, trials=1))  # a search of one trial trains no search model
    assert [(group.phase, len(group.runs)) for group in whole] == [("final", 6)]


def test_runs_per_step_gives_each_group_the_runs_of_one_architecture_and_a_gpu() -> None:
    """For a GPU: K runs of a task x phase x architecture to a job, whatever runs_per_job says."""
    settings = grouping(4)
    settings.resources = ResourceSettings(runs_per_job=4, runs_per_step=2)
    groups = transformations.run_groups(settings)
    assert [(group.phase, group.number, group.runs) for group in groups] == [
        ("search", 1, (("Tf", 1), ("Tf", 2))),
        ("search", 2, (("LSTM+Nd", 1), ("LSTM+Nd", 2))),
        ("final", 1, (("Tf", 1), ("Tf", 7))),
        ("final", 2, (("Tf", 9),)),
        ("final", 3, (("LSTM+Nd", 1), ("LSTM+Nd", 7))),
        ("final", 4, (("LSTM+Nd", 9),)),
    ]
    assert transformations.group_gpus(settings.resources) == 1 and transformations.group_gpus(ResourceSettings(runs_per_job=4)) == 0
    assert not re.fullmatch(transformations.single_run_phases(ResourceSettings(runs_per_step=2)), "final")  # the rules of one run have none


def test_a_group_names_every_runs_files_and_options() -> None:
    search, _, final, _ = transformations.run_groups(grouping(3, seeds=(1, 7)))  # 4 runs of each phase: 3 and 1
    assert search.runs == (("Tf", 1), ("Tf", 2), ("LSTM+Nd", 1)) and final.runs == (("Tf", 1), ("Tf", 7), ("LSTM+Nd", 1))
    assert search.paths(transformations.RUN_MODEL) == [
        "results/runs/{task}/tf/search/1/model.pt", "results/runs/{task}/tf/search/2/model.pt", "results/runs/{task}/lstm+nd/search/1/model.pt"]
    assert final.paths(transformations.CHECKPOINT) == [
        "results/checkpoints/{task}/tf/final/1.pt", "results/checkpoints/{task}/tf/final/7.pt", "results/checkpoints/{task}/lstm+nd/final/1.pt"]
    assert final.log(transformations.TRAIN_GROUP_LOG) == "logs/train/{task}/final/group1.log"
    assert final.log(transformations.EVALUATE_GROUP_LOG) == "logs/evaluate/{task}/final/group1.log"
    assert search.rule("train") == "train_search_group1" and final.rule("evaluate") == "evaluate_final_group1"
    seeds = [transformations.run_seed("search", trial) for trial in (1, 2, 1)]
    assert search.train_options == f"--architecture Tf Tf LSTM+Nd --seed {seeds[0]} {seeds[1]} {seeds[2]} --trial 1 2 1"
    assert final.train_options == "--architecture Tf Tf LSTM+Nd --seed 1 7 1"
    wildcards = SimpleNamespace(task="qf")
    assert search.hparams(wildcards) == ["results/search/qf/tf/trial1.json", "results/search/qf/tf/trial2.json", "results/search/qf/lstm+nd/trial1.json"]
    assert final.hparams(wildcards) == ["results/search/qf/tf/best.json", "results/search/qf/tf/best.json", "results/search/qf/lstm+nd/best.json"]
    assert final.hparams_inputs(wildcards) == ["results/search/qf/tf/best.json", "results/search/qf/lstm+nd/best.json"]


def test_a_cfl_or_ptb_training_job_takes_its_experiments_size_times_its_runs_grown_at_each_attempt(settings: ResolvedSettings) -> None:
    assert (settings.resources.cfl.runtime_min, settings.resources.ptb.runtime_min) == (480, 1440)  # config.yaml
    assert transformations.job_resources(settings.resources, settings.resources.cfl, 1) == transformations.JobResources(480, 4000)
    assert transformations.job_resources(settings.resources, settings.resources.ptb, 2) == transformations.JobResources(2 * 1440, 2 * 8000)
    assert transformations.job_resources(settings.resources, settings.resources.cfl, 3, runs=7) == transformations.JobResources(7 * 4 * 480, 4 * 4000)


def test_a_job_of_several_runs_has_the_sum_of_their_times_and_the_most_memory_of_them(settings: ResolvedSettings) -> None:
    group = transformations.RunGroup("final", 1, (("Tf+Nd", 1), ("Tf", 1), ("Tf+Nd", 2), ("LSTM+Sup", 1)))
    resources = group.resources(settings.resources, 2)
    assert resources == transformations.JobResources(2 * (2 * 1440 + 240 + 480), 2 * 16000)  # one after another: the time adds up


def test_runs_per_job_groups_the_architectures_whose_trials_are_drawn_and_selected_together() -> None:
    assert transformations.architecture_groups(grouping(1)) == []  # 1: the rules `hparams` and `select`, a job per architecture
    assert re.fullmatch(transformations.single_architectures(ResourceSettings()), "tf+nd")
    assert not re.fullmatch(transformations.single_architectures(ResourceSettings(runs_per_job=2)), "tf+nd")
    wider = SimpleNamespace(**{**vars(grouping(2, trials=2)), "architectures": ("Tf", "LSTM+Nd", "RNN")})
    first, second = transformations.architecture_groups(wider)
    assert (first.number, first.architectures, second.number, second.architectures) == (1, ("Tf", "LSTM+Nd"), 2, ("RNN",))
    assert (first.rule("hparams"), second.rule("select")) == ("hparams_group1", "select_group2")
    assert first.trial_paths() == ["results/search/{task}/tf/trial1.json", "results/search/{task}/tf/trial2.json",
                                   "results/search/{task}/lstm+nd/trial1.json", "results/search/{task}/lstm+nd/trial2.json"]
    assert first.curve_paths() == ["results/runs/{task}/tf/search/1/train.parquet", "results/runs/{task}/tf/search/2/train.parquet",
                                   "results/runs/{task}/lstm+nd/search/1/train.parquet", "results/runs/{task}/lstm+nd/search/2/train.parquet"]
    assert first.best_paths() == ["results/search/{task}/tf/best.json", "results/search/{task}/lstm+nd/best.json"]
    assert first.log(transformations.SELECT_GROUP_LOG) == "logs/select/{task}/group1.log"
    assert first.architecture_options == "--architecture Tf LSTM+Nd"
    assert first.select_options(SimpleNamespace(task="qf")) == (
        "--hparams results/search/qf/tf/trial1.json results/search/qf/tf/trial2.json"
        " --curves results/runs/qf/tf/search/1/train.parquet results/runs/qf/tf/search/2/train.parquet"
        " --hparams results/search/qf/lstm+nd/trial1.json results/search/qf/lstm+nd/trial2.json"
        " --curves results/runs/qf/lstm+nd/search/1/train.parquet results/runs/qf/lstm+nd/search/2/train.parquet"
    )
    (single,) = transformations.architecture_groups(grouping(17, trials=1))  # a single trial: drawn, not trained, no curves
    assert single.trained == () and single.curve_paths() == []
    assert single.select_options(SimpleNamespace(task="qf")) == "--hparams results/search/qf/tf/trial1.json --hparams results/search/qf/lstm+nd/trial1.json"
