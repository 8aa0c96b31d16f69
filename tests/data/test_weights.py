"""Rule weights: maximum-likelihood counts, proportional fitting, and the shipped grammar files."""

from __future__ import annotations

from collections import Counter

import pytest

from stacklm.data.compare import compare
from stacklm.data.splits import build_splits
from stacklm.data.weights import TARGET_SPLITS, TRAIN_FILE_TASKS, _refit, estimate_weights, probabilities
from stacklm.grammars import CompiledGrammar, compiled, parse_grammar
from stacklm.grammars.estimate import rule_counts
from stacklm.tasks import TASK_NAMES, get_task
from tests.data.test_splits import SHORT_SIZES, few_short_sentences

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


def test_refit_keeps_a_left_hand_side_the_target_never_uses():
    theta = {("S", ("a",)): 0.5, ("S", ("b",)): 0.5}
    assert _refit(theta, {}, {("S", ("a",)): 0.5, ("S", ("b",)): 0.5}) == theta


@pytest.mark.parametrize("name", TASK_NAMES)
def test_shipped_weights_are_fitted_to_the_upstream_counts(name, upstream_examples):
    """Per left-hand side, the weights sum to the number of uses in the parses of the fit's target
    (the scale the fit writes them in), the rules it never uses have weight 0, and a left-hand
    side it never uses has weight 1 per rule."""
    task = get_task(name)
    target = "train" if name in TRAIN_FILE_TASKS else "held-out"
    sentences = [example.source[:-1] for split in TARGET_SPLITS[target] for example in upstream_examples(name, split)]
    generalization = [example.source[:-1] for example in upstream_examples(name, "generalization")]
    for grammar, observed_sentences in ((compiled(name), sentences), (compiled(f"{name}.generalization"), generalization)):
        observed = rule_counts(grammar, observed_sentences)
        lhs_totals, weight_totals = Counter(), Counter()
        for rule in grammar.grammar.rules:
            lhs_totals[rule.lhs] += observed.get(rule.key, 0.0)
            weight_totals[rule.lhs] += rule.weight
        for rule in grammar.grammar.rules:
            if not lhs_totals[rule.lhs]:
                assert rule.weight == 1.0, rule
            elif observed.get(rule.key, 0.0) == 0.0:
                assert rule.weight == 0.0, rule
        for lhs, total in lhs_totals.items():
            assert weight_totals[lhs] == pytest.approx(total or len(grammar.grammar.rules_of[lhs]), abs=0.01), lhs
        assert [rule.key for rule in grammar.grammar.rules] == [rule.key for rule in task.grammar.grammar.rules]


def test_the_held_out_fit_corrects_for_the_exclusion_of_training_sources():
    """The validation of docs/data-validation.md in miniature, where the truth is known: splits
    drawn by McCoy's procedure from a grammar whose short sentences run out during train. Fitted
    to their validation and test alone, the weights draw a train split within a few seed noises
    of the true one; the uncorrected estimate (no round of fitting) does not."""
    task = get_task("question-formation")
    truth, sizes = few_short_sentences(task), SHORT_SIZES
    drawn = build_splits(task, sizes, seed=7, grammars=truth)
    held_out = [example.source[:-1] for example in drawn.validation + drawn.test]
    distances = {}
    for iterations in (0, 3):
        fitted, _ = estimate_weights(task, "held-out", held_out, [], iterations, simulations=1, sizes=sizes)
        grammars = (CompiledGrammar(fitted), truth[1])
        generated = dict(build_splits(task, sizes, seed=1, grammars=grammars).items())
        comparison = compare(task, generated, dict(drawn.items()), grammars=grammars)[0]  # train
        distances[iterations] = comparison.distance, comparison.noise
    corrected, noise = distances[3]
    assert corrected < 2 * noise < distances[0][0]
