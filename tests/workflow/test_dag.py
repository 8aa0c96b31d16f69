"""The DAG of the full config (dry-run), the profiles, and configs rejected before any job."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

import stacklm.experiments.common as shared
import stacklm.experiments.ptb.dag as ptb
import stacklm.experiments.transformations.dag as transformations
import stacklm.experiments.transformations.search as search_stage
import stacklm.workflow.dag as pipeline
import stacklm.workflow.settings as resolution
from stacklm.errors import StacklmError

from tests.workflow.snakemake_runs import ROOT, run_snakemake


def job_counts(output: str) -> dict[str, int]:
    """The "Job stats" table Snakemake prints: rule -> job count (and "total")."""
    table = output.split("Job stats:")[1]
    return {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)$", table, flags=re.MULTILINE)}


# Every job of the full settings and of each preset, by rule: the dry runs listed the same jobs
# (rule and output) before the preset and the user's keys were resolved as a whole (main @ f539c71).
# A change here is a change of the DAG. The PTB experiment added, in the full settings, 35 models x
# 10 restarts (350 ptb_train, 350 ptb_evaluate), 35 ptb_select, 1 ptb_report and its tracking_sync
# (3,847 -> 4,584 jobs); in the small preset 5 models x 2 restarts (10 + 10), 5 + 1 and the sync
# (640 -> 667); none in the ci and table1 presets. Then 2 ptb_html (its two tables as pages of
# `snakemake --report`): 4,586 and 669. Then Figure 2 of DuSell & Chiang (2022): the marked-reversal runs of
# NS+S and NS+S+U train as cfl_train_actions (cfl_train logging the stack actions; 40 of the 1,100 runs, 2 of
# the small preset's 35) and one cfl_actions draws the figure: 4,587 and 670. Then the small preset's
# resources.runs_per_job: 17, a job per task for its 17 architectures' final runs: 119 train and 119
# evaluate jobs become 7 train_final_group1 and 7 evaluate_final_group1 (670 -> 446). Then the same
# setting groups the CFL runs: a language's 7 runs train in one job (marked reversal: 5, and the 2
# that log their stack actions in a second), its 7 models are evaluated in one: 33 cfl_train, 2
# cfl_train_actions and 35 cfl_evaluate jobs become 6 and 5 (446 -> 387). Then its 7 models' selections
# in one: 35 cfl_select jobs become 5 (387 -> 357). Then its trials' draws and selections, a job per task
# for its 17 architectures: 119 hparams and 119 select jobs become 7 hparams_group1 and 7 select_group1 (357 -> 133).
# Then its 10 PTB restarts train in one job and are evaluated in one: 10 ptb_train and 10 ptb_evaluate jobs become
# ptb_train_group1 and ptb_evaluate_group1 (133 -> 115). Then its MLflow mirrors, a job per kind of experiment: 13
# tracking_sync jobs become tracking_sync_group1 (the 7 tasks), group2 (the 5 CFL languages) and group3 (PTB) (115 -> 105).
# Then the paper's data by default (data.source: upstream, downloaded): the full settings fetch the 4 splits of each of
# the 7 tasks (28 data_fetch) and repair German passivization's 4 (data_repair) (4,587 -> 4,619); the table1 preset fetches
# question formation's 4, and follows the paper's protocol, 10 trials and 5 seeds: 4 x (10 + 5) = 60 train and
# 4 x 5 = 20 evaluate jobs (60 -> 108). Then the cadence settings (training.progress_interval_s) in a file of their own,
# which the training jobs read as an ancient input: one settings job more (4,619 -> 4,620, 105 -> 106, 32 -> 33, 108 -> 109).
# Then the PTB and SyntaxGym files as inputs, downloaded when ptb.mirror is null (the default): one ptb_download and one
# ptb_suites where PTB runs (4,620 -> 4,622; small 106 -> 108).
DAG_JOBS: dict[str | None, dict[str, int]] = {
    None: {"cfl_generate": 5, "data_generate": 7, "settings": 9, "cfl_train": 1060, "cfl_train_actions": 40, "data_summarize": 7, "hparams": 119,
           "tracking": 1, "cfl_select": 35, "data_report": 1, "train": 1785, "cfl_evaluate": 35, "select": 119,
           "cfl_figures": 1, "tracking_sync": 13, "curves": 7, "evaluate": 595, "aggregate": 1, "report": 1, "html": 7,
           "ptb_train": 350, "ptb_evaluate": 350, "ptb_select": 35, "ptb_report": 1, "ptb_html": 2, "cfl_actions": 1, "all": 1,
           "data_fetch": 28, "data_repair": 4, "ptb_download": 1, "ptb_suites": 1, "total": 4622},
    "small": {"cfl_generate": 5, "data_generate": 7, "settings": 9, "data_summarize": 7, "hparams_group1": 7,
              "tracking": 1, "data_report": 1, "select_group1": 7, "train_final_group1": 7,
              "cfl_figures": 1, "curves": 7, "evaluate_final_group1": 7, "aggregate": 1, "report": 1, "html": 7,
              **{f"tracking_sync_group{number}": 1 for number in (1, 2, 3)}, "ptb_train_group1": 1, "ptb_evaluate_group1": 1,
              "ptb_select": 5, "ptb_report": 1, "ptb_html": 2, "cfl_actions": 1, "all": 1, "ptb_download": 1, "ptb_suites": 1,
              **{f"cfl_train_{language}_group1": 1 for language in ("marked_reversal", "unmarked_reversal", "padded_reversal", "dyck_2", "hardest_cfl")},
              "cfl_train_marked_reversal_group2": 1,
              **{f"cfl_{command}_{language}_group1": 1 for command in ("select", "evaluate")
                 for language in ("marked_reversal", "unmarked_reversal", "padded_reversal", "dyck_2", "hardest_cfl")},
              "total": 108},
    "ci": {"data_generate": 1, "settings": 7, "data_summarize": 1, "hparams": 2, "tracking": 1, "data_report": 1, "train": 8,
           "select": 2, "curves": 1, "evaluate": 4, "aggregate": 1, "tracking_sync": 1, "report": 1, "html": 1, "all": 1,
           "total": 33},
    "table1": {"data_fetch": 4, "data_generate": 1, "settings": 7, "data_summarize": 1, "hparams": 4, "tracking": 1, "data_report": 1,
               "train": 60, "select": 4, "curves": 1, "evaluate": 20, "aggregate": 1, "tracking_sync": 1, "report": 1,
               "html": 1, "all": 1, "total": 109},
}


# resources.runs_per_job: 2 (not the default): the training and evaluation jobs of each preset, a rule
# per group of a task's runs of a phase in the order architecture x index (dag.run_groups), a job of it
# per task, and the draws and selections of its architectures' trials, a rule per group of 2
# architectures (dag.architecture_groups), and its MLflow mirror's (tracking_sync_group1, of its one
# task); every other rule keeps its jobs. The ci preset's 2 architectures x 2 trials and x 2 seeds
# become 2 jobs each (8 -> 4 training jobs, 4 -> 2 evaluations), its 2 hparams and 2 select jobs 1
# each (33 -> 25 in all); table1's 4 x 10 search runs in 20 jobs, its 4 x 5 final runs in 10 (60 -> 30), their
# 20 evaluations in 10, its 4 hparams and 4 select jobs 2 each (109 -> 65).
GROUPED_JOBS: dict[str, dict[str, int]] = {
    "ci": {"train_search_group1": 1, "train_search_group2": 1, "train_final_group1": 1, "train_final_group2": 1,
           "evaluate_final_group1": 1, "evaluate_final_group2": 1, "hparams_group1": 1, "select_group1": 1, "tracking_sync_group1": 1,
           "total": 25},
    "table1": {**{f"train_search_group{number}": 1 for number in range(1, 21)}, **{f"train_final_group{number}": 1 for number in range(1, 11)},
               **{f"evaluate_final_group{number}": 1 for number in range(1, 11)},
               **{f"{command}_group{number}": 1 for command in ("hparams", "select") for number in (1, 2)}, "tracking_sync_group1": 1,
               "total": 65},
}


@pytest.mark.e2e
@pytest.mark.parametrize("preset", ["small", "ci", "table1"])
def test_each_presets_dry_run_lists_the_same_jobs(workflow_copy: Callable[[dict[str, Any]], Path], preset: str) -> None:
    directory = workflow_copy({"preset": preset})
    result = run_snakemake(directory, "-n", "--workflow-profile", "none", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert job_counts(output) == DAG_JOBS[preset]


@pytest.mark.e2e
@pytest.mark.parametrize("preset", ["ci", "table1"])
def test_two_runs_per_job_train_and_evaluate_each_group_of_runs_in_one_job_and_keep_one_output_per_run(
    workflow_copy: Callable[[dict[str, Any]], Path], preset: str
) -> None:
    directory = workflow_copy({"preset": preset, "resources": {"runs_per_job": 2}})
    settings = resolution.resolve({**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": preset})
    result = run_snakemake(directory, "-n", "-p", "--workflow-profile", "none", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    expected = {rule: count for rule, count in DAG_JOBS[preset].items() if rule not in ("train", "evaluate", "hparams", "select", "tracking_sync")}
    expected |= GROUPED_JOBS[preset]
    assert job_counts(output) == expected
    commands = [line for line in output.splitlines() if line.startswith("Shell command: stacklm ")]
    final = next(line for line in commands if line.startswith("Shell command: stacklm train") and "--phase final" in line and "--architecture Tf Tf " in line
                 and line.endswith("final/group1.log 2>&1"))  # the first group, wherever the dry run lists it
    assert "--seed 1 2 " in final and "--hparams results/search/question-formation/tf/best.json results/search/question-formation/tf/best.json " in final
    assert (" --out results/runs/question-formation/tf/final/1 results/runs/question-formation/tf/final/2"
            " --log logs/train/question-formation/tf/final/1.log logs/train/question-formation/tf/final/2.log") in final
    assert final.endswith("> logs/train/question-formation/final/group1.log 2>&1")
    search = next(line for line in commands if line.startswith("Shell command: stacklm train") and "--phase search" in line and "--architecture Tf Tf " in line
                  and " --trial 1 2 " in line)
    assert f"--seed {transformations.run_seed('search', 1)} {transformations.run_seed('search', 2)} --trial 1 2 " in search  # seeds no final run takes
    assert "--hparams results/search/question-formation/tf/trial1.json results/search/question-formation/tf/trial2.json " in search
    evaluation = next(line for line in commands if line.startswith("Shell command: stacklm evaluate") and "/tf/final/1 " in line)
    assert ("--run results/runs/question-formation/tf/final/1 results/runs/question-formation/tf/final/2 " in evaluation
            and " --out results/runs/question-formation/tf/final/1/metrics.parquet results/runs/question-formation/tf/final/2/metrics.parquet"
            " --log logs/evaluate/question-formation/tf/final/1.log logs/evaluate/question-formation/tf/final/2.log " in evaluation)
    assert evaluation.endswith("> logs/evaluate/question-formation/final/group1.log 2>&1")
    draw = next(line for line in commands if line.startswith("Shell command: stacklm hparams") and "--architecture Tf " in line)
    assert "--architecture Tf " in draw and " --out results/search/question-formation/tf/trial1.json" in draw
    assert draw.endswith("> logs/hparams/question-formation/group1.log 2>&1")
    selection = next(line for line in commands if line.startswith("Shell command: stacklm select") and "/tf/trial1.json " in line)
    trials = " ".join(f"results/search/question-formation/tf/trial{trial}.json" for trial in transformations.trials(settings.search))
    curves = " ".join(f"results/runs/question-formation/tf/search/{trial}/train.parquet" for trial in transformations.trained_trials(settings.search))
    assert f"--hparams {trials} --curves {curves} --hparams " in selection  # Tf's trials, then the next architecture's
    assert " --out results/search/question-formation/tf/best.json results/search/question-formation/" in selection
    assert selection.endswith("> logs/select/question-formation/group1.log 2>&1")


@pytest.mark.e2e
def test_the_small_presets_grouped_ptb_jobs_name_each_restarts_files(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({"preset": "small"})
    result = run_snakemake(directory, "-n", "-p", "--workflow-profile", "none", "--configfile", "test.yaml", "--", ptb.METRICS)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    settings = resolution.resolve({**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": "small"})
    restarts = ptb.runs(settings.ptb)
    assert len(restarts) <= settings.resources.runs_per_job  # one group
    commands = [line for line in output.splitlines() if line.startswith("Shell command: stacklm ptb ")]
    (training,) = [line for line in commands if line.startswith("Shell command: stacklm ptb train")]
    models = " ".join(str(run["ptb_model"]) for run in restarts)
    assert training.startswith(f"Shell command: stacklm ptb train --model {models} --restart {' '.join(str(run['restart']) for run in restarts)} ")
    assert " --out " + " ".join(ptb.RUN_DIR.format(**run) for run in restarts) + " --log " + " ".join(ptb.TRAIN_LOG.format(**run) for run in restarts) in training
    assert f" --cadence {resolution.settings_file('cadence')} " in training  # ptb.progress_interval_s: not an option
    assert training.endswith("> logs/ptb/train/group1.log 2>&1")
    (evaluation,) = [line for line in commands if line.startswith("Shell command: stacklm ptb evaluate")]
    assert evaluation.startswith("Shell command: stacklm ptb evaluate --run " + " ".join(ptb.RUN_DIR.format(**run) for run in restarts) + " ")
    assert " --out " + " ".join(ptb.RUN_METRICS.format(**run) for run in restarts) + " --log " + " ".join(ptb.EVALUATE_LOG.format(**run) for run in restarts) in evaluation


@pytest.mark.e2e
def test_grouped_draws_and_selections_write_each_architectures_own(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    """A real run of two tasks' hparams_group1 and select_group1 (a single trial: no training): a
    rule made in the Snakefile's loop runs its shell line after the loop has ended, so each
    file must hold its own task's and architecture's draw."""
    tasks, architectures = ["question-formation", "passivization"], ["Tf", "LSTM+Sup", "RNN"]
    directory = workflow_copy({"preset": "ci", "tasks": tasks, "architectures": architectures, "search": {"trials": 1}, "resources": {"runs_per_job": 2}})
    targets = [transformations.BEST_HPARAMS.format(task=task, architecture=shared.architecture_slug(name)) for task in tasks for name in architectures]
    result = run_snakemake(directory, "--cores", "1", "--workflow-profile", "none", "--configfile", "test.yaml", "--", *targets)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "hparams_group2" in output and "select_group2" in output  # 3 architectures, 2 to a job
    settings = resolution.resolve({**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": "ci"}, {"search": {"trials": 1}})
    for task in tasks:
        for name in architectures:
            drawn = search_stage.draw_hyperparameters(settings.search, task, name, 1)
            best = json.loads((directory / transformations.BEST_HPARAMS.format(task=task, architecture=shared.architecture_slug(name))).read_text())
            assert best == {**drawn.__dict__, "max_epochs": settings.final.max_epochs}, (task, name)


@pytest.mark.e2e
def test_dry_run_of_the_full_config_lists_every_job(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({})
    result = run_snakemake(directory, "-n", "--workflow-profile", "none")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    listed = re.findall(r"^(?:local)?rule (\w+):$", output, flags=re.MULTILINE)
    assert len(listed) == counts["total"]
    settings = resolution.resolve(yaml.safe_load((ROOT / "config.yaml").read_text()))
    pairs = len(settings.tasks) * len(settings.architectures)
    seeds = len(settings.final.seeds)
    expected = {
        "settings": len(resolution.SETTINGS_READ),  # one file per kind of job, its sections only
        "tracking": 1,
        "tracking_sync": len(settings.tasks) + len(settings.cfl.languages) + 1,  # one per MLflow experiment, PTB's included
        "ptb_train": len(settings.ptb.models) * settings.ptb.restarts,  # the paper's grid: >= 40 training jobs
        "ptb_evaluate": len(settings.ptb.models) * settings.ptb.restarts,  # test perplexity and SG score of every restart
        "ptb_select": len(settings.ptb.models),
        "hparams": pairs,
        "train": pairs * (len(transformations.trained_trials(settings.search)) + seeds),
        "select": pairs,
        "evaluate": pairs * seeds,
        "aggregate": 1,
        "report": 1,
        "all": 1,
    }
    assert {rule: counts.get(rule) for rule in expected} == expected
    assert counts == DAG_JOBS[None]


@pytest.mark.e2e
def test_models_metrics_and_report_need_no_mlflow_job(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({"preset": "ci"})
    targets = [transformations.REPORT_DOCUMENT, "results/runs/question-formation/tf/final/1/metrics.parquet"]
    result = run_snakemake(directory, *targets, "-n", "--workflow-profile", "none", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    assert counts["report"] == 1 and counts["train"] > 0 and counts["evaluate"] > 0
    assert "tracking" not in counts and "tracking_sync" not in counts
    result = run_snakemake(directory, pipeline.TRACKING_MANIFEST.format(experiment="question-formation"), "-n", "--workflow-profile", "none", "--configfile", "test.yaml")
    counts = job_counts(result.stdout + result.stderr)
    assert counts["tracking"] == 1 and counts["tracking_sync"] == 1 and counts["train"] > 0 and counts["evaluate"] > 0
    assert "report" not in counts


def test_tracking_sync_reads_every_run_of_its_experiment() -> None:
    settings = resolution.resolve({**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": "ci"})
    task = settings.tasks[0]
    records = pipeline.tracking_records(settings, task)
    assert sorted(records["curves"]) == sorted(
        transformations.RUN_CURVE.format(task=task, architecture=shared.architecture_slug(name), phase=phase, index=index)
        for name in settings.architectures
        for phase, indices in (("search", transformations.trials(settings.search)), ("final", settings.final.seeds))
        for index in indices
    )
    assert records["metrics"] == [path for path in transformations.final_metrics(settings) if f"/{task}/" in path]
    assert pipeline.tracking_experiments(settings) == [*settings.tasks, *settings.cfl.languages]
    assert f"results/tracking/{task}.json" in pipeline.all_targets(settings)
    with pytest.raises(StacklmError, match="no task, CFL language or PTB experiment is named 'no-such-task'"):
        pipeline.tracking_records(settings, "no-such-task")


def test_runs_per_job_groups_each_kinds_mlflow_mirrors() -> None:
    settings = resolution.resolve({**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": "small"})
    assert pipeline.tracking_groups(dataclasses.replace(settings, resources=dataclasses.replace(settings.resources, runs_per_job=1))) == []
    assert not re.fullmatch(pipeline.single_experiments(settings), "dyck-2")
    groups = pipeline.tracking_groups(settings)
    assert [group.experiments for group in groups] == [settings.tasks, settings.cfl.languages, ("ptb",)]  # a kind waits for its own runs only
    assert [group.rule for group in groups] == ["tracking_sync_group1", "tracking_sync_group2", "tracking_sync_group3"]
    assert groups[1].manifests == [pipeline.TRACKING_MANIFEST.format(experiment=name) for name in settings.cfl.languages]
    options = shlex.split(pipeline.tracking_group_options(settings, groups[1]))
    starts = [position for position, word in enumerate(options) if word == "--experiment"]
    assert [options[position + 1] for position in starts] == list(settings.cfl.languages)
    for position, end, name in zip(starts, [*starts[1:], len(options)], settings.cfl.languages):  # each language's own options
        assert shlex.join(options[position:end]) == shlex.join(["--experiment", name]) + " --curves " + " ".join(
            pipeline.tracking_records(settings, name)["curves"]) + " --metrics " + " ".join(pipeline.tracking_records(settings, name)["metrics"]) + " " + (
            pipeline.tracking_log_options(settings, name))
    inputs = pipeline.tracking_group_inputs(settings, groups[0])
    assert inputs["curves"] == [path for task in settings.tasks for path in pipeline.tracking_inputs(settings, task)["curves"]]
    assert inputs["metrics"] == [path for task in settings.tasks for path in pipeline.tracking_inputs(settings, task)["metrics"]]
    wider = dataclasses.replace(settings, resources=dataclasses.replace(settings.resources, runs_per_job=3))
    assert [group.experiments for group in pipeline.tracking_groups(wider)] == [
        settings.tasks[:3], settings.tasks[3:6], settings.tasks[6:], settings.cfl.languages[:3], settings.cfl.languages[3:], ("ptb",)]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("profile", "device", "gpus"),
    [("profiles/cpu", "cpu", "gpu=0"), ("profiles/slurm", "cuda", "gpu=1")],
)
def test_profiles_choose_the_device_and_the_slurm_resources(
    workflow_copy: Callable[[dict[str, Any]], Path], profile: str, device: str, gpus: str
) -> None:
    directory = workflow_copy({"preset": "ci"})
    target = "results/runs/question-formation/lstm+sup/final/1/model.pt"
    result = run_snakemake(directory, target, "-n", "--profile", profile, "--configfile", "test.yaml")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    output = result.stdout + result.stderr
    train = [line for line in output.splitlines() if line.startswith("Shell command: stacklm train")]
    assert train and all(f"--device {device}" in line for line in train)
    assert re.search(rf"resources:.*{gpus}", output)
    if profile == "profiles/slurm":
        # Sup family: config.yaml resources, not the profile's defaults; the account survives
        # the auto-loaded profiles/default.
        assert re.search(r"resources:.*slurm_account=CHANGEME, slurm_partition=gpu, runtime=480, gpu=1", output)
        assert "mem_mb=8000" in output


@pytest.mark.e2e
def test_the_slurm_profile_gives_a_cfl_training_job_its_time_and_memory(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    """A CFL grid run on SLURM: config.yaml's resources.cfl (480 min, 4000 MB), not the profile's
    default 30 minutes, which would stop a run of hours three times and fail it."""
    directory = workflow_copy({"preset": "ci", "cfl": {"languages": ["marked-reversal"], "models": ["cfl/NS"], "learning_rates": [0.01], "restarts": 1}})
    target = "results/cfl/runs/marked-reversal/cfl-ns/lr0.01-r1/model.pt"
    result = run_snakemake(directory, target, "-n", "--profile", "profiles/slurm", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert re.search(r"rule cfl_train:(.|\n)*resources:.*runtime=480", output), output[-3000:]
    assert "mem_mb=4000" in output


def test_default_profile_stays_executor_neutral() -> None:
    keys = set(yaml.safe_load((ROOT / "profiles" / "default" / "profile.yaml").read_text()))
    assert keys == {"printshellcmds", "rerun-incomplete", "keep-going", "show-failed-logs", "scheduler"}


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"architectures": ["Tf", "Tf+Quantum"]}, "config key 'architectures[1]': unknown architecture 'Tf+Quantum'"),
        ({"search": {"trials": 0}}, "config key 'search.trials'"),
        ({"training": {"parameter_budget": 0}}, "config key 'training.parameter_budget'"),
        # A preset's values are checked as the user's are: the schema sees the resolved settings.
        ({"preset": "ci", "presets": {"ci": {"search": {"trials": "2"}}}}, "config key 'search.trials': '2' is not of type 'integer'"),
        ({"preset": "ci", "presets": {"ci": {"model": {"dropout": 1.5}}}}, "config key 'model.dropout'"),
        ({"preset": "ci", "presets": {"ci": {"final": {"seeds": [1, 1]}}}}, "config key 'final.seeds'"),
        ({"preset": "ci", "presets": {"ci": {"training": {"parameter_budget": -1}}}}, "config key 'training.parameter_budget'"),
    ],
)
def test_invalid_config_is_rejected_before_any_job_naming_the_key(
    workflow_copy: Callable[[dict[str, Any]], Path], overrides: dict[str, Any], message: str
) -> None:
    directory = workflow_copy(overrides)
    result = run_snakemake(directory, "--cores", "1", "--configfile", "test.yaml")
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr and 'File "' not in result.stderr
    assert not (directory / "results").exists()


@pytest.mark.e2e
def test_a_users_configfile_key_wins_over_the_presets(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({"preset": "ci", "search": {"trials": 3}})
    result = run_snakemake(directory, "-n", "--workflow-profile", "none", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    ci = yaml.safe_load((ROOT / "config.yaml").read_text())["presets"]["ci"]
    pairs = len(ci["tasks"]) * len(ci["architectures"])
    assert ci["search"]["trials"] != 3
    assert counts["train"] == pairs * (3 + len(ci["final"]["seeds"]))  # 3 search trials, the preset's seeds
    searched = re.findall(r"wildcards: task=question-formation, architecture=tf, phase=search, index=(\d+)", output)
    assert sorted(searched) == ["1", "2", "3"]


@pytest.mark.e2e
def test_the_ci_preset_on_the_upstream_source_takes_every_split_from_the_mirror(workflow_copy: Callable[[dict[str, Any]], Path], upstream_dir: Path) -> None:
    """The data stage of a ``data.source: upstream`` run of the ci preset, the reference copies as
    mirror: each split is the first lines of McCoy et al.'s file (the generalization split with its
    linear targets added), and the data folder counts them as upstream's."""
    sizes = {"train": 200, "validation": 50, "test": 2000, "generalization": 50}  # test: McCoy's repeated source (lines 443, 1999) included
    directory = workflow_copy({"preset": "ci", "data": {"source": "upstream", "upstream_mirror": str(upstream_dir), "sizes": sizes}})
    result = run_snakemake(directory, "--cores", "2", "--configfile", "test.yaml", "--", "results/data/question-formation/summary.parquet")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    data = directory / "results/data/question-formation"
    names = {"train": "question.train", "validation": "question.dev", "test": "question.test"}
    for split, name in names.items():
        lines = (upstream_dir / "question-formation" / name).read_text(encoding="utf-8").splitlines(keepends=True)
        assert (data / f"{split}.tsv").read_text(encoding="utf-8") == "".join(lines[: sizes[split]])
    upstream_generalization = (upstream_dir / "question-formation/question.gen").read_text(encoding="utf-8").splitlines()[:50]
    assert [line.rsplit("\t", 1)[0] for line in (data / "generalization.tsv").read_text(encoding="utf-8").splitlines()] == upstream_generalization
    assert json.loads((data / "construction.json").read_text()) == {f"upstream {split}": size for split, size in sizes.items()}
    assert "git blob a3e63ea44122" in (directory / "logs/data/fetch/question-formation/train.log").read_text()


@pytest.mark.e2e
def test_runs_per_step_gives_a_gpu_job_the_runs_of_one_task_and_architecture(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    """resources.runs_per_step: 2 on the ci preset (2 architectures x 2 trials, x 2 seeds): each training job
    trains the 2 runs of one architecture, on a GPU (its `gpu` resource; no profile caps it here)."""
    directory = workflow_copy({"preset": "ci", "resources": {"runs_per_step": 2}})
    result = run_snakemake(directory, "-n", "-p", "--workflow-profile", "none", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    trainings = [line for line in output.splitlines() if line.startswith("Shell command: stacklm train")]
    assert len(trainings) == 4 and all(re.search(r"--architecture (\S+) \1 --seed", line) and "--device cuda" in line for line in trainings)
