"""Checks every split must pass, whichever source made it; errors name ``file:line``.

For each example of task T:
- the source is a sentence of T's grammar followed by one of T's markers;
- the target is T's hierarchical transformation of the source (identity marker: the sentence);
- generalization examples carry the transform marker, an ambiguity-breaking sentence, and the
  linear transformation as third field; other splits have no third field and no
  ambiguity-breaking transform example;
- no sentence occurs twice, within a split or across splits (so no generalization input occurs
  in train, validation or test).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from stacklm.errors import StacklmError, located
from stacklm.tasks import Task
from stacklm.tasks.example import Example


def validate_splits(task: Task, splits: Mapping[str, Sequence[Example]], origins: Mapping[str, str]) -> None:
    """Raise at the first example that breaks a rule of the module docstring; ``origins`` maps
    each split to the file it came from (or will be written to)."""
    first_seen: dict[tuple[str, ...], tuple[str, int]] = {}
    for split, examples in splits.items():
        origin = origins[split]
        for number, example in enumerate(examples, start=1):
            _check(task, split, example, origin, number)
            sentence = example.source[:-1]
            if sentence in first_seen:
                other, other_number = first_seen[sentence]
                raise located(origin, number, f"sentence also at {other}:{other_number}: {' '.join(sentence)!r}")
            first_seen[sentence] = (origin, number)


def _check(task: Task, split: str, example: Example, origin: str, number: int) -> None:
    def fail(message: str) -> StacklmError:
        return located(origin, number, f"{task.name} {split}: {message}")

    if example.marker not in task.markers:
        raise fail(f"last source token {example.marker!r} is not a marker ({' or '.join(task.markers)})")
    parses = task.grammar.parse(example.source[:-1])
    if not parses:
        raise fail(f"not a sentence of the task's grammar: {' '.join(example.source[:-1])!r}")
    parse = parses[0]
    transform = example.marker == task.transform_marker
    expected = task.hierarchical(parse) if transform else parse.tokens
    if example.target != expected:
        raise fail(f"target {' '.join(example.target)!r} is not the hierarchical target {' '.join(expected)!r}")
    breaking = transform and task.is_ambiguity_breaking(parse)
    if split == "generalization":
        if not breaking:
            raise fail("a generalization example must be an ambiguity-breaking transform example")
        linear = task.linear(parse.tokens)
        if example.linear != linear:
            raise fail(f"third field must be the linear target {' '.join(linear)!r}")
    else:
        if example.linear is not None:
            raise fail("only the generalization split has a third (linear) field")
        if breaking:
            raise fail("ambiguity-breaking transform examples belong only to the generalization split")
