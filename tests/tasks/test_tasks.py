"""Task registry, markers, hand-checked transformations, partial accuracy, vocabulary, features."""

from __future__ import annotations

import pytest

from stacklm.errors import StacklmError
from stacklm.tasks import TASK_NAMES, get_task

# One worked example per task: source, hierarchical target, linear target (docs/design/transformations-data.md#worked-examples).
WORKED = {
    "question-formation": ("your yaks who do entertain my tyrannosaurus don't confuse my yak . quest",
                           "don't your yaks who do entertain my tyrannosaurus confuse my yak ?",
                           "do your yaks who entertain my tyrannosaurus don't confuse my yak ?"),
    "tense-reinflection-do": ("some newts by our yak did smile . PRESENT", "some newts by our yak do smile .", "some newts by our yak does smile ."),
    "tense-reinflection": ("the yaks that some unicorn entertained applauded her salamanders below some walrus . PRESENT",
                           "the yaks that some unicorn entertains applaud her salamanders below some walrus .",
                           "the yaks that some unicorn entertains applauds her salamanders below some walrus ."),
    "german-question-formation": ("dein Rabe , der gegessen hat , kann feiern . quest", "kann dein Rabe , der gegessen hat , feiern ?",
                                  "hat dein Rabe , der gegessen , kann feiern ?"),
    "passivization": ("her yak by her zebras amused her newt . passiv", "her newt was amused by her yak by her zebras .", "her zebras were amused by her yak ."),
    "question-formation-have": ("my salamander that has moved hasn't moved . quest", "hasn't my salamander that has moved moved ?",
                                "has my salamander that moved hasn't moved ?"),
    "german-passivization": ("einige Esel hinter meinem Dinosaurier unterhielten deinen Pfau neben meinem Wellensittich . passiv",
                             "dein Pfau neben meinem Wellensittich wurde von einigen Eseln hinter meinem Dinosaurier unterhalten .",
                             "mein Dinosaurier wurde von einigen Eseln unterhalten ."),
}


def words(text):
    return tuple(text.split())


@pytest.mark.parametrize("name", TASK_NAMES)
def test_worked_examples(name):
    task = get_task(name)
    source, hierarchical, linear = map(words, WORKED[name])
    assert task.transform(source, "hierarchical") == hierarchical
    assert task.transform(source, "linear") == linear
    identity = source[:-1] + (task.identity_marker,)
    assert task.transform(identity, "hierarchical") == task.transform(identity, "linear") == source[:-1]


def test_german_passive_puts_singular_objects_in_the_nominative():
    task = get_task("german-passivization")
    source = words("ihr Esel unterhielt den Löwen . passiv")
    assert task.transform(source, "hierarchical") == words("der Löwe wurde von ihrem Esel unterhalten .")
    # Linear: an ambiguous dative plural ``meinen Raben`` is read as accusative singular (App. A).
    source = words("die Hunde bei meinen Raben bewunderten einen Molch . passiv")
    assert task.transform(source, "linear") == words("mein Rabe wurde von den Hunden bewundert .")


def test_registry_and_errors():
    assert TASK_NAMES == ("question-formation", "tense-reinflection-do", "tense-reinflection", "german-question-formation",
                          "passivization", "question-formation-have", "german-passivization")
    with pytest.raises(StacklmError, match="unknown task 'question-fromation'"):
        get_task("question-fromation")
    task = get_task("question-formation")
    with pytest.raises(StacklmError, match="'PRESENT' is not a marker"):
        task.transform(words("my yak does smile . PRESENT"), "hierarchical")
    with pytest.raises(StacklmError, match="not a sentence of the task's grammar"):
        task.transform(words("my yak smile does . quest"), "hierarchical")
    with pytest.raises(StacklmError, match="unknown rule"):
        task.transform(words("my yak does smile . quest"), "sideways")


