import importlib.metadata
import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stacklm.evaluation.metrics import MetricValue
from stacklm.tracking.records import METRICS_SCHEMA, RunMetadata, code_version, commit, curve_table, data_version, metrics_table, write_table
from stacklm.training.run_state import CheckpointRecord

METADATA = RunMetadata(
    task="question-formation", architecture="Tf+Nd", phase="final", trial=None, seed=3, learning_rate=1e-4, tokens_per_batch=900,
    parameters=200_123, data_version="ab" * 32, code_version="0.1.0", wall_time_s=12.5, tokens_per_s=1000.0, config=json.dumps({"a": 1}),
)


def test_metrics_parquet_has_the_contract_columns_and_types(tmp_path: Path) -> None:
    rows = [MetricValue("test", None, "full_accuracy", 0.75), MetricValue("generalization", "linear", "partial_accuracy", 0.5)]
    write_table(metrics_table(rows, METADATA), tmp_path / "metrics.parquet")
    table = pq.read_table(tmp_path / "metrics.parquet")
    assert table.schema.equals(METRICS_SCHEMA)
    assert table.column_names == [
        "task", "architecture", "phase", "trial", "seed", "split", "rule", "metric", "value", "learning_rate", "tokens_per_batch",
        "parameters", "data_version", "code_version", "wall_time_s", "tokens_per_s", "config",
    ]
    records = table.to_pylist()
    assert records[0]["rule"] is None and records[0]["trial"] is None and records[1]["rule"] == "linear"
    assert [record["value"] for record in records] == [0.75, 0.5]
    assert {record["architecture"] for record in records} == {"Tf+Nd"}


def test_train_parquet_has_one_row_per_checkpoint(tmp_path: Path) -> None:
    curve = [CheckpointRecord(index, 1, 10 * index, 100 * index, 1e-4, 3.0, 2.0 / index, True) for index in (1, 2)]
    write_table(curve_table(curve, METADATA), tmp_path / "train.parquet")
    records = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert [record["validation_cross_entropy"] for record in records] == [2.0, 1.0]
    assert records[1]["seed"] == 3 and records[1]["examples_seen"] == 200
    assert records[0]["test_full_accuracy"] is None  # no generalization curve was scored


def test_train_parquet_carries_the_generalization_curves(tmp_path: Path) -> None:
    scores = [{"test_full_accuracy": 0.5, "linear_partial_accuracy": 0.25}, {}]
    curve = [CheckpointRecord(index, 1, 10, 100, 1e-4, 3.0, 2.0, True, scores[index - 1]) for index in (1, 2)]
    write_table(curve_table(curve, METADATA), tmp_path / "train.parquet")
    records = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert [record["test_full_accuracy"] for record in records] == [0.5, None]
    assert [record["linear_partial_accuracy"] for record in records] == [0.25, None]
    assert records[0]["hierarchical_full_accuracy"] is None
    with pytest.raises(ValueError, match="test_accuracy"):
        curve_table([CheckpointRecord(1, 1, 10, 100, 1e-4, 3.0, 2.0, True, {"test_accuracy": 1.0})], METADATA)


def test_data_version_follows_the_contents(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a\tb\n")
    first = data_version([tmp_path / "train.tsv"])
    (tmp_path / "train.tsv").write_text("a\tc\n")
    assert data_version([tmp_path / "train.tsv"]) != first and len(first) == 64


def test_code_version_names_the_commit() -> None:
    version = code_version()
    assert version.split("+")[0] == importlib.metadata.version("stacklm")
    if (Path(__file__).resolve().parents[2] / ".git").exists():
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, check=True).stdout.strip()
        assert commit(version) == head and len(head) == 40
    assert commit("0.1.0") is None
