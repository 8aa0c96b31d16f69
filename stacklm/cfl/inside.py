"""The inside algorithm over a semiring, for PCFGs with ε-rules and unary rules handled exactly.

The grammar is compiled into a *circuit* of chart items, each covering a span w_{i+1} … w_j
(0 ≤ i ≤ j ≤ n) of the input:

- ε: the empty string,                I(ε, i, j)   = 1̄ if j = i, else 0̄;
- a terminal a,                       I(a, i, j)   = τ(a, i+1) if j = i + 1, else 0̄;
- a concatenation C = A B,            I(C, i, j)   = ⊕_{k=i}^{j} I(A, i, k) ⊗ I(B, k, j);
- a nonterminal X,                    I(X, i, j)   = ⊕_{X → α} p(X → α) ⊗ I(α, i, j).

A right-hand side α = Y₁ … Y_m (m ≥ 2) becomes binary concatenations: a terminal at
either end is split off first (a Y₂…Y_m, then Y₁…Y_{m−1} b), and what remains is
left-nested, [Y₁ Y₂], [[Y₁ Y₂] Y₃], …. Equal parts share one item, so ( Q S Q ) and
[ Q S Q ] share [Q S Q], whose splits cost O(n) each, while a terminal's costs O(1). Every parse of w_{i+1..j} from X
fixes the span of each of its nodes (an empty span sits where its neighbours put it), so the
recurrence counts each parse exactly once, and I(S, 0, n) = p_G(w) in the LOG semiring (as
ln p_G(w)), the best parse's probability in MAX_PLUS, and p_G(w) in REAL.

τ(a, t) is the weight of terminal a at position t: 1̄ for a = w_t and 0̄ otherwise scores the
string w. The *wildcard* τ ≡ 1̄ sums over every string instead, which gives the length table

    β(X, ℓ) = Σ_{|w| = ℓ} P(X ⇒* w) = I_wildcard(X, 0, ℓ),

from the same code. Items are computed width by width (j − i = 0, 1, …, n). Within one width,
X depends on the items of its right-hand sides, and C = A B on B when A derives ε and on A
when B does; :func:`compile_grammar` orders the items along these dependencies and rejects a
grammar in which they form a cycle (such as X → X, or X → Y X with Y ⇒* ε), whose inside
weights would need a fixed point rather than a finite recurrence.

Cost: O(|C| · B · n³) semiring operations for B strings of length n and |C| concatenations.
Two savings skip only terms that are 0̄ or unused: the sum over k is restricted by the width
bounds of A and B (a child of width exactly 1, such as a terminal, leaves one term, O(B · n²)),
and items needed only at spans that start at 0 (the start symbol's left spine) are computed
only there, O(B · n²). The chart holds |items| · B · (n+1)² numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from stacklm.cfl.grammar import Symbol, WeightedGrammar
from stacklm.errors import StacklmError
from stacklm.semiring import LOG, Semiring


@dataclass(frozen=True)
class Empty:
    """The item of ε (right-hand side of an ε-rule)."""


@dataclass(frozen=True)
class Terminal:
    symbol: int


@dataclass(frozen=True)
class Concatenation:
    left: int  # item index of A in C = A B
    right: int  # item index of B


@dataclass(frozen=True)
class Alternatives:
    """A nonterminal X: pairs (item index of α, p(X → α)), one per rule X → α."""

    rules: tuple[tuple[int, float], ...]


Item = Empty | Terminal | Concatenation | Alternatives


@dataclass(frozen=True)
class Circuit:
    """The chart items of a grammar, and an order in which one width can be filled."""

    items: tuple[Item, ...]
    labels: tuple[str, ...]  # readable name of each item: "S", "3" (terminal 3), "ε", "[0 S]"
    index: dict[Symbol, int]  # item of each terminal and nonterminal
    nullable: frozenset[int]  # items that derive ε
    min_width: tuple[int, ...]  # the shortest string each item derives
    max_width: tuple[float, ...]  # the longest (math.inf when unbounded)
    order: tuple[int, ...]  # the Concatenation and Alternatives items, dependencies first
    anchored: frozenset[int]  # items needed only at spans that start at 0
    start: int  # item of the start symbol
    num_terminals: int


def compile_grammar(grammar: WeightedGrammar) -> Circuit:
    """The circuit of ``grammar``: one item per terminal, nonterminal and right-hand-side prefix."""
    items: list[Item] = [Empty()] + [Terminal(a) for a in range(grammar.num_terminals)]
    labels = ["ε"] + [str(a) for a in range(grammar.num_terminals)]
    index: dict[Symbol, int] = {a: a + 1 for a in range(grammar.num_terminals)}
    for name in grammar.nonterminals:
        index[name] = len(items)
        items.append(Alternatives(()))
        labels.append(name)
    parts: dict[tuple[Symbol, ...], int] = {}

    def item_of(rhs: tuple[Symbol, ...]) -> int:
        if not rhs:
            return 0
        if len(rhs) == 1:
            return index[rhs[0]]
        if rhs not in parts:
            if isinstance(rhs[0], int):  # a Y₂ … Y_m
                left, right = index[rhs[0]], item_of(rhs[1:])
            else:  # [Y₁ … Y_{m−1}] Y_m: left-nested, and a trailing terminal comes off first
                left, right = item_of(rhs[:-1]), index[rhs[-1]]
            parts[rhs] = len(items)
            items.append(Concatenation(left, right))
            labels.append("[" + " ".join(str(symbol) for symbol in rhs) + "]")
        return parts[rhs]

    for name in grammar.nonterminals:
        items[index[name]] = Alternatives(tuple((item_of(rule.rhs), rule.probability) for rule in grammar.rules_of(name)))
    nullable = _nullable_items(items)
    order = _same_width_order(items, labels, nullable)
    min_width, max_width = _width_bounds(items)
    anchored = _anchored_items(items)
    return Circuit(tuple(items), tuple(labels), index, nullable, min_width, max_width, order, anchored, index[grammar.start], grammar.num_terminals)


def _nullable_items(items: list[Item]) -> frozenset[int]:
    """The least set closed under: ε; C = A B with A and B nullable; X with a nullable α."""
    nullable = {0}
    changed = True
    while changed:
        changed = False
        for position, item in enumerate(items):
            if position in nullable:
                continue
            if (isinstance(item, Concatenation) and item.left in nullable and item.right in nullable) or (
                isinstance(item, Alternatives) and any(body in nullable for body, _ in item.rules)
            ):
                nullable.add(position)
                changed = True
    return frozenset(nullable)


def _children(item: Item) -> tuple[int, ...]:
    if isinstance(item, Alternatives):
        return tuple(body for body, _ in item.rules)
    if isinstance(item, Concatenation):
        return (item.left, item.right)
    return ()


def _width_bounds(items: list[Item]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The least and greatest width of each item's strings; an item that reaches a cycle is unbounded.

    Widths: ε 0, a terminal 1, A B the sum, X the min (max) over its right-hand sides. Every
    cycle among items lengthens the string (same-width cycles are rejected before), so an item
    derives arbitrarily long strings exactly when it reaches a cycle (unproductive items aside,
    whose weights are 0̄ at every width anyway).
    """
    minimum: list[float] = [0.0] + [math.inf] * (len(items) - 1)
    changed = True
    while changed:
        changed = False
        for position, item in enumerate(items):
            if isinstance(item, Terminal):
                bound = 1.0
            elif isinstance(item, Concatenation):
                bound = minimum[item.left] + minimum[item.right]
            elif isinstance(item, Alternatives):
                bound = min(minimum[body] for body, _ in item.rules)
            else:
                bound = 0.0
            if bound < minimum[position]:
                minimum[position], changed = bound, True
    maximum: dict[int, float] = {}
    visiting: set[int] = set()

    def longest(position: int) -> float:
        if position in visiting:
            return math.inf  # a cycle
        if position not in maximum:
            visiting.add(position)
            item = items[position]
            children = [longest(child) for child in _children(item)]
            visiting.discard(position)
            if isinstance(item, Terminal):
                maximum[position] = 1.0
            elif isinstance(item, Concatenation):
                maximum[position] = children[0] + children[1]
            else:
                maximum[position] = max(children, default=0.0)
        return maximum[position]

    return tuple(int(w) if math.isfinite(w) else 0 for w in minimum), tuple(longest(p) for p in range(len(items)))


