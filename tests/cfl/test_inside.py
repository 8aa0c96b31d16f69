"""The inside algorithm against brute-force enumeration of derivations, across semirings."""

import itertools
import math
import random

import pytest
import torch

from stacklm.cfl.grammar import WeightedGrammar
from stacklm.cfl.inside import compile_grammar, inside_chart, length_table, one_hot_weights, string_weights
from stacklm.cfl.languages import LANGUAGES, padded_reversal
from stacklm.errors import StacklmError
from stacklm.semiring import LOG, MAX_PLUS, REAL

# (language, lengths): every string of these lengths over the alphabet is scored (K^ℓ ≤ 117,649)
ALL_STRINGS = [
    ("marked-reversal", (0, 1, 5, 7)),
    ("unmarked-reversal", (0, 1, 6, 8)),
    ("padded-reversal", (0, 3, 6, 8)),
    ("dyck-2", (2, 5, 6)),
    ("hardest-cfl", (0, 4, 5)),  # below the shortest length, 6: all weights 0
]
# longer lengths, checked on the strings that have derivations
DERIVED_STRINGS = [("dyck-2", 10), ("padded-reversal", 11), ("hardest-cfl", 8), ("hardest-cfl", 10)]


@pytest.mark.parametrize("name, lengths", ALL_STRINGS)
def test_inside_equals_the_sum_over_derivations_for_every_string(name, lengths, derivations):
    grammar = LANGUAGES[name].grammar
    circuit = compile_grammar(grammar)
    table = length_table(circuit, max(lengths), REAL)
    for length in lengths:
        expected = derivations(grammar, length)
        strings = [list(w) for w in itertools.product(range(grammar.num_terminals), repeat=length)]
        found = string_weights(circuit, strings, REAL)
        oracle = torch.tensor([expected.get(tuple(w), 0.0) for w in strings], dtype=torch.float64)
        torch.testing.assert_close(found, oracle, rtol=1e-12, atol=0.0)
        # β(S, ℓ) = Σ_{|w|=ℓ} p_G(w)
        assert table[circuit.start, length].item() == pytest.approx(math.fsum(expected.values()), rel=1e-12, abs=0.0)


@pytest.mark.parametrize("name, length", DERIVED_STRINGS)
def test_inside_equals_the_sum_over_derivations_on_longer_strings(name, length, derivations):
    grammar = LANGUAGES[name].grammar
    circuit = compile_grammar(grammar)
    expected = derivations(grammar, length)
    strings = [list(w) for w in expected]
    found = string_weights(circuit, strings, LOG)
    torch.testing.assert_close(found, torch.tensor([math.log(expected[tuple(w)]) for w in strings], dtype=torch.float64), rtol=1e-12, atol=1e-12)
    # the derived strings carry all of β(S, ℓ), so p_G(w | ℓ) sums to 1 over them
    log_total = length_table(circuit, length, LOG)[circuit.start, length]
    assert torch.exp(found - log_total).sum().item() == pytest.approx(1.0, abs=1e-12)
    # and random strings of that length score 0̄ exactly when no derivation yields them
    generator = random.Random(length)
    others = [[generator.randrange(grammar.num_terminals) for _ in range(length)] for _ in range(2000)]
    assert [weight == -math.inf for weight in string_weights(circuit, others, LOG).tolist()] == [tuple(w) not in expected for w in others]


