"""A run's records: its metadata, ``train.parquet`` (learning curve) and ``metrics.parquet``.

``metrics.parquet`` is the source of truth for the tables (long format, one row per metric):
task, architecture, phase ("search"|"final"), trial (null for final), seed, split, rule,
metric, value, then the run's metadata — learning_rate, tokens_per_batch, parameters,
data_version (sha256 of the data files), code_version (stacklm version + the git commit),
wall_time_s and tokens_per_s of training, config (JSON of the resolved settings, and the
built model's config as ``built_model``).
``train.parquet`` has one row per checkpoint (with the generalization curves' accuracies where
the run scored them) and the same metadata columns.
A PTB run (DuSell & Chiang (2022) §5; ``stacklm.experiments.ptb.training``) has the same metadata (task
"ptb", architecture the model's name, phase "search", trial null, seed the random restart,
learning_rate the drawn η, tokens_per_batch null) and ``clip_per_target``, the drawn c. Its
``train.parquet`` has one row per epoch (``PTB_CURVE_SCHEMA``: epoch, learning_rate_used,
train_loss = the epoch's mean NLL per target, is_best as every curve's, and
validation_perplexity = exp of the checkpoint's validation cross-entropy); its ``metrics.parquet`` (``PTB_METRICS_SCHEMA``: the metrics columns,
then suite and circuit) holds the perplexity on split "validation" and "test" (the best epoch's
parameters), and on split "syntaxgym" each suite's accuracy (suite and its circuit set), each
circuit's score (circuit set) and the SG score (neither set).
Both are written atomically.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
from importlib.metadata import version
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from stacklm.atomic import write_atomically
from stacklm.training.schedule import perplexity

if TYPE_CHECKING:  # they import torch; this module stays light for `stacklm tracking sync`
    from stacklm.evaluation.metrics import MetricValue
    from stacklm.evaluation.syntaxgym.sources import SGResult
    from stacklm.training.run_state import CheckpointRecord

Phase = Literal["search", "final"]


@dataclass(frozen=True)
class RunMetadata:
    task: str
    architecture: str
    phase: Phase
    trial: int | None
    seed: int
    learning_rate: float
    tokens_per_batch: int | None  # None for the CFL runs: batches of 10 strings of one length, no token budget
    parameters: int
    data_version: str
    code_version: str
    wall_time_s: float
    tokens_per_s: float
    config: str  # JSON of the run's resolved settings


METADATA_SCHEMA = pa.schema(
    [
        ("task", pa.string()),
        ("architecture", pa.string()),
        ("phase", pa.string()),
        ("trial", pa.int64()),
        ("seed", pa.int64()),
        ("learning_rate", pa.float64()),
        ("tokens_per_batch", pa.int64()),
        ("parameters", pa.int64()),
        ("data_version", pa.string()),
        ("code_version", pa.string()),
        ("wall_time_s", pa.float64()),
        ("tokens_per_s", pa.float64()),
        ("config", pa.string()),
    ]
)
METRIC_FIELDS = [("split", pa.string()), ("rule", pa.string()), ("metric", pa.string()), ("value", pa.float64())]
METRICS_SCHEMA = pa.schema(list(METADATA_SCHEMA)[:5] + [pa.field(*item) for item in METRIC_FIELDS] + list(METADATA_SCHEMA)[5:])
CHECKPOINT_FIELDS = [
    ("checkpoint", pa.int64()),
    ("epoch", pa.int64()),
    ("step", pa.int64()),
    ("examples_seen", pa.int64()),
    ("learning_rate_used", pa.float64()),
    ("train_loss", pa.float64()),
    ("validation_cross_entropy", pa.float64()),
    ("is_best", pa.bool_()),
]
# The generalization curves (``TaskEvaluator.checkpoint_scores``): a full and a partial accuracy
# on each scored set (the test set, the generalization set under each rule); null where a run scored none.
CURVE_SETS = ("test", "hierarchical", "linear")


def curve_score(scored_set: str, kind: Literal["full", "partial"]) -> str:
    """The curve column of ``kind`` accuracy on ``scored_set`` (one of ``CURVE_SETS``)."""
    return f"{scored_set}_{kind}_accuracy"


CURVE_SCORES = tuple(curve_score(name, kind) for name in CURVE_SETS for kind in ("full", "partial"))
# A checkpoint's row without the run's metadata: a finished run's curve and a training state's so far alike.
CHECKPOINT_SCHEMA = pa.schema(CHECKPOINT_FIELDS + [(name, pa.float64()) for name in CURVE_SCORES])
CURVE_SCHEMA = pa.schema(list(CHECKPOINT_SCHEMA) + list(METADATA_SCHEMA))


# PTB runs: the drawn clipping factor, the per-epoch curve and the SyntaxGym rows' names.
PTB_RUN_FIELDS = [("clip_per_target", pa.float64())]
PTB_EPOCH_FIELDS = [item for item in CHECKPOINT_FIELDS if item[0] in ("epoch", "learning_rate_used", "train_loss", "is_best")] + [
    ("validation_perplexity", pa.float64())
]
PTB_CURVE_SCHEMA = pa.schema(PTB_EPOCH_FIELDS + list(METADATA_SCHEMA) + PTB_RUN_FIELDS)
SG_FIELDS = [("suite", pa.string()), ("circuit", pa.string())]
PTB_METRICS_SCHEMA = pa.schema(list(METRICS_SCHEMA) + [pa.field(*item) for item in SG_FIELDS + PTB_RUN_FIELDS])
PERPLEXITY = "perplexity"
SG_SPLIT = "syntaxgym"
SG_SUITE_ACCURACY = "sg_suite_accuracy"
SG_CIRCUIT_SCORE = "sg_circuit_score"
SG_SCORE = "sg_score"


@dataclass(frozen=True)
class PtbMetric:
    """One row of a PTB run's metrics: a perplexity, a suite's accuracy, a circuit's or the SG score."""

    split: str  # "validation", "test" or SG_SPLIT
    metric: str
    value: float
    suite: str | None = None
    circuit: str | None = None


