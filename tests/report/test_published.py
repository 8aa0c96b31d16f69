"""The results published under docs/ (e.g. docs/table1/, the run of docs/table1.md) are what the
project's own report command renders from their committed metrics.parquet and settings.json, and
the README and the run's page show exactly that table between the folder's markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacklm.cli import main

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted(path.parent for path in (ROOT / "docs").glob("*/metrics.parquet"))


@pytest.mark.parametrize("folder", PUBLISHED, ids=[folder.name for folder in PUBLISHED])
def test_the_published_table_is_the_report_of_its_metrics(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    arguments = ["report", "--metrics", str(folder / "metrics.parquet"), "--settings", str(folder / "settings.json")]
    arguments += ["--tables", str(out / "table.tex"), "--markdown", str(out / "table.md")]
    arguments += ["--document", str(out / "report.tex"), "--figures", str(out / "figure3.png")]
    assert main(arguments) == 0
    rendered = (out / "table.md").read_text()
    assert rendered == (folder / "table.md").read_text()
    start, end = f"<!-- {folder.name} table -->\n", f"<!-- end of {folder.name} table -->"
    for page in (ROOT / "README.md", folder.with_suffix(".md")):
        text = page.read_text()
        assert text[text.index(start) + len(start) : text.index(end)] == rendered, page
