"""The grammar file format: rules, probabilities, and errors that name file and line."""

from __future__ import annotations

import pytest

from stacklm.errors import StacklmError
from stacklm.grammars import format_grammar, load_grammar, parse_grammar

TINY = """\
# a comment
2\tS -> A B
1\tS -> B

1\tA -> a
3\tA -> b
1\tB -> c
"""


def test_rules_probabilities_and_lexicon():
    grammar = parse_grammar(TINY, "tiny.cfg")
    assert grammar.start == "S"
    assert grammar.preterminals == {"A", "B"}
    assert grammar.lexicon == {"a": ("A",), "b": ("A",), "c": ("B",)}
    probabilities = {(rule.lhs, rule.rhs): grammar.probability(rule) for rule in grammar.rules}
    assert probabilities[("S", ("A", "B"))] == pytest.approx(2 / 3)
    assert probabilities[("A", ("b",))] == pytest.approx(3 / 4)
    assert [rule.line for rule in grammar.rules] == [2, 3, 5, 6, 7]


def test_format_round_trips(tmp_path):
    grammar = parse_grammar(TINY, "tiny.cfg")
    path = tmp_path / "g.cfg"
    path.write_text(format_grammar(grammar.reweighted({("A", ("a",)): 0.5, ("A", ("b",)): 1.25, ("S", ("B",)): 1, ("B", ("c",)): 7}), ["header"]))
    again = load_grammar(path)
    assert [(rule.key, rule.weight) for rule in again.rules] == [
        (("S", ("A", "B")), 0.0), (("S", ("B",)), 1.0), (("A", ("a",)), 0.5), (("A", ("b",)), 1.25), (("B", ("c",)), 7.0)]
    assert path.read_text().startswith("# header\n")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("1 S -> A\n1 A a\n", 2, "expected 'WEIGHT LHS -> RHS...'"),
        ("1 S -> A\nx A -> a\n", 2, "is not a number"),
        ("1 S -> A\n-1 A -> a\n", 2, "finite and >= 0"),
        ("1 S -> A\nnan A -> a\n", 2, "finite and >= 0"),
        ("1 S -> A\n1 A -> a\n\n2 A -> a\n", 4, "repeats line 2"),
        ("1 S -> A\n1 A -> B\n1 A -> C\n1 B -> b\n1 C -> A B\n", 5, r"recursive \(A -> C -> A\)"),
        ("1 S -> A B\n1 A -> a\n1 A -> B\n1 B -> b\n", 3, "both word rules and nonterminal rules"),
        ("1 S -> A x\n1 A -> a\n", 1, "'x' is not a nonterminal"),
        ("1 S -> A\n1 A -> a\n1 C -> c\n", 3, "not reachable"),
        ("1 S -> A\n0 A -> a\n", 2, "total weight 0"),
        ("1 S -> A -> B\n1 A -> a\n1 B -> b\n", 1, "more than one"),
    ],
)
def test_bad_grammar_names_file_and_line(text, line, message):
    with pytest.raises(StacklmError, match=rf"^bad\.cfg:{line}: .*{message}"):
        parse_grammar(text, "bad.cfg")


def test_empty_grammar_names_file():
    with pytest.raises(StacklmError, match=r"^empty\.cfg: the grammar has no rules"):
        parse_grammar("# nothing\n", "empty.cfg")
