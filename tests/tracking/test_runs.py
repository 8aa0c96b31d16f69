"""The MLflow view of runs built from their Parquet files: keys, params, metrics, curves, digests,
and the files that cannot be mirrored, named."""

import json
import os
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from stacklm.errors import StacklmError
from stacklm.evaluation.metrics import MetricValue
from stacklm.tracking.records import CURVE_SCHEMA, RunMetadata, curve_table, metrics_table, write_table
from stacklm.tracking.mlflow_mirror import ModelFile
from stacklm.tracking.runs import cfl_run_key, flat_params, metric_name, source_tags, task_run_key, task_runs
from stacklm.training.run_state import CheckpointRecord

METADATA = RunMetadata(
    task="passivization", architecture="LSTM+Nd", phase="final", trial=None, seed=2, learning_rate=0.5, tokens_per_batch=None,
    parameters=10, data_version="ab" * 32, code_version="0.1.0", wall_time_s=1.0, tokens_per_s=2.0, config=json.dumps({"model": {"dropout": 0.1}}),
)
CURVE = [CheckpointRecord(1, 1, 4, 40, 0.5, 2.0, 1.5, True), CheckpointRecord(2, 1, 8, 80, 0.25, 1.0, 1.25, True)]


def test_keys_names_and_flat_params_keep_the_mlflow_names_of_before() -> None:
    assert task_run_key("passivization", "Tf", "search", 3, 3) == "passivization/Tf/search/trial-3"
    assert task_run_key("passivization", "Tf", "final", None, 5) == "passivization/Tf/final/seed-5"
    assert cfl_run_key("dyck-2", "cfl/JM", "lr0.001-m20-r3") == "dyck-2/cfl/JM/lr0.001-m20-r3"
    assert metric_name({"split": "generalization", "rule": "linear", "metric": "partial_accuracy"}) == "generalization/linear/partial_accuracy"
    assert metric_name({"split": "test", "rule": None, "metric": "full_accuracy"}) == "test/full_accuracy"
    assert flat_params({"a": {"b": 1, "c": None}, "d": "text"}, "settings.") == {"settings.a.b": "1", "settings.a.c": "null", "settings.d": "text"}


def test_a_final_run_is_mirrored_from_its_curve_and_metrics(tmp_path: Path) -> None:
    write_table(curve_table(CURVE, METADATA), tmp_path / "train.parquet")
    write_table(metrics_table([MetricValue("test", None, "full_accuracy", 0.25)], METADATA), tmp_path / "metrics.parquet")
    (run,) = task_runs("passivization", [tmp_path / "train.parquet"], [tmp_path / "metrics.parquet"])
    assert run.key == "passivization/LSTM+Nd/final/seed-2"
    assert run.params["tokens_per_batch"] == "null" and run.params["settings.model.dropout"] == "0.1" and run.params["seed"] == "2"
    assert run.metrics == {
        "best_validation_cross_entropy": 1.25, "steps": 8, "epochs": 1, "wall_time_s": 1.0, "tokens_per_s": 2.0, "test/full_accuracy": 0.25,
    }
    assert run.curves == {
        "curve/validation_cross_entropy": [(40, 1.5), (80, 1.25)], "curve/train_loss": [(40, 2.0), (80, 1.0)],
        "curve/learning_rate": [(40, 0.5), (80, 0.25)],
    }
    assert run.model == ModelFile(tmp_path / "model.pt", "task") or not (tmp_path / "model.pt").exists()
    write_table(curve_table(CURVE[:1], METADATA), tmp_path / "train.parquet")  # new bytes, new digest
    assert task_runs("passivization", [tmp_path / "train.parquet"], [tmp_path / "metrics.parquet"])[0].digest != run.digest


