"""SyntaxGym prediction formulas, parsed without ``eval``: a tokenizer and a recursive-descent parser.

A formula compares region values of one item (Hu et al. 2020; the SyntaxGym suite format that
DuSell & Chiang (2022) scored, ``docs/design/cfl-and-ptb.md#sg-score``). Its grammar, loosest binding first, is
the one of syntaxgym 0.5's formula parser:

    formula    := comparison (("&" | "|") comparison)*          left-associative, one level
    comparison := sum (("<" | ">" | "=") sum)?                  at most one comparison
    sum        := atom (("+" | "-") atom)*                       left-associative
    atom       := "(" N ";%" condition "%)" | number | "(" formula ")"

``(N;%c%)`` is the value of region N in condition c; a number may carry a leading minus. A
formula is boolean: ``&``/``|`` join booleans, ``<``/``>``/``=`` compare numbers, ``+``/``-`` add
numbers, and anything else is an error (the grammar above accepts ``(a < b) + 1``; the type
check refuses it). ``=`` is ``numpy.isclose`` with syntaxgym's tolerances:
``|a − b| ≤ EQUALITY_ATOL + EQUALITY_RTOL · |b|``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Mapping

EQUALITY_RTOL = 1e-5
EQUALITY_ATOL = 1e-3

RegionKey = tuple[str, int]  # (condition name, region number)


class FormulaError(ValueError):
    """A formula that does not parse or does not type-check; ``column`` is 1-based."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(f"column {column}: {message}")
        self.column = column


@dataclass(frozen=True)
class RegionValue:
    region: int
    condition: str


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Arithmetic:
    operator: Literal["+", "-"]
    left: "Numeric"
    right: "Numeric"


@dataclass(frozen=True)
class Comparison:
    operator: Literal["<", ">", "="]
    left: "Numeric"
    right: "Numeric"


@dataclass(frozen=True)
class Logical:
    operator: Literal["&", "|"]
    left: "Boolean"
    right: "Boolean"


Numeric = RegionValue | Number | Arithmetic
Boolean = Comparison | Logical
Expression = Numeric | Boolean


@dataclass(frozen=True)
class Formula:
    text: str  # as the suite writes it
    expression: Boolean

    def regions(self) -> frozenset[RegionKey]:
        """The (condition, region number) pairs the formula reads."""
        return frozenset(_regions(self.expression))

    def evaluate(self, values: Mapping[RegionKey, float]) -> bool:
        """The formula's truth for one item, given every region value it reads."""
        return _evaluate_boolean(self.expression, values)


# One token: a region reference, a number, an operator or a parenthesis (after optional spaces).
_TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<region>\(\s*(?P<number>\d+)\s*;\s*%(?P<condition>[A-Za-z0-9_-]+)%\s*\))"
    r"|(?P<literal>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<symbol>[-+<>=&|()])"
    r")"
)


