"""stacklm.experiments.transformations.dag: the paths, lookups, resources and targets of the
transformations experiment's DAG."""

from __future__ import annotations

import pytest

import stacklm.experiments.common as shared
import stacklm.experiments.transformations.dag as transformations
import stacklm.workflow.dag as pipeline
from stacklm.errors import StacklmError
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
