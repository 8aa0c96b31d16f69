"""The data stage's lookups."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stacklm.experiments.transformations.data import data_targets, fetch_options, generate_inputs, generate_options
from stacklm.experiments.transformations.settings import DataSettings
from stacklm.settings_file import build


def settings(**data):
    return build(DataSettings, data, "data")


def test_lookups_for_each_source():
    generate = settings()
    assert generate_inputs(generate, "german-passivization") == {}
    assert generate_options(generate, "question-formation") == "--seed 1 --train 100000 --validation 1000 --test 10000 --generalization 10000"
    assert fetch_options(generate) == ""
    upstream = settings(source="upstream", seed=7, upstream_mirror="/mirror", sizes={"train": 5, "test": 6, "validation": 7, "generalization": 8})
    # The repair is a step of the DAG for German passivization only.
    assert generate_inputs(upstream, "german-passivization") == {
        "validation": "results/upstream/german-passivization/validation.repaired.tsv",
        "generalization": "results/upstream/german-passivization/generalization.repaired.tsv"}
    assert generate_inputs(upstream, "question-formation")["validation"] == "results/upstream/question-formation/validation.tsv"
    assert generate_options(upstream, "question-formation") == (
        "--seed 7 --train 5 --validation 7 --test 6 --generalization 8"
        " --validation-file results/upstream/question-formation/validation.tsv"
        " --generalization-file results/upstream/question-formation/generalization.tsv")
    assert fetch_options(upstream) == "--mirror /mirror"
    assert data_targets(SimpleNamespace(tasks=("question-formation", "german-passivization"))) == ["results/data/question-formation/summary.parquet", "results/data/german-passivization/summary.parquet",
                                      "results/data/report.txt"]


@pytest.mark.parametrize("preset", [None, "small", "ci"])
def test_config_yaml_data_section_resolves(preset):
    from pathlib import Path

    import yaml

    from stacklm.workflow.settings import resolve

    config = yaml.safe_load((Path(__file__).resolve().parents[3] / "config.yaml").read_text())
    config["preset"] = preset
    data = resolve(config).data
    assert data.source == "generate"
    if preset == "ci":
        assert data.sizes.in_distribution + data.sizes.generalization <= 500  # generated in well under a second