def _anchored_items(items: list[Item]) -> frozenset[int]:
    """The largest set of computed items whose every use is as the left part, or a right-hand side, of a member.

    Such an item only ever enters I(S, 0, n) through spans that start at 0: the start symbol
    when no right-hand side uses it, then the left spine of its rules (for hardest CFL,
    S′ → R $ Q S L ; gives S′, [R $], [R $ Q], … [R $ Q S L ;]).
    """
    uses: dict[int, list[tuple[int, bool]]] = {position: [] for position in range(len(items))}  # (parent, as left part or body)
    for parent, item in enumerate(items):
        if isinstance(item, Concatenation):
            uses[item.left].append((parent, True))
            uses[item.right].append((parent, False))
        elif isinstance(item, Alternatives):
            for body, _ in item.rules:
                uses[body].append((parent, True))
    anchored = {position for position, item in enumerate(items) if isinstance(item, (Concatenation, Alternatives))}
    changed = True
    while changed:
        changed = False
        for position in list(anchored):
            if not all(parent in anchored and leftmost for parent, leftmost in uses[position]):
                anchored.discard(position)
                changed = True
    return frozenset(anchored)


def _same_width_dependencies(item: Item, nullable: frozenset[int]) -> tuple[int, ...]:
    """Items whose value at the same span enters this item's value at that span."""
    if isinstance(item, Alternatives):
        return tuple(body for body, _ in item.rules)
    if isinstance(item, Concatenation):
        empty_left_part = (item.right,) if item.left in nullable else ()  # k = 0: I(A, i, i) ⊗ I(B, i, j)
        empty_right_part = (item.left,) if item.right in nullable else ()  # k = w: I(A, i, j) ⊗ I(B, j, j)
        return empty_left_part + empty_right_part
    return ()


