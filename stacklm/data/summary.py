"""Per-task summary of a data folder, as one long table (Parquet).

Rows (task, split, statistic, key, value):
- ``construction``: the counts of split construction (draws, duplicates, drops, cap groups),
  split ``all``;
- ``examples``: number of examples, key ``all``;
- ``marker``: examples per marker;
- ``construction_kind``: examples per coarse construction of the sentence (subject/object kind);
- ``length``: histogram of the language-model string length |source| + |target|.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from stacklm.atomic import write_bytes_atomically
from stacklm.data.dataset import COUNTS_FILE
from stacklm.data.examples import read_examples
from stacklm.data.splits import SPLITS
from stacklm.tasks import Task
from stacklm.tasks.example import Example

COLUMNS = ["task", "split", "statistic", "key", "value"]


def summarize(task: Task, splits: Mapping[str, Sequence[Example]], counts: Mapping[str, int]) -> pd.DataFrame:
    rows = [(task.name, "all", "construction", key, int(value)) for key, value in sorted(counts.items())]
    for split, examples in splits.items():
        rows.append((task.name, split, "examples", "all", len(examples)))
        tallies = {"marker": Counter(), "construction_kind": Counter(), "length": Counter()}
        for example in examples:
            tallies["marker"][example.marker] += 1
            tallies["construction_kind"][task.construction(task.parse(example.source[:-1]))] += 1
            tallies["length"][len(example.source) + len(example.target)] += 1
        for statistic, tally in tallies.items():
            keys = sorted(tally, key=int) if statistic == "length" else sorted(tally)
            rows.extend((task.name, split, statistic, str(key), tally[key]) for key in keys)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"value": "int64"})


def summarize_folder(task: Task, folder: Path) -> pd.DataFrame:
    splits = {split: read_examples(folder / f"{split}.tsv") for split in SPLITS}
    counts = json.loads((folder / COUNTS_FILE).read_text(encoding="utf-8"))
    return summarize(task, splits, counts)


def describe(frame: pd.DataFrame) -> str:
    """A few lines per task: sizes, transform share, mean length and constructions per split."""
    lines = []
    for task, rows in frame.groupby("task", sort=False):
        lines.append(f"{task}:")
        for split in SPLITS:
            part = rows[rows.split == split]
            if part.empty:
                continue
            size = int(part[part.statistic == "examples"].value.sum())
            lengths = part[part.statistic == "length"]
            mean_length = (lengths.key.astype(int) * lengths.value).sum() / max(size, 1)
            markers = ", ".join(f"{row.key} {row.value / max(size, 1):.1%}" for row in part[part.statistic == "marker"].itertuples())
            kinds = part[part.statistic == "construction_kind"].sort_values("value", ascending=False).head(3)
            top = "; ".join(f"{row.key} {row.value / max(size, 1):.1%}" for row in kinds.itertuples())
            lines.append(f"  {split:<14} {size:>7} examples  markers: {markers}  mean length {mean_length:.1f}  top: {top}")
        construction = rows[rows.statistic == "construction"]
        lines.append("  construction: " + ", ".join(f"{row.key} {row.value}" for row in construction.itertuples()))
    return "\n".join(lines)


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """Atomically (``stacklm.atomic``)."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    write_bytes_atomically(path, buffer.getvalue())
