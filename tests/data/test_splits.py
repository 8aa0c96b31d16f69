"""Split construction: sizes, determinism, de-duplication by upstream's procedures, where ambiguity-breaking examples go."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from stacklm.data.splits import PROCEDURES, SplitSizes, build_splits
from stacklm.data.validate import validate_splits
from stacklm.errors import StacklmError
from stacklm.settings_file import build
from stacklm.grammars import CompiledGrammar
from stacklm.tasks import TASK_NAMES, get_task

SIZES = SplitSizes(train=600, validation=50, test=100, generalization=150)


@pytest.fixture(scope="module", params=TASK_NAMES)
def task_and_splits(request):
    task = get_task(request.param)
    return task, build_splits(task, SIZES, seed=3)


def test_sizes_markers_and_targets(task_and_splits):
    task, splits = task_and_splits
    assert {name: len(examples) for name, examples in splits.items()} == {"train": 600, "validation": 50, "test": 100, "generalization": 150}
    validate_splits(task, dict(splits.items()), {name: name for name, _ in splits.items()})
    in_distribution = splits.train + splits.validation + splits.test
    transform_share = sum(example.marker == task.transform_marker for example in in_distribution) / len(in_distribution)
    assert 0.25 < transform_share < 0.5  # a fair coin, less the dropped ambiguity-breaking transforms
    assert all(example.linear is None for example in in_distribution)
    vocabulary = set(task.vocabulary())
    assert all(set(example.source) | set(example.target) | set(example.linear or ()) <= vocabulary for _, examples in splits.items() for example in examples)
    for example in splits.generalization:
        assert example.marker == task.transform_marker
        assert example.target == task.transform(example.source, "hierarchical")
        assert example.linear == task.transform(example.source, "linear") != example.target


def test_no_source_twice_and_no_generalization_input_elsewhere(task_and_splits):
    task, splits = task_and_splits
    sources = [example.source for _, examples in splits.items() for example in examples]
    assert len(set(sources)) == len(sources)
    if PROCEDURES[task.name].key == "sentence":
        sentences = [source[:-1] for source in sources]
        assert len(set(sentences)) == len(sentences)
    generalization = {example.source for example in splits.generalization}
    assert not generalization & {example.source for example in splits.train + splits.validation + splits.test}


def few_short_sentences(task):
    """Question formation's grammar with bare or PP subjects, and intransitive verbs or
    transitive ones with a bare object: its 2,808 bare intransitives ("my yak does sleep .") run
    out within a few thousand draws, its other kinds of sentence do not."""
    weights = {rule.key: rule.weight for rule in task.grammar.grammar.rules}
    for number in "SP":
        weights[(f"NP_M_{number}", ("Det", f"N_{number}", f"RC_{number}"))] = 0.0
    for rule in task.grammar.grammar.rules_of["NP_O"]:
        weights[rule.key] = 1.0 if len(rule.rhs) == 2 else 0.0
    grammar = CompiledGrammar(task.grammar.grammar.reweighted(weights))
    return grammar, grammar


def short_share(task, examples):
    """The share of bare intransitives."""
    return sum(task.construction(task.parse(example.source[:-1])) == "subject=bare object=none" for example in examples) / len(examples)


SHORT_SIZES = SplitSizes(train=20_000, validation=1_000, test=4_000, generalization=0)


def test_mccoy_cuts_the_stream_in_order_so_later_splits_hold_fewer_short_sentences():
    """McCoy's question formation: sources are unique (a sentence may occur under both markers),
    and validation and test come after train in the stream, when the short sentences are used up."""
    task = get_task("question-formation")
    splits = build_splits(task, SHORT_SIZES, seed=4, grammars=few_short_sentences(task))
    assert short_share(task, splits.test) < short_share(task, splits.train) - 0.02
    sentences = [example.source[:-1] for example in splits.train]
    assert len(set(sentences)) < len(sentences)  # some sentence under both markers
    validate_splits(task, dict(splits.items()), {name: name for name, _ in splits.items()})


def test_mccoy_tense_cuts_test_first_and_validation_last():
    task = get_task("question-formation")
    tense = replace(task, name="tense-reinflection-do")  # the procedure goes by the task's name
    splits = build_splits(tense, SHORT_SIZES, seed=4, grammars=few_short_sentences(task))
    assert short_share(task, splits.validation) < short_share(task, splits.train) < short_share(task, splits.test)
    sentences = [example.source[:-1] for _, examples in splits.items() for example in examples]
    assert len(set(sentences)) == len(sentences)


def test_mueller_shuffles_the_pool_so_splits_are_exchangeable():
    task = get_task("question-formation")
    mueller = replace(task, name="question-formation-have")  # the procedure goes by the task's name
    splits = build_splits(mueller, SHORT_SIZES, seed=4, grammars=few_short_sentences(task))
    assert abs(short_share(task, splits.test) - short_share(task, splits.train)) < 0.02
    sentences = [example.source[:-1] for _, examples in splits.items() for example in examples]
    assert len(set(sentences)) == len(sentences)


@pytest.mark.parametrize("name", ["question-formation", "question-formation-have"])
def test_generalization_caps_are_upstreams_proportions(name, upstream_examples):
    """Measured on upstream's generalization file: ⌈2n/3⌉ subject relatives, the rest object relatives."""
    task = get_task(name)
    kinds = Counter(task.generalization_construction(example.source) for example in upstream_examples(name, "generalization"))
    caps = task.generalization_caps(10_000)
    assert kinds == {"SRC": caps["SRC"], "ORC": 10_000 - caps["SRC"]}


