"""A PTB run's records: the per-epoch curve and the long-format metrics (perplexities, each
suite's accuracy with its circuit, each circuit's score, the SG score), written and read back."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stacklm.evaluation.syntaxgym.circuits import Circuit, sg_scores
from stacklm.evaluation.syntaxgym.score import PredictionResult, SuiteResult
from stacklm.evaluation.syntaxgym.sources import SGResult
from stacklm.tracking.records import (
    PTB_CURVE_SCHEMA, PTB_METRICS_SCHEMA, RunMetadata, ptb_curve_table, ptb_metric_rows, ptb_metrics_table, write_table,
)
from tests.tracking.ptb_epochs import ptb_epoch, shown

METADATA = RunMetadata(
    task="ptb", architecture="rns-2-3", phase="search", trial=None, seed=4, learning_rate=12.5, tokens_per_batch=None,
    parameters=5_684_068, data_version="cd" * 32, code_version="0.1.0", wall_time_s=60.0, tokens_per_s=500.0, config=json.dumps({"b": 2}),
)


def suite(name: str, holds: list[bool]) -> SuiteResult:
    return SuiteResult(name, tuple(PredictionResult(item, 1, value) for item, value in enumerate(holds, start=1)))


def test_the_curve_has_one_row_per_epoch_with_the_draw(tmp_path: Path) -> None:
    epochs = [ptb_epoch(1, 12.5, 5.5, 300.0, True), ptb_epoch(2, 12.5, 5.0, 310.0, False), ptb_epoch(3, 12.5 / 1.5, 4.9, 290.0, True)]
    write_table(ptb_curve_table(epochs, METADATA, 3e-4), tmp_path / "train.parquet")
    table = pq.read_table(tmp_path / "train.parquet")
    assert table.schema.equals(PTB_CURVE_SCHEMA)
    rows = table.to_pylist()
    assert [(r["epoch"], r["learning_rate_used"], r["train_loss"], r["validation_perplexity"], r["is_best"]) for r in rows] == [
        (1, 12.5, 5.5, shown(300.0), True), (2, 12.5, 5.0, shown(310.0), False), (3, 12.5 / 1.5, 4.9, shown(290.0), True),
    ]
    assert {(r["task"], r["architecture"], r["seed"], r["learning_rate"], r["clip_per_target"]) for r in rows} == {("ptb", "rns-2-3", 4, 12.5, 3e-4)}
    assert rows[0]["tokens_per_batch"] is None and rows[0]["trial"] is None


def test_the_metrics_hold_perplexities_suites_circuits_and_the_sg_score(tmp_path: Path) -> None:
    circuits = (Circuit("Agreement", ("number_orc", "number_src")), Circuit("Center Embedding", ("center_embed",)))
    suites = (suite("number_orc", [True, False]), suite("number_src", [True, True, True, False]), suite("center_embed", [False]))
    # Accuracies 1/2, 3/4, 0: Agreement (1/2 + 3/4) / 2 = 5/8, Center Embedding 0; SG score (1/2 + 3/4 + 0) / 3 = 5/12.
    sg = SGResult(suites, sg_scores({s.suite: s.accuracy for s in suites}, circuits), circuits)
    write_table(ptb_metrics_table(ptb_metric_rows(120.5, 115.25, sg), METADATA, 3e-4), tmp_path / "metrics.parquet")
    table = pq.read_table(tmp_path / "metrics.parquet")
    assert table.schema.equals(PTB_METRICS_SCHEMA)
    rows = [(r["split"], r["metric"], r["suite"], r["circuit"], r["value"]) for r in table.to_pylist()]
    assert rows == [
        ("validation", "perplexity", None, None, 120.5),
        ("test", "perplexity", None, None, 115.25),
        ("syntaxgym", "sg_suite_accuracy", "number_orc", "Agreement", 0.5),
        ("syntaxgym", "sg_suite_accuracy", "number_src", "Agreement", 0.75),
        ("syntaxgym", "sg_suite_accuracy", "center_embed", "Center Embedding", 0.0),
        ("syntaxgym", "sg_circuit_score", None, "Agreement", 0.625),
        ("syntaxgym", "sg_circuit_score", None, "Center Embedding", 0.0),
        ("syntaxgym", "sg_score", None, None, pytest.approx(5 / 12)),
    ]
    assert set(table.column("rule").to_pylist()) == {None} and set(table.column("clip_per_target").to_pylist()) == {3e-4}


def test_a_run_without_sg_scoring_has_its_perplexities_alone() -> None:
    rows = ptb_metric_rows(120.5, 115.25, None)
    assert [(row.split, row.metric, row.value) for row in rows] == [("validation", "perplexity", 120.5), ("test", "perplexity", 115.25)]
