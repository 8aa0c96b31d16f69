"""Split construction (datasets.md §0.5, with two weightings of the grammar).

Every draw is a tree; a draw whose sentence was drawn before (by either stream, or is in
``exclude``) is skipped — global de-duplication over all splits.

1. Generalization stream, from the task's generalization grammar: a new sentence that is
   ambiguity-breaking, passes the task's generalization filter and whose group's cap is not
   full becomes a transform example with both targets (hierarchical, then linear); others are
   dropped. Until the pool holds ``generalization`` examples.
2. In-distribution stream, from the task's in-distribution grammar: the marker is a fair coin;
   a transform example of an ambiguity-breaking sentence is dropped (it would tell the rules
   apart); every other example joins the pool until it holds train + validation + test.
3. Shuffle each pool; the in-distribution pool is cut into train, validation, test in order.

Upstream drew both pools from one stream (§0.5 step 4); two streams let each follow the
proportions of its upstream split, which differ for McCoy's tasks (``stacklm.data.weights``).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from stacklm.errors import StacklmError
from stacklm.grammars import CompiledGrammar
from stacklm.tasks import Task
from stacklm.tasks.example import Example

SPLITS = ("train", "validation", "test", "generalization")
# Give up when this many draws in a row add nothing to either pool (the language is exhausted).
MAX_FRUITLESS_DRAWS = 1_000_000


@dataclass(frozen=True)
class SplitSizes:
    train: int = 100_000
    validation: int = 1_000
    test: int = 10_000
    generalization: int = 10_000

    def __post_init__(self) -> None:
        for split in SPLITS:
            if getattr(self, split) < 0:
                raise ValueError(f"{split}: expected an integer >= 0, got {getattr(self, split)!r}")

    @property
    def in_distribution(self) -> int:
        return self.train + self.validation + self.test


@dataclass(frozen=True)
class Splits:
    train: tuple[Example, ...]
    validation: tuple[Example, ...]
    test: tuple[Example, ...]
    generalization: tuple[Example, ...]
    counts: Mapping[str, int]  # construction counts: draws, duplicates, drops, groups

    def items(self) -> Iterable[tuple[str, tuple[Example, ...]]]:
        return ((name, getattr(self, name)) for name in SPLITS)


def build_splits(task: Task, sizes: SplitSizes, seed: int, exclude: frozenset[tuple[str, ...]] = frozenset(),
                 grammars: tuple[CompiledGrammar, CompiledGrammar] | None = None) -> Splits:
    """The four splits of ``task`` drawn from ``random.Random(seed)`` (module docstring), from
    ``grammars`` = (in-distribution, generalization) when given, else the task's own."""
    in_grammar, generalization_grammar = grammars or (task.grammar, task.generalization_grammar)
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set(exclude)
    counts: Counter[str] = Counter()
    generalization = _generalization_pool(task, generalization_grammar, sizes.generalization, rng, seen, counts)
    in_distribution = _in_distribution_pool(task, in_grammar, sizes.in_distribution, rng, seen, counts)
    rng.shuffle(in_distribution)
    rng.shuffle(generalization)
    train_end = sizes.train
    validation_end = train_end + sizes.validation
    return Splits(
        train=tuple(in_distribution[:train_end]),
        validation=tuple(in_distribution[train_end:validation_end]),
        test=tuple(in_distribution[validation_end:]),
        generalization=tuple(generalization),
        counts=dict(sorted(counts.items())),
    )


def _generalization_pool(task: Task, grammar: CompiledGrammar, size: int, rng: random.Random, seen: set, counts: Counter) -> list[Example]:
    """Transform examples of new ambiguity-breaking sentences that pass the filter, per group
    up to its cap, drawn from the generalization grammar."""
    caps = task.generalization_caps(size)
    groups: Counter[str] = Counter()
    pool: list[Example] = []
    for parse in _new_sentences(task, grammar, rng, seen, counts, "generalization", lambda: len(pool) < size):
        if not task.is_ambiguity_breaking(parse):
            counts["generalization draws: not ambiguity-breaking"] += 1
            continue
        group = task.generalization_group(parse)
        if group is None:
            counts["generalization draws: filtered out"] += 1
        elif groups[group] >= caps[group]:
            counts["generalization draws: group full"] += 1
        else:
            groups[group] += 1
            pool.append(task.example(parse, task.transform_marker, with_linear=True))
    counts.update({f"generalization group {group}": number for group, number in groups.items()})
    return pool


def _in_distribution_pool(task: Task, grammar: CompiledGrammar, size: int, rng: random.Random, seen: set, counts: Counter) -> list[Example]:
    """Examples of new sentences with a fair-coin marker; ambiguity-breaking transform
    examples are dropped."""
    pool: list[Example] = []
    for parse in _new_sentences(task, grammar, rng, seen, counts, "in-distribution", lambda: len(pool) < size):
        marker = task.transform_marker if rng.random() < 0.5 else task.identity_marker
        if marker == task.transform_marker and task.is_ambiguity_breaking(parse):
            counts["in-distribution draws: ambiguity-breaking, dropped"] += 1
        else:
            pool.append(task.example(parse, marker, with_linear=False))
    return pool


def _new_sentences(task, grammar, rng, seen, counts, stream, wanted):
    """Draws from ``grammar`` whose sentence is not in ``seen`` (added as drawn), while
    ``wanted()``; an error after MAX_FRUITLESS_DRAWS draws in a row that yield nothing new."""
    fruitless = 0
    while wanted():
        parse = grammar.sample(rng)
        counts[f"{stream} draws"] += 1
        if parse.tokens in seen:
            counts[f"{stream} draws: duplicate"] += 1
            fruitless += 1
            if fruitless >= MAX_FRUITLESS_DRAWS:
                raise StacklmError(f"{task.name}: {fruitless} {stream} draws in a row repeated earlier sentences; the grammar cannot fill the requested sizes")
            continue
        fruitless = 0
        seen.add(parse.tokens)
        yield parse
