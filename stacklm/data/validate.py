"""Checks every split must pass, whichever source made it; errors name ``file:line``.

For each example of task T:
- the source is a sentence of T's grammar followed by one of T's markers;
- the target is T's hierarchical transformation of the source (identity marker: the sentence);
- generalization examples carry the transform marker, an ambiguity-breaking sentence, and the
  linear transformation as third field; other splits have no third field and no
  ambiguity-breaking transform example;
- no source (sentence and marker) of a drawn split occurs twice, within a split or across
  splits (so no generalization input occurs in train, validation or test); a sentence may
  occur under both markers, as in upstream's files. Upstream's own splits are taken as upstream
  wrote them (McCoy's ``question.test`` repeats a source): each line is checked, their
  uniqueness is not.
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

from stacklm.errors import StacklmError, located
from stacklm.tasks import Task
from stacklm.tasks.example import Example


def validate_splits(task: Task, splits: Mapping[str, Sequence[Example]], origins: Mapping[str, str],
                    drawn: Collection[str] | None = None) -> None:
    """Raise at the first example that breaks a rule of the module docstring; ``origins`` maps
    each split to the file it came from (or will be written to); ``drawn`` names the splits
    drawn by stacklm (default: all), whose sources must be unique."""
    drawn = set(splits) if drawn is None else set(drawn)
    first_seen: dict[tuple[str, ...], tuple[str, str, int]] = {}
    for split, examples in splits.items():
        origin = origins[split]
        for number, example in enumerate(examples, start=1):
            _check(task, split, example, origin, number)
            source = example.source
            if source in first_seen:
                other_split, other, other_number = first_seen[source]
                if split in drawn or other_split in drawn:
                    raise located(origin, number, f"source also at {other}:{other_number}: {' '.join(source)!r}")
            else:
                first_seen[source] = (split, origin, number)


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
