"""The five grammars against the exact rule tables of docs/design/cfl-and-ptb.md#cfl-languages."""

from fractions import Fraction

import pytest

from stacklm.cfl.languages import LANGUAGES, dyck, marked_reversal

F = Fraction
OPEN, CLOSE, OPEN_SQ, CLOSE_SQ, COMMA, SEMI, DOLLAR = range(7)

SPEC_RULES = {
    "marked-reversal": [("S", (0, "S", 0), F(30, 61)), ("S", (1, "S", 1), F(30, 61)), ("S", (2,), F(1, 61))],
    "unmarked-reversal": [("S", (0, "S", 0), F(30, 61)), ("S", (1, "S", 1), F(30, 61)), ("S", (), F(1, 61))],
    "padded-reversal": [
        ("S", (0, "S", 0), F(30, 61)), ("S", (1, "S", 1), F(30, 61)), ("S", ("T0",), F(1, 122)), ("S", ("T1",), F(1, 122)),
        ("T0", (0, "T0"), F(30, 31)), ("T0", (), F(1, 31)), ("T1", (1, "T1"), F(30, 31)), ("T1", (), F(1, 31)),
    ],
    "dyck-2": [
        ("S", ("S", "T"), F(1, 2)), ("S", ("T",), F(1, 2)),
        ("T", (OPEN, "S", CLOSE), F(39, 80)), ("T", (OPEN, CLOSE), F(1, 80)),
        ("T", (OPEN_SQ, "S", CLOSE_SQ), F(39, 80)), ("T", (OPEN_SQ, CLOSE_SQ), F(1, 80)),
    ],
    "hardest-cfl": [
        ("S'", ("R", DOLLAR, "Q", "S", "L", SEMI), F(1)),
        ("L", ("L'", COMMA, "U"), F(1)),
        ("L'", (COMMA, "V", "L'"), F(1, 3)), ("L'", (), F(2, 3)),
        ("R", ("U", COMMA, "R'"), F(1)),
        ("R'", ("R'", "V", COMMA), F(1, 3)), ("R'", (), F(2, 3)),
        ("U", ("W", "U"), F(1, 3)), ("U", (), F(2, 3)),
        ("V", ("W", "V"), F(1, 2)), ("V", ("W",), F(1, 2)),
        *[("W", (symbol,), F(1, 5)) for symbol in (OPEN, CLOSE, OPEN_SQ, CLOSE_SQ, DOLLAR)],
        ("Q", ("L", SEMI, "R"), F(1, 4)), ("Q", (), F(3, 4)),
        ("S", ("S", "Q", "T"), F(3, 5)), ("S", ("T",), F(2, 5)),
        ("T", (OPEN, "Q", "S", "Q", CLOSE), F(3, 8)), ("T", (OPEN, "Q", CLOSE), F(1, 8)),
        ("T", (OPEN_SQ, "Q", "S", "Q", CLOSE_SQ), F(3, 8)), ("T", (OPEN_SQ, "Q", CLOSE_SQ), F(1, 8)),
    ],
}
START = {"marked-reversal": "S", "unmarked-reversal": "S", "padded-reversal": "S", "dyck-2": "S", "hardest-cfl": "S'"}
TERMINALS = {
    "marked-reversal": ("0", "1", "#"),
    "unmarked-reversal": ("0", "1"),
    "padded-reversal": ("0", "1"),
    "dyck-2": ("(", ")", "[", "]"),
    "hardest-cfl": ("(", ")", "[", "]", ",", ";", "$"),
}


def test_the_five_languages_are_registered_by_name():
    assert sorted(LANGUAGES) == sorted(SPEC_RULES)
    assert all(language.name == name for name, language in LANGUAGES.items())


@pytest.mark.parametrize("name", sorted(SPEC_RULES))
def test_rule_probabilities_are_those_of_the_spec(name):
    grammar = LANGUAGES[name].grammar
    assert grammar.start == START[name]
    found = sorted((rule.lhs, tuple(map(str, rule.rhs)), rule.probability) for rule in grammar.rules)
    expected = sorted((lhs, tuple(map(str, rhs)), float(p)) for lhs, rhs, p in SPEC_RULES[name])
    assert [(lhs, rhs) for lhs, rhs, _ in found] == [(lhs, rhs) for lhs, rhs, _ in expected]
    for (_, rhs, probability), (_, _, spec) in zip(found, expected):
        assert probability == pytest.approx(spec, rel=1e-14), rhs


@pytest.mark.parametrize("name, vocabulary_size", [("marked-reversal", 4), ("unmarked-reversal", 3), ("padded-reversal", 3), ("dyck-2", 5), ("hardest-cfl", 8)])
def test_alphabets_and_eos_follow_spec_table_1_1(name, vocabulary_size):
    language = LANGUAGES[name]
    assert language.terminal_names == TERMINALS[name]
    assert language.num_terminals == len(TERMINALS[name]) == vocabulary_size - 1
    assert language.vocabulary_size == vocabulary_size and language.eos == vocabulary_size - 1


def test_builders_take_the_mean_parameters():
    probabilities = {rule.rhs: rule.probability for rule in marked_reversal(symbol_types=3, mean_length=9).grammar.rules}
    assert probabilities[(3,)] == pytest.approx(0.1) and probabilities[(2, "S", 2)] == pytest.approx(0.3)
    assert dyck(bracket_types=1).terminal_names == ("(", ")")