def test_files_that_cannot_be_mirrored_are_named(tmp_path: Path) -> None:
    write_table(curve_table(CURVE, METADATA), tmp_path / "train.parquet")
    write_table(curve_table(CURVE, replace(METADATA, seed=3)), tmp_path / "other.parquet")
    write_table(metrics_table([MetricValue("test", None, "full_accuracy", 0.25)], METADATA), tmp_path / "metrics.parquet")
    write_table(pa.Table.from_pylist([], schema=CURVE_SCHEMA), tmp_path / "empty.parquet")
    with pytest.raises(StacklmError, match="metrics.parquet: the metrics of run passivization/LSTM\\+Nd/final/seed-2, whose train.parquet"):
        task_runs("passivization", [tmp_path / "other.parquet"], [tmp_path / "metrics.parquet"])
    with pytest.raises(StacklmError, match="does not belong to the experiment 'question-formation'"):
        task_runs("question-formation", [tmp_path / "train.parquet"], [])
    with pytest.raises(StacklmError, match="train.parquet both hold run"):
        task_runs("passivization", [tmp_path / "train.parquet", tmp_path / "train.parquet"], [])
    with pytest.raises(StacklmError, match="empty.parquet: the run's records have no row"):
        task_runs("passivization", [tmp_path / "empty.parquet"], [])
    with pytest.raises(StacklmError, match="missing.parquet: cannot read"):
        task_runs("passivization", [tmp_path / "missing.parquet"], [])


def test_every_curve_column_is_mirrored_where_scored_and_logs_pair_with_their_files(tmp_path: Path) -> None:
    scored = [replace(CURVE[0], scores={"test_full_accuracy": 0.5}), replace(CURVE[1], scores={"test_full_accuracy": 0.75, "linear_partial_accuracy": 0.25})]
    write_table(curve_table(scored, METADATA), tmp_path / "train.parquet")
    os.utime(tmp_path / "train.parquet", (1_700_000_000, 1_700_000_000))
    (tmp_path / "train.log").write_text("trained\n")
    (run,) = task_runs("passivization", [tmp_path / "train.parquet"], [], [tmp_path / "train.log"])
    assert run.curves["curve/test_full_accuracy"] == [(40, 0.5), (80, 0.75)] and run.curves["curve/linear_partial_accuracy"] == [(80, 0.25)]
    assert "curve/hierarchical_full_accuracy" not in run.curves  # never scored: no empty curve
    assert run.name == "LSTM+Nd final seed-2" and run.tags == {
        "task": "passivization", "architecture": "LSTM+Nd", "phase": "final", "seed": "2",
        "mlflow.source.name": "stacklm train", "mlflow.source.type": "LOCAL",  # no commit: code_version names none
    }
    assert run.files == [(tmp_path / "train.parquet", ""), (tmp_path / "train.log", "logs/train")] and run.folder == tmp_path
    assert (run.start_ms, run.end_ms) == (1_700_000_000_000 - 1000, 1_700_000_000_000)
    (deleted,) = task_runs("passivization", [tmp_path / "train.parquet"], [], [tmp_path / "deleted.log"])
    assert deleted.files == [(tmp_path / "train.parquet", "")]  # a log deleted since: the run is still mirrored
    with pytest.raises(StacklmError, match="2 curve logs given for 1 curve files"):
        task_runs("passivization", [tmp_path / "train.parquet"], [], [tmp_path / "train.log"] * 2)


