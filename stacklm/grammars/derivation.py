"""Derivations of a non-recursive weighted CFG: enumeration, seeded sampling, exhaustive parsing.

A *skeleton* is a derivation from the start symbol down to preterminals, with the words left
open. Because the grammar is non-recursive, there are finitely many skeletons k, and

    P(tree) = P(k) · Π_i P(p_i → w_i),    P(k) = Π_{structural rules r used in k} P(r),

where p_1 … p_n are the preterminals of k and w_1 … w_n the words. Hence

- sampling = draw k from the table of P(k), then each word w_i from P(p_i → ·): the same
  distribution as top-down sampling, with n + 1 uniform draws per sentence;
- exhaustive parsing = walk a trie of the skeletons' preterminal sequences, following at
  token i every preterminal that can emit w_i; every skeleton reached at the end is a parse.

Both keep the tree: a ``Parse`` is a skeleton plus its words, and ``Parse.tree()`` builds the
labelled tree.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from stacklm.grammars.grammar import Grammar, Rule


@dataclass(frozen=True)
class Node:
    label: str
    start: int  # span [start, end) over the sentence's tokens
    end: int
    children: tuple[int, ...]  # indices into Skeleton.nodes; () for a preterminal


@dataclass(frozen=True, eq=False)
class Skeleton:
    """One derivation down to preterminals. ``nodes`` are in pre-order; node 0 is the root."""

    index: int  # position in the grammar's enumeration; identifies the skeleton
    nodes: tuple[Node, ...]
    preterminals: tuple[str, ...]
    rules: tuple[Rule, ...]  # structural rules used, in pre-order
    probability: float

    def children(self, node: int) -> tuple[int, ...]:
        return self.nodes[node].children

    def child_labels(self, node: int) -> tuple[str, ...]:
        return tuple(self.nodes[child].label for child in self.nodes[node].children)


@dataclass(frozen=True)
class Tree:
    label: str
    children: tuple["Tree | str", ...]

    def leaves(self) -> tuple[str, ...]:
        return tuple(itertools.chain.from_iterable((child,) if isinstance(child, str) else child.leaves() for child in self.children))

    def __str__(self) -> str:
        return f"({self.label} {' '.join(str(child) for child in self.children)})"


@dataclass(frozen=True)
class Parse:
    skeleton: Skeleton
    tokens: tuple[str, ...]

    @property
    def preterminals(self) -> tuple[str, ...]:
        return self.skeleton.preterminals

    def tree(self, node: int = 0) -> Tree:
        spec = self.skeleton.nodes[node]
        if not spec.children:
            return Tree(spec.label, (self.tokens[spec.start],))
        return Tree(spec.label, tuple(self.tree(child) for child in spec.children))

    def span(self, node: int) -> tuple[str, ...]:
        spec = self.skeleton.nodes[node]
        return self.tokens[spec.start : spec.end]

    def rule_keys(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """Every rule used, structural then lexical, as (lhs, rhs) keys."""
        for rule in self.skeleton.rules:
            yield rule.key
        for tag, word in zip(self.skeleton.preterminals, self.tokens):
            yield (tag, (word,))


@dataclass(frozen=True)
class _Partial:
    nodes: tuple[Node, ...]
    preterminals: tuple[str, ...]
    rules: tuple[Rule, ...]
    probability: float


def _expand(grammar: Grammar, symbol: str, memo: dict[str, list[_Partial]]) -> list[_Partial]:
    """All derivations of ``symbol`` down to preterminals, with spans relative to 0 and node
    indices relative to 0 (the symbol's own node)."""
    if symbol in memo:
        return memo[symbol]
    if symbol in grammar.preterminals:
        result = [_Partial((Node(symbol, 0, 1, ()),), (symbol,), (), 1.0)]
    else:
        result = []
        for rule in grammar.rules_of[symbol]:
            probability = grammar.probability(rule)
            for parts in itertools.product(*(_expand(grammar, child, memo) for child in rule.rhs)):
                nodes: list[Node] = [Node(symbol, 0, 0, ())]
                children, preterminals, rules, product = [], [], [rule], probability
                for part in parts:
                    offset_node, offset_token = len(nodes), len(preterminals)
                    children.append(offset_node)
                    nodes.extend(_shift(node, offset_node, offset_token) for node in part.nodes)
                    preterminals.extend(part.preterminals)
                    rules.extend(part.rules)
                    product *= part.probability
                nodes[0] = Node(symbol, 0, len(preterminals), tuple(children))
                result.append(_Partial(tuple(nodes), tuple(preterminals), tuple(rules), product))
    memo[symbol] = result
    return result


def _shift(node: Node, offset_node: int, offset_token: int) -> Node:
    return Node(node.label, node.start + offset_token, node.end + offset_token, tuple(child + offset_node for child in node.children))


@dataclass(frozen=True, eq=False)
class CompiledGrammar:
    """A grammar with its skeletons enumerated, ready to sample and parse."""

    grammar: Grammar
    skeletons: tuple[Skeleton, ...] = field(init=False)
    _cumulative: list[float] = field(init=False, repr=False)
    _lexical: dict[str, tuple[list[float], tuple[str, ...]]] = field(init=False, repr=False)
    _trie: dict = field(init=False, repr=False)

    def __post_init__(self) -> None:
        partials = _expand(self.grammar, self.grammar.start, {})
        skeletons = tuple(Skeleton(index, p.nodes, p.preterminals, p.rules, p.probability) for index, p in enumerate(partials))
        object.__setattr__(self, "skeletons", skeletons)
        object.__setattr__(self, "_cumulative", list(itertools.accumulate(skeleton.probability for skeleton in skeletons)))
        lexical = {}
        for tag in self.grammar.preterminals:
            rules = self.grammar.rules_of[tag]
            lexical[tag] = (list(itertools.accumulate(rule.weight for rule in rules)), tuple(rule.rhs[0] for rule in rules))
        object.__setattr__(self, "_lexical", lexical)
        trie: dict = {}
        for skeleton in skeletons:
            node = trie
            for tag in skeleton.preterminals:
                node = node.setdefault(tag, {})
            node.setdefault(None, []).append(skeleton)
        object.__setattr__(self, "_trie", trie)

    def sample(self, rng: random.Random) -> Parse:
        """One tree drawn from the grammar's distribution (see the module docstring)."""
        skeleton = self.skeletons[_draw(self._cumulative, rng)]
        words = []
        for tag in skeleton.preterminals:
            cumulative, choices = self._lexical[tag]
            words.append(choices[_draw(cumulative, rng)])
        return Parse(skeleton, tuple(words))

    def parse(self, tokens: Sequence[str]) -> tuple[Parse, ...]:
        """Every parse of ``tokens`` in skeleton order, () if none. Parsing ignores the weights:
        a parse through a rule of weight 0 is found, and has probability 0."""
        lexicon = self.grammar.lexicon
        states = [self._trie]
        for token in tokens:
            tags = lexicon.get(token, ())
            states = [state[tag] for state in states for tag in tags if tag in state]
            if not states:
                return ()
        tokens = tuple(tokens)
        found = sorted((skeleton for state in states for skeleton in state.get(None, ())), key=lambda skeleton: skeleton.index)
        return tuple(Parse(skeleton, tokens) for skeleton in found)

    def probability(self, parse: Parse) -> float:
        """P(tree) = P(skeleton) · Π_i P(p_i → w_i)."""
        product = parse.skeleton.probability
        for tag, word in zip(parse.preterminals, parse.tokens):
            cumulative, choices = self._lexical[tag]
            index = choices.index(word)
            product *= (cumulative[index] - (cumulative[index - 1] if index else 0.0)) / cumulative[-1]
        return product


def _draw(cumulative: list[float], rng: random.Random) -> int:
    """Index i with probability (c_i − c_{i−1}) / c_last, from one uniform draw."""
    return min(bisect.bisect_right(cumulative, rng.random() * cumulative[-1]), len(cumulative) - 1)