@pytest.mark.parametrize(
    ("name", "kind", "output", "reference", "expected"),
    [
        ("question-formation", "first_word", "does my yak smile ?", "does the yak smile ?", True),
        ("question-formation", "first_word", "do my yak smile ?", "does my yak smile ?", False),
        ("question-formation", "first_word", "", "does my yak smile ?", False),
        ("passivization", "second_word", "her newt was amused by her yak .", "my newt was amused by your yak .", True),
        ("passivization", "second_word", "her zebras were amused by her yak .", "her newt was amused by her yak .", False),
        # tense: same classes, same main verb (index 2 is R → the second V).
        ("tense-reinflection", "pos_main_word", "the yaks that some unicorn entertains applaud her salamanders .",
         "the yaks that some unicorn amuses applaud our salamanders .", True),
        ("tense-reinflection", "pos_main_word", "the yaks that some unicorn entertains applauds her salamanders .",
         "the yaks that some unicorn entertains applaud her salamanders .", False),
        ("tense-reinflection", "pos_main_word", "the yaks that some unicorn entertains applaud her .",
         "the yaks that some unicorn entertains applaud her salamanders .", False),
        # tense with auxiliaries: the main auxiliary (A) decides, not the bare verb.
        ("tense-reinflection-do", "pos_main_word", "some newts by our yak do smile .", "some newts by our yak do swim .", True),
        ("tense-reinflection-do", "pos_main_word", "some newts by our yak does smile .", "some newts by our yak do smile .", False),
        ("tense-reinflection-do", "pos_main_word", "some newts by our yak do smile banana .", "some newts by our yak do smile .", False),
    ],
)
def test_partial_match(name, kind, output, reference, expected):
    task = get_task(name)
    assert task.partial_accuracy_kind == kind
    assert task.partial_match(words(output), words(reference)) is expected


@pytest.mark.parametrize("name", TASK_NAMES)
def test_vocabulary_is_sorted_and_every_token_has_features(name):
    task = get_task(name)
    vocabulary = task.vocabulary()
    assert list(vocabulary) == sorted(set(vocabulary))
    assert set(task.markers) | {"."} <= set(vocabulary)
    for token in vocabulary:
        features = task.token_features(token)
        assert set(features) == {"pos", "case", "subword"} and features["subword"] == "whole" and features["pos"]
    with pytest.raises(StacklmError, match="not in the task's vocabulary"):
        task.token_features("banana")


def test_token_features_read_the_lexicon():
    german = get_task("german-question-formation")
    assert german.token_features("dem") == {"pos": "Det_S_Dat", "case": "Dat", "subword": "whole"}
    assert german.token_features("der") == {"pos": "Det_S_Nom|Rel_S_Nom", "case": "Nom", "subword": "whole"}
    assert german.token_features("Löwen")["case"] == "Nom|Acc|Dat"
    assert german.token_features("kann") == {"pos": "Aux_S_can", "case": "none", "subword": "whole"}
    assert german.token_features("?") == {"pos": "QuestionMark", "case": "none", "subword": "whole"}
    english = get_task("tense-reinflection")
    assert english.token_features("PRESENT")["pos"] == "Marker"
    assert english.token_features("giggles")["pos"] == "V_intrans_sg"  # a target-only word
    assert english.token_features("read")["pos"] == "V_intrans_pl|V_intrans_sg"
    assert get_task("german-passivization").token_features("wurde")["pos"] == "Aux_S"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_the_first_partial_decided_by_tokens_decide_the_partial_match(name):
    """An output cut after ``partial_decided_by(r)`` tokens matches r exactly when the whole output
    does: the sampler stops there. Checked on 600 outputs near and far from the worked examples."""
    import random

    task = get_task(name)
    vocabulary = task.vocabulary()
    generator = random.Random(7)
    _, hierarchical, linear = map(words, WORKED[name])
    outcomes = set()
    for reference in (hierarchical, linear):
        decided_by = task.partial_decided_by(reference)
        for _ in range(300):
            output = list(reference)
            for _ in range(generator.randint(0, 2)):  # a few tokens changed: matches and misses
                output[generator.randrange(len(output))] = generator.choice(vocabulary)
            if generator.random() < 0.5:  # longer or shorter
                output = output + [generator.choice(vocabulary) for _ in range(generator.randint(1, 4))] if generator.random() < 0.5 else output[: generator.randrange(len(output))]
            whole = task.partial_match(tuple(output), reference)
            assert task.partial_match(tuple(output[:decided_by]), reference) is whole, (output, reference)
            outcomes.add(whole)
    assert outcomes == {True, False}