def test_an_ambiguous_hardest_cfl_string_sums_its_two_parses_by_hand():
    """w = ", $ [ ] , $ [ ] , ;" has two parses of S' → R $ Q S L ; with Q ⇒ ε and S ⇒ [ ]:

    - R ⇒ "," (U, R' ⇒ ε) and L ⇒ ", $ [ ] ," (L' → , V L', V ⇒ "$ [ ]", L' ⇒ ε, U ⇒ ε);
    - R ⇒ ", $ [ ] ," (U ⇒ ε, R' → R' V ,, R' ⇒ ε) and L ⇒ "," (L' ⇒ ε, U ⇒ ε).

    Both use four ε-rules of probability 2/3 (U, R', L', U / U, R', L', U), one comma rule
    (1/3), V ⇒ "$ [ ]" ((1/2 · 1/5)³), Q → ε twice (3/4 each), S → T (2/5), T → [ Q ] (1/8).
    """
    circuit = compile_grammar(LANGUAGES["hardest-cfl"].grammar)
    w = [[4, 6, 2, 3, 4, 6, 2, 3, 4, 5]]
    parse = (2 / 3) ** 4 * (1 / 3) * (1 / 10) ** 3 * (3 / 4) ** 2 * (2 / 5) * (1 / 8)
    assert string_weights(circuit, w, MAX_PLUS).item() == pytest.approx(math.log(parse), rel=1e-13)
    assert string_weights(circuit, w, LOG).item() == pytest.approx(math.log(2 * parse), rel=1e-13)


