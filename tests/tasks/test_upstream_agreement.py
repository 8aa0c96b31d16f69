"""Our transformations against every line of the upstream dev and gen files
(docs/design/transformations-data.md#agreement-with-the-upstream-files)."""

from __future__ import annotations

import pytest

from stacklm.data.upstream import repair_example
from stacklm.tasks import TASK_NAMES, get_task

# task → (identity lines in dev, transform lines in dev, gen lines where the hierarchical and the
# linear target share the partial-accuracy word), as listed in
# docs/design/transformations-data.md#agreement-with-the-upstream-files.
EXPECTED = {
    "question-formation": (594, 406, 0),
    "tense-reinflection-do": (560, 440, 0),
    "tense-reinflection": (558, 442, 0),
    "german-question-formation": (629, 371, 0),
    "passivization": (665, 335, 379),
    "question-formation-have": (614, 386, 0),
    "german-passivization": (654, 346, 578),
}


def reference(task, example):
    return repair_example(example).target if task.name == "german-passivization" else example.target


@pytest.mark.parametrize("name", TASK_NAMES)
def test_dev_file(name, upstream_examples):
    task = get_task(name)
    identity = transform = 0
    for example in upstream_examples(name, "validation"):
        target = reference(task, example)
        assert task.transform(example.source, "hierarchical") == target, example
        if example.marker == task.identity_marker:
            identity += 1
            assert target == example.source[:-1]
        else:
            transform += 1
            # On in-distribution data the two rules agree: training cannot tell them apart.
            assert task.transform(example.source, "linear") == target, example
    assert (identity, transform) == EXPECTED[name][:2]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_generalization_file(name, upstream_examples):
    task = get_task(name)
    shared_partial_word = 0
    for example in upstream_examples(name, "generalization"):
        target = reference(task, example)
        assert example.marker == task.transform_marker
        assert task.transform(example.source, "hierarchical") == target, example
        linear = task.transform(example.source, "linear")
        assert linear != target, example  # every generalization example tells the rules apart
        shared_partial_word += task.partial_match(linear, target)
        assert task.partial_match(target, target)
    assert shared_partial_word == EXPECTED[name][2]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_upstream_sentence_parses_and_its_tokens_are_in_the_vocabulary(name, upstream_examples):
    task = get_task(name)
    vocabulary = set(task.vocabulary())
    ambiguous = {}
    for split in ("validation", "generalization"):
        examples = upstream_examples(name, split)
        counts = [len(task.grammar.parse(example.source[:-1])) for example in examples]
        assert min(counts) >= 1
        ambiguous[split] = sum(count > 1 for count in counts) / len(counts)
        for example in examples:
            assert set(example.source) | set(reference(task, example)) | set(task.transform(example.source, "linear")) <= vocabulary
    if name == "german-question-formation":  # der/die/den (docs/design/transformations-data.md#parsing-and-ambiguity)
        assert ambiguous["validation"] == pytest.approx(0.07, abs=0.01) and ambiguous["generalization"] == pytest.approx(0.24, abs=0.01)
    else:
        assert ambiguous == {"validation": 0.0, "generalization": 0.0}
