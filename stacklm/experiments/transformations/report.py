"""The commands of the rules ``aggregate`` and ``report``."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path


from stacklm.parquet_file import read_parquet
from stacklm.atomic import write_bytes_atomically, write_text_atomically
from stacklm.errors import StacklmError
from stacklm.report.aggregate import Cell, aggregate, summarize
from stacklm.report.paper import PAPER_CITATION, PAPER_TABLES, paper_cells
from stacklm.report.tables import ColumnSet, Figure, Part, render_document, render_table
from stacklm.experiments.transformations.settings import FinalSettings, ReportSettings
from stacklm.settings_file import read_settings

def aggregate_command(args: argparse.Namespace) -> int:
    combined = aggregate(args.runs)
    buffer = io.BytesIO()
    combined.to_parquet(buffer, index=False)
    write_bytes_atomically(args.out, buffer.getvalue())
    print(f"{len(args.runs)} runs, {len(combined)} metric rows -> {args.out}")
    return 0


def report_command(args: argparse.Namespace) -> int:
    settings = read_settings(args.settings)
    tasks = settings.section("tasks", tuple[str, ...])
    architectures = settings.section("architectures", tuple[str, ...])
    final = settings.section("final", FinalSettings)
    report = settings.section("report", ReportSettings)
    for option in ("tables", "markdown", "markdown_means"):
        given = len(getattr(args, option))
        if given != len(tasks) and (given or option != "markdown_means"):
            raise StacklmError(f"--{option.replace('_', '-')}: {given} files given for {len(tasks)} tasks")
    metrics = read_parquet(Path(args.metrics), "the metrics")
    log_ratio = report.log_ratio
    panels = []
    means = args.markdown_means or [None] * len(tasks)
    for task, path, markdown, markdown_means in zip(tasks, args.tables, args.markdown, means):
        cells = summarize(metrics, task, architectures, log_ratio)
        panels.append((task, cells))
        number = PAPER_TABLES[task][0]
        reproduction = ColumnSet(reproduction_title(cells, architectures), cells)
        paper = ColumnSet(f"{PAPER_CITATION}, Table {number} (5 runs)", paper_cells(task))
        # the Markdown table also shows every seed's own values (with two seeds or more), between the mean and the paper's
        present = [seed for seed in final.seeds if (metrics["seed"] == seed).any()]
        per_seed = [ColumnSet(f"Seed {seed}", summarize(metrics[metrics["seed"] == seed], task, architectures, log_ratio)) for seed in present] if len(present) > 1 else []
        write_text_atomically(path, render_table(task, architectures, [reproduction, paper], source=Path(args.metrics).name, scale=args.scale))
        markdown_sets = [reproduction, *per_seed, paper]
        write_text_atomically(
            markdown, render_table(task, architectures, markdown_sets, source=Path(args.metrics).name, markdown=True, scale=args.scale)
        )
        if markdown_means is not None:
            write_text_atomically(
                markdown_means, render_table(task, architectures, [reproduction, paper], source=Path(args.metrics).name, markdown=True, scale=args.scale)
            )
    threshold = report.min_test_accuracy
    seeds = max((cell.runs for _, cells in panels for cell in cells.values()), default=0)
    # matplotlib loads here, not at import: every other `stacklm` command stays quick to start.
    from stacklm.report.figures import figure3_caption, plot_figure3

    plot_figure3(panels, architectures, threshold, args.figures)
    figure3 = [Figure(str(path), f"{figure3_caption(threshold, seeds)} {args.scale}") for path in args.figures if str(path).endswith(".pdf")]
    transformations = Part(f"Syntactic transformations ({PAPER_CITATION})", args.scale, [str(path) for path in args.tables], figure3)
    write_text_atomically(args.document, render_document(args.document, [transformations, *document_parts(args.parts)]))
    print(f"{len(tasks)} tables, {len(args.figures)} figure files, {args.document}")
    return 0


def reproduction_title(cells: dict[tuple[str, str], Cell], architectures: tuple[str, ...]) -> str:
    """``This reproduction (N seeds)``, N the most seeds any architecture has in ``cells``, naming
    the architectures that have fewer (``; Tf+Sup 3``): their means are over those seeds only."""
    runs = {name: max(cell.runs for (architecture, _), cell in cells.items() if architecture == name) for name in architectures}
    most = max(runs.values(), default=0)
    fewer = "".join(f"; {name} {count}" for name, count in runs.items() if 0 < count < most)
    return f"This reproduction ({most} seed{'' if most == 1 else 's'}{fewer})"


def document_parts(text: str) -> list[Part]:
    """The parts of ``--parts`` (``stacklm.workflow.document.document_parts`` as JSON)."""
    try:
        return [
            Part(item["heading"], item["scale"], list(item["tables"]), [Figure(figure["path"], figure["caption"]) for figure in item["figures"]])
            for item in json.loads(text)
        ]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise StacklmError(f"--parts: not a list of parts (heading, scale, tables, figures with path and caption): {type(error).__name__}: {error}") from None