def test_same_seed_same_splits_other_seed_other_splits():
    task = get_task("german-question-formation")
    first, second = build_splits(task, SIZES, seed=5), build_splits(task, SIZES, seed=5)
    assert first == second
    assert build_splits(task, SIZES, seed=6).train != first.train


def test_caps_split_generalization_between_subject_and_object_relatives():
    task = get_task("question-formation")
    splits = build_splits(task, SplitSizes(train=0, validation=0, test=0, generalization=300), seed=1)
    kinds = [task.construction(task.parse(example.source[:-1])).split()[0] for example in splits.generalization]
    assert kinds.count("subject=SRC") <= 200 and kinds.count("subject=ORC") <= 100
    assert splits.counts["generalization group SRC"] + splits.counts["generalization group ORC"] == 300


def test_excluded_sentences_never_appear():
    task = get_task("passivization")
    full = build_splits(task, SIZES, seed=2)
    excluded = frozenset(example.source[:-1] for example in full.train[:300])
    again = build_splits(task, SIZES, seed=2, exclude=excluded)
    assert not excluded & {example.source[:-1] for _, examples in again.items() for example in examples}


def test_an_exhausted_language_is_an_error(monkeypatch):
    import stacklm.data.splits as splits_module

    monkeypatch.setattr(splits_module, "MAX_FRUITLESS_DRAWS", 50)
    task = get_task("passivization")
    grammar = task.grammar.grammar
    first_rules = {}
    for rule in grammar.rules:
        first_rules.setdefault(rule.lhs, rule.key)
    one_sentence = CompiledGrammar(grammar.reweighted({key: 1.0 for key in first_rules.values()}))
    with pytest.raises(StacklmError, match="50 in-distribution draws in a row added no example .* duplicate"):
        build_splits(task, SplitSizes(train=2, validation=0, test=0, generalization=0), seed=0, grammars=(one_sentence, one_sentence))


def test_a_generalization_grammar_whose_sentences_are_all_turned_down_is_an_error(monkeypatch):
    """New sentences that the task's filter turns down add nothing either: the stream stops
    instead of drawing forever."""
    import stacklm.data.splits as splits_module

    monkeypatch.setattr(splits_module, "MAX_FRUITLESS_DRAWS", 200)
    task = get_task("question-formation")
    monkeypatch.setattr(type(task), "is_ambiguity_breaking", lambda self, parse: False)
    with pytest.raises(StacklmError, match=r"200 generalization draws in a row added no example \(.*not ambiguity-breaking"):
        build_splits(task, SplitSizes(train=0, validation=0, test=0, generalization=5), seed=1)


def test_sizes_built_from_settings_name_the_key():
    assert build(SplitSizes, {"train": 5}) == SplitSizes(train=5)
    with pytest.raises(StacklmError, match="config key 'data.sizes.trian'"):
        build(SplitSizes, {"trian": 5}, "data.sizes")
    with pytest.raises(StacklmError, match="config key 'data.sizes': test: expected an integer >= 0"):
        build(SplitSizes, {"test": -1}, "data.sizes")
