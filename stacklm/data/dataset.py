"""A task's data folder: the four split files and the construction counts, from either source.

- ``generate``: all four splits from the grammar (``stacklm.data.splits``).
- ``upstream``: each split given as an upstream file is its first ``sizes`` lines (already
  repaired where the task needs it; the linear target is added to the generalization
  examples); a split not given (a train file that cannot be had, with ``data.missing:
  generate``) is drawn from the grammar, never repeating an upstream sentence.
  ``construction.json`` counts ``upstream <split>`` for each upstream split: the data folder
  says which splits are upstream's and which are drawn.

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
    """The splits from the chosen source: ``upstream`` maps some splits to their upstream
    examples, validated against ``upstream_origins`` (their files) before the other splits are
    drawn."""
    if not upstream:
        return build_splits(task, sizes, seed)
    taken = {}
    for split, examples in upstream.items():
        wanted = getattr(sizes, split)
        if len(examples) < wanted:
            raise StacklmError(f"config key 'data.sizes.{split}': upstream has {len(examples)} {split} examples, {wanted} requested")
        taken[split] = tuple(examples[:wanted])
    if "generalization" in taken:
        taken["generalization"] = tuple(replace(example, linear=task.linear(example.source[:-1])) if example.marker == task.transform_marker
                                        else example for example in taken["generalization"])
    validate_splits(task, taken, upstream_origins or {split: f"upstream {split}" for split in taken}, drawn=())
    exclude = frozenset(example.source[:-1] for examples in upstream.values() for example in examples)
    drawn = build_splits(task, replace(sizes, **{split: 0 for split in taken}), seed, exclude=exclude)
    counts = dict(drawn.counts) | {f"upstream {split}": len(examples) for split, examples in taken.items()}
    return Splits(**{split: taken.get(split, getattr(drawn, split)) for split in SPLITS}, counts=counts)


def _upstream_splits(counts: Mapping[str, int]) -> tuple[str, ...]:
    """The splits that ``construction.json``'s ``counts`` say came from upstream files."""
    return tuple(split for split in SPLITS if f"upstream {split}" in counts)


def drawn_splits(folder: str | Path) -> tuple[str, ...]:
    """The splits of a data folder that stacklm drew: all but those its ``construction.json``
    counts as upstream's (all, in a folder without that file)."""
    path = Path(folder) / COUNTS_FILE
    if not path.is_file():
        return SPLITS
    try:
        counts = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StacklmError(f"{path}: not a JSON object of construction counts ({error})") from None
    if not isinstance(counts, dict):
        raise StacklmError(f"{path}: not a JSON object of construction counts")
    upstream = _upstream_splits(counts)
    return tuple(split for split in SPLITS if split not in upstream)


def write_dataset(task: Task, splits: Splits, folder: Path) -> list[Path]:
    """Validate all four splits, then write ``<split>.tsv`` and ``construction.json``."""
    paths = {split: folder / f"{split}.tsv" for split in SPLITS}
    drawn = set(SPLITS) - set(_upstream_splits(splits.counts))
    validate_splits(task, dict(splits.items()), {split: str(path) for split, path in paths.items()}, drawn)
    for split, examples in splits.items():
        write_examples(paths[split], examples)
    counts_path = folder / COUNTS_FILE
    write_text_atomically(counts_path, json.dumps(splits.counts, indent=1, sort_keys=True) + "\n")
    return [*paths.values(), counts_path]
