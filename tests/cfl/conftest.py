"""A brute-force oracle for the CFL tests: every derivation of every string of one length."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

import pytest

from stacklm.cfl.grammar import Symbol, WeightedGrammar


def enumerate_derivations(grammar: WeightedGrammar, length: int) -> dict[tuple[int, ...], float]:
    """p_G(w) for every w with |w| = ``length``, by expanding all leftmost derivations.

    Independent of the inside algorithm: sentential forms are expanded one rule at a time, and
    a form is dropped once its terminals plus the shortest yields of its nonterminals exceed
    ``length`` (the grammars have no unary or ε cycles, so this search is finite).
    """
    shortest: dict[Symbol, float] = {a: 1 for a in range(grammar.num_terminals)}
    shortest.update({name: math.inf for name in grammar.nonterminals})
    changed = True
    while changed:
        changed = False
        for rule in grammar.rules:
            bound = sum(shortest[symbol] for symbol in rule.rhs)
            if bound < shortest[rule.lhs]:
                shortest[rule.lhs], changed = bound, True
    distribution: dict[tuple[int, ...], float] = defaultdict(float)
    forms: list[tuple[tuple[int, ...], tuple[Symbol, ...], float]] = [((), (grammar.start,), 1.0)]
    while forms:
        emitted, pending, probability = forms.pop()
        if len(emitted) + sum(shortest[symbol] for symbol in pending) > length:
            continue
        if not pending:
            if len(emitted) == length:
                distribution[emitted] += probability
            continue
        assert len(pending) < 10 * length + 20, "runaway sentential form"
        first, rest = pending[0], pending[1:]
        if isinstance(first, int):
            forms.append((emitted + (first,), rest, probability))
        else:
            forms.extend((emitted, rule.rhs + rest, probability * rule.probability) for rule in grammar.rules_of(first))
    return dict(distribution)


@pytest.fixture(scope="session")
def derivations() -> Callable[[WeightedGrammar, int], dict[tuple[int, ...], float]]:
    return enumerate_derivations
