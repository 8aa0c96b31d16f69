"""The data: settings and the data stage's lookups."""

from __future__ import annotations

import pytest

from stacklm.experiments.transformations.data import DataSettings, data_settings, data_targets, fetch_options, generate_inputs, generate_options
from stacklm.data.splits import SplitSizes
from stacklm.errors import StacklmError
from stacklm.settings_file import build


def settings(**data):
    return {"tasks": ["question-formation", "german-passivization"], "data": data}


def test_defaults_and_typed_fields():
    assert build(DataSettings, {}) == DataSettings("generate", 1, SplitSizes(), None)
    parsed = build(DataSettings, {"source": "upstream", "seed": 3, "sizes": {"train": 10}, "upstream_mirror": "/m"})
    assert parsed.sizes == SplitSizes(train=10) and parsed.upstream_mirror == "/m"


@pytest.mark.parametrize(
    ("data", "tasks", "message"),
    [
        ({"sead": 1}, None, "config key 'data.sead': unknown"),
        ({"source": "web"}, None, "config key 'data.source': 'web' is not one of 'generate', 'upstream'"),
        ({"seed": "one"}, None, "config key 'data.seed': expected int"),
        ({"upstream_mirror": 3}, None, "config key 'data.upstream_mirror': expected str, got 3"),
        ({"sizes": {"tests": 3}}, None, "config key 'data.sizes.tests': unknown"),
        ({"source": "upstream", "sizes": {"validation": 2000}}, None, "config key 'data.sizes.validation': upstream has 1000"),
        ({}, ["question-formation", "passivisation"], r"config key 'tasks\[1\]': unknown task 'passivisation'"),
    ],
)
def test_bad_settings_name_the_key(data, tasks, message):
    values = settings(**data)
    if tasks is not None:
        values["tasks"] = tasks
    with pytest.raises(StacklmError, match=message):
        data_settings(values)


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
    assert data_targets(generate) == ["results/data/question-formation/summary.parquet", "results/data/german-passivization/summary.parquet",
                                      "results/data/report.txt"]


@pytest.mark.parametrize("preset", [None, "small", "ci"])
def test_config_yaml_data_section_resolves(preset):
    from pathlib import Path

    import yaml

    from stacklm.workflow.settings import apply_preset

    config = yaml.safe_load((Path(__file__).resolve().parents[3] / "config.yaml").read_text())
    config["preset"] = preset
    data = data_settings(apply_preset(config))
    assert data.source == "generate"
    if preset == "ci":
        assert data.sizes.in_distribution + data.sizes.generalization <= 500  # generated in well under a second
