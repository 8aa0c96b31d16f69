"""A CFL model's selected run scored on the fixed test set (the rule ``cfl_evaluate``; DuSell &
Chiang (2022) App. 8): the first ``cfl.test_strings_per_length`` strings of each valid length
(the paper uses all 100), Δ overall (length term included) and per length (conditioned on the
length).

The metrics Parquet has the columns of every run's metrics (``METRICS_SCHEMA``; split
"validation" or "test", rule null, metric ``cross_entropy_above_truth``) and ``length``: null
for Δ over the whole set, ℓ for the test bin of length ℓ (p_true conditioned on ℓ); plus
``setting`` and ``vector_size`` of the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from stacklm.parquet_file import read_parquet
from stacklm.cfl.datasets import CflDataset, read_split
from stacklm.cfl.languages import LANGUAGES
from stacklm.errors import StacklmError
from stacklm.evaluation.cfl import score_cfl_dataset
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.evaluation.metrics import MetricValue
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.cfl.data import first_strings_per_length
from stacklm.experiments.cfl.search import CflRun, best_delta
from stacklm.experiments.cfl.settings import CflSettings
from stacklm.experiments.cfl.training import Placement, with_run_columns
from stacklm.experiments.common import per_run, run_each
from stacklm.kernels import backend as backends
from stacklm.models.registry import model_for_config
from stacklm.settings_file import read_settings
from stacklm.tracking.records import RunMetadata, metrics_table, write_table
from stacklm.training.checkpoint import load_parameters
from stacklm.training.run_files import choose_device, load_model, set_threads


@dataclass(frozen=True)
class EvaluatedSelection:
    """One ``--selection`` with its ``--runs``, ``--out`` and ``--log``."""

    selection: Path
    runs: Path
    out: Path
    log: Path | None

    @property
    def label(self) -> str:
        return str(self.selection)


def evaluate_command(args: argparse.Namespace) -> int:
    count = len(args.selection)
    runs = per_run("--runs", args.runs, count, "--selection")
    outs = per_run("--out", args.out, count, "--selection")
    logs = per_run("--log", args.log, count, "--selection", [None] * count)
    evaluated = [EvaluatedSelection(*fields) for fields in zip(args.selection, runs, outs, logs)]
    settings = read_settings(args.settings)
    cfl = settings.section("cfl", CflSettings)
    evaluation = settings.section("evaluation", EvaluationSettings)
    device = choose_device(args.device)
    set_threads(args.threads)
    test = first_strings_per_length(read_split(args.test), cfl.test_strings_per_length)
    placement = Placement(device, backends.resolve(args.backend, device))
    run_each(evaluated, lambda run, stream: evaluate_run(run, test, cfl, evaluation, placement, stream))
    return 0


def evaluate_run(
    evaluated: EvaluatedSelection, test: CflDataset, cfl: CflSettings, evaluation: EvaluationSettings, placement: Placement, stream: TextIO | None
) -> None:
    """Score one model's selected run on the test set and write its metrics Parquet."""
    selection = read_parquet(evaluated.selection, "the selected run")
    setting = str(selection["setting"].iloc[0])
    saved = load_model(evaluated.runs / setting / "model.pt")
    if (saved.task, saved.architecture) != (selection["task"].iloc[0], selection["architecture"].iloc[0]):
        raise StacklmError(f"{evaluated.runs / setting} holds a {saved.architecture} run on {saved.task}, not the selected run of {evaluated.selection}")
    # the run's settings, with those this command used
    metadata = RunMetadata(**saved.metadata)
    used = {"evaluation": asdict(evaluation), "test_strings_per_length": cfl.test_strings_per_length,
            "evaluation_backend": backends.record(placement.backend)}
    metadata = replace(metadata, config=json.dumps(json.loads(metadata.config) | used, sort_keys=True))
    language = LANGUAGES[saved.task]
    model = model_for_config(saved.model_config)
    load_parameters(model, saved.parameters, saved.source)
    model = backends.accelerate(model.eval().to(placement.device), placement.backend)
    scores = score_cfl_dataset(model, test, eos_index=language.eos, tokens_per_batch=evaluation.tokens_per_batch, device=placement.device)
    rows = [
        MetricValue("validation", None, DELTA, best_delta(selection)),  # on the run's own validation set
        MetricValue("test", None, DELTA, scores.overall),
        *(MetricValue("test", None, DELTA, value) for value in scores.by_length.values()),
    ]
    lengths: list[int | None] = [None, None, *scores.by_length]
    table = metrics_table(rows, metadata)
    run = CflRun(saved.task, saved.architecture, metadata.learning_rate, saved.settings["vector_size"], metadata.seed)
    table = with_run_columns(table, run).append_column("length", pa.array(lengths, pa.int64()))
    write_table(table, evaluated.out)
    print(f"{run.model} {run.setting}: test Δ {scores.overall:.6f} -> {evaluated.out}", file=stream or sys.stderr, flush=True)
