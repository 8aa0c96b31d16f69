"""`stacklm aggregate` and `stacklm report` on synthetic runs: files, values, and that the same
Parquet gives byte-identical tables."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from stacklm.cli import main
from stacklm.report.paper import PAPER_TABLES
from stacklm.report.tables import escape_latex

TASKS = ["question-formation", "passivization"]
ARCHITECTURES = ["Tf", "Tf+Nd", "LSTM"]
TEST_ACCURACY = {"Tf": 0.95, "Tf+Nd": 0.97, "LSTM": 0.2}
SCALE = "Preset small: data drawn from stacklm's grammars; 500 training examples per task; 1 seed trained at most 1 epoch."
SCALE_TEX = escape_latex(SCALE)


def test_report_renders_tables_document_and_figure(tmp_path: Path, write_run: Callable[..., Path]) -> None:
    runs = [
        write_run(task, name, seed, lambda metric, split, rule, name=name, seed=seed: TEST_ACCURACY[name] + 0.01 * seed)
        for task in TASKS
        for name in ARCHITECTURES
        for seed in (1, 2, 3)
    ]
    settings = tmp_path / "settings.json"
    settings.write_text(
        json.dumps({"tasks": TASKS, "architectures": ARCHITECTURES, "final": {"seeds": [1, 2, 3]}, "report": {"min_test_accuracy": 0.9, "log_ratio": "per_example"}})
    )
    metrics = tmp_path / "metrics.parquet"
    assert main(["aggregate", "--out", str(metrics), *map(str, runs)]) == 0
    out = tmp_path / "report"
    tables = [str(out / "tables" / f"{task}.tex") for task in TASKS]
    figures = [str(out / "figures" / "figure3.png"), str(out / "figures" / "figure3.pdf")]
    markdown = [str(out / "tables" / f"{task}.md") for task in TASKS]
    means = [str(out / "tables" / f"{task}-means.md") for task in TASKS]
    arguments = ["report", "--metrics", str(metrics), "--settings", str(settings), "--tables", *tables, "--markdown", *markdown, "--markdown-means", *means]
    arguments += ["--document", str(out / "report.tex"), "--figures", *figures, "--scale", SCALE]
    assert main(arguments) == 0
    first = {path: Path(path).read_bytes() for path in tables}
    latex = first[tables[0]].decode()
    assert r"Tf+Nd & $\mathbf{0.990}$ {\scriptsize $\pm$.01}" in latex  # mean of 0.98, 0.99, 1.00
    assert "This reproduction (3 seeds)" in latex and r"DuSell \& Cotterell (2025), Table 1 (5 runs)" in latex
    assert r"DuSell \& Cotterell (2025), Table 4 (5 runs)" in Path(tables[1]).read_text()
    assert "| Tf+Nd | **0.990** ±.01 |" in Path(markdown[0]).read_text()
    assert "**Seed 2**" in Path(markdown[0]).read_text() and "| Tf+Nd | **0.990** |" in Path(markdown[0]).read_text()  # 0.97 + 0.02
    assert "Seed 2" not in latex
    # --markdown-means: the full Markdown table less its per-seed sections, as the .tex has it
    full, mean_only = Path(markdown[0]).read_text(), Path(means[0]).read_text()
    assert "| Tf+Nd | **0.990** ±.01 |" in mean_only and "Seed" not in mean_only and "Table 1 (5 runs)" in mean_only
    sections = full.split("\n\n**")
    assert "\n\n**".join(section for section in sections if not section.startswith("Seed ")) == mean_only
    assert all(Path(path).stat().st_size > 1000 for path in figures)
    document = (out / "report.tex").read_text()
    assert r"\input{tables/passivization.tex}" in document
    # the scale: on the title page, and ending every caption (the tables', Figure 3's)
    assert rf"\item[Syntactic transformations (DuSell \& Cotterell (2025))] {SCALE_TEX}" in document
    captions = [line for path in [*tables, str(out / "report.tex")] for line in Path(path).read_text().splitlines() if line.startswith(r"\caption{")]
    assert len(captions) == len(TASKS) + 1 and all(caption.endswith(SCALE_TEX + "}") for caption in captions)
    assert all(SCALE in Path(path).read_text().splitlines()[0] for path in markdown)
    assert main(arguments) == 0
    assert {path: Path(path).read_bytes() for path in tables} == first


def test_the_title_counts_the_seeds_that_ran_and_names_the_architectures_with_fewer(tmp_path: Path, write_run: Callable[..., Path]) -> None:
    """Settings asking for 5 seeds, runs of 3 (Tf), 2 (Tf+Nd) and none (LSTM): the mean is over the
    seeds that ran, and the title says so instead of the settings' 5."""
    counts = {"Tf": 3, "Tf+Nd": 2}
    runs = [write_run(TASKS[0], name, seed, lambda metric, split, rule, name=name: TEST_ACCURACY[name]) for name, count in counts.items() for seed in range(1, count + 1)]
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"tasks": TASKS[:1], "architectures": ARCHITECTURES, "final": {"seeds": [1, 2, 3, 4, 5]}, "report": {"min_test_accuracy": 0.9, "log_ratio": "per_example"}}))
    metrics = tmp_path / "metrics.parquet"
    assert main(["aggregate", "--out", str(metrics), *map(str, runs)]) == 0
    out = tmp_path / "report"
    arguments = ["report", "--metrics", str(metrics), "--settings", str(settings), "--tables", str(out / "t.tex"), "--markdown", str(out / "t.md")]
    assert main([*arguments, "--document", str(out / "report.tex"), "--figures", str(out / "figure3.png")]) == 0
    markdown = (out / "t.md").read_text()
    assert "**This reproduction (3 seeds; Tf+Nd 2)**" in markdown and "This reproduction (3 seeds; Tf+Nd 2)" in (out / "t.tex").read_text()
    assert "**Seed 3**" in markdown and "Seed 4" not in markdown and "(5 seeds" not in markdown