def _same_width_order(items: list[Item], labels: list[str], nullable: frozenset[int]) -> tuple[int, ...]:
    """A topological order of the computed items under the same-width dependencies."""
    order: list[int] = []
    state: dict[int, str] = {}  # "open" while on the depth-first path, "done" after

    def visit(position: int, path: list[int]) -> None:
        if state.get(position) == "done":
            return
        if state.get(position) == "open":
            cycle = path[path.index(position):] + [position]
            raise StacklmError(
                "the grammar has a cycle of unary rules through ε-deriving symbols, "
                + " -> ".join(labels[p] for p in cycle)
                + "; its inside weights are not a finite recurrence"
            )
        state[position] = "open"
        for dependency in _same_width_dependencies(items[position], nullable):
            visit(dependency, path + [position])
        state[position] = "done"
        if isinstance(items[position], (Concatenation, Alternatives)):
            order.append(position)

    for position in range(len(items)):
        visit(position, [])
    return tuple(order)


def inside_chart(circuit: Circuit, terminal_weights: Tensor, semiring: type[Semiring] = LOG) -> Tensor:
    """I(item, i, j) for every item and span, filled width by width.

    ``terminal_weights``: τ, shape (B, n, K), in the semiring's representation.
    Returns the chart, shape (items, B, n+1, n+1), indexed [item, b, i, j − i]; entries with
    i + (j − i) > n are 0̄, and so are the entries with i > 0 of anchored items, which no span
    of I(S, 0, n) needs and which are left uncomputed. The chart is written in place and is not
    meant for autograd.
    """
    batch_size, length, num_terminals = terminal_weights.shape
    if num_terminals != circuit.num_terminals:
        raise StacklmError(f"terminal weights have {num_terminals} terminals; the grammar has {circuit.num_terminals}")
    chart = semiring.zeros(len(circuit.items), batch_size, length + 1, length + 1, dtype=terminal_weights.dtype, device=terminal_weights.device)
    chart[0, :, :, 0] = semiring.one  # ε spans every empty span
    if length > 0:
        for position, item in enumerate(circuit.items):
            if isinstance(item, Terminal):
                chart[position, :, :length, 1] = terminal_weights[:, :, item.symbol]
    probabilities = {
        position: semiring.from_real(torch.tensor([p for _, p in item.rules], dtype=chart.dtype, device=chart.device))
        for position, item in enumerate(circuit.items)
        if isinstance(item, Alternatives)
    }
    for width in range(length + 1):
        for position in circuit.order:
            item = circuit.items[position]
            starts = 1 if position in circuit.anchored else length - width + 1  # spans (i, i + width) for i < starts
            if isinstance(item, Concatenation):
                value = _concatenation(chart, item, width, starts, circuit, semiring)
            else:
                bodies = torch.stack([chart[body, :, :starts, width] for body, _ in item.rules], dim=-1)  # (B, starts, rules)
                value = semiring.sum(semiring.times(bodies, probabilities[position]), dim=-1)
            chart[position, :, :starts, width] = value
    return chart


