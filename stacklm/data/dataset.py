"""A task's data folder: the four split files and the construction counts, from either source.

- ``generate``: all four splits from the grammar (``stacklm.data.splits``).
- ``upstream``: validation and generalization are the first ``sizes`` lines of the pinned
  upstream files (already repaired where the task needs it; the linear target is added to the
  generalization examples); train and test are drawn from the grammar, never repeating an
  upstream sentence.

Either way every split is validated before anything is written, and each file is written
atomically, so a failure leaves no partial output.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from stacklm.atomic import write_text_atomically
from stacklm.data.examples import write_examples
from stacklm.data.splits import SPLITS, SplitSizes, Splits, build_splits
from stacklm.data.validate import validate_splits
from stacklm.errors import StacklmError
from stacklm.tasks import Task
from stacklm.tasks.example import Example

COUNTS_FILE = "construction.json"


def make_splits(task: Task, sizes: SplitSizes, seed: int, upstream: Mapping[str, Sequence[Example]] | None = None,
                upstream_origins: Mapping[str, str] | None = None) -> Splits:
    """The splits from the chosen source; upstream examples are validated against
    ``upstream_origins`` (their files) before anything else is drawn."""
    if upstream is None:
        return build_splits(task, sizes, seed)
    taken = {}
    for split in ("validation", "generalization"):
        wanted = getattr(sizes, split)
        if len(upstream[split]) < wanted:
            raise StacklmError(f"config key 'data.sizes.{split}': upstream has {len(upstream[split])} {split} examples, {wanted} requested")
        taken[split] = tuple(upstream[split][:wanted])
    taken["generalization"] = tuple(replace(example, linear=task.linear(example.source[:-1])) if example.marker == task.transform_marker else example
                                    for example in taken["generalization"])
    validate_splits(task, taken, upstream_origins or {split: f"upstream {split}" for split in taken})
    exclude = frozenset(example.source[:-1] for examples in upstream.values() for example in examples)
    drawn = build_splits(task, replace(sizes, validation=0, generalization=0), seed, exclude=exclude)
    counts = dict(drawn.counts) | {f"upstream {split}": len(examples) for split, examples in taken.items()}
    return Splits(drawn.train, taken["validation"], drawn.test, taken["generalization"], counts)


def write_dataset(task: Task, splits: Splits, folder: Path) -> list[Path]:
    """Validate all four splits, then write ``<split>.tsv`` and ``construction.json``."""
    paths = {split: folder / f"{split}.tsv" for split in SPLITS}
    validate_splits(task, dict(splits.items()), {split: str(path) for split, path in paths.items()})
    for split, examples in splits.items():
        write_examples(paths[split], examples)
    counts_path = folder / COUNTS_FILE
    write_text_atomically(counts_path, json.dumps(splits.counts, indent=1, sort_keys=True) + "\n")
    return [*paths.values(), counts_path]
