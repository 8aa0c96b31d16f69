"""Probabilistic context-free grammars G = (N, Σ, R, S, p) for the CFL tasks.

A rule X → α (α ∈ (N ∪ Σ)*) has probability p(X → α), and the rules of each left-hand side
sum to one. A derivation's probability is the product of its rules' probabilities, and the
string probability sums over all derivations (parses):

    p_G(w) = Σ_{d : S ⇒* w} Π_{(X → α) ∈ d} p(X → α).

Terminals are the integers 0 … K−1 (K = ``num_terminals``); nonterminals are names (str).
The grammars of [RNS-RNN App. 8] are built from unnormalised weights, as the authors' code
does, so :meth:`WeightedGrammar.from_weights` renormalises the rules of each left-hand side.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from stacklm.errors import StacklmError

Symbol = str | int  # a nonterminal name, or a terminal 0 … K−1


def stop(mean: float) -> float:
    """stop(m) = 1/(m+1): the stopping probability of a geometric count with mean m."""
    return 1.0 / (mean + 1.0)


def cont(mean: float) -> float:
    """cont(m) = m/(m+1) = 1 − stop(m): the probability of one more repetition."""
    return mean / (mean + 1.0)


@dataclass(frozen=True)
class WeightedRule:
    """X → α with probability p(X → α); an empty ``rhs`` is X → ε."""

    lhs: str
    rhs: tuple[Symbol, ...]
    probability: float

    def __str__(self) -> str:
        body = " ".join(str(symbol) for symbol in self.rhs) or "ε"
        return f"{self.lhs} -> {body}  {self.probability:.6g}"


@dataclass(frozen=True)
class WeightedGrammar:
    """A PCFG: ``start`` symbol, ``rules`` (probabilities sum to 1 per left-hand side), K terminals."""

    start: str
    rules: tuple[WeightedRule, ...]
    num_terminals: int

    def __post_init__(self) -> None:
        nonterminals = self.nonterminals
        if self.start not in nonterminals:
            raise StacklmError(f"start symbol {self.start!r} has no rules")
        totals: dict[str, float] = defaultdict(float)
        for rule in self.rules:
            if not rule.probability > 0.0:
                raise StacklmError(f"rule {rule} has a probability that is not positive")
            totals[rule.lhs] += rule.probability
            for symbol in rule.rhs:
                if isinstance(symbol, int) and not 0 <= symbol < self.num_terminals:
                    raise StacklmError(f"rule {rule} uses terminal {symbol}, outside 0..{self.num_terminals - 1}")
                if isinstance(symbol, str) and symbol not in nonterminals:
                    raise StacklmError(f"rule {rule} uses nonterminal {symbol!r}, which has no rules")
        for lhs, total in totals.items():
            if not math.isclose(total, 1.0, rel_tol=0.0, abs_tol=1e-12):
                raise StacklmError(f"the rules of {lhs!r} sum to {total!r}, not 1")

    @classmethod
    def from_weights(cls, start: str, weighted_rules: Iterable[tuple[str, tuple[Symbol, ...], float]], num_terminals: int) -> WeightedGrammar:
        """The grammar whose rules X → α have p(X → α) = weight(X → α) / Σ_β weight(X → β).

        Rules of weight 0 are left out (they never take part in a derivation).
        """
        weighted = [(lhs, tuple(rhs), float(weight)) for lhs, rhs, weight in weighted_rules]
        for lhs, rhs, weight in weighted:
            if weight < 0.0 or not math.isfinite(weight):
                raise StacklmError(f"rule {lhs} -> {rhs} has weight {weight!r}; weights must be finite and nonnegative")
        totals: dict[str, float] = defaultdict(float)
        for lhs, _, weight in weighted:
            totals[lhs] += weight
        rules = tuple(WeightedRule(lhs, rhs, weight / totals[lhs]) for lhs, rhs, weight in weighted if weight > 0.0)
        return cls(start, rules, num_terminals)

    @property
    def nonterminals(self) -> tuple[str, ...]:
        """Left-hand sides in order of first appearance (the start symbol's rules come first by convention)."""
        return tuple(dict.fromkeys(rule.lhs for rule in self.rules))

    def rules_of(self, lhs: str) -> tuple[WeightedRule, ...]:
        return tuple(rule for rule in self.rules if rule.lhs == lhs)

    def __str__(self) -> str:
        return "\n".join(str(rule) for rule in self.rules)
