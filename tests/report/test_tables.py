"""stacklm.report.tables: number formats, bold, LaTeX escaping, and the layout of DuSell &
Cotterell (2025), Tables 1-7."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from stacklm.report.aggregate import COLUMNS, Cell
from stacklm.report.paper import paper_cells
from stacklm.report.tables import (
    ColumnSet,
    Figure,
    Part,
    best_architectures,
    escape_latex,
    format_mean,
    format_std,
    render_cell,
    render_document,
    render_markdown_cell,
    render_table,
)

NAN = float("nan")


def test_number_formats_follow_the_paper() -> None:
    assert format_mean(0.99949) == "0.999"
    assert format_mean(-4.9261) == "-4.926"
    assert format_mean(NAN) == "--"
    assert format_mean(math.inf) == "inf"
    assert format_std(0.0449) == ".04"
    assert format_std(2.444) == "2.44"
    assert format_std(10.09) == "10.09"
    assert format_std(NAN) == ""


def test_cells_bold_the_best_and_show_std_small() -> None:
    assert render_cell(Cell(0.5, 0.1, 3), bold=True) == r"$\mathbf{0.500}$ {\scriptsize $\pm$.10}"
    assert render_cell(Cell(-4.9261, 2.444, 5), bold=False) == r"$-4.926$ {\scriptsize $\pm$2.44}"
    assert render_cell(Cell(0.5, NAN, 1), bold=False) == "$0.500$"
    assert render_cell(Cell(-math.inf, NAN, 1), bold=True) == r"$\mathbf{-\infty}$"
    assert render_markdown_cell(Cell(math.inf, NAN, 1), bold=False) == "∞"
    assert render_cell(Cell(NAN, NAN, 0), bold=True) == "--"
    assert render_cell(None, bold=False) == "--"


def test_best_is_highest_except_for_linear_and_ties_are_all_bold() -> None:
    cells = {
        ("A", "full_test"): Cell(0.9, 0, 2), ("B", "full_test"): Cell(0.95, 0, 2), ("C", "full_test"): Cell(NAN, NAN, 0),
        ("A", "full_linear"): Cell(0.0, 0, 2), ("B", "full_linear"): Cell(0.0, 0, 2), ("C", "full_linear"): Cell(0.3, 0, 2),
    }  # fmt: skip
    by_key = {column.key: column for column in COLUMNS}
    assert best_architectures(cells, ["A", "B", "C"], by_key["full_test"]) == {"B"}
    assert best_architectures(cells, ["A", "B", "C"], by_key["full_linear"]) == {"A", "B"}


def table_rows(latex: str) -> list[list[str]]:
    body = latex.split("\\midrule\n")[1].split("\\bottomrule")[0]
    return [[cell.strip() for cell in line.removesuffix("\\\\").split(" & ")] for line in body.strip().splitlines()]


def test_table_has_both_column_sets_in_the_papers_layout() -> None:
    ours = {(name, column.key): Cell(0.5, 0.05, 5) for name in ("Tf", "Tf+Nd") for column in COLUMNS}
    ours[("Tf+Nd", "full_hierarchical")] = Cell(0.7, 0.2, 5)
    latex = render_table(
        "question-formation",
        ["Tf", "Tf+Nd", "Tf+Syn"],
        [ColumnSet("This reproduction (5 seeds)", ours), ColumnSet("DuSell & Cotterell (2025), Table 1 (5 runs)", paper_cells("question-formation"))],
        source="metrics.parquet",
    )
    rows = table_rows(latex)
    assert [row[0] for row in rows] == ["Tf", "Tf+Nd", "Tf+Syn"]
    assert all(len(row) == 1 + 2 * len(COLUMNS) for row in rows)
    tf, tf_nd, tf_syn = rows
    assert tf_nd[2] == r"$\mathbf{0.700}$ {\scriptsize $\pm$.20}"  # ours, FA Hier.: best
    assert tf[2] == r"$0.500$ {\scriptsize $\pm$.05}"
    assert tf_nd[9] == r"$\mathbf{0.318}$ {\scriptsize $\pm$.19}"  # the paper's Tf+Nd, FA Hier.
    assert tf[8] == tf_nd[8] == r"$0.999$ {\scriptsize $\pm$.00}"  # the paper's Tf test accuracy ties Tf+Nd's: nothing stands out, no bold
    assert tf[11] == r"$-4.926$ {\scriptsize $\pm$2.44}"  # the paper's Tf, FA Log Ratio
    assert tf_syn[1:] == ["--"] * 2 * len(COLUMNS)  # neither we nor the paper have it
    header = latex.split("\\toprule\n")[1].split("\\midrule")[0]
    assert header.count(r"Test $\uparrow$") == 2 and header.count(r"Linear $\downarrow$") == 4
    assert header.count(r"Log Ratio $\uparrow$") == 4 and header.count(r"Hier. $\uparrow$") == 4
    assert "This reproduction (5 seeds)" in header and r"DuSell \& Cotterell (2025), Table 1 (5 runs)" in header
    assert r"\label{tab:question-formation}" in latex and "Results on question formation." in latex


def test_document_has_a_title_page_of_scales_then_every_parts_tables_and_figures(tmp_path: Path) -> None:
    report = tmp_path / "report"
    document = render_document(
        report / "report.tex",
        [
            Part("Syntactic transformations", "Preset small: 500 examples.", [str(report / "tables" / "question-formation.tex"), str(report / "tables" / "passivization.tex")],
                 [Figure(str(report / "figures" / "figure3.pdf"), "Figure 3. Preset small: 500 examples.")]),
            Part("Penn Treebank", "Preset small: 100 lines.", [str(tmp_path / "ptb" / "ptb.tex")], [Figure(str(tmp_path / "ptb" / "sg.pdf"), "SG. Preset small: 100 lines.")]),
        ],
    )
    assert r"\input{tables/question-formation.tex}" in document and r"\input{tables/passivization.tex}" in document
    assert r"\includegraphics[width=\textwidth,height=0.8\textheight,keepaspectratio]{figures/figure3.pdf}" in document
    assert r"\input{../ptb/ptb.tex}" in document and r"{../ptb/sg.pdf}" in document and r"\caption{SG. Preset small: 100 lines.}" in document
    title = document[document.index(r"\begin{titlepage}") : document.index(r"\end{titlepage}")]
    assert r"\item[Syntactic transformations] Preset small: 500 examples." in title and r"\item[Penn Treebank] Preset small: 100 lines." in title
    assert document.index(r"\begin{document}") < document.index(r"\end{titlepage}") < document.index(r"\input") < document.index(r"\end{document}")


@pytest.mark.parametrize("with_paper", [False, True])
def test_caption_mentions_the_paper_only_beside_its_numbers(with_paper: bool) -> None:
    ours = {("Tf", column.key): Cell(0.5, 0.05, 5) for column in COLUMNS}
    sets = [ColumnSet("ours", ours)] + ([ColumnSet("paper", paper_cells("passivization"))] if with_paper else [])
    latex = render_table("passivization", ["Tf"], sets, source="m.parquet")
    assert (r"DuSell \& Cotterell (2025), Table 4" in latex) == with_paper


def test_markdown_table_stacks_the_two_column_sets() -> None:
    ours = {(name, column.key): Cell(0.25, 0.1, 2) for name in ("Tf", "Tf+Nd") for column in COLUMNS}
    sets = [ColumnSet("This reproduction (2 seeds)", ours), ColumnSet("DuSell & Cotterell (2025), Table 1 (5 runs)", paper_cells("question-formation"))]
    markdown = render_table("question-formation", ["Tf", "Tf+Nd"], sets, source="m.parquet", markdown=True)
    rows = [line for line in markdown.splitlines() if line.startswith("| Tf")]
    assert rows[0] == rows[1].replace("Tf+Nd", "Tf") == "| Tf | 0.250 ±.10 |" + " 0.250 ±.10 |" * 6  # no cell differs: no bold
    assert rows[3] == "| Tf+Nd | 0.999 ±.00 | **0.318** ±.19 | **0.018** ±.02 | **8.563** ±8.11 | **0.732** ±.15 | **0.268** ±.15 | **2.461** ±3.52 |"
    assert markdown.count("| Architecture | FA Test ↑ | FA Hier. ↑ | FA Linear ↓ | FA Log Ratio ↑ | PA Hier. ↑ | PA Linear ↓ | PA Log Ratio ↑ |") == 2


def test_what_rounds_to_zero_prints_as_zero_never_negative_zero() -> None:
    assert format_mean(-0.0004) == format_mean(-1e-12) == format_mean(0.0) == "0.000"
    assert render_cell(Cell(-0.0004, NAN, 1), bold=False) == "$0.000$"
    assert render_markdown_cell(Cell(-0.0001, NAN, 1), bold=False) == "0.000"
    assert format_mean(-0.0006) == "-0.001"


def test_ties_are_judged_on_the_printed_values() -> None:
    by_key = {column.key: column for column in COLUMNS}
    printed_zero = {("A", "full_log_ratio"): Cell(0.0004, NAN, 1), ("B", "full_log_ratio"): Cell(0.0001, NAN, 1), ("C", "full_log_ratio"): Cell(-0.0002, NAN, 1)}
    assert {format_mean(cell.mean) for cell in printed_zero.values()} == {"0.000"}
    assert best_architectures(printed_zero, ["A", "B", "C"], by_key["full_log_ratio"]) == set()  # every row prints 0.000: none stands out
    lowest = {("A", "full_linear"): Cell(0.0012, NAN, 1), ("B", "full_linear"): Cell(0.0008, NAN, 1), ("C", "full_linear"): Cell(0.0016, NAN, 1)}
    assert best_architectures(lowest, ["A", "B", "C"], by_key["full_linear"]) == {"A", "B"}  # both print 0.001


def test_latex_specials_in_generated_text_are_escaped() -> None:
    assert escape_latex("90% & $x_1$ #{~^}\\<>") == (
        r"90\% \& \$x\_1\$ \#\{\textasciitilde{}\textasciicircum{}\}\textbackslash{}\textless{}\textgreater{}"
    )
    ours = {("Tf", column.key): Cell(0.5, 0.05, 5) for column in COLUMNS}
    latex = render_table("passivization", ["Tf"], [ColumnSet("50% of A & B_c", ours)], source="m.parquet")
    assert r"{50\% of A \& B\_c}" in latex
    document = render_document(Path("r/report.tex"), [Part("A & B", "50% #1", ["r/t.tex"], [Figure("r/f.pdf", "reaches 90%. #1")])])
    assert r"\caption{reaches 90\%. \#1}" in document and r"\item[A \& B] 50\% \#1" in document


def test_a_column_where_no_cell_differs_has_no_bold() -> None:
    """A toy run's all-zero columns: nothing is best, nothing is bold (LaTeX and Markdown)."""
    zeros = {(name, column.key): Cell(0.0, 0.0, 1) for name in ("Tf", "Tf+Nd", "LSTM") for column in COLUMNS}
    zeros[("LSTM", "full_test")] = Cell(0.25, 0.0, 1)
    latex = render_table("question-formation", ["Tf", "Tf+Nd", "LSTM"], [ColumnSet("ours", zeros)], source="m.parquet")
    assert latex.count(r"\mathbf") == 1 and r"$\mathbf{0.250}$" in latex  # only the one column where a cell differs
    markdown = render_table("question-formation", ["Tf", "Tf+Nd", "LSTM"], [ColumnSet("ours", zeros)], source="m.parquet", markdown=True)
    assert markdown.count("**") == 2 * 2  # the column set's title, and the one best cell


def test_every_caption_ends_in_the_scale() -> None:
    ours = {("Tf", column.key): Cell(0.5, 0.05, 1) for column in COLUMNS}
    scale = "Preset small: data drawn from stacklm's grammars; 500 training examples per task; 1 seed trained at most 1 epoch."
    latex = render_table("passivization", ["Tf"], [ColumnSet("ours", ours), ColumnSet("paper", paper_cells("passivization"))], source="m.parquet", scale=scale)
    caption = latex[latex.index(r"\caption{") :].split("\n")[0]
    assert caption.endswith(escape_latex(scale) + "}") and "Table 4" in caption
    markdown = render_table("passivization", ["Tf"], [ColumnSet("ours", ours)], source="m.parquet", markdown=True, scale=scale)
    assert scale in markdown.splitlines()[0]
