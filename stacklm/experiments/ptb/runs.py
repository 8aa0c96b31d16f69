"""One PTB restart trained, and a trained restart scored (the jobs ``ptb_train`` and
``ptb_evaluate``; DuSell & Chiang (2022) §5.2, App. 10–11).

Training (``train_restart``): the vocabulary of the whole training file (V = 10,000, also on a
slice), the splits' truncated-BPTT chunks (B = 32, 35 steps), restart k's draw of η and c and
its initial parameters from seeds derived from (salt, model, k), then
``stacklm.training.ptb.train_resumably``. Written: ``model.pt`` (the best epoch's parameters,
``stacklm.training.ptb.save_ptb_model``) and ``train.parquet`` (one row per epoch,
``stacklm.tracking.records.ptb_curve_table``).

Scoring (``evaluate_restart``): the best epoch's validation perplexity (as training measured
it), the test perplexity (same layout) and the SG score over the chosen suites, into
``metrics.parquet`` (``ptb_metrics_table``).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TextIO

import torch

from stacklm.data.ptb import PTB_SHA256, Chunk, Split, build_vocabulary, chunks, encode, first_lines, ptb_file_name, read_split
from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.model import PtbScorer
from stacklm.evaluation.syntaxgym.score import SuiteResult
from stacklm.evaluation.syntaxgym.sources import SUITE_SHA256, score_all
from stacklm.experiments.common import derived_seed
from stacklm.experiments.ptb.dag import EXPERIMENT
from stacklm.models.ptb import PtbLanguageModel, ptb_config, ptb_config_fields
from stacklm.tracking.records import (
    BUILT_MODEL,
    RunMetadata,
    code_version,
    ptb_curve_table,
    ptb_metric_rows,
    ptb_metrics_table,
    write_table,
)
from stacklm.training.loop import StopRequest
from stacklm.training.progress import Progress
from stacklm.training.ptb import SavedPtbModel, SearchDraw, draw_hyperparameters, evaluate, load_ptb_model, save_ptb_model, train_resumably

BATCH_SIZE = 32  # App. 10
BPTT = 35  # App. 10: truncated BPTT of 35 steps


@dataclass(frozen=True)
class RestartSeeds:
    draw: int  # η and c (random.Random)
    parameters: int  # the initial parameters (torch.Generator)


def restart_seeds(salt: int, model: str, restart: int) -> RestartSeeds:
    """Seeds that depend on (salt, model, restart) alone."""
    return RestartSeeds(draw=derived_seed("ptb", salt, model, restart, "draw"), parameters=derived_seed("ptb", salt, model, restart, "parameters"))


def restart_draw(salt: int, model: str, restart: int) -> SearchDraw:
    """Restart ``restart``'s learning rate and clipping factor (App. 10's log-uniform draws)."""
    return draw_hyperparameters(random.Random(restart_seeds(salt, model, restart).draw))


def data_version(lines: int | None) -> str:
    """What the runs read: the pinned files (refused on reading unless their sha256 is the pinned one) and the slice."""
    return hashlib.sha256(json.dumps({"files": PTB_SHA256, "lines": lines}, sort_keys=True).encode()).hexdigest()


def split_tokens(data: Path, split: Split, lines: int | None) -> list[str]:
    return first_lines(read_split(data, split), lines)


def split_chunks(tokens: list[str], vocabulary: Vocabulary, source: str) -> list[Chunk]:
    if not tokens:
        raise StacklmError(f"{source}: the split has no token")
    return chunks(encode(tokens, vocabulary), vocabulary.eos_index, BATCH_SIZE, BPTT)


def train_restart(
    model_name: str,
    restart: int,
    data: Path,
    out: Path,
    checkpoint: Path,
    *,
    salt: int,
    lines: int | None,
    max_epochs: int,
    progress_interval_s: float,
    device: torch.device,
    stop_request: StopRequest | None = None,
    stream: TextIO | None = None,
) -> None:
    """Train restart ``restart`` of ``model_name`` into ``out``, resumable at ``checkpoint``;
    ``stop_request``: the command's (default: one installed for this run); progress lines go to
    ``stream`` (default stderr)."""
    config = ptb_config(model_name)
    seeds = restart_seeds(salt, model_name, restart)
    draw = restart_draw(salt, model_name, restart)
    train_file = read_split(data, "train")
    vocabulary = build_vocabulary(train_file)
    if len(vocabulary) != config.vocabulary_size:
        raise StacklmError(f"{data / ptb_file_name('train')}: a vocabulary of {len(vocabulary)} types, the model reads {config.vocabulary_size}")
    train_chunks = split_chunks(first_lines(train_file, lines), vocabulary, str(data / ptb_file_name("train")))
    valid_chunks = split_chunks(split_tokens(data, "valid", lines), vocabulary, str(data / ptb_file_name("valid")))
    version = data_version(lines)
    run_settings = {
        "model": model_name,
        "restart": restart,
        "salt": salt,
        "lines": lines,
        "max_epochs": max_epochs,
        "batch_size": BATCH_SIZE,
        "bptt": BPTT,
        "seeds": asdict(seeds),
        "draw": asdict(draw),
    }
    model = PtbLanguageModel(config)
    model.initialize(torch.Generator().manual_seed(seeds.parameters))
    model = model.to(device)
    Progress(stream=stream, interval_s=progress_interval_s).line(
        f"{model_name} restart {restart}: learning rate {draw.learning_rate:.4g}, clipping {draw.clip_per_target:.4g} per target;"
        f" {len(train_chunks)} training and {len(valid_chunks)} validation chunks"
    )
    result = train_resumably(
        model,
        train_chunks,
        valid_chunks,
        draw,
        max_epochs,
        checkpoint=checkpoint,
        fingerprint_source={"model": ptb_config_fields(config), "seeds": asdict(seeds), "draw": asdict(draw), "data_version": version},
        progress_interval_s=progress_interval_s,
        stop_request=stop_request,
        stream=stream,
    )
    metadata = RunMetadata(
        task=EXPERIMENT,  # the runs' task column names their MLflow experiment
        architecture=model_name,
        phase="search",
        trial=None,
        seed=restart,
        learning_rate=draw.learning_rate,
        tokens_per_batch=None,
        parameters=sum(parameter.numel() for parameter in model.parameters()),
        data_version=version,
        code_version=code_version(),
        wall_time_s=result.wall_time_s,
        tokens_per_s=result.tokens_per_s,
        config=json.dumps(run_settings | {BUILT_MODEL: ptb_config_fields(config)}, sort_keys=True),
    )
    saved = SavedPtbModel(
        config=config,
        vocabulary=vocabulary.tokens,
        parameters=model.state_dict(),
        metadata=asdict(metadata),
        clip_per_target=draw.clip_per_target,
        best_valid_perplexity=result.best_valid_perplexity,
    )
    save_ptb_model(out / "model.pt", saved)
    write_table(ptb_curve_table(result.epochs, metadata, draw.clip_per_target), out / "train.parquet")


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
    saved = load_ptb_model(run / "model.pt")
    metadata = RunMetadata(**saved.metadata)
    used = {"evaluation": {"lines": lines, "suites": None if suites is None else list(suites)}}
    metadata = replace(metadata, config=json.dumps(json.loads(metadata.config) | used, sort_keys=True))
    model = saved.model().to(device)
    vocabulary = Vocabulary(saved.vocabulary)
    progress = Progress(stream=stream)
    started = time.monotonic()
    test_chunks = split_chunks(split_tokens(data, "test", lines), vocabulary, str(data / ptb_file_name("test")))
    test_perplexity = evaluate(model, test_chunks)
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
    rows = ptb_metric_rows(saved.best_valid_perplexity, test_perplexity, sg)
    write_table(ptb_metrics_table(rows, metadata, saved.clip_per_target), out)
