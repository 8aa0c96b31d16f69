"""``stacklm ptb select`` and ``stacklm ptb report`` on Parquet records of known values: the
restart of lowest finite validation perplexity (a diverged one never), the tables' rows those
selected restarts' whatever the other restarts hold, every restart in the combined Parquet and
the figure's files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from stacklm.cli import main
from stacklm.evaluation.syntaxgym.circuits import Circuit, sg_scores
from stacklm.evaluation.syntaxgym.score import PredictionResult, SuiteResult
from stacklm.evaluation.syntaxgym.sources import SGResult
from stacklm.tracking.records import RunMetadata, ptb_curve_table, ptb_metric_rows, ptb_metrics_table, write_table
from tests.tracking.ptb_epochs import ptb_epoch, shown


def stacklm(*argv: str) -> int:
    return main(list(argv))


def metadata(model: str, restart: int) -> RunMetadata:
    return RunMetadata(
        task="ptb", architecture=model, phase="search", trial=None, seed=restart, learning_rate=10.0, tokens_per_batch=None,
        parameters=5_656_336, data_version="0" * 64, code_version="0.1.0", wall_time_s=1.0, tokens_per_s=1.0, config="{}",
    )


def write_curve(folder: Path, model: str, restart: int, perplexities: list[float]) -> Path:
    best = math.inf
    records = []
    for epoch, perplexity in enumerate(perplexities, start=1):
        records.append(ptb_epoch(epoch, 10.0, 5.0, perplexity, perplexity < best))
        best = min(best, perplexity)
    path = folder / model / str(restart) / "train.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_table(ptb_curve_table(records, metadata(model, restart), 1e-4), path)
    return path


def test_select_takes_the_lowest_finite_validation_perplexity(tmp_path: Path, capsys) -> None:
    curves = [
        write_curve(tmp_path, "lstm", 1, [300.0, 150.0, 151.0, 152.0]),  # best epoch 2: 150
        write_curve(tmp_path, "lstm", 2, [200.0, math.inf]),  # diverged in epoch 2: its best, 200, stands
        write_curve(tmp_path, "lstm", 3, [140.0, 120.0, 125.0, 130.0]),  # 120: selected
        write_curve(tmp_path, "lstm", 4, [math.inf]),  # diverged in epoch 1: never selected
    ]
    assert stacklm("ptb", "select", "--curves", *map(str, curves), "--out", str(tmp_path / "lstm.json")) == 0
    assert json.loads((tmp_path / "lstm.json").read_text()) == {
        "model": "lstm", "restart": 3, "validation_perplexity": shown(120.0), "restarts": {"1": shown(150.0), "2": shown(200.0), "3": shown(120.0), "4": None},
    }
    assert "lstm: restart 3 of 4 (validation perplexity 120.00, the lowest)" in capsys.readouterr().out


def test_select_breaks_ties_by_the_first_restart_and_refuses_what_it_cannot_choose_from(tmp_path: Path, capsys) -> None:
    tied = [write_curve(tmp_path, "ns-1-2", restart, [130.0, 125.0]) for restart in (2, 1)]
    assert stacklm("ptb", "select", "--curves", *map(str, tied), "--out", str(tmp_path / "tie.json")) == 0
    assert json.loads((tmp_path / "tie.json").read_text())["restart"] == 2  # the first given
    diverged = [write_curve(tmp_path, "jm-hidden", restart, [math.inf]) for restart in (1, 2)]
    assert stacklm("ptb", "select", "--curves", *map(str, diverged), "--out", str(tmp_path / "x.json")) == 1
    assert "no restart of jm-hidden reached a finite validation score" in capsys.readouterr().err
    mixed = [tied[0], write_curve(tmp_path, "lstm", 1, [100.0])]
    assert stacklm("ptb", "select", "--curves", *map(str, mixed), "--out", str(tmp_path / "x.json")) == 1
    assert "restarts of 2 models (lstm, ns-1-2), not of one" in capsys.readouterr().err
    assert stacklm("ptb", "select", "--curves", str(tied[0]), str(tied[0]), "--out", str(tmp_path / "x.json")) == 1
    assert "restart 2 is given twice" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


CIRCUITS = (Circuit("Agreement", ("number_src",)),)


def write_metrics(folder: Path, model: str, restart: int, validation: float, test: float, accuracy: float) -> Path:
    results = (SuiteResult("number_src", tuple(PredictionResult(item, 1, item <= accuracy * 10) for item in range(1, 11))),)
    sg = SGResult(results, sg_scores({"number_src": results[0].accuracy}, CIRCUITS), CIRCUITS)
    path = folder / model / str(restart) / "metrics.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_table(ptb_metrics_table(ptb_metric_rows(validation, test, sg), metadata(model, restart), 1e-4), path)
    return path


def test_report_renders_the_selected_restarts_from_every_restarts_records(tmp_path: Path) -> None:
    metrics = [
        write_metrics(tmp_path, "lstm", 1, 130.0, 125.0, 0.5),
        write_metrics(tmp_path, "lstm", 2, 120.0, 118.0, 0.3),  # selected
        write_metrics(tmp_path, "rns-2-3", 1, 121.0, 117.0, 0.6),  # selected
    ]
    selections = []
    for model, restart in (("rns-2-3", 1), ("lstm", 2)):  # the tables' row order
        selections.append(tmp_path / f"{model}.json")
        selections[-1].write_text(json.dumps({"model": model, "restart": restart, "validation_perplexity": 0.0, "restarts": {}}))
    out = tmp_path / "out"
    tables, markdown, figures = [out / "ptb.tex", out / "circuits.tex"], [out / "ptb.md", out / "circuits.md"], [out / "f.png", out / "f.pdf"]
    assert stacklm(
        "ptb", "report", "--metrics", *map(str, metrics), "--selected", *map(str, selections), "--figure-models", "lstm", "rns-2-3",
        "--out-metrics", str(out / "metrics.parquet"), "--tables", *map(str, tables), "--markdown", *map(str, markdown), "--figures", *map(str, figures),
        "--scale", "Preset small: the first 100 lines of each PTB split.",
    ) == 0
    combined = pd.read_parquet(out / "metrics.parquet")
    assert sorted(set(zip(combined["architecture"], combined["seed"]))) == [("lstm", 1), ("lstm", 2), ("rns-2-3", 1)]
    assert markdown[0].read_text().splitlines()[4:] == [
        "| rns-2-3 | 5,656,336 | 121.00 | **117.00** | **0.600** |",
        "| lstm | 5,656,336 | **120.00** | 118.00 | 0.300 |",
    ]
    assert "(of 1–2 restarts)" in markdown[0].read_text()
    assert markdown[1].read_text().splitlines()[4:] == ["| rns-2-3 | **0.600** | **0.600** |", "| lstm | 0.300 | 0.300 |"]
    assert r"rns-2-3 & 5,656,336 & $121.00$ & $\mathbf{117.00}$ & $\mathbf{0.600}$ \\" in tables[0].read_text()
    assert all("Preset small: the first 100 lines of each PTB split.}" in path.read_text() for path in tables)  # every caption states the scale
    assert figures[0].read_bytes()[:4] == b"\x89PNG" and figures[1].read_bytes()[:5] == b"%PDF-"


def test_report_refuses_a_figure_model_without_a_selection_and_a_file_that_is_no_ptb_record(tmp_path: Path, capsys) -> None:
    metrics = write_metrics(tmp_path, "lstm", 1, 130.0, 125.0, 0.5)
    selection = tmp_path / "lstm.json"
    selection.write_text(json.dumps({"model": "lstm", "restart": 1, "validation_perplexity": 130.0, "restarts": {"1": 130.0}}))
    common = ["--out-metrics", str(tmp_path / "m.parquet"), "--tables", "a.tex", "b.tex", "--markdown", "a.md", "b.md", "--figures", str(tmp_path / "f.png"),
              "--scale", "s"]
    assert stacklm("ptb", "report", "--metrics", str(metrics), "--selected", str(selection), "--figure-models", "rns-2-3", *common) == 1
    assert "--figure-models: no selection of rns-2-3 among --selected" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert stacklm("ptb", "report", "--metrics", str(metrics), "--selected", str(tmp_path / "bad.json"), "--figure-models", "lstm", *common) == 1
    assert "bad.json: not a PTB selection" in capsys.readouterr().err
    curve = write_curve(tmp_path, "lstm", 1, [100.0])
    assert stacklm("ptb", "report", "--metrics", str(curve), "--selected", str(selection), "--figure-models", "lstm", *common) == 1
    assert "train.parquet: not the metrics of a PTB restart" in capsys.readouterr().err
    assert not (tmp_path / "m.parquet").exists()


@pytest.mark.parametrize("module", ["stacklm.experiments.ptb.commands", "stacklm.experiments.ptb.dag"])
def test_the_light_jobs_import_no_torch(module: str) -> None:
    import subprocess
    import sys

    code = f"import sys, {module}; print('torch' in sys.modules, 'pandas' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == ["False", "False"]
