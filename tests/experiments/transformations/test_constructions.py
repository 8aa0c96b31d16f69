"""End to end: ``stacklm train``, ``stacklm evaluate``, then ``stacklm constructions`` on small generated sets."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stacklm.data.dataset import make_splits, write_dataset
from stacklm.data.examples import write_examples
from stacklm.data.upstream import read_upstream
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.errors import StacklmError
from stacklm.experiments.transformations import commands
from stacklm.tasks import get_task

SIZES = SplitSizes(train=300, validation=30, test=30, generalization=60)
SETTINGS = {
    "training": {"parameter_budget": 8000, "examples_per_checkpoint": 300, "progress_interval_s": 0},
    "evaluation": {"curve_examples": 0, "tokens_per_batch": 512},
}


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    commands.register(subparsers)
    arguments = parser.parse_args(list(argv))
    return arguments.func(arguments)


def write_data(directory: Path, task: str, seed: int) -> Path:
    for name, examples in build_splits(get_task(task), SIZES, seed=seed).items():
        write_examples(directory / f"{name}.tsv", examples)
    return directory


def train_and_evaluate(directory: Path, task: str, data_dir: Path, seed: int) -> Path:
    """A small Tf of one epoch, evaluated: its folder."""
    (directory / "settings.json").write_text(json.dumps(SETTINGS))
    (directory / "hp.json").write_text(json.dumps({"learning_rate": 0.005, "tokens_per_batch": 256, "max_epochs": 1}))
    run_dir = directory / f"{task}-{seed}"
    common = ["--task", task, "--data-dir", str(data_dir), "--settings", str(directory / "settings.json"), "--device", "cpu", "--threads", "1"]
    assert run("train", *common, "--architecture", "Tf", "--hparams", str(directory / "hp.json"), "--seed", str(seed),
               "--checkpoint", str(directory / f"{task}-{seed}.pt"), "--out", str(run_dir)) == 0
    assert run("evaluate", *common, "--run", str(run_dir), "--out", str(run_dir / "metrics.parquet")) == 0
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("runs")
    question = write_data(directory / "question-formation", "question-formation", 1)
    tense = write_data(directory / "tense-reinflection", "tense-reinflection", 1)
    return {
        "data": question,
        "other data": write_data(directory / "question-formation-2", "question-formation", 2),
        "1": train_and_evaluate(directory, "question-formation", question, 1),
        "2": train_and_evaluate(directory, "question-formation", question, 2),
        "tense data": tense,
        "tense": train_and_evaluate(directory, "tense-reinflection", tense, 1),
    }


def constructions(data_dir: Path, *folders: Path, out: Path) -> int:
    return run("constructions", "--data-dir", str(data_dir), "--markdown", str(out / "constructions.md"), "--parquet", str(out / "constructions.parquet"),
               "--device", "cpu", "--threads", "1", *map(str, folders))


def test_one_row_per_run_and_construction_whose_weighted_means_are_the_runs_metrics(runs: dict[str, Path], tmp_path: Path) -> None:
    assert constructions(runs["data"], runs["1"], runs["2"], out=tmp_path) == 0
    rows = pq.read_table(tmp_path / "constructions.parquet").to_pylist()
    task = get_task("question-formation")
    generalization = build_splits(task, SIZES, seed=1).generalization
    counts = {label: sum(task.generalization_construction(example.source) == label for example in generalization) for label in ("SRC", "ORC")}
    assert [(row["seed"], row["construction"], row["count"]) for row in rows] == [(seed, label, counts[label]) for seed in (1, 2) for label in ("SRC", "ORC")]
    assert {row["architecture"] for row in rows} == {"Tf"} and {row["task"] for row in rows} == {"question-formation"}
    for seed in ("1", "2"):
        metrics = {(row["rule"], row["metric"]): row["value"] for row in pq.read_table(runs[seed] / "metrics.parquet").to_pylist() if row["split"] == "generalization"}
        own = [row for row in rows if row["run"] == str(runs[seed])]
        for column, key in (("full_accuracy_hierarchical", ("hierarchical", "full_accuracy")), ("full_accuracy_linear", ("linear", "full_accuracy")),
                            ("partial_accuracy_hierarchical", ("hierarchical", "partial_accuracy")), ("partial_accuracy_linear", ("linear", "partial_accuracy"))):
            assert sum(row[column] * row["count"] for row in own) / len(generalization) == pytest.approx(metrics[key], rel=1e-12, abs=1e-15)
    page = (tmp_path / "constructions.md").read_text()
    assert "| architecture | seed | construction | examples | FA hier. | FA lin. | PA hier. | PA lin. |" in page
    assert f"| Tf | 2 | ORC | {counts['ORC']} | {rows[3]['full_accuracy_hierarchical']:.3f} |" in page
    assert "- SRC: a subject relative clause" in page and "SRC or ORC" not in page  # the constructions present only


def test_a_missing_model_other_data_and_other_tasks_are_named(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(StacklmError, match=re.escape(f"{tmp_path / 'absent' / 'model.pt'}: model file not found")):
        constructions(runs["data"], tmp_path / "absent", out=tmp_path)
    with pytest.raises(StacklmError, match=re.escape(f"the data in {runs['other data']} differs from the data {runs['1']} was trained on")):
        constructions(runs["other data"], runs["1"], out=tmp_path)
    with pytest.raises(StacklmError, match=re.escape(f"{runs['tense'] / 'model.pt'}: a run of 'tense-reinflection', not of 'question-formation' as the first run")):
        constructions(runs["data"], runs["1"], runs["tense"], out=tmp_path)
    with pytest.raises(StacklmError, match="a run of 'tense-reinflection', whose generalization set has no constructions"):
        constructions(runs["tense data"], runs["tense"], out=tmp_path)
    assert not (tmp_path / "constructions.md").exists()


def upstream_data(directory: Path, upstream_dir: Path) -> Path:
    """A data folder of McCoy et al.'s real files (their first lines), as the upstream source writes it."""
    task = get_task("question-formation")
    upstream = {split: read_upstream(task.name, split, upstream_dir) for split in ("train", "validation", "test", "generalization")}
    splits = make_splits(task, SIZES, 1, upstream)
    write_dataset(task, splits, directory)
    return directory


