"""`stacklm aggregate` and `stacklm report` on synthetic runs: files, values, and that the same
Parquet gives byte-identical tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from stacklm.cli import main

TASKS = ["question-formation", "passivization"]
ARCHITECTURES = ["Tf", "Tf+Nd", "LSTM"]
TEST_ACCURACY = {"Tf": 0.95, "Tf+Nd": 0.97, "LSTM": 0.2}


def test_report_renders_tables_document_and_figure(tmp_path: Path, write_run: Callable[..., Path]) -> None:
    runs = [
        write_run(task, name, seed, lambda metric, split, rule, name=name, seed=seed: TEST_ACCURACY[name] + 0.01 * seed)
        for task in TASKS
        for name in ARCHITECTURES
        for seed in (1, 2, 3)
    ]
    settings = tmp_path / "settings.json"
    settings.write_text(
        json.dumps({"tasks": TASKS, "architectures": ARCHITECTURES, "final": {"seeds": [1, 2, 3]}, "report": {"min_test_accuracy": 0.9}})
    )
    metrics = tmp_path / "metrics.parquet"
    assert main(["aggregate", "--out", str(metrics), *map(str, runs)]) == 0
    out = tmp_path / "report"
    tables = [str(out / "tables" / f"{task}.tex") for task in TASKS]
    figures = [str(out / "figures" / "figure3.png"), str(out / "figures" / "figure3.pdf")]
    markdown = [str(out / "tables" / f"{task}.md") for task in TASKS]
    arguments = ["report", "--metrics", str(metrics), "--settings", str(settings), "--tables", *tables, "--markdown", *markdown]
    arguments += ["--document", str(out / "report.tex"), "--figures", *figures]
    assert main(arguments) == 0
    first = {path: Path(path).read_bytes() for path in tables}
    latex = first[tables[0]].decode()
    assert r"Tf+Nd & $\mathbf{0.990}$ {\scriptsize $\pm$.01}" in latex  # mean of 0.98, 0.99, 1.00
    assert "This reproduction (3 seeds)" in latex and "Seed 000, Table 1 (5 runs)" in latex
    assert "Seed 000, Table 4 (5 runs)" in Path(tables[1]).read_text()
    assert "| Tf+Nd | **0.990** ±.01 |" in Path(markdown[0]).read_text()
    assert all(Path(path).stat().st_size > 1000 for path in figures)
    assert r"\input{tables/passivization.tex}" in (out / "report.tex").read_text()
    assert main(arguments) == 0
    assert {path: Path(path).read_bytes() for path in tables} == first
