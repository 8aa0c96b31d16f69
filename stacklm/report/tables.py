"""LaTeX tables in the layout of DuSell & Cotterell (2025), Tables 1–7, rendered with Jinja2.

Each table has a row per architecture and the paper's columns: full accuracy (Test ↑, Hier. ↑,
Linear ↓, Log Ratio ↑) and partial accuracy (Hier. ↑, Linear ↓, Log Ratio ↑). A cell is the
mean over seeds with the standard deviation in small text; the best mean of each column is
bold (the highest, or the lowest for Linear), judged on the printed values: every row that
prints the best value is bold, as in the paper; a column whose rows all print the same value
(the all-zero columns of a toy run) has no bold. The paper's numbers for the same architectures
follow as a second column set, bold by the same rule among those rows. Every caption ends in
the run's scale (``stacklm.workflow.document``): a preset's numbers are not the paper's.

The templates use ``<< >>`` and ``<% %>`` delimiters, so LaTeX braces need no escaping; every
generated text (titles, captions, row labels) passes through the ``tex`` filter, which escapes
LaTeX's special characters.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

import jinja2

from stacklm.report.aggregate import COLUMNS, Column
from stacklm.report.paper import PAPER_CITATION, PAPER_TABLES

MISSING = "--"
LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
}


class Summary(Protocol):
    mean: float
    std: float


def escape_latex(text: str) -> str:
    """``text`` typeset as written: every LaTeX special character escaped."""
    return "".join(LATEX_SPECIALS.get(character, character) for character in str(text))


def environment() -> jinja2.Environment:
    templates = jinja2.Environment(
        loader=jinja2.PackageLoader("stacklm.report", "templates"),
        block_start_string="<%",
        block_end_string="%>",
        variable_start_string="<<",
        variable_end_string=">>",
        comment_start_string="<#",
        comment_end_string="#>",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    templates.filters["tex"] = escape_latex
    return templates


def format_mean(value: float) -> str:
    """Three decimals, as in the paper ("-4.926"), and "0.000" for what rounds to zero from
    below; "inf" for an infinite log ratio; -- if NaN."""
    if math.isnan(value):
        return MISSING
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:.3f}"
    return "0.000" if float(text) == 0 else text


def format_std(value: float) -> str:
    """Two decimals without the leading zero (±.05, ±2.44), as in the paper."""
    if math.isnan(value) or math.isinf(value):
        return ""
    text = f"{abs(value):.2f}"
    return text[1:] if text.startswith("0.") else text


def best_architectures(cells: Mapping[tuple[str, str], Summary], architectures: Sequence[str], column: Column) -> set[str]:
    """The rows whose printed mean is the column's best (every row on a tie); none if no mean, or
    if every row prints the same mean (nothing stands out)."""
    means = {name: cells[(name, column.key)].mean for name in architectures if (name, column.key) in cells}
    finite = {name: _printed(mean) for name, mean in means.items() if not math.isnan(mean)}
    if not finite:
        return set()
    if len(set(finite.values())) == 1:
        return set()
    best = max(finite.values()) if column.higher_is_better else min(finite.values())
    return {name for name, mean in finite.items() if mean == best}


def _printed(value: float) -> float:
    """``value`` as the table prints it (three decimals), so that ties are judged on what a reader sees."""
    return value if math.isinf(value) else float(format_mean(value))


def render_cell(summary: Summary | None, bold: bool) -> str:
    """A LaTeX cell: the mean in math mode (bold if best), then ±std in small text."""
    if summary is None or math.isnan(summary.mean):
        return MISSING
    mean = format_mean(summary.mean).replace("inf", r"\infty")
    mean = rf"$\mathbf{{{mean}}}$" if bold else f"${mean}$"
    std = format_std(summary.std)
    return f"{mean} {{\\scriptsize $\\pm${std}}}" if std else mean


def render_markdown_cell(summary: Summary | None, bold: bool) -> str:
    """The same cell in Markdown: **mean** ±std."""
    if summary is None or math.isnan(summary.mean):
        return MISSING
    mean = format_mean(summary.mean).replace("inf", "∞")
    if bold:
        mean = f"**{mean}**"
    std = format_std(summary.std)
    return f"{mean} ±{std}" if std else mean


@dataclass(frozen=True)
class ColumnSet:
    title: str
    cells: Mapping[tuple[str, str], Summary]


def table_rows(
    architectures: Sequence[str], column_sets: Sequence[ColumnSet], cell: Callable[[Summary | None, bool], str]
) -> list[dict[str, object]]:
    """One ``{"label", "cells"}`` per architecture: every column of every set, in order."""
    rows: list[dict[str, object]] = []
    for name in architectures:
        cells = []
        for column_set in column_sets:
            for column in COLUMNS:
                best = name in best_architectures(column_set.cells, architectures, column)
                cells.append(cell(column_set.cells.get((name, column.key)), best))
        rows.append({"label": name, "cells": cells})
    return rows


def render_table(
    task: str, architectures: Sequence[str], column_sets: Sequence[ColumnSet], source: str, markdown: bool = False, scale: str = ""
) -> str:
    """The table for ``task`` (LaTeX ``table*``, or Markdown): a row per architecture, a group per
    column set; ``scale`` ends the caption."""
    rows = table_rows(architectures, column_sets, render_markdown_cell if markdown else render_cell)
    number, caption = PAPER_TABLES[task]
    return environment().get_template("table.md.j2" if markdown else "table.tex.j2").render(
        task=task,
        number=number,
        caption=caption,
        paper=PAPER_CITATION,
        columns=COLUMNS,
        column_sets=column_sets,
        rows=rows,
        source=source,
        scale=scale,
    )


@dataclass(frozen=True)
class Figure:
    path: str  # a PDF
    caption: str


@dataclass(frozen=True)
class Part:
    """A section of the document: an experiment's tables (LaTeX files with their own captions)
    and figures, after a heading; ``scale`` is listed on the title page."""

    heading: str
    scale: str
    tables: Sequence[str]
    figures: Sequence[Figure]


def render_document(document: str | Path, parts: Sequence[Part]) -> str:
    """A standalone LaTeX document: a title page listing every part's scale, then each part's
    tables (``\\input``) and figures, with paths relative to ``document``'s folder."""
    folder = Path(document).parent
    return environment().get_template("report.tex.j2").render(
        parts=[
            {
                "heading": part.heading,
                "scale": part.scale,
                "tables": [_relative(path, folder) for path in part.tables],
                "figures": [{"path": _relative(figure.path, folder), "caption": figure.caption} for figure in part.figures],
            }
            for part in parts
        ]
    )


def _relative(path: str | Path, folder: Path) -> str:
    return Path(os.path.relpath(Path(path), folder)).as_posix()
