"""Sampling and exhaustive parsing against brute-force enumeration of a small ambiguous grammar."""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict

import pytest

from stacklm.grammars import CompiledGrammar, Tree, parse_grammar

# Ambiguous on purpose: "d n r n" is a subject with a relative clause or two noun phrases.
TEXT = """\
1 ROOT -> S P
3 S -> NP VP
1 S -> NP NP
2 NP -> D N
1 NP -> D N R N
1 VP -> V
2 VP -> V NP
1 D -> d
3 D -> e
1 N -> n
1 R -> r
1 R -> d
1 V -> v
1 P -> .
"""


def enumerate_trees(grammar, symbol):
    """(tree, probability) for every tree of ``symbol``, top-down, without skeletons."""
    out = []
    for rule in grammar.rules_of[symbol]:
        probability = grammar.probability(rule)
        if symbol in grammar.preterminals:
            out.append((Tree(symbol, rule.rhs), probability))
            continue
        for parts in itertools.product(*(enumerate_trees(grammar, child) for child in rule.rhs)):
            product = probability
            for _, part_probability in parts:
                product *= part_probability
            out.append((Tree(symbol, tuple(tree for tree, _ in parts)), product))
    return out


@pytest.fixture(scope="module")
def grammar():
    return parse_grammar(TEXT, "test.cfg")


@pytest.fixture(scope="module")
def compiled(grammar):
    return CompiledGrammar(grammar)


def test_parse_finds_exactly_the_trees_of_each_sentence(grammar, compiled):
    trees_of = defaultdict(list)
    for tree, probability in enumerate_trees(grammar, "ROOT"):
        trees_of[tree.leaves()].append((str(tree), probability))
    assert sum(probability for trees in trees_of.values() for _, probability in trees) == pytest.approx(1.0)
    assert any(len(trees) == 2 for trees in trees_of.values())
    for sentence, trees in trees_of.items():
        parses = compiled.parse(sentence)
        assert sorted(str(parse.tree()) for parse in parses) == sorted(tree for tree, _ in trees)
        assert sorted(compiled.probability(parse) for parse in parses) == pytest.approx(sorted(p for _, p in trees))
        assert all(parse.tree().leaves() == sentence for parse in parses)


def test_non_sentences_do_not_parse(compiled):
    assert compiled.parse(("d", "n", "v")) == ()
    assert compiled.parse(("d", "n", "v", ".", ".")) == ()
    assert compiled.parse(("x",)) == ()
    assert compiled.parse(()) == ()


def test_zero_weight_words_and_rules_parse_with_probability_zero_and_are_never_sampled(grammar):
    weights = {rule.key: rule.weight for rule in grammar.rules} | {("D", ("d",)): 0.0, ("S", ("NP", "NP")): 0.0}
    compiled = CompiledGrammar(grammar.reweighted(weights))
    for sentence in (("d", "n", "v", "."), ("e", "n", "e", "n", ".")):
        (parse,) = compiled.parse(sentence)
        assert compiled.probability(parse) == 0.0
    rng = random.Random(0)
    samples = [compiled.sample(rng) for _ in range(2000)]
    assert all("d" != sample.tokens[0] and len(sample.skeleton.rules) > 0 and sample.skeleton.rules[1].rhs != ("NP", "NP") for sample in samples)


def test_sampling_follows_the_tree_distribution(grammar, compiled):
    expected = Counter()
    for tree, probability in enumerate_trees(grammar, "ROOT"):
        expected[str(tree)] += probability
    rng = random.Random(1234)
    draws = 40_000
    observed = Counter(str(compiled.sample(rng).tree()) for _ in range(draws))
    total_variation = sum(abs(observed[tree] / draws - expected[tree]) for tree in expected | observed) / 2
    assert set(observed) <= set(expected)
    assert total_variation < 0.02


def test_same_seed_same_samples(compiled):
    first = [compiled.sample(random.Random(7)).tokens for _ in range(1)] + [s.tokens for s in _draws(compiled, 7, 200)]
    second = [compiled.sample(random.Random(7)).tokens for _ in range(1)] + [s.tokens for s in _draws(compiled, 7, 200)]
    assert first == second
    assert [s.tokens for s in _draws(compiled, 8, 200)] != [s.tokens for s in _draws(compiled, 7, 200)]


def _draws(compiled, seed, count):
    rng = random.Random(seed)
    return [compiled.sample(rng) for _ in range(count)]


def test_parse_keys_count_every_rule_use(compiled):
    (parse,) = compiled.parse(("e", "n", "v", "d", "n", "."))
    assert sorted(parse.rule_keys()) == sorted([
        ("ROOT", ("S", "P")), ("S", ("NP", "VP")), ("NP", ("D", "N")), ("VP", ("V", "NP")), ("NP", ("D", "N")),
        ("D", ("e",)), ("N", ("n",)), ("V", ("v",)), ("D", ("d",)), ("N", ("n",)), ("P", (".",))])