PDFLATEX = Path("/usr/bin/pdflatex")
ALL_TASKS = list(PAPER_TABLES)


def test_the_report_of_every_task_compiles_with_pdflatex_and_every_float_fits(tmp_path: Path, write_run: Callable[..., Path]) -> None:
    """The full report (a title page of scales, seven tables, the seven-panel Figure 3, a caption
    with "90%" and column titles with "&", then a PTB part's table and a CFL part's figure) through
    pdflatex: no error, no float too large, nothing overfull."""
    if not PDFLATEX.exists():
        pytest.skip(f"{PDFLATEX} is absent: `make test` installs Debian's TeX packages")
    runs = [
        write_run(task, name, 1, lambda metric, split, rule, name=name: TEST_ACCURACY[name] - (0.5 if rule == "linear" else 0.0))
        for task in ALL_TASKS
        for name in ARCHITECTURES
    ]
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"tasks": ALL_TASKS, "architectures": ARCHITECTURES, "final": {"seeds": [1]}, "report": {"min_test_accuracy": 0.9, "log_ratio": "per_example"}}))
    metrics = tmp_path / "metrics.parquet"
    assert main(["aggregate", "--out", str(metrics), *map(str, runs)]) == 0
    out = tmp_path / "report"
    arguments = ["report", "--metrics", str(metrics), "--settings", str(settings)]
    arguments += ["--tables", *(str(out / "tables" / f"{task}.tex") for task in ALL_TASKS)]
    arguments += ["--markdown", *(str(out / "tables" / f"{task}.md") for task in ALL_TASKS)]
    arguments += ["--document", str(out / "report.tex"), "--figures", str(out / "figures" / "figure3.png"), str(out / "figures" / "figure3.pdf")]
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.tex").write_text("\\begin{table}[t]\\centering\\begin{tabular}{lr}Model & SG Score \\\\ lstm & 0.5\\end{tabular}"
                                              "\\caption{PTB. 100 lines.}\\end{table}\n")
    parts = [{"heading": "Penn Treebank (DuSell & Chiang, 2022)", "scale": "Preset small: 100 lines; 50% #1.", "tables": [str(tmp_path / "ptb" / "ptb.tex")],
              "figures": [{"path": str(out / "figures" / "figure3.pdf"), "caption": "A CFL figure. Preset small."}]}]
    arguments += ["--scale", SCALE, "--parts", json.dumps(parts)]
    assert main(arguments) == 0
    assert r"\input{../ptb/ptb.tex}" in (out / "report.tex").read_text()
    compiled = subprocess.run([str(PDFLATEX), "-interaction=nonstopmode", "-halt-on-error", "report.tex"], cwd=out,
                              capture_output=True, text=True, timeout=300)
    log = (out / "report.log").read_text(errors="replace")
    assert compiled.returncode == 0, log[-3000:]
    assert "Float too large" not in log and "Overfull" not in log, log[-3000:]
    assert "Float(s) lost" not in log and "Output written on report.pdf" in log


def test_report_refuses_parts_that_are_not_parts() -> None:
    from stacklm.errors import StacklmError
    from stacklm.experiments.transformations.report import document_parts

    with pytest.raises(StacklmError, match="--parts: not a list of parts"):
        document_parts('[{"heading": "CFL"}]')
