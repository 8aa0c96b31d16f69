"""PTB restarts scored (the rule ``ptb_evaluate``; DuSell & Chiang (2022) §5.2, App. 11): the
best epoch's validation perplexity (as training measured it), the test perplexity (the same
chunks) and the SG score over the chosen suites, into ``metrics.parquet``
(``stacklm.tracking.records.ptb_metrics_table``). Several ``--run`` values are several restarts
scored one after another (rule ``ptb_evaluate_group<n>``), each with its ``--out`` and ``--log``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import torch

from stacklm.data.ptb import ptb_file_name
from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import located
from stacklm.evaluation.syntaxgym.model import PtbScorer
from stacklm.evaluation.syntaxgym.score import SuiteResult
from stacklm.evaluation.syntaxgym.sources import SUITE_SHA256, score_all
from stacklm.experiments.common import evaluated_runs, run_each
from stacklm.experiments.ptb.data import split_chunks, split_tokens
from stacklm.experiments.ptb.training import device_and_threads
from stacklm.tracking.records import RunMetadata, ptb_metric_rows, ptb_metrics_table, write_table
from stacklm.training.progress import Progress
from stacklm.training.checkpoint import ADVICE
from stacklm.training import chunks
from stacklm.training.run_files import load_model, rebuild_ptb_model
from stacklm.training.schedule import perplexity


def evaluate_command(args: argparse.Namespace) -> int:
    """``stacklm ptb evaluate``: each restart of ``--run`` in turn."""
    planned = evaluated_runs(args)
    device = device_and_threads(args)
    suites = tuple(args.suites) if args.suites else None
    run_each(planned, lambda run, stream: evaluate_restart(run.run, args.data, args.syntaxgym, run.out, lines=args.lines, suites=suites, device=device, stream=stream))
    return 0


def evaluate_restart(
    run: Path,
    data: Path,
    syntaxgym: Path,
    out: Path,
    *,
    lines: int | None,
    suites: tuple[str, ...] | None,
    device: torch.device,
    stream: TextIO | None = None,
) -> None:
    """Score the restart trained in ``run`` into ``out``; progress lines go to ``stream`` (default stderr)."""
    saved = load_model(run / "model.pt")
    trained = rebuild_ptb_model(saved)
    if saved.validation_cross_entropy is None:
        raise located(saved.source, None, f"a model file without its validation cross-entropy; {ADVICE}")
    metadata = RunMetadata(**saved.metadata)
    used = {"evaluation": {"lines": lines, "suites": None if suites is None else list(suites)}}
    metadata = replace(metadata, config=json.dumps(json.loads(metadata.config) | used, sort_keys=True))
    model = trained.to(device)
    vocabulary = Vocabulary(saved.vocabulary)
    progress = Progress(stream=stream)
    started = time.monotonic()
    test_chunks = split_chunks(split_tokens(data, "test", lines), vocabulary, str(data / ptb_file_name("test")))
    test_perplexity = chunks.perplexity(model, test_chunks)
    targets = sum(chunk.num_targets for chunk in test_chunks)
    progress.line(f"{metadata.architecture} restart {metadata.seed}: test perplexity {test_perplexity:.2f} over {targets} targets ({time.monotonic() - started:.0f} s)")
    scored: list[SuiteResult] = []
    total = len(suites) if suites is not None else len(SUITE_SHA256)

    def report(result: SuiteResult) -> None:
        scored.append(result)
        progress.line(f"suite {len(scored)} of {total}, {result.suite}: accuracy {result.accuracy:.3f} ({time.monotonic() - started:.0f} s)")

    scorer = PtbScorer(model, vocabulary)
    sg = score_all(syntaxgym, scorer.words, scorer, suites, on_suite=report)
    progress.line(f"SG score {sg.scores.overall:.3f} over {len(sg.suites)} suites")
    rows = ptb_metric_rows(perplexity(saved.validation_cross_entropy), test_perplexity, sg)
    write_table(ptb_metrics_table(rows, metadata, saved.settings["draw"]["clip_per_target"]), out)
