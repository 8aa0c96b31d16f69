"""``stacklm html``: the report's Markdown tables as HTML pages for ``snakemake --report``."""

from html.parser import HTMLParser
from pathlib import Path

import pytest

from stacklm.cli import main
from stacklm.report.pages import markdown_page

TABLE = """Results on question formation. Mean over seeds ± standard deviation; the best mean of each column in bold.

**This reproduction (1 seed)**

| Architecture | FA Test ↑ | PA Linear ↓ |
|---|---:|---:|
| Tf+Nd | **0.999** ±.00 | 0.014 |
| <script>alert(1)</script> | 0.000 | -- |
"""


class Cells(HTMLParser):
    """The text of every table cell, row by row, and the tags met."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.tags: list[str] = []
        self.in_cell = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")
            self.in_cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self.in_cell = False

    def handle_data(self, data: str) -> None:
        if self.in_cell:
            self.rows[-1][-1] += data


def parse(page: str) -> Cells:
    cells = Cells()
    cells.feed(page)
    return cells


def test_a_markdown_table_becomes_an_html_table_with_the_same_cells() -> None:
    page = markdown_page(TABLE, "question-formation")
    cells = parse(page)
    assert cells.rows == [
        ["Architecture", "FA Test ↑", "PA Linear ↓"],
        ["Tf+Nd", "0.999 ±.00", "0.014"],
        ["<script>alert(1)</script>", "0.000", "--"],
    ]
    assert "<strong>0.999</strong>" in page and "<title>question-formation</title>" in page
    assert "script" not in cells.tags  # a name from the config is text, never markup


def test_the_command_writes_the_page_and_names_a_missing_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.md").write_text(TABLE)
    assert main(["html", "--markdown", str(tmp_path / "t.md"), "--title", "qf", "--out", str(tmp_path / "out" / "t.html")]) == 0
    assert parse((tmp_path / "out" / "t.html").read_text()).rows[1] == ["Tf+Nd", "0.999 ±.00", "0.014"]
    assert main(["html", "--markdown", str(tmp_path / "none.md"), "--title", "qf", "--out", str(tmp_path / "x.html")]) == 1
    assert f"{tmp_path / 'none.md'}: cannot read the Markdown table" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
