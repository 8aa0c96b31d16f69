"""The data stage's lookups."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stacklm.errors import StacklmError
from stacklm.experiments.transformations.data import data_targets, fetch_options, generate_inputs, generate_options
from stacklm.experiments.transformations.settings import DataSettings
from stacklm.settings_file import build


def settings(**data):
    return build(DataSettings, data, "data")


def test_lookups_for_each_source(upstream_dir):
    generate = settings(source="generate")
    assert generate_inputs(generate, "german-passivization") == {}
    assert generate_options(generate, "question-formation") == "--seed 1 --train 100000 --validation 1000 --test 10000 --generalization 10000"
    assert fetch_options(generate) == ""
    downloaded = settings(seed=7, sizes={"train": 5, "test": 6, "validation": 7, "generalization": 8})
    # Every split is upstream's; the repair is a step of the DAG for German passivization only.
    assert generate_inputs(downloaded, "german-passivization") == {
        split: f"results/upstream/german-passivization/{split}.repaired.tsv" for split in ("train", "validation", "test", "generalization")}
    assert generate_inputs(downloaded, "tense-reinflection")["train"] == "results/upstream/tense-reinflection/train.tsv"
    assert generate_options(downloaded, "question-formation") == (
        "--seed 7 --train 5 --validation 7 --test 6 --generalization 8"
        + "".join(f" --{split}-file results/upstream/question-formation/{split}.tsv" for split in ("train", "validation", "test", "generalization")))
    assert fetch_options(downloaded) == ""
    mirrored = settings(upstream_mirror=str(upstream_dir))
    assert fetch_options(mirrored) == f"--mirror {upstream_dir}"
    assert set(generate_inputs(mirrored, "question-formation")) == {"train", "validation", "test", "generalization"}
    assert data_targets(SimpleNamespace(tasks=("question-formation", "german-passivization"))) == ["results/data/question-formation/summary.parquet", "results/data/german-passivization/summary.parquet",
                                      "results/data/report.txt"]


def test_a_train_file_the_mirror_lacks_stops_the_dag_unless_its_split_may_be_drawn(upstream_dir):
    """No copy of tense reinflection's train file is in the reference folder."""
    strict = settings(upstream_mirror=str(upstream_dir))
    with pytest.raises(StacklmError, match=r"config key 'data.upstream_mirror': .*tense-reinflection/tense.train not found "
                                           r"\(tense-reinflection's upstream train file\).*data.missing: generate"):
        generate_inputs(strict, "tense-reinflection")
    lenient = settings(upstream_mirror=str(upstream_dir), missing="generate")
    assert set(generate_inputs(lenient, "tense-reinflection")) == {"validation", "test", "generalization"}
    assert "--train-file" not in generate_options(lenient, "tense-reinflection")


@pytest.mark.parametrize(("preset", "source"), [(None, "upstream"), ("table1", "upstream"), ("table1-fixed-hp", "upstream"), ("small", "generate"), ("ci", "generate")])
def test_config_yaml_data_section_resolves(preset, source):
    """The full settings and the table1 presets take the paper's data; the small presets, offline, draw theirs."""
    from pathlib import Path

    import yaml

    from stacklm.workflow.settings import resolve

    config = yaml.safe_load((Path(__file__).resolve().parents[3] / "config.yaml").read_text())
    config["preset"] = preset
    data = resolve(config).data
    assert data.source == source
    if preset == "ci":
        assert data.sizes.in_distribution + data.sizes.generalization <= 500  # generated in well under a second
