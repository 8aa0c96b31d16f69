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
    with pytest.raises(StacklmError, match=r"test.tsv:1: sentence also at train.tsv:6"):
        validate_splits(TASK, duplicate, ORIGINS)