def ptb_metric_rows(validation_perplexity: float, test_perplexity: float, sg: SGResult | None) -> list[PtbMetric]:
    """The rows of a trained PTB model: both perplexities, then (when scored) every suite's
    accuracy with its circuit, every circuit's score and the SG score."""
    rows = [PtbMetric("validation", PERPLEXITY, validation_perplexity), PtbMetric("test", PERPLEXITY, test_perplexity)]
    if sg is None:
        return rows
    circuit_of = {suite: circuit.name for circuit in sg.circuits for suite in circuit.suites}
    rows += [PtbMetric(SG_SPLIT, SG_SUITE_ACCURACY, result.accuracy, result.suite, circuit_of[result.suite]) for result in sg.suites]
    rows += [PtbMetric(SG_SPLIT, SG_CIRCUIT_SCORE, score, circuit=name) for name, score in sg.scores.circuits]
    return rows + [PtbMetric(SG_SPLIT, SG_SCORE, sg.scores.overall)]


def data_version(paths: Sequence[str | Path]) -> str:
    """sha256 over the files' names and contents, in the order given."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).name.encode() + b"\0")
        digest.update(Path(path).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


COMMIT_MARK = "+g"
BUILT_MODEL = "built_model"  # the key of the built model's config in a run's config JSON


def code_version() -> str:
    """``stacklm`` version, plus ``+g<commit>`` (the whole hash) when the package lies in a git checkout."""
    release = version("stacklm")
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return release
    return f"{release}{COMMIT_MARK}{head.stdout.strip()}" if head.returncode == 0 else release


def commit(code_version: str) -> str | None:
    """The git commit a :func:`code_version` names; None for a package outside a checkout."""
    return code_version.split(COMMIT_MARK, 1)[1] if COMMIT_MARK in code_version else None


def metrics_table(rows: Sequence[MetricValue], metadata: RunMetadata) -> pa.Table:
    columns = {name: [value] * len(rows) for name, value in asdict(metadata).items()}
    columns |= {name: [getattr(row, name) for row in rows] for name, _ in METRIC_FIELDS}
    return pa.Table.from_pydict(columns, schema=METRICS_SCHEMA)


def checkpoint_table(curve: Sequence[CheckpointRecord]) -> pa.Table:
    """The checkpoints' columns of ``train.parquet`` (``CHECKPOINT_SCHEMA``), one row per record:
    of a finished run's curve, and of a training state's curve so far (``stacklm progress``)."""
    unknown = sorted({name for record in curve for name in record.scores} - set(CURVE_SCORES))
    if unknown:
        raise ValueError(f"checkpoint scores {', '.join(unknown)} are not curve columns ({', '.join(CURVE_SCORES)})")
    columns = {name: [getattr(record, name) for record in curve] for name, _ in CHECKPOINT_FIELDS}
    columns |= {name: [record.scores.get(name) for record in curve] for name in CURVE_SCORES}
    return pa.Table.from_pydict(columns, schema=CHECKPOINT_SCHEMA)


def curve_table(curve: Sequence[CheckpointRecord], metadata: RunMetadata) -> pa.Table:
    """A finished run's ``train.parquet``: ``checkpoint_table``, then the run's metadata on every row."""
    checkpoints = checkpoint_table(curve)
    columns = {name: [value] * len(curve) for name, value in asdict(metadata).items()}
    return pa.Table.from_arrays(checkpoints.columns + pa.Table.from_pydict(columns, schema=METADATA_SCHEMA).columns, schema=CURVE_SCHEMA)


def write_table(table: pa.Table, path: str | Path) -> None:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    write_atomically(path, lambda file: file.write(buffer.getvalue()))


def ptb_curve_table(epochs: Sequence[CheckpointRecord], metadata: RunMetadata, clip_per_target: float) -> pa.Table:
    """A PTB run's ``train.parquet``: one row per epoch (a checkpoint at each epoch's end)."""
    columns: dict[str, list[object]] = {name: [value] * len(epochs) for name, value in asdict(metadata).items()}
    columns |= {
        "epoch": [record.epoch for record in epochs],
        "learning_rate_used": [record.learning_rate_used for record in epochs],
        "train_loss": [record.train_loss for record in epochs],
        "is_best": [record.is_best for record in epochs],
        "validation_perplexity": [perplexity(record.validation_cross_entropy) for record in epochs],
        "clip_per_target": [clip_per_target] * len(epochs),
    }
    return pa.Table.from_pydict(columns, schema=PTB_CURVE_SCHEMA)


def ptb_metrics_table(rows: Sequence[PtbMetric], metadata: RunMetadata, clip_per_target: float) -> pa.Table:
    """A PTB run's ``metrics.parquet``: one row per metric (``ptb_metric_rows``); rule is null."""
    columns: dict[str, list[object]] = {name: [value] * len(rows) for name, value in asdict(metadata).items()}
    columns |= {name: [getattr(row, name) for row in rows] for name in ("split", "metric", "value", "suite", "circuit")}
    columns |= {"rule": [None] * len(rows), "clip_per_target": [clip_per_target] * len(rows)}
    return pa.Table.from_pydict(columns, schema=PTB_METRICS_SCHEMA)
