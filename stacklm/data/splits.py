"""Split construction: the four splits drawn as upstream drew them
(docs/design/transformations-data.md#split-construction; the measurements: docs/data-validation.md).

Every draw is a tree and a marker; a draw whose *key* was drawn before (by either stream) is
skipped, and no sentence of ``exclude`` is ever drawn. Upstream's two sources keyed their
streams differently, and split them differently (``PROCEDURES``, measured on their train files):

- McCoy et al. (2020), question formation: the key is the *source*, sentence · marker, so a
  sentence may occur under both markers (2,011 sentences of ``question.train`` do); the
  in-distribution stream is cut in the order drawn, *train first*: its first examples are
  train, the next validation, the next test. The short sentences have few types and are used
  up early, so dev and test hold fewer of them (bare intransitives: 12.3 % of the first 10,000
  lines of ``question.train``, 0.9 % of its last 10,000, 0.5 % of ``question.dev``).
- McCoy et al. (2020), both tense reinflections (no train file to measure): the key is the
  *sentence* (none of the 10,000 test sentences occurs under both markers, where a source key
  would give about 50 among its 532 bare intransitives), and the stream is cut *test first*,
  then train, then validation: the short sentences are plentiful in test and gone from dev
  (bare intransitives: 532 lines of ``tense.test``, 0 of ``tense.dev``; ``tense_aux``: 682 and
  0; the task has only 1,404 and 2,808 such sentences); dev and test share no sentence.
- Mueller et al. (2022) (the other four tasks): the key is the *sentence*; the in-distribution
  pool is shuffled before it is cut, so train, validation and test are exchangeable (no
  sentence of their train files occurs under both markers, and their construction shares are
  flat along the file).

1. Generalization stream, from the task's generalization grammar: a new key whose sentence is
   ambiguity-breaking, passes the task's generalization filter and whose group's cap is not full
   becomes a transform example with both targets (hierarchical, then linear); others are
   dropped. Until the pool holds ``generalization`` examples.
2. In-distribution stream, from the task's in-distribution grammar: the marker is a fair coin;
   a transform example of an ambiguity-breaking sentence is dropped (it would tell the rules
   apart); every other new key joins the pool until it holds train + validation + test.
3. The in-distribution pool is cut into the three splits in the procedure's order (shuffled
   first where it says so); each split and the generalization pool are then shuffled, so
   that any prefix of a split is a fair sample of it.

Upstream drew generalization from the same stream as the rest; its own stream here follows the
proportions of upstream's generalization split, which differ from the in-distribution ones for
McCoy's tasks (``stacklm.data.weights``). The two never share a source: generalization sources
are ambiguity-breaking transform examples, which the in-distribution stream drops.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping

from stacklm.errors import StacklmError
from stacklm.grammars import CompiledGrammar, Parse
from stacklm.tasks import Task
from stacklm.tasks.example import Example

SPLITS = ("train", "validation", "test", "generalization")
# Give up when this many draws in a row add nothing to the pool being filled (the language is exhausted,
# or none of its sentences passes the task's filters).
MAX_FRUITLESS_DRAWS = 1_000_000


@dataclass(frozen=True)
class Procedure:
    """How upstream drew a task's splits (module docstring)."""

    key: Literal["source", "sentence"]  # what is drawn at most once
    order: tuple[str, str, str]  # the in-distribution splits, in the order they are cut from the pool
    shuffled: bool  # the pool is shuffled before it is cut