def test_a_ptb_restart_is_mirrored_from_its_curve_and_metrics(tmp_path: Path) -> None:
    import math

    from stacklm.evaluation.syntaxgym.circuits import Circuit, sg_scores
    from stacklm.evaluation.syntaxgym.score import PredictionResult, SuiteResult
    from stacklm.evaluation.syntaxgym.sources import SGResult
    from stacklm.tracking.records import ptb_curve_table, ptb_metric_rows, ptb_metrics_table
    from stacklm.tracking.runs import ptb_run_key, ptb_runs
    from tests.tracking.ptb_epochs import ptb_epoch, shown

    metadata = replace(METADATA, task="ptb", architecture="rns-2-3", phase="search", seed=4, config=json.dumps({"draw": {"clip_per_target": 1e-4}}))
    epochs = [ptb_epoch(1, 10.0, 6.0, 400.0, True), ptb_epoch(2, 10.0, 5.5, 300.0, True), ptb_epoch(3, 10.0, math.nan, math.inf, False)]
    write_table(ptb_curve_table(epochs, metadata, 1e-4), tmp_path / "train.parquet")
    circuits = (Circuit("Agreement", ("number_src",)), Circuit("Center Embedding", ("center_embed",)))
    suites = (SuiteResult("number_src", (PredictionResult(1, 1, True), PredictionResult(2, 1, False))), SuiteResult("center_embed", (PredictionResult(1, 1, True),)))
    sg = SGResult(suites, sg_scores({"number_src": 0.5, "center_embed": 1.0}, circuits), circuits)
    write_table(ptb_metrics_table(ptb_metric_rows(300.0, 290.0, sg), metadata, 1e-4), tmp_path / "metrics.parquet")
    (run,) = ptb_runs("ptb", [tmp_path / "train.parquet"], [tmp_path / "metrics.parquet"])
    assert run.key == ptb_run_key("rns-2-3", 4) == "ptb/rns-2-3/restart-4" and run.name == "rns-2-3 restart-4"
    assert run.tags["model"] == "rns-2-3" and run.tags["restart"] == "4" and run.params["settings.draw.clip_per_target"] == "0.0001"
    assert run.metrics == {
        "best_validation_perplexity": shown(300.0), "epochs": 3, "wall_time_s": 1.0, "tokens_per_s": 2.0,
        "validation/perplexity": 300.0, "test/perplexity": 290.0,
        "syntaxgym/suite/number_src": 0.5, "syntaxgym/suite/center_embed": 1.0,
        "syntaxgym/circuit/Agreement": 0.5, "syntaxgym/circuit/Center Embedding": 1.0, "syntaxgym/sg_score": 0.75,
    }
    assert run.curves == {  # the diverged epoch's NaN and ∞ left out
        "curve/validation_perplexity": [(1, shown(400.0)), (2, shown(300.0))], "curve/train_loss": [(1, 6.0), (2, 5.5)],
        "curve/learning_rate": [(1, 10.0), (2, 10.0), (3, 10.0)],
    }
    assert run.tags["mlflow.source.name"] == "stacklm ptb train" and run.model is None  # no model.pt written here
    with pytest.raises(StacklmError, match="does not belong to the experiment 'passivization'"):
        ptb_runs("passivization", [tmp_path / "train.parquet"], [])


def test_no_curve_shares_a_name_with_a_metric(tmp_path: Path) -> None:
    """The runs table shows a curve's last point: a curve named like a final metric
    (``validation_perplexity`` beside ``validation/perplexity``) shows two numbers for one name."""
    from stacklm.tracking.records import ptb_curve_table, ptb_metric_rows, ptb_metrics_table
    from stacklm.tracking.runs import ptb_runs
    from tests.tracking.ptb_epochs import ptb_epoch, shown

    scored = [replace(record, scores={"test_full_accuracy": 0.5}) for record in CURVE]
    write_table(curve_table(scored, METADATA), tmp_path / "task" / "train.parquet")
    write_table(metrics_table([MetricValue("test", None, "full_accuracy", 0.25)], METADATA), tmp_path / "task" / "metrics.parquet")
    ptb = replace(METADATA, task="ptb", architecture="lstm", phase="search")
    write_table(ptb_curve_table([ptb_epoch(1, 10.0, 6.0, 400.0, True), ptb_epoch(2, 10.0, 7.0, 500.0, False)], ptb, 1e-4), tmp_path / "ptb" / "train.parquet")
    write_table(ptb_metrics_table(ptb_metric_rows(400.0, 390.0, None), ptb, 1e-4), tmp_path / "ptb" / "metrics.parquet")
    runs = [*task_runs("passivization", [tmp_path / "task" / "train.parquet"], [tmp_path / "task" / "metrics.parquet"]),
            *ptb_runs("ptb", [tmp_path / "ptb" / "train.parquet"], [tmp_path / "ptb" / "metrics.parquet"])]

    def spelled(name: str) -> str:
        return name.replace("/", "_")

    for run in runs:
        assert all(name.startswith("curve/") for name in run.curves)
        assert not {spelled(name) for name in run.curves} & {spelled(name) for name in run.metrics}, run.key
    assert runs[1].metrics["validation/perplexity"] == 400.0 and runs[1].curves["curve/validation_perplexity"][-1] == (2, shown(500.0))


def test_the_source_tags_name_the_command_and_the_commit() -> None:
    commit = "0123456789abcdef" * 2 + "01234567"
    assert source_tags("cfl", f"0.1.0+g{commit}") == {
        "mlflow.source.name": "stacklm cfl train", "mlflow.source.type": "LOCAL", "mlflow.source.git.commit": commit,
    }
    assert source_tags("task", "0.1.0") == {"mlflow.source.name": "stacklm train", "mlflow.source.type": "LOCAL"}
