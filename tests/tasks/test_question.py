"""The constructions of question formation's generalization set: the relative clause on the subject."""

from __future__ import annotations

from collections import Counter

import pytest

from stacklm.data.splits import SplitSizes, build_splits
from stacklm.errors import StacklmError
from stacklm.tasks import TASK_NAMES, get_task
from stacklm.tasks.question import AMBIGUOUS_RELATIVE

# Generalization prompts of the generators, each labelled by hand from its words: a relativizer
# then the clause's auxiliary (or, in German, its participle) is a subject relative (SRC); a
# relativizer then a noun phrase, the clause's subject, an object relative (ORC).
HAND_CHECKED = [
    ("question-formation", "her quail who your newt does applaud doesn't sleep . quest", "ORC"),
    ("question-formation", "the walrus who doesn't high_five my zebra does sleep . quest", "SRC"),
    ("question-formation", "our unicorn that some walrus does entertain doesn't high_five your salamanders upon your zebra . quest", "ORC"),
    ("question-formation", "the walrus that does move doesn't giggle . quest", "SRC"),
    ("question-formation", "your yaks who do entertain my tyrannosaurus don't confuse my yak . quest", "SRC"),
    ("question-formation", "the peacocks who do comfort her xylophone don't remember our raven . quest", "SRC"),
    ("question-formation", "my newts that your yak doesn't admire do giggle . quest", "ORC"),
    # the object's relative clause is not the subject's
    ("question-formation", "the walrus that does move doesn't admire my yak that your newt does comfort . quest", "SRC"),
    ("question-formation-have", "my salamander that has moved hasn't moved . quest", "SRC"),
    ("german-question-formation", "dein Rabe , der gegessen hat , kann feiern . quest", "SRC"),
    ("german-question-formation", "ihr Pfau , den ihr Rabe erfreut hat , kann arbeiten . quest", "ORC"),
    # `die`, nominative or accusative: "who regretted your sousliks" or "whom your sousliks regretted"
    ("german-question-formation", "meine Ziesel , die ihre Ziesel bedauert haben , können unsere Ziesel bedauern . quest", AMBIGUOUS_RELATIVE),
]
QUESTION_TASKS = ("question-formation", "question-formation-have", "german-question-formation")


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


@pytest.mark.parametrize(("name", "source", "construction"), HAND_CHECKED)
def test_the_construction_of_hand_checked_prompts(name: str, source: str, construction: str) -> None:
    task = get_task(name)
    assert task.generalization_construction(words(source)) == construction
    assert construction in task.generalization_constructions


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("my walrus doesn't admire the yak that your newt does comfort . quest", r"neither construction .* \(a bare subject\)"),
        ("the walrus by my yak doesn't giggle . quest", r"neither construction .* \(a PP subject\)"),
        ("the walrus that does move doesn't giggle . decl", "does not end with the marker 'quest'"),
        ("the walrus that does move . quest", "not a sentence of the task's grammar"),
    ],
)
def test_a_prompt_of_neither_construction_is_an_error_naming_it(source: str, message: str) -> None:
    with pytest.raises(StacklmError, match=message) as error:
        get_task("question-formation").generalization_construction(words(source))
    assert " ".join(words(source)[:-1]) in str(error.value)


@pytest.mark.parametrize("name", [name for name in TASK_NAMES if name not in QUESTION_TASKS])
def test_a_task_without_constructions_has_none(name: str) -> None:
    task = get_task(name)
    splits = build_splits(task, SplitSizes(train=0, validation=0, test=0, generalization=20), seed=1)
    assert task.generalization_constructions == {}
    assert {task.generalization_construction(example.source) for example in splits.generalization} == {None}


@pytest.mark.parametrize("name", QUESTION_TASKS)
def test_every_generated_generalization_example_has_one_construction_its_cap_group_where_the_words_tell(name: str) -> None:
    task = get_task(name)
    splits = build_splits(task, SplitSizes(train=0, validation=0, test=0, generalization=300), seed=1)
    labels = Counter(task.generalization_construction(example.source) for example in splits.generalization)
    assert sum(labels.values()) == 300 and set(labels) <= set(task.generalization_constructions)
    drawn = {group: splits.counts[f"generalization group {group}"] for group in ("SRC", "ORC")}
    if name == "german-question-formation":
        assert labels["SRC"] <= drawn["SRC"] and labels["ORC"] <= drawn["ORC"] and labels[AMBIGUOUS_RELATIVE] > 0
    else:
        assert dict(labels) == drawn


# The upstream generalization files: ⌈2n/3⌉ and ⌈n/3⌉ of 10,000 (German: counted once, 2,413
# sentences with a relativizer `die` that both readings allow).
UPSTREAM_COUNTS = {
    "question-formation": {"SRC": 6667, "ORC": 3333},
    "question-formation-have": {"SRC": 6667, "ORC": 3333},
    "german-question-formation": {"SRC": 5861, "ORC": 1726, AMBIGUOUS_RELATIVE: 2413},
}


@pytest.mark.parametrize("name", QUESTION_TASKS)
def test_the_constructions_of_the_upstream_generalization_files(name: str, upstream_examples) -> None:
    task = get_task(name)
    labels = Counter(task.generalization_construction(example.source) for example in upstream_examples(name, "generalization"))
    assert dict(labels) == UPSTREAM_COUNTS[name]