@pytest.mark.parametrize("name", sorted(LANGUAGES))
def test_log_equals_real_on_the_whole_chart(name):
    circuit = compile_grammar(LANGUAGES[name].grammar)
    generator = torch.Generator().manual_seed(0)
    real = torch.rand(3, 9, circuit.num_terminals, generator=generator, dtype=torch.float64)  # arbitrary τ
    real[0, 4] = 0.0  # and a position no terminal matches
    chart_real = inside_chart(circuit, real, REAL)
    chart_log = inside_chart(circuit, LOG.from_real(real), LOG)
    torch.testing.assert_close(chart_log.exp(), chart_real, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(length_table(circuit, 30, LOG).exp(), length_table(circuit, 30, REAL), rtol=1e-12, atol=0.0)


def test_max_plus_gives_the_best_parse_of_a_padded_reversal_string():
    """"0 0" has three parses: S → 0 S 0 with S → T0 → ε or S → T1 → ε, and S → T0 → 0 T0 → 0 0 T0 → 0 0."""
    circuit = compile_grammar(padded_reversal().grammar)
    nest, stop_nest, pad, stop_pad = 30 / 61, 1 / 122, 30 / 31, 1 / 31
    through_middle = nest * stop_nest * stop_pad  # one of two such parses
    all_padding = stop_nest * pad * pad * stop_pad  # the best
    assert string_weights(circuit, [[0, 0]], MAX_PLUS).exp().item() == pytest.approx(all_padding, rel=1e-14)
    assert string_weights(circuit, [[0, 0]], REAL).item() == pytest.approx(2 * through_middle + all_padding, rel=1e-14)
    assert string_weights(circuit, [[0, 1]], MAX_PLUS).item() == -math.inf


def test_max_plus_length_table_is_the_most_likely_derivation_of_each_length():
    circuit = compile_grammar(LANGUAGES["marked-reversal"].grammar)
    best = length_table(circuit, 9, MAX_PLUS)[circuit.start]
    for length in range(10):
        expected = (length // 2) * math.log(30 / 61) + math.log(1 / 61) if length % 2 else -math.inf
        assert best[length].item() == pytest.approx(expected, rel=1e-14)


def test_epsilon_and_unary_rules_nested_through_several_symbols(derivations):
    """S → A B | C, A → ε | 0 A, B → A A | 1, C → B: ε reaches S through two levels and a unary chain."""
    grammar = WeightedGrammar.from_weights(
        "S",
        [("S", ("A", "B"), 2), ("S", ("C",), 1), ("A", (), 1), ("A", (0, "A"), 1), ("B", ("A", "A"), 1), ("B", (1,), 3), ("C", ("B",), 1)],
        2,
    )
    circuit = compile_grammar(grammar)
    table = length_table(circuit, 5, REAL)
    for length in range(6):
        expected = derivations(grammar, length)
        strings = [list(w) for w in itertools.product(range(2), repeat=length)]
        oracle = torch.tensor([expected.get(tuple(w), 0.0) for w in strings], dtype=torch.float64)
        torch.testing.assert_close(string_weights(circuit, strings, REAL), oracle, rtol=1e-12, atol=0.0)
        assert table[circuit.start, length].item() == pytest.approx(math.fsum(expected.values()), rel=1e-12)
    # p(ε) by hand: S → A B with A, B → A A → ε ε: (2/3)·(1/2)·(1/4)·(1/2)·(1/2) + via C → B: (1/3)·(1/4)·(1/4)
    assert table[circuit.start, 0].item() == pytest.approx(2 / 3 * 1 / 2 * 1 / 4 * 1 / 4 + 1 / 3 * 1 / 4 * 1 / 4)


@pytest.mark.parametrize(
    "rules",
    [
        [("S", ("S",), 1), ("S", (0,), 1)],  # S → S
        [("S", ("N", "S"), 1), ("S", (0,), 1), ("N", (), 1), ("N", (1,), 1)],  # S → N S with N ⇒ ε
        [("S", ("A",), 1), ("A", ("S", "N"), 1), ("A", (0,), 1), ("N", (), 1)],  # S → A → S N
    ],
)
def test_grammars_with_same_width_cycles_are_rejected(rules):
    with pytest.raises(StacklmError, match="cycle of unary rules"):
        compile_grammar(WeightedGrammar.from_weights("S", rules, 2))


def test_width_bounds():
    circuit = compile_grammar(LANGUAGES["hardest-cfl"].grammar)
    bounds = {label: (circuit.min_width[p], circuit.max_width[p]) for p, label in enumerate(circuit.labels)}
    assert bounds["W"] == (1, 1) and bounds["ε"] == (0, 0) and bounds["0"] == (1, 1)
    assert bounds["S'"] == (6, math.inf) and bounds["Q"] == (0, math.inf) and bounds["T"] == (2, math.inf)


def test_only_the_left_spine_of_an_unused_start_symbol_is_anchored():
    hardest = compile_grammar(LANGUAGES["hardest-cfl"].grammar)
    assert sorted(hardest.labels[p] for p in hardest.anchored) == sorted(["S'", "[R 6]", "[R 6 Q]", "[R 6 Q S]", "[R 6 Q S L]", "[R 6 Q S L 5]"])
    assert compile_grammar(LANGUAGES["dyck-2"].grammar).anchored == frozenset()  # S is used inside T
    # S' → A, A → A 1 | 0: A only ever starts at 0
    left_recursive = compile_grammar(WeightedGrammar.from_weights("S'", [("S'", ("A",), 1), ("A", ("A", 1), 1), ("A", (0,), 1)], 2))
    assert sorted(left_recursive.labels[p] for p in left_recursive.anchored) == ["A", "S'", "[A 1]"]
    assert string_weights(left_recursive, [[0, 1, 1, 1]], REAL).item() == pytest.approx(0.5**4)


def test_chunked_scoring_equals_one_chunk():
    circuit = compile_grammar(LANGUAGES["dyck-2"].grammar)
    strings = [[0, 2, 3, 1, 0, 1], [2, 3, 2, 3, 0, 1], [0, 1, 0, 0, 1, 1], [0, 1, 1, 0, 0, 1], [2, 0, 1, 3, 2, 3]]
    whole = string_weights(circuit, strings, LOG)
    torch.testing.assert_close(string_weights(circuit, strings, LOG, max_chart_bytes=1), whole, rtol=0.0, atol=0.0)
    assert whole[3].item() == -math.inf and torch.isfinite(whole[[0, 1, 2, 4]]).all()


def test_bad_inputs_are_rejected():
    circuit = compile_grammar(LANGUAGES["dyck-2"].grammar)
    with pytest.raises(StacklmError, match="share one length"):
        string_weights(circuit, [[0, 1], [0, 1, 0, 1]])
    with pytest.raises(StacklmError, match="outside the terminals"):
        string_weights(circuit, [[0, 4]])
    with pytest.raises(StacklmError, match="5 terminals"):
        inside_chart(circuit, one_hot_weights([[0, 1]], 5))
    assert string_weights(circuit, []).shape == (0,)
