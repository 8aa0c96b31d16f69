"""The PTB report (the rule ``ptb_report``; DuSell & Chiang (2022) §5.2, App. 11): every restart's
metrics into one Parquet file (the tables' source), the PTB table and the circuit table of the
selected restarts (``stacklm.report.ptb``), and App. 11's figure of SG score against test
perplexity of every restart of the figure's models."""

from __future__ import annotations

import argparse

from stacklm.parquet_file import read_parquet
from stacklm.errors import StacklmError, located
from stacklm.experiments.ptb.search import PtbSelection


def report_command(args: argparse.Namespace) -> int:
    """Every restart's metrics into one Parquet file, and the tables and figure rendered from it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stacklm.atomic import write_text_atomically
    from stacklm.report.ptb import plot_sg_against_perplexity, ptb_runs, render_circuit_table, render_ptb_table
    from stacklm.tracking.records import PTB_METRICS_SCHEMA, write_table

    selection: dict[str, int] = {}
    for path in args.selected:
        selected = PtbSelection.read(path)
        if selected.model in selection:
            raise located(path, None, f"a second selection of {selected.model}")
        selection[selected.model] = selected.restart
    unknown = [model for model in args.figure_models if model not in selection]
    if unknown:
        raise StacklmError(f"--figure-models: no selection of {', '.join(unknown)} among --selected")
    tables = []
    for path in args.metrics:
        try:
            tables.append(pq.read_table(path).select(PTB_METRICS_SCHEMA.names).cast(PTB_METRICS_SCHEMA))
        except (OSError, KeyError, pa.ArrowException) as error:
            raise located(path, None, f"not the metrics of a PTB restart ({error})") from None
    write_table(pa.concat_tables(tables), args.out_metrics)
    source = str(args.out_metrics)
    runs = ptb_runs(read_parquet(args.out_metrics, "the metrics"), source)
    latex = (render_ptb_table(runs, selection, source, scale=args.scale), render_circuit_table(runs, selection, source, scale=args.scale))
    for path, text in zip(args.tables, latex):
        write_text_atomically(path, text)
    markdown = (
        render_ptb_table(runs, selection, source, markdown=True, scale=args.scale),
        render_circuit_table(runs, selection, source, markdown=True, scale=args.scale),
    )
    for path, text in zip(args.markdown, markdown):
        write_text_atomically(path, text)
    plot_sg_against_perplexity(runs, selection, args.figure_models, args.figures)
    print(f"{len(runs)} PTB restarts of {len(selection)} models -> {args.out_metrics}, {', '.join(map(str, args.tables + args.markdown + args.figures))}")
    return 0
