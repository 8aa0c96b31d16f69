"""Weighted context-free grammars in stacklm's own text format.

A grammar file (``stacklm/grammars/data/<task>.cfg``) holds one rule per line::

    # comment; blank lines are ignored
    WEIGHT  LHS -> RHS1 RHS2 ...

P(LHS → RHS) = weight / Σ weights of the rules of LHS. The first rule's LHS is the start
symbol. A symbol is a nonterminal iff it is the LHS of some rule; every other symbol is a word
(terminal). A rule is either *lexical* (its RHS is one word) or *structural* (its RHS is one or
more nonterminals); a nonterminal whose rules are all lexical is a *preterminal* (a part of
speech), and no nonterminal mixes the two kinds. Every nonterminal must be reachable from the
start symbol, weights must be finite and ≥ 0 with a positive total per LHS, a rule may not be
listed twice, and the grammar must be non-recursive (so it derives finitely many preterminal
sequences, which ``stacklm.grammars.derivation`` enumerates). Errors name ``file:line``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from stacklm.errors import located

ARROW = "->"


@dataclass(frozen=True)
class Rule:
    lhs: str
    rhs: tuple[str, ...]
    weight: float
    line: int = 0  # 1-based line in the grammar file; 0 when built in code

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.lhs, self.rhs)


@dataclass(frozen=True)
class Grammar:
    rules: tuple[Rule, ...]
    path: str = "<grammar>"
    start: str = field(init=False)
    rules_of: Mapping[str, tuple[Rule, ...]] = field(init=False, repr=False, compare=False)
    preterminals: frozenset[str] = field(init=False, repr=False, compare=False)
    lexicon: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)  # word → its preterminals

    def __post_init__(self) -> None:
        if not self.rules:
            raise located(self.path, None, "the grammar has no rules")
        rules_of: dict[str, list[Rule]] = defaultdict(list)
        seen: dict[tuple[str, tuple[str, ...]], Rule] = {}
        for rule in self.rules:
            if rule.key in seen:
                raise located(self.path, rule.line, f"rule {_show(rule)} repeats line {seen[rule.key].line}; sum the weights instead")
            seen[rule.key] = rule
            rules_of[rule.lhs].append(rule)
        lexicon: dict[str, list[str]] = defaultdict(list)
        preterminals = set()
        for lhs, rules in rules_of.items():
            lexical = [len(rule.rhs) == 1 and rule.rhs[0] not in rules_of for rule in rules]
            if any(lexical) and not all(lexical):
                rule = rules[lexical.index(not lexical[0])]
                raise located(self.path, rule.line, f"{lhs} has both word rules and nonterminal rules")
            for rule in rules:
                if not all(lexical) and any(symbol not in rules_of for symbol in rule.rhs):
                    word = next(symbol for symbol in rule.rhs if symbol not in rules_of)
                    raise located(self.path, rule.line, f"{word!r} is not a nonterminal; words appear only alone on the right of a rule")
            if sum(rule.weight for rule in rules) <= 0:
                raise located(self.path, rules[0].line, f"the rules of {lhs} have total weight 0")
            if all(lexical):
                preterminals.add(lhs)
                for rule in rules:
                    lexicon[rule.rhs[0]].append(lhs)
        start = self.rules[0].lhs
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "rules_of", {lhs: tuple(rules) for lhs, rules in rules_of.items()})
        object.__setattr__(self, "preterminals", frozenset(preterminals))
        object.__setattr__(self, "lexicon", {word: tuple(tags) for word, tags in lexicon.items()})
        self._check_reachable_and_acyclic()

    def _check_reachable_and_acyclic(self) -> None:
        """Depth-first search from the start symbol; a back edge is a recursion."""
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done

        def visit(symbol: str, path: list[str]) -> None:
            state[symbol] = 1
            for rule in self.rules_of[symbol]:
                for child in rule.rhs:
                    if child not in self.rules_of:
                        continue
                    if state.get(child) == 1:
                        cycle = " -> ".join(path[path.index(child):] + [child]) if child in path else child
                        raise located(self.path, rule.line, f"the grammar is recursive ({cycle}); only non-recursive grammars are supported")
                    if child not in state:
                        visit(child, path + [child])
            state[symbol] = 2

        visit(self.start, [self.start])
        for lhs, rules in self.rules_of.items():
            if lhs not in state:
                raise located(self.path, rules[0].line, f"{lhs} is not reachable from the start symbol {self.start}")

    def probability(self, rule: Rule) -> float:
        """P(rule) = weight(rule) / Σ_{r: lhs(r) = lhs(rule)} weight(r)."""
        return rule.weight / sum(other.weight for other in self.rules_of[rule.lhs])

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(sorted(self.lexicon))

    def reweighted(self, weights: Mapping[tuple[str, tuple[str, ...]], float]) -> "Grammar":
        """The same rules with new weights (rules absent from ``weights`` get 0)."""
        return Grammar(tuple(Rule(rule.lhs, rule.rhs, float(weights.get(rule.key, 0.0)), rule.line) for rule in self.rules), self.path)


def _show(rule: Rule) -> str:
    return f"{rule.lhs} {ARROW} {' '.join(rule.rhs)}"


def parse_grammar(text: str, path: str | Path = "<grammar>") -> Grammar:
    """The grammar written in ``text`` (the format of the module docstring)."""
    rules = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) < 4 or fields[2] != ARROW:
            raise located(path, number, f"expected 'WEIGHT LHS {ARROW} RHS...', found {line.strip()!r}")
        try:
            weight = float(fields[0])
        except ValueError:
            raise located(path, number, f"weight {fields[0]!r} is not a number") from None
        if not math.isfinite(weight) or weight < 0:
            raise located(path, number, f"weight {fields[0]!r} must be finite and >= 0")
        if ARROW in fields[3:]:
            raise located(path, number, f"more than one {ARROW!r}")
        rules.append(Rule(fields[1], tuple(fields[3:]), weight, number))
    if not rules:
        raise located(path, None, "the grammar has no rules")
    return Grammar(tuple(rules), str(path))


def load_grammar(path: str | Path) -> Grammar:
    with open(path, encoding="utf-8") as file:
        return parse_grammar(file.read(), path)


def format_grammar(grammar: Grammar, header: Iterable[str] = ()) -> str:
    """The grammar as file text: ``header`` lines as comments, then one rule per line, a blank
    line between LHS groups (rules in their original order; weights as written by ``repr``)."""
    lines = [f"# {line}".rstrip() for line in header]
    previous = None
    for rule in grammar.rules:
        if previous is not None and rule.lhs != previous:
            lines.append("")
        lines.append(f"{_format_weight(rule.weight)}\t{_show(rule)}")
        previous = rule.lhs
    return "\n".join(lines) + "\n"


def _format_weight(weight: float) -> str:
    return str(int(weight)) if weight == int(weight) else repr(weight)
