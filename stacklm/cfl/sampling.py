"""Exact sampling from a PCFG conditioned on the string length, p_G(w | |w| = ℓ)
(``docs/design/cfl-and-ptb.md#length-conditioned-sampling``).

With the length table β(X, ℓ) = Σ_{|w|=ℓ} P(X ⇒* w) of :func:`stacklm.cfl.inside.length_table`
(over every item of the circuit), a derivation of length ℓ is expanded top-down:

- a nonterminal X at length ℓ takes the rule X → α with probability p(X → α) · β(α, ℓ) / β(X, ℓ);
- a concatenation C = A B at length ℓ gives B the length k with probability
  β(A, ℓ − k) · β(B, k) / β(C, ℓ), and A the rest;
- a terminal emits itself (its length is 1), ε emits nothing.

The product of these choices is P(d) / β(S, ℓ) for each derivation d of a length-ℓ string, so
summing over the derivations of w gives exactly p_G(w) / β(S, ℓ) = p_G(w | |w| = ℓ).
A length is *valid* when β(S, ℓ) > 0.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from stacklm.cfl.grammar import WeightedGrammar
from stacklm.cfl.inside import Alternatives, Circuit, Concatenation, Empty, Terminal, compile_grammar, length_table
from stacklm.errors import StacklmError
from stacklm.semiring import LOG


@dataclass(frozen=True)
class Choice:
    """The options of one expansion: what each option expands to, and cumulative weights."""

    expansions: tuple[tuple[tuple[int, int], ...], ...]  # per option: (item, length) children, left to right
    cumulative: tuple[float, ...]  # running sums of the options' weights, exp(log weight − max)

    def draw(self, generator: random.Random) -> int:
        """Option o with probability (cumulative[o] − cumulative[o−1]) / cumulative[−1]."""
        total = self.cumulative[-1]
        option = bisect.bisect_right(self.cumulative, generator.random() * total)
        # random() < 1, but its product with the total may round up to the total itself
        return option if option < len(self.cumulative) else bisect.bisect_left(self.cumulative, total)


@dataclass(frozen=True)
class LengthSampler:
    """Samples w ~ p_G(w | |w| = ℓ) for ℓ ≤ ``max_length``, and gives ln β(S, ℓ)."""

    circuit: Circuit
    log_beta: tuple[tuple[float, ...], ...]  # log_beta[item][ℓ] = ln β(item, ℓ)
    max_length: int
    choices: dict[tuple[int, int], Choice] = field(default_factory=dict, compare=False, repr=False)  # memo

    @classmethod
    def build(cls, grammar: WeightedGrammar, max_length: int) -> LengthSampler:
        circuit = compile_grammar(grammar)
        table = length_table(circuit, max_length, LOG)
        return cls(circuit, tuple(tuple(row) for row in table.tolist()), max_length)

    def log_total(self, length: int) -> float:
        """ln β(S, ℓ), the log probability that the grammar generates a string of length ℓ."""
        self._check_length(length)
        return self.log_beta[self.circuit.start][length]

    def valid_lengths(self, low: int, high: int) -> tuple[int, ...]:
        """The lengths ℓ ∈ [low, high] with β(S, ℓ) > 0."""
        self._check_length(low)
        self._check_length(high)
        return tuple(length for length in range(low, high + 1) if self.log_beta[self.circuit.start][length] > -math.inf)

    def sample(self, length: int, generator: random.Random) -> list[int]:
        """One string w of length ℓ drawn from p_G(w | |w| = ℓ), left to right."""
        if self.log_total(length) == -math.inf:
            raise StacklmError(f"the grammar generates no string of length {length}")
        string: list[int] = []
        pending = [(self.circuit.start, length)]  # a stack; its top is the leftmost unexpanded part
        while pending:
            position, span = pending.pop()
            item = self.circuit.items[position]
            if isinstance(item, Terminal):
                string.append(item.symbol)
            elif not isinstance(item, Empty):
                choice = self._choice(position, span)
                pending.extend(reversed(choice.expansions[choice.draw(generator)]))
        return string

    def _choice(self, position: int, length: int) -> Choice:
        key = (position, length)
        if key not in self.choices:
            self.choices[key] = self._options(position, length)
        return self.choices[key]

    def _options(self, position: int, length: int) -> Choice:
        """The weighted options of item ``position`` at ``length`` (the top-down step above)."""
        item = self.circuit.items[position]
        beta = self.log_beta
        if isinstance(item, Alternatives):
            expansions = tuple(((body, length),) for body, _ in item.rules)
            log_weights = [math.log(p) + beta[body][length] for body, p in item.rules]
        elif isinstance(item, Concatenation):
            expansions = tuple(((item.left, length - k), (item.right, k)) for k in range(length + 1))
            log_weights = [beta[item.left][length - k] + beta[item.right][k] for k in range(length + 1)]
        else:
            raise StacklmError(f"item {self.circuit.labels[position]} has no options")
        top = max(log_weights)
        cumulative: list[float] = []
        total = 0.0
        for log_weight in log_weights:
            total += math.exp(log_weight - top)
            cumulative.append(total)
        return Choice(expansions, tuple(cumulative))

    def _check_length(self, length: int) -> None:
        if not 0 <= length <= self.max_length:
            raise StacklmError(f"length {length} is outside the sampler's table, 0..{self.max_length}")
