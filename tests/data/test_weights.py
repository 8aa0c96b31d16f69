"""Rule weights: maximum-likelihood counts, proportional fitting, and the shipped grammar files."""

from __future__ import annotations

from collections import Counter

import pytest

from stacklm.data.weights import _refit, probabilities
from stacklm.grammars import CompiledGrammar, compiled, parse_grammar
from stacklm.grammars.estimate import rule_counts
from stacklm.tasks import TASK_NAMES, get_task

AMBIGUOUS = parse_grammar("""\
1 ROOT -> A B
1 ROOT -> C
1 A -> x
1 B -> y
1 C -> D D
1 D -> x
1 D -> y
""", "ambiguous.cfg")


def test_counts_split_a_sentence_evenly_over_its_parses():
    counts = rule_counts(CompiledGrammar(AMBIGUOUS), [("x", "y"), ("y", "y")])
    assert counts[("ROOT", ("A", "B"))] == pytest.approx(0.5)
    assert counts[("ROOT", ("C",))] == pytest.approx(1.5)
    assert counts[("D", ("y",))] == pytest.approx(2.5)
    q = probabilities(counts)
    assert q[("ROOT", ("C",))] == pytest.approx(0.75) and q[("D", ("x",))] == pytest.approx(0.5 / 3)


def test_refit_multiplies_by_target_over_simulated_and_renormalises():
    theta = {("S", ("a",)): 0.5, ("S", ("b",)): 0.5, ("T", ("c",)): 1.0}
    refit = _refit(theta, {("S", ("a",)): 0.6, ("S", ("b",)): 0.4, ("T", ("c",)): 1.0},
                   {("S", ("a",)): 0.3, ("S", ("b",)): 0.7, ("T", ("c",)): 1.0})
    assert refit[("S", ("a",))] == pytest.approx((0.5 * 2) / (0.5 * 2 + 0.5 * 4 / 7))
    assert refit[("T", ("c",))] == 1.0


@pytest.mark.parametrize("name", TASK_NAMES)
def test_shipped_weights_are_fitted_to_the_upstream_counts(name, upstream_examples):
    """Per left-hand side, the weights sum to the number of uses in the upstream parses (the
    scale the fit writes them in), and the rules upstream never uses have weight 0."""
    task = get_task(name)
    identity = [example.source[:-1] for example in upstream_examples(name, "validation") if example.marker == task.identity_marker]
    generalization = [example.source[:-1] for example in upstream_examples(name, "generalization")]
    for grammar, sentences in ((compiled(name), identity), (compiled(f"{name}.generalization"), generalization)):
        observed = rule_counts(grammar, sentences)
        lhs_totals, weight_totals = Counter(), Counter()
        for rule in grammar.grammar.rules:
            lhs_totals[rule.lhs] += observed.get(rule.key, 0.0)
            weight_totals[rule.lhs] += rule.weight
            if observed.get(rule.key, 0.0) == 0.0:
                assert rule.weight == 0.0, rule
        for lhs, total in lhs_totals.items():
            assert weight_totals[lhs] == pytest.approx(total, abs=0.01), lhs
        assert [rule.key for rule in grammar.grammar.rules] == [rule.key for rule in task.grammar.grammar.rules]
