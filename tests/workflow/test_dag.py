"""The DAG of the full config (dry-run), the profiles, and configs rejected before any job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from stacklm import workflow
from stacklm.errors import StacklmError

from tests.workflow.snakemake_runs import ROOT, run_snakemake


def job_counts(output: str) -> dict[str, int]:
    """The "Job stats" table Snakemake prints: rule -> job count (and "total")."""
    table = output.split("Job stats:")[1]
    return {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)$", table, flags=re.MULTILINE)}


def test_dry_run_of_the_full_config_lists_every_job(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({})
    result = run_snakemake(directory, "-n", "--workflow-profile", "none")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    listed = re.findall(r"^(?:local)?rule (\w+):$", output, flags=re.MULTILINE)
    assert len(listed) == counts["total"]
    settings = workflow.resolve(yaml.safe_load((ROOT / "config.yaml").read_text()))
    pairs = len(settings["tasks"]) * len(settings["architectures"])
    seeds = len(settings["final"]["seeds"])
    expected = {
        "settings": len(workflow.SETTINGS_READ),  # one file per kind of job, its sections only
        "tracking": 1,
        "tracking_sync": len(settings["tasks"]) + len(settings["cfl"]["languages"]),  # one per MLflow experiment
        "hparams": pairs,
        "train": pairs * (len(workflow.trained_trials(settings)) + seeds),
        "select": pairs,
        "evaluate": pairs * seeds,
        "aggregate": 1,
        "report": 1,
        "all": 1,
    }
    assert {rule: counts.get(rule) for rule in expected} == expected


def test_models_metrics_and_report_need_no_mlflow_job(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({"preset": "ci"})
    targets = [workflow.REPORT_DOCUMENT, "results/runs/question-formation/tf/final/1/metrics.parquet"]
    result = run_snakemake(directory, *targets, "-n", "--workflow-profile", "none", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    counts = job_counts(output)
    assert counts["report"] == 1 and counts["train"] > 0 and counts["evaluate"] > 0
    assert "tracking" not in counts and "tracking_sync" not in counts
    result = run_snakemake(directory, workflow.TRACKING_MANIFEST.format(experiment="question-formation"), "-n", "--workflow-profile", "none", "--configfile", "test.yaml")
    counts = job_counts(result.stdout + result.stderr)
    assert counts["tracking"] == 1 and counts["tracking_sync"] == 1 and counts["train"] > 0 and counts["evaluate"] > 0
    assert "report" not in counts


def test_tracking_sync_reads_every_run_of_its_experiment() -> None:
    settings = workflow.resolve({**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": "ci"})
    task = settings["tasks"][0]
    records = workflow.tracking_records(settings, task)
    assert sorted(records["curves"]) == sorted(
        workflow.RUN_CURVE.format(task=task, architecture=workflow.architecture_slug(name), phase=phase, index=index)
        for name in settings["architectures"]
        for phase, indices in (("search", workflow.trials(settings)), ("final", settings["final"]["seeds"]))
        for index in indices
    )
    assert records["metrics"] == [path for path in workflow.final_metrics(settings) if f"/{task}/" in path]
    assert workflow.tracking_experiments(settings) == [*settings["tasks"], *settings["cfl"]["languages"]]
    assert f"results/tracking/{task}.json" in workflow.all_targets(settings)
    with pytest.raises(StacklmError, match="no task or CFL language is named 'no-such-task'"):
        workflow.tracking_records(settings, "no-such-task")


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


def test_default_profile_stays_executor_neutral() -> None:
    keys = set(yaml.safe_load((ROOT / "profiles" / "default" / "profile.yaml").read_text()))
    assert keys == {"printshellcmds", "rerun-incomplete", "keep-going", "show-failed-logs", "scheduler"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"architectures": ["Tf", "Tf+Quantum"]}, "config key 'architectures[1]': unknown architecture 'Tf+Quantum'"),
        ({"search": {"trials": 0}}, "config key 'search.trials'"),
        ({"preset": "ci", "presets": {"ci": {"search": {"trials": 0}}}}, "config key 'search.trials'"),
        # The schema catches a budget <= 0 in the settings; stacklm one that a preset sets.
        ({"training": {"parameter_budget": 0}}, "On instance['training']['parameter_budget']"),
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
    assert not (directory / "results").exists()
