"""The results published under docs/ (e.g. docs/table1/, the run of docs/table1.md) are what the
project's own report command renders from their committed metrics.parquet and settings.json (what
docs/publish.sh wrote), and the run's page, and the README where it shows that run, hold exactly
that table between the folder's markers."""

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
    readme = ROOT / "README.md"
    for page in (folder.with_suffix(".md"), *([readme] if start in readme.read_text() else [])):
        text = page.read_text()
        assert text[text.index(start) + len(start) : text.index(end)] == rendered, page


def test_the_readme_shows_a_published_table() -> None:
    text = (ROOT / "README.md").read_text()
    assert any(f"<!-- {folder.name} table -->\n" in text for folder in PUBLISHED)
