"""The formula parser: trees and values by hand, errors with columns, and every formula of the suites."""

import json
import re
from pathlib import Path

import pytest

from stacklm.evaluation.syntaxgym.formula import (
    Arithmetic,
    Comparison,
    FormulaError,
    Logical,
    Number,
    RegionValue,
    parse_formula,
)


def test_a_suite_formula_parses_to_its_comparison() -> None:
    formula = parse_formula("(7;%match_sing%) < (7;%mismatch_sing%)")
    assert formula.expression == Comparison("<", RegionValue(7, "match_sing"), RegionValue(7, "mismatch_sing"))
    assert formula.regions() == {("match_sing", 7), ("mismatch_sing", 7)}


def test_precedence_sums_then_comparisons_then_connectives_left_to_right() -> None:
    a1, a2, b1 = RegionValue(1, "a"), RegionValue(2, "a"), RegionValue(1, "b-c")
    formula = parse_formula("(1;%a%) + (2;%a%) < (1;%b-c%) - 3 & (1;%a%) > 0 | (2;%a%) = 5")
    first = Comparison("<", Arithmetic("+", a1, a2), Arithmetic("-", b1, Number(3.0)))
    assert formula.expression == Logical("|", Logical("&", first, Comparison(">", a1, Number(0.0))), Comparison("=", a2, Number(5.0)))


def test_subtraction_is_left_associative() -> None:
    formula = parse_formula("(1;%a%)-(2;%a%)-(3;%a%)>0")
    values = {("a", 1): 5.0, ("a", 2): 3.0, ("a", 3): 4.0}
    # (5 − 3) − 4 = −2; grouped to the right it would be 5 − (3 − 4) = 6.
    assert formula.evaluate(values) is False
    assert parse_formula("(1;%a%)-((2;%a%)-(3;%a%))>0").evaluate(values) is True


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [(100.0, 100.0009, True), (100.0, 100.0025, False), (0.0, 0.001, True), (0.0, 0.0011, False)],
)
def test_equality_uses_syntaxgyms_tolerances(left: float, right: float, equal: bool) -> None:
    # |a − b| ≤ 1e-3 + 1e-5·|b|: at b = 100.0009 the bound is 0.002000009, at b = 0.001 it is 0.00100001.
    assert parse_formula("(1;%x%) = (1;%y%)").evaluate({("x", 1): left, ("y", 1): right}) is equal


def test_connectives_and_negative_literals() -> None:
    values = {("x", 1): -0.5, ("y", 1): 2.0}
    assert parse_formula("(1;%x%) > -1").evaluate(values) is True
    assert parse_formula("(1;%x%) > -1 & (1;%y%) < 1").evaluate(values) is False
    assert parse_formula("(1;%x%) > -1 | (1;%y%) < 1").evaluate(values) is True
    assert parse_formula("((1;%y%) - (1;%x%)) > 2.4e0").evaluate(values) is True


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("(7;%a%) <", 10, "found the end of the formula"),
        ("(7;%a%) < (7;%b%) < (7;%c%)", 19, "chained comparison"),
        ("(7;%a%) + (7;%b%)", 1, "must compare"),
        ("((7;%a%) < (7;%b%)) + 1 > 0", 21, "needs numbers"),
        ("(7;%a%) < 1 & (7;%b%)", 13, "needs comparisons"),
        ("(7;%a%) < (7;%b%) )", 19, "unexpected ')'"),
        ("((7;%a%) < (7;%b%)", 19, "expected ')'"),
        ("__import__('os').system('x') < 1", 1, "unexpected '_'"),
        ("(7;%a b%) < 1", 3, "unexpected ';'"),
        ("", 1, "found the end of the formula"),
    ],
)
def test_malformed_formulas_name_the_column(text: str, column: int, message: str) -> None:
    with pytest.raises(FormulaError) as caught:
        parse_formula(text)
    assert caught.value.column == column
    assert message in str(caught.value)


def test_every_formula_of_the_suites_parses_and_reads_the_regions_it_names(upstream_dir: Path) -> None:
    files = sorted((upstream_dir / "sg-test-suites" / "syntaxgym-format").glob("*.json"))
    assert len(files) == 33  # docs/design/cfl-and-ptb.md#sg-score: 33 suites in six circuits
    formulas = [p["formula"] for path in files for p in json.loads(path.read_text())["predictions"]]
    for text in formulas:
        named = {(condition, int(region)) for region, condition in re.findall(r"\((\d+);%([^%]+)%\)", text)}
        assert parse_formula(text).regions() == named, text