MCCOY_QUESTION = Procedure(key="source", order=("train", "validation", "test"), shuffled=False)
MCCOY_TENSE = Procedure(key="sentence", order=("test", "train", "validation"), shuffled=False)
MUELLER = Procedure(key="sentence", order=("train", "validation", "test"), shuffled=True)
PROCEDURES: Mapping[str, Procedure] = {
    "question-formation": MCCOY_QUESTION, "tense-reinflection-do": MCCOY_TENSE, "tense-reinflection": MCCOY_TENSE,
    "german-question-formation": MUELLER, "passivization": MUELLER, "question-formation-have": MUELLER, "german-passivization": MUELLER,
}


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
    """The four splits of ``task`` drawn from ``random.Random(seed)`` as ``PROCEDURES[task.name]``
    says (module docstring), from ``grammars`` = (in-distribution, generalization) when given,
    else the task's own; no sentence of ``exclude`` occurs, under either marker."""
    procedure = PROCEDURES[task.name]
    in_grammar, generalization_grammar = grammars or (task.grammar, task.generalization_grammar)
    rng = random.Random(seed)
    stream = _Stream(task, procedure, rng, exclude)
    generalization = _generalization_pool(task, generalization_grammar, sizes.generalization, stream)
    in_distribution = _in_distribution_pool(task, in_grammar, sizes.in_distribution, stream)
    if procedure.shuffled:
        rng.shuffle(in_distribution)
    cut, start = {}, 0
    for split in procedure.order:
        cut[split], start = in_distribution[start : start + getattr(sizes, split)], start + getattr(sizes, split)
    parts = [cut["train"], cut["validation"], cut["test"], generalization]
    for part in parts:
        rng.shuffle(part)
    return Splits(*map(tuple, parts), counts=dict(sorted(stream.counts.items())))


class _Stream:
    """Draws (parse, marker) whose key (``Procedure.key``) is new, counting what it skips."""

    def __init__(self, task: Task, procedure: Procedure, rng: random.Random, exclude: frozenset[tuple[str, ...]]):
        self.task, self.rng, self.exclude = task, rng, exclude
        self.by_source = procedure.key == "source"
        self.seen: set[tuple[str, ...]] = set()
        self.counts: Counter[str] = Counter()

    def draws(self, grammar: CompiledGrammar, name: str, marker, pool: list[Example], size: int) -> Iterable[tuple[Parse, str]]:
        """(parse, marker) with a new key until ``pool`` holds ``size`` examples (the caller appends
        those it keeps), the marker from ``marker()``; an error after MAX_FRUITLESS_DRAWS draws in a
        row that add nothing to ``pool``, whether their key repeats an earlier one or the caller
        turns them down."""
        fruitless, kept = 0, len(pool)
        while len(pool) < size:
            if len(pool) > kept:
                fruitless, kept = 0, len(pool)
            if fruitless >= MAX_FRUITLESS_DRAWS:
                raise StacklmError(
                    f"{self.task.name}: {fruitless} {name} draws in a row added no example (repeated earlier sentences,"
                    f" or turned down: {self._turned_down(name)}); the grammar cannot fill the requested sizes"
                )
            fruitless += 1
            parse = grammar.sample(self.rng)
            chosen = marker()
            self.counts[f"{name} draws"] += 1
            key = parse.tokens + (chosen,) if self.by_source else parse.tokens
            if key in self.seen or parse.tokens in self.exclude:
                self.counts[f"{name} draws: duplicate"] += 1
                continue
            self.seen.add(key)
            yield parse, chosen

    def _turned_down(self, name: str) -> str:
        """The counts of ``name``'s draws so far, by what became of them."""
        prefix = f"{name} draws: "
        return ", ".join(f"{count} {reason[len(prefix):]}" for reason, count in sorted(self.counts.items()) if reason.startswith(prefix)) or "none"


def _generalization_pool(task: Task, grammar: CompiledGrammar, size: int, stream: _Stream) -> list[Example]:
    """Transform examples of new ambiguity-breaking sentences that pass the filter, per group
    up to its cap, drawn from the generalization grammar."""
    caps = task.generalization_caps(size)
    groups: Counter[str] = Counter()
    pool: list[Example] = []
    counts = stream.counts
    for parse, marker in stream.draws(grammar, "generalization", lambda: task.transform_marker, pool, size):
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
            pool.append(task.example(parse, marker, with_linear=True))
    counts.update({f"generalization group {group}": number for group, number in groups.items()})
    return pool


def _in_distribution_pool(task: Task, grammar: CompiledGrammar, size: int, stream: _Stream) -> list[Example]:
    """Examples of new keys with a fair-coin marker, in the order drawn; ambiguity-breaking
    transform examples are dropped."""
    pool: list[Example] = []

    def coin() -> str:
        return task.transform_marker if stream.rng.random() < 0.5 else task.identity_marker

    for parse, marker in stream.draws(grammar, "in-distribution", coin, pool, size):
        if marker == task.transform_marker and task.is_ambiguity_breaking(parse):
            stream.counts["in-distribution draws: ambiguity-breaking, dropped"] += 1
        else:
            pool.append(task.example(parse, marker, with_linear=False))
    return pool