def _concatenation(chart: Tensor, item: Concatenation, width: int, starts: int, circuit: Circuit, semiring: type[Semiring]) -> Tensor:
    """I(C, i, i+w) = ⊕_k I(A, i, i+k) ⊗ I(B, i+k, i+w) for i = 0 … n−w; shape (B, starts).

    Only the split points k with width bounds min_A ≤ k ≤ max_A and min_B ≤ w − k ≤ max_B are
    summed; the other terms are 0̄. A terminal child thus leaves a single term.
    """
    lowest = int(max(circuit.min_width[item.left], width - circuit.max_width[item.right], 0))
    highest = int(min(width - circuit.min_width[item.right], circuit.max_width[item.left]))
    if lowest > highest:
        return semiring.zeros(chart.shape[1], starts, dtype=chart.dtype, device=chart.device)
    left, right = chart[item.left], chart[item.right]  # (B, n+1, n+1), [b, i, width]
    if lowest == highest:
        return semiring.times(left[:, :starts, lowest], right[:, lowest : lowest + starts, width - lowest])
    # right_split[b, i, k − lowest] = I(B, i+k, i+w) = right[b, i+k, w−k]: an anti-diagonal, read through strides
    row_stride = right.stride(1)
    right_split = right.as_strided(
        size=(right.shape[0], starts, highest - lowest + 1),
        stride=(right.stride(0), row_stride, row_stride - 1),
        storage_offset=right.storage_offset() + lowest * (row_stride - 1) + width,
    )
    return semiring.sum(semiring.times(left[:, :starts, lowest : highest + 1], right_split), dim=-1)


def one_hot_weights(strings: list[list[int]], num_terminals: int, semiring: type[Semiring] = LOG) -> Tensor:
    """τ(a, t) = 1̄ if w_t = a else 0̄, for B strings of one length n; shape (B, n, K)."""
    lengths = {len(string) for string in strings}
    if len(lengths) != 1:
        raise StacklmError(f"strings scored together must share one length; found lengths {sorted(lengths)}")
    symbols = torch.tensor(strings, dtype=torch.long).reshape(len(strings), lengths.pop())
    if symbols.numel() and not (0 <= int(symbols.min()) and int(symbols.max()) < num_terminals):
        raise StacklmError(f"a string holds a symbol outside the terminals 0..{num_terminals - 1}")
    real = torch.nn.functional.one_hot(symbols, num_terminals).to(torch.float64)
    return semiring.from_real(real)


def string_weights(circuit: Circuit, strings: list[list[int]], semiring: type[Semiring] = LOG, max_chart_bytes: int = 2**27) -> Tensor:
    """I(S, 0, n) for each of B strings of one length n, shape (B,): ln p_G(w) in LOG.

    The strings are scored in chunks whose chart fits in ``max_chart_bytes``.
    """
    if not strings:
        return torch.empty(0, dtype=torch.float64)
    weights = one_hot_weights(strings, circuit.num_terminals, semiring)
    length = weights.shape[1]
    bytes_per_string = len(circuit.items) * (length + 1) ** 2 * weights.element_size()
    chunk = max(1, max_chart_bytes // bytes_per_string)
    return torch.cat([
        inside_chart(circuit, weights[first : first + chunk], semiring)[circuit.start, :, 0, length]
        for first in range(0, len(strings), chunk)
    ])


def length_table(circuit: Circuit, max_length: int, semiring: type[Semiring] = LOG) -> Tensor:
    """β(item, ℓ) for every item and ℓ = 0 … max_length, shape (items, max_length+1).

    In LOG this is ln Σ_{|w|=ℓ} P(X ⇒* w); in MAX_PLUS the best derivation of any length-ℓ string.
    """
    wildcard = semiring.ones(1, max_length, circuit.num_terminals, dtype=torch.float64)
    return inside_chart(circuit, wildcard, semiring)[:, 0, 0, :]