@dataclass(frozen=True)
class _Token:
    kind: Literal["region", "literal", "symbol", "end"]
    text: str
    column: int  # 1-based
    region: RegionValue | None = None


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while text[position:].strip():
        match = _TOKEN.match(text, position)
        if match is None:
            column = position + len(text[position:]) - len(text[position:].lstrip()) + 1
            raise FormulaError(f"unexpected {text[column - 1]!r}", column)
        if match.group("region") is not None:
            region = RegionValue(int(match.group("number")), match.group("condition"))
            tokens.append(_Token("region", match.group("region"), match.start("region") + 1, region))
        elif match.group("literal") is not None:
            tokens.append(_Token("literal", match.group("literal"), match.start("literal") + 1))
        else:
            tokens.append(_Token("symbol", match.group("symbol"), match.start("symbol") + 1))
        position = match.end()
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.index = 0

    @property
    def current(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def at_symbol(self, symbols: str) -> bool:
        return self.current.kind == "symbol" and self.current.text in symbols

    def formula(self) -> Expression:
        left = self.comparison()
        while self.at_symbol("&|"):
            operator = self.take()
            right = self.comparison()
            left = Logical(operator.text, _boolean(left, operator), _boolean(right, operator))  # type: ignore[arg-type]
        return left

    def comparison(self) -> Expression:
        left = self.sum()
        if not self.at_symbol("<>="):
            return left
        operator = self.take()
        right = self.sum()
        if self.at_symbol("<>="):
            raise FormulaError(f"chained comparison {operator.text!r} … {self.current.text!r}: add parentheses", self.current.column)
        return Comparison(operator.text, _numeric(left, operator), _numeric(right, operator))  # type: ignore[arg-type]

    def sum(self) -> Expression:
        left = self.atom()
        while self.at_symbol("+-"):
            operator = self.take()
            right = self.atom()
            left = Arithmetic(operator.text, _numeric(left, operator), _numeric(right, operator))  # type: ignore[arg-type]
        return left

    def atom(self) -> Expression:
        token = self.take()
        if token.kind == "region":
            assert token.region is not None
            return token.region
        if token.kind == "literal":
            return Number(float(token.text))
        if token.kind == "symbol" and token.text == "-" and self.current.kind == "literal":
            return Number(-float(self.take().text))
        if token.kind == "symbol" and token.text == "(":
            inner = self.formula()
            if not self.at_symbol(")"):
                raise FormulaError(f"expected ')' to close the '(' of column {token.column}, found {_shown(self.current)}", self.current.column)
            self.take()
            return inner
        raise FormulaError(f"expected a region '(N;%condition%)', a number or '(', found {_shown(token)}", token.column)


def _shown(token: _Token) -> str:
    return "the end of the formula" if token.kind == "end" else repr(token.text)


def _numeric(expression: Expression, operator: _Token) -> Numeric:
    if isinstance(expression, (Comparison, Logical)):
        raise FormulaError(f"{operator.text!r} needs numbers on both sides, not a truth value", operator.column)
    return expression


def _boolean(expression: Expression, operator: _Token) -> Boolean:
    if not isinstance(expression, (Comparison, Logical)):
        raise FormulaError(f"{operator.text!r} needs comparisons on both sides, not a number", operator.column)
    return expression


def parse_formula(text: str) -> Formula:
    """The formula ``text``; a ``FormulaError`` names the column of the first problem."""
    parser = _Parser(text)
    expression = parser.formula()
    if parser.current.kind != "end":
        raise FormulaError(f"unexpected {parser.current.text!r} after a complete formula", parser.current.column)
    if not isinstance(expression, (Comparison, Logical)):
        raise FormulaError("a formula must compare values ('<', '>' or '='), not only compute a number", 1)
    return Formula(text, expression)


def _regions(expression: Expression) -> list[RegionKey]:
    if isinstance(expression, RegionValue):
        return [(expression.condition, expression.region)]
    if isinstance(expression, Number):
        return []
    return _regions(expression.left) + _regions(expression.right)


def _evaluate_numeric(expression: Numeric, values: Mapping[RegionKey, float]) -> float:
    if isinstance(expression, RegionValue):
        return values[expression.condition, expression.region]
    if isinstance(expression, Number):
        return expression.value
    left, right = _evaluate_numeric(expression.left, values), _evaluate_numeric(expression.right, values)
    return left + right if expression.operator == "+" else left - right


def _evaluate_boolean(expression: Boolean, values: Mapping[RegionKey, float]) -> bool:
    if isinstance(expression, Logical):
        left, right = _evaluate_boolean(expression.left, values), _evaluate_boolean(expression.right, values)
        return (left and right) if expression.operator == "&" else (left or right)
    left, right = _evaluate_numeric(expression.left, values), _evaluate_numeric(expression.right, values)
    if expression.operator == "<":
        return left < right
    if expression.operator == ">":
        return left > right
    return abs(left - right) <= EQUALITY_ATOL + EQUALITY_RTOL * abs(right)
