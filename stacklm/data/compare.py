"""Two datasets' construction profiles side by side, their distance, and the generator's noise.

The *profile* of a set of examples is the empirical distribution over kinds of line,

    kind(x) = marker(x) · construction(parse(x)),

where ``construction`` is the task's own coarse label (``Task.construction``: what modifies the
subject and what follows the main verb, for question formation and tense reinflection: nothing,
a bare NP, an NP with a PP, with a subject or an object relative clause). Two profiles p, q are
compared by their total variation distance

    TV(p, q) = ½ Σ_x |p(x) − q(x)|.

A distance means little without the noise of sampling: the *seed noise* is TV between the
profiles of two samples of this checkout's generator (``stacklm.data.splits``), drawn with two
seeds at the sizes of the two sets compared. Two sets drawn from one distribution lie about
that far apart; a distance many times the noise is a difference of distribution.

A dataset is a data folder (``train.tsv``, ``validation.tsv``, ``test.tsv``,
``generalization.tsv``; the splits present are compared) or a single split file, ours or
upstream's (``source<TAB>target``, ``stacklm.data.examples``); a file's split is read off its
name (``question.train``, ``passiv_en_nps.dev``, ``test.tsv``) unless given.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from stacklm.data.examples import read_examples
from stacklm.data.splits import SPLITS, SplitSizes, build_splits
from stacklm.errors import StacklmError
from stacklm.grammars import CompiledGrammar
from stacklm.tasks import Task
from stacklm.tasks.example import Example

# File-name endings (after the last '.', or the stem of a '.tsv' file) → split.
SPLIT_OF_SUFFIX = {"train": "train", "dev": "validation", "validation": "validation", "test": "test", "gen": "generalization", "generalization": "generalization"}
NOISE_SEEDS = (1, 2)


def profile(task: Task, examples: Sequence[Example]) -> Counter:
    """Counts of kind(x) = marker · construction over ``examples`` (module docstring)."""
    return Counter(f"{example.marker} {task.construction(task.parse(example.source[:-1]))}" for example in examples)


def total_variation(first: Counter, second: Counter) -> float:
    """TV(p, q) = ½ Σ_x |p(x) − q(x)| between the normalised counts."""
    first_total, second_total = sum(first.values()), sum(second.values())
    if not first_total or not second_total:
        raise StacklmError("total variation of an empty sample is undefined")
    return sum(abs(first[key] / first_total - second[key] / second_total) for key in first.keys() | second.keys()) / 2


def split_of(path: Path) -> str:
    """The split a single file holds, from its name; an error names the file otherwise."""
    suffix = path.stem if path.suffix == ".tsv" else path.suffix.lstrip(".")
    if suffix not in SPLIT_OF_SUFFIX:
        raise StacklmError(f"{path}: cannot tell the split from the file name; give it with --split ({', '.join(SPLITS)})")
    return SPLIT_OF_SUFFIX[suffix]


def read_dataset(path: Path, split: str | None = None) -> dict[str, list[Example]]:
    """split → examples: every split file present in a data folder, or the one file ``path``."""
    if path.is_dir():
        found = {name: read_examples(path / f"{name}.tsv") for name in SPLITS if (path / f"{name}.tsv").is_file()}
        if not found:
            raise StacklmError(f"{path}: no split file ({', '.join(f'{name}.tsv' for name in SPLITS)})")
        return found
    if not path.is_file():
        raise StacklmError(f"{path}: no such file or folder")
    return {split or split_of(path): read_examples(path)}


@dataclass(frozen=True)
class Comparison:
    split: str
    first: Counter  # profile of A
    second: Counter  # profile of B
    distance: float  # TV(A, B)
    noise: float  # TV between two generated samples of A's and B's sizes


def noise_sizes(dataset: Mapping[str, Sequence[Example]]) -> SplitSizes:
    """The generator's sizes for a noise sample like ``dataset``: its splits' sizes, the
    default sizes for splits it lacks (upstream draws later splits after train)."""
    return replace(SplitSizes(), **{split: len(examples) for split, examples in dataset.items()})


def compare(task: Task, first: Mapping[str, Sequence[Example]], second: Mapping[str, Sequence[Example]],
            seeds: tuple[int, int] = NOISE_SEEDS, grammars: tuple[CompiledGrammar, CompiledGrammar] | None = None) -> list[Comparison]:
    """One comparison per split both datasets hold, not empty (two single files of different splits:
    B is compared as a sample of A's split). The noise samples are drawn at A's and at B's
    sizes (``noise_sizes``) with ``seeds``, from ``grammars`` (in-distribution, generalization)
    when given, else the task's own."""
    if not first.keys() & second.keys() and len(first) == len(second) == 1:
        second = {next(iter(first)): next(iter(second.values()))}  # B read as a sample of A's split
    splits = [split for split in SPLITS if first.get(split) and second.get(split)]
    if not splits:
        raise StacklmError(f"no split in common: {', '.join(first)} against {', '.join(second)}")
    generated = [build_splits(task, noise_sizes(dataset), seed, grammars=grammars) for dataset, seed in zip((first, second), seeds)]
    comparisons = []
    for split in splits:
        profiles = profile(task, first[split]), profile(task, second[split])
        noise = total_variation(*(profile(task, getattr(sample, split)) for sample in generated))
        comparisons.append(Comparison(split, *profiles, total_variation(*profiles), noise))
    return comparisons


def format_comparison(comparison: Comparison, names: tuple[str, str], seeds: tuple[int, int] = NOISE_SEEDS) -> str:
    """The two profiles as a table of shares (kinds by decreasing share in A), then TV and noise."""
    first_total, second_total = sum(comparison.first.values()), sum(comparison.second.values())
    kinds = sorted(comparison.first.keys() | comparison.second.keys(), key=lambda kind: (-comparison.first[kind] / first_total, kind))
    width = max(len(kind) for kind in kinds)
    lines = [f"{comparison.split}: A = {names[0]} ({first_total:,} lines), B = {names[1]} ({second_total:,} lines)",
             f"  {'kind':<{width}}  {'A':>7}  {'B':>7}  {'B - A':>7}"]
    for kind in kinds:
        first_share, second_share = comparison.first[kind] / first_total, comparison.second[kind] / second_total
        lines.append(f"  {kind:<{width}}  {first_share:>7.2%}  {second_share:>7.2%}  {second_share - first_share:>+7.2%}")
    ratio = comparison.distance / comparison.noise if comparison.noise else float("inf")
    lines.append(f"  TV(A, B) = {comparison.distance:.4f}; seed noise TV(generator seed {seeds[0]}, seed {seeds[1]}) = {comparison.noise:.4f}"
                 f" at the same sizes; TV / noise = {ratio:.1f}")
    return "\n".join(lines)
