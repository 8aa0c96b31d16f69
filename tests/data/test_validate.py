"""Validation catches each kind of bad example and names file and line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stacklm.data.splits import SplitSizes, build_splits
from stacklm.data.validate import validate_splits
from stacklm.errors import StacklmError
from stacklm.tasks import get_task
from stacklm.tasks.example import Example

TASK = get_task("question-formation")
SPLITS = build_splits(TASK, SplitSizes(train=40, validation=10, test=10, generalization=10), seed=4)
ORIGINS = {name: f"{name}.tsv" for name, _ in SPLITS.items()}


def words(text):
    return tuple(text.split())


def with_example(split, index, example):
    splits = {name: list(examples) for name, examples in SPLITS.items()}
    splits[split][index] = example
    return splits


def test_generated_splits_pass():
    validate_splits(TASK, dict(SPLITS.items()), ORIGINS)


@pytest.mark.parametrize(
    ("split", "index", "change", "message"),
    [
        ("train", 2, lambda e: replace(e, source=e.source[:-1] + ("PRESENT",)), "train.tsv:3: .*'PRESENT' is not a marker"),
        ("test", 0, lambda e: replace(e, source=("yak",) + e.source), "test.tsv:1: .*not a sentence of the task's grammar"),
        ("validation", 4, lambda e: replace(e, target=e.target[::-1]), "validation.tsv:5: .*is not the hierarchical target"),
        ("generalization", 1, lambda e: replace(e, linear=e.target), "generalization.tsv:2: .*third field must be the linear target"),
        ("generalization", 0, lambda e: replace(e, linear=None), "generalization.tsv:1: .*third field must be the linear target"),
        ("train", 0, lambda e: replace(e, linear=e.target), "train.tsv:1: .*only the generalization split has a third"),
    ],
)
def test_each_rule_names_file_and_line(split, index, change, message):
    bad = with_example(split, index, change(SPLITS.__getattribute__(split)[index]))
    with pytest.raises(StacklmError, match=message):
        validate_splits(TASK, bad, ORIGINS)


def test_ambiguity_breaking_and_duplicate_examples_are_refused():
    breaking = SPLITS.generalization[0]
    splits = with_example("test", 3, replace(breaking, linear=None))
    with pytest.raises(StacklmError, match=r"test.tsv:4: .*ambiguity-breaking transform examples belong only to the generalization split"):
        validate_splits(TASK, splits, ORIGINS)
    identity = Example(words("my yak does smile . decl"), words("my yak does smile ."))
    with pytest.raises(StacklmError, match=r"generalization.tsv:1: .*must be an ambiguity-breaking transform example"):
        validate_splits(TASK, with_example("generalization", 0, replace(identity, linear=identity.target)), ORIGINS)
    duplicate = with_example("test", 0, SPLITS.train[5])
    with pytest.raises(StacklmError, match=r"test.tsv:1: source also at train.tsv:6"):
        validate_splits(TASK, duplicate, ORIGINS)


def flip_marker(example):
    """The same sentence under the other marker, with that marker's target."""
    parse = TASK.parse(example.source[:-1])
    marker = TASK.identity_marker if example.marker == TASK.transform_marker else TASK.transform_marker
    return TASK.example(parse, marker, with_linear=False)


def test_a_sentence_may_occur_under_both_markers_but_a_source_only_once():
    train = next(e for e in SPLITS.train if not TASK.is_ambiguity_breaking(TASK.parse(e.source[:-1])))
    validate_splits(TASK, with_example("test", 0, flip_marker(train)), ORIGINS)
    with pytest.raises(StacklmError, match=r"test.tsv:1: source also at train.tsv"):
        validate_splits(TASK, with_example("test", 0, train), ORIGINS)


def test_upstream_splits_may_repeat_a_source_but_a_drawn_split_may_not_repeat_theirs():
    repeated = with_example("test", 1, SPLITS.test[0])
    validate_splits(TASK, repeated, ORIGINS, drawn=("train",))
    with pytest.raises(StacklmError, match=r"test.tsv:2: source also at test.tsv:1"):
        validate_splits(TASK, repeated, ORIGINS, drawn=("test",))
    with pytest.raises(StacklmError, match=r"test.tsv:1: source also at train.tsv:6"):
        validate_splits(TASK, with_example("test", 0, SPLITS.train[5]), ORIGINS, drawn=("train",))
