import math

import pytest

from stacklm.cfl.grammar import WeightedGrammar, WeightedRule, cont, stop
from stacklm.errors import StacklmError


def test_stop_and_cont_make_a_geometric_count_with_the_given_mean():
    assert stop(60) == pytest.approx(1 / 61) and cont(60) == pytest.approx(60 / 61)
    assert cont(0.5) == pytest.approx(1 / 3) and cont(1.5) == pytest.approx(3 / 5)
    # E[repetitions] = Σ_k k cont^k stop = cont / stop = m
    assert sum(k * cont(3) ** k * stop(3) for k in range(2000)) == pytest.approx(3.0)


def test_from_weights_renormalises_each_left_hand_side_and_drops_zero_weights():
    grammar = WeightedGrammar.from_weights("W", [("W", (0,), 1), ("W", (1,), 1), ("W", (2,), 1), ("W", (3,), 1), ("W", (4,), 1), ("W", (0, 0), 0)], 5)
    assert [rule.probability for rule in grammar.rules] == [pytest.approx(0.2)] * 5
    assert grammar.nonterminals == ("W",)


def test_rules_of_keeps_the_rule_order():
    grammar = WeightedGrammar.from_weights("S", [("S", ("A", 0), 1), ("A", (), 3), ("S", (), 1), ("A", (1,), 1)], 2)
    assert [rule.rhs for rule in grammar.rules_of("S")] == [("A", 0), ()]
    assert [rule.probability for rule in grammar.rules_of("A")] == [0.75, 0.25]
    assert grammar.nonterminals == ("S", "A")


@pytest.mark.parametrize(
    "start, rules, num_terminals, message",
    [
        ("S", (WeightedRule("A", (0,), 1.0),), 1, "start symbol 'S' has no rules"),
        ("S", (WeightedRule("S", ("B",), 1.0),), 1, "nonterminal 'B', which has no rules"),
        ("S", (WeightedRule("S", (3,), 1.0),), 2, "terminal 3, outside 0..1"),
        ("S", (WeightedRule("S", (0,), 0.5), WeightedRule("S", (), 0.4)), 1, "sum to 0.9"),
        ("S", (WeightedRule("S", (0,), 1.0), WeightedRule("S", (), 0.0)), 1, "not positive"),
        ("S", (WeightedRule("S", (0,), math.nan),), 1, "not positive"),
    ],
)
def test_invalid_grammars_are_rejected_with_the_reason(start, rules, num_terminals, message):
    with pytest.raises(StacklmError, match=message.replace("(", r"\(").replace(".", r"\.")):
        WeightedGrammar(start, rules, num_terminals)


def test_negative_weights_are_rejected():
    with pytest.raises(StacklmError, match="nonnegative"):
        WeightedGrammar.from_weights("S", [("S", (0,), -1.0)], 1)
