"""The results published under docs/ are what the project's own commands render from the committed
records: a Table 1 run (e.g. docs/table1/, the run of docs/table1.md) is the report of its
metrics.parquet and settings.json (what docs/publish.sh wrote); a CFL run (docs/cfl-two-languages/)
is the summary of its curves.parquet and metrics.parquet (what its run.sh copied). The run's page
holds exactly that table between the folder's markers, and the README where it shows that run the
same (a Table 1 run: its table as the .tex has it, table-means.md, without the per-seed sections)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stacklm.cli import main
from stacklm.experiments.cfl.figures import summary_markdown

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted(path.parent for path in (ROOT / "docs").glob("*/settings.json"))
CFL_PUBLISHED = sorted(path.parent for path in (ROOT / "docs").glob("*/summary.md"))


def assert_pages_hold(folder: Path, rendered: str, readme_rendered: str) -> None:
    """The folder's page shows ``rendered`` between the folder's markers, and the README, where it
    holds them, ``readme_rendered``."""
    start, end = f"<!-- {folder.name} table -->\n", f"<!-- end of {folder.name} table -->"
    readme = ROOT / "README.md"
    for page, table in ((folder.with_suffix(".md"), rendered), *([(readme, readme_rendered)] if start in readme.read_text() else [])):
        text = page.read_text()
        assert text[text.index(start) + len(start) : text.index(end)] == table, page


@pytest.mark.parametrize("folder", PUBLISHED, ids=[folder.name for folder in PUBLISHED])
def test_the_published_table_is_the_report_of_its_metrics(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    arguments = ["report", "--metrics", str(folder / "metrics.parquet"), "--settings", str(folder / "settings.json")]
    arguments += ["--tables", str(out / "table.tex"), "--markdown", str(out / "table.md"), "--markdown-means", str(out / "table-means.md")]
    arguments += ["--document", str(out / "report.tex"), "--figures", str(out / "figure3.png")]
    assert main(arguments) == 0
    rendered, means = (out / "table.md").read_text(), (out / "table-means.md").read_text()
    assert rendered == (folder / "table.md").read_text()
    assert means == (folder / "table-means.md").read_text()
    assert_pages_hold(folder, rendered, means)


@pytest.mark.parametrize("folder", CFL_PUBLISHED, ids=[folder.name for folder in CFL_PUBLISHED])
def test_a_published_cfl_summary_is_the_summary_of_its_records(folder: Path) -> None:
    rendered = summary_markdown(pd.read_parquet(folder / "curves.parquet"), pd.read_parquet(folder / "metrics.parquet"))
    assert rendered == (folder / "summary.md").read_text()
    assert_pages_hold(folder, rendered, rendered)


def test_the_readme_shows_a_published_table() -> None:
    text = (ROOT / "README.md").read_text()
    assert any(f"<!-- {folder.name} table -->\n" in text for folder in PUBLISHED)