def test_a_run_is_scored_on_other_data_only_when_asked_and_the_rows_say_so(runs: dict[str, Path], tmp_path: Path, upstream_dir: Path) -> None:
    """A model trained on generated data, scored on McCoy et al.'s real generalization set."""
    real = upstream_data(tmp_path / "mccoy", upstream_dir)
    common = ["--task", "question-formation", "--data-dir", str(real), "--settings", str(runs["1"].parent / "settings.json"), "--device", "cpu",
              "--threads", "1", "--run", str(runs["1"]), "--out", str(tmp_path / "metrics.parquet")]
    with pytest.raises(StacklmError, match=re.escape(f"the data in {real} differs from the data {runs['1']} was trained on") + ".*--other-data"):
        run("evaluate", *common)
    assert run("evaluate", *common, "--other-data") == 0
    rows = pq.read_table(tmp_path / "metrics.parquet").to_pylist()
    own = pq.read_table(runs["1"] / "metrics.parquet").to_pylist()
    assert {row["data_version"] for row in rows} == {own[0]["data_version"]}  # the data it was trained on
    scored = {json.dumps(json.loads(row["config"])["scored_data"], sort_keys=True) for row in rows}
    assert len(scored) == 1 and json.loads(scored.pop())["directory"] == str(real)
    assert "scored_data" not in json.loads(own[0]["config"])
    assert json.loads(own[0]["config"])["data"] == dict.fromkeys(("train", "validation", "test", "generalization"), "drawn")
    generalization = {(row["rule"], row["metric"]): row["value"] for row in rows if row["split"] == "generalization"}
    assert generalization != {(row["rule"], row["metric"]): row["value"] for row in own if row["split"] == "generalization"}
    assert run("constructions", "--data-dir", str(real), "--markdown", str(tmp_path / "c.md"), "--device", "cpu", "--threads", "1",
               "--other-data", str(runs["1"])) == 0
    assert f"`{real}` (runs trained on other data)" in (tmp_path / "c.md").read_text()


def test_a_run_records_which_splits_of_its_data_are_upstream_files(tmp_path: Path, upstream_dir: Path) -> None:
    real = upstream_data(tmp_path / "mccoy", upstream_dir)
    run_dir = train_and_evaluate(tmp_path, "question-formation", real, 1)
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    assert json.loads(rows[0]["config"])["data"] == dict.fromkeys(("train", "validation", "test", "generalization"), "upstream")
