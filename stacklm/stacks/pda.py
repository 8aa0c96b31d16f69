"""The weighted-PDA dynamic program behind the nondeterministic stacks (NS, RNS, dVPDA).

Written once over a semiring (LOG for the stacks, REAL for tests, MAX_PLUS for Viterbi
weights); ``nondeterministic.py`` and ``vector_nondeterministic.py`` add actions and readings.

Paper notation (RNS-RNN: DuSell & Chiang 2022, eqs. 2–5 and §5.1; dVPDA: DuSell & Cotterell 2025, §3.2 and eq. 6). A PDA
with states Q (q0 = 0) and stack symbols Γ (⊥ = 0) takes, at step t, transitions of weight
Δ⁺_t[q,x→r,y] (push y), Δ^R_t[q,x→r,y] (replace the top by y) and Δ⁻_t[q,x→r] (pop). For
−1 ≤ i < t, γ[i→t][q,x→r,y] is the weight of the ways to go from (i, q, x) to (t, r, y)
with one element, pushed at step i+1, above x all along:

    γ[i→t][q,x→r,y] = 𝟙[i = t−1] Δ⁺_t[q,x→r,y]                              (push)
                    + Σ_{s,z} γ[i→t−1][q,x→s,z] Δ^R_t[s,z→r,y]              (replace)
                    + Σ_{k=i+1}^{t−2} Σ_u γ[i→k][q,x→u,y] γ'_t[k][u,y,r]    (pop)
    γ'_t[k][u,y,r]  = Σ_{s,z} γ[k→t−1][u,y→s,z] Δ⁻_t[s,z→r]                 (factorised pop)
    α[t][r,y]       = Σ_{i=−1}^{t−1} Σ_{q,x} α[i][q,x] γ[i→t][q,x→r,y],   α[0] = α[−1] = 𝟙[q0, ⊥]

Row i = −1 is the bottom element: γ[−1→0] = 𝟙[q0,⊥→q0,⊥] (a fictitious push of ⊥) when the
bottom may be replaced (the dVPDA of DuSell & Cotterell 2025: runs "never fully empty the stack, replacing
the bottom does not count"); for the NS family of DuSell & Chiang 2022 it is zero, so i ≥ 0, the first
action is a push, and no configuration at t ≥ 1 has ⊥-from-time-0 on top.

Vectors without ζ. The dVPDA's reading needs η[t][r,y,:], the sum over runs ending at
(t, r, y) of weight × top vector. The reference keeps ζ[i→t] (γ with the top vector), an
O(n²·Q²S²·m) table. Here only its α-weighted rows are kept,

    η[i→t][r,y,:] = Σ_{q,x} α[i][q,x] ζ[i→t][q,x→r,y,:],      η[t] = Σ_i η[i→t],

and splitting the runs by their last transition gives the same three terms as γ:

    η[t−1→t][r,y,:] = (Σ_{q,x} α[t−1][q,x] Δ⁺_t[q,x→r,y]) v_t                  (push)
    η[i→t]          += Σ_{s,z} η[i→t−1][s,z,:] Δ^R_t[s,z→r,y]                  (replace keeps the vector)
    η[i→t]          += Σ_k Σ_u η[i→k][u,y,:] γ'_t[k][u,y,r]                    (pop exposes the vector
                                                                                 on top at k)

Without a window the pop never needs the rows apart, so they are summed into one: this is
the recursion η[t] = push + η[t−1] Δ^R + Σ_k η[k] γ'_t[k] of ``stack-performance.md`` §1,
O(n²·Q²S·m) in total. With a window the rows are kept (row i leaves when t − i > D).
Because the η rows obey the same terms as γ rows, they are stored as extra rows of the
γ columns, and one contraction serves both.

Window D (DuSell & Chiang 2022, §5.1): γ[i→t] = 0 when t − i > D, for every row i ≥ 0. Column t then
depends on rows t−D … t−1 and columns t−D+1 … t−1 only, so the state between chunks is the
last D − 1 columns (D + 1 for the dVPDA, whose bottom row reaches two split points further
back) and D values of α: O(D²) per sequence, and truncated BPTT runs arbitrarily long text in
chunks. The bottom row i = −1 of the dVPDA is exempt, like the glue rules of §5.1: a
run may return to the bottom at any time (the NS family has no such row), so D ≥ n is the
full stack for both.

Layout (N = Q·S, configuration (q, x) at index q·S + x). Column t is one tensor
(B, G·m + slots·N, N): first the η rows (G groups of m), then the γ rows, N per slot; entry
[row, (r, y)]. Without a window, slot s holds row i = s − 1 and column t has t + 1 slots
(G = 1); with a window, slot s < D holds the row i ≡ s (mod D) of the current frame
t−D … t−1, slot D the bottom row (dVPDA only), and a mask hides the rows a column does not
have (G = number of slots). The state also holds α of the
rows of the last column (B, slots, N), α[t] (B, N) and η[t] (B, m, N).

The sums of products are left to a ``Contraction``: ``ReferenceContraction`` materialises
every term in the semiring (the definition; REAL, LOG, MAX_PLUS), ``ShiftedLogContraction``
(LOG) turns each into a real matrix product shifted by log α and keeps each column, once
made, in real form: Ĝ = exp(γ − log α − ρ) with row maxima 1 for the products over the last
column, and, without a window, the shares α[i]γ[i→k]/α[k] ∈ [0, 1] in one dense buffer that
the pop reads as a view (``kernels/shifted.py``). The DP below is the same for both.

Cost per sequence, full stack: the pop contraction, Σ_t (t·N + m) × (t·Q) × Q per symbol,
≈ n³·Q³S²/3 multiply-adds (plus O(n²·N²) for the rest); memory kept for backward
O(n²·N²): the columns (log, Ĝ, shares, buffer) and O(t·N²) per step, never a step's O(t²)
operand. With a window: O(n·D²·Q³S²) time and O(n·D·N²) memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch
from torch import Tensor

from stacklm.semiring import LOG, Semiring, logsumexp
from stacklm.stacks.kernels.shifted import (
    pop_left,
    pop_output,
    pop_right,
    pop_shift,
    ShareBuffer,
    append_share,
    column_shares,
    prepare_column,
    prepared_log_matmul,
    prepared_log_pop,
    share_pop,
    shifted_log_matmul,
    stack_columns,
)


@dataclass(frozen=True)
class PDASizes:
    """The sizes and variant of one PDA."""

    num_states: int  # |Q|
    num_symbols: int  # |Γ|
    vector_size: int  # m; 0 for the NS family (no vectors)
    window: int | None  # D, or None for the full stack
    bottom_replaceable: bool  # the dVPDA's row i = −1; False for the NS family

    def __post_init__(self) -> None:
        if self.num_states < 1 or self.num_symbols < 1 or self.vector_size < 0:
            raise ValueError(f"PDA sizes must be positive, got {self}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")

    @property
    def num_configurations(self) -> int:
        return self.num_states * self.num_symbols

    @property
    def eta_groups(self) -> int:
        if self.vector_size == 0:
            return 0
        return 1 if self.window is None else self.slots(0)

    @property
    def eta_rows(self) -> int:
        return self.eta_groups * self.vector_size

    def slots(self, step: int) -> int:
        """Row slots of column ``step``: rows −1 … step−1, or D and the bottom's with a window."""
        if self.window is None:
            return step + 1
        return self.window + 1 if self.bottom_replaceable else self.window

    def slot(self, row: int) -> int:
        if self.window is None:
            return row + 1
        if row == -1 and self.bottom_replaceable:
            return self.window
        return row % self.window

    def bottom_rows(self) -> list[tuple[int, int]]:
        """The row ranges of a column that belong to the bottom row −1: its η group, its γ slot."""
        slot = self.slot(-1)
        ranges = [(slot * self.vector_size, (slot + 1) * self.vector_size)] if self.vector_size else []
        start = self.eta_rows + slot * self.num_configurations
        return ranges + [(start, start + self.num_configurations)]

    def slot_rows(self, step: int) -> list[int]:
        """The row i that each slot of column ``step`` holds (frame step−D … step−1, and −1)."""
        if self.window is None:
            return [slot - 1 for slot in range(step + 1)]
        first = step - self.window
        rows = [first + (slot - first) % self.window for slot in range(self.window)]
        return rows + [-1] if self.bottom_replaceable else rows


@dataclass(frozen=True)
class Transitions:
    """The transition weights of one step, in the semiring's representation."""

    push: Tensor  # (B, N, N): Δ⁺[q,x→r,y]
    replace: Tensor  # (B, N, N): Δ^R[q,x→r,y]
    pop: Tensor  # (B, N, Q): Δ⁻[s,z→r]
    pushed: Tensor | None  # (B, m): v_t, or None without vectors


Prepared = tuple[Tensor, ...]  # a column as its engine keeps it (batch at dim 0)


@dataclass(frozen=True)
class PDATables:
    """The part of γ, α and η that later steps need, after ``steps`` steps."""

    steps: int  # t
    first_column: int  # index k of columns[0]
    columns: tuple[Prepared, ...]  # columns k = first_column … t, each (B, G·m + slots·N, N) as prepared
    alpha_rows: Tensor  # (B, slots(t), N): α[i] of the row i of each slot of column t
    alpha: Tensor  # (B, N): α[t]
    eta: Tensor | None  # (B, m, N): η[t]
    shares: ShareBuffer | None = None  # the fast engine's dense copy of the columns (full stack)

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> PDATables:
        return PDATables(
            steps=self.steps,
            first_column=self.first_column,
            columns=tuple(tuple(function(tensor) for tensor in column) for column in self.columns),
            alpha_rows=function(self.alpha_rows),
            alpha=function(self.alpha),
            eta=None if self.eta is None else function(self.eta),
            shares=None if self.shares is None else self.shares.transform(function),
        )


class Contraction(Protocol):
    """How the DP's sums of products are computed; the DP itself never changes.

    A column is handed to ``prepare`` once, with α of its step (the shift of every later
    product over its configurations); ``prepared_matmul`` and ``pop`` read prepared columns.
    """

    semiring: type[Semiring]

    def prepare(
        self,
        column: Tensor,
        alpha: Tensor,
        row_weights: Tensor,
        shares: ShareBuffer | None,
        index: int | None,
        num_states: int,
        expected_columns: int | None = None,
    ) -> tuple[Prepared, ShareBuffer | None]:
        """Column (B, rows, N), α (B, N) of its step and α of its rows (B, rows) -> the form later
        products read; ``index`` is the column's k when every column is kept (no window), and
        ``expected_columns`` how many columns the sequence will have, when known."""

    def matmul(self, left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
        """⊕_c left[..., i, c] ⊗ right[..., c, j]; ``shift`` (..., C) is α of each c."""

    def prepared_matmul(self, column: Prepared, right: Tensor, shift: Tensor) -> Tensor:
        """``matmul`` with a prepared column (B, rows, N) as the left operand."""

    def rows(self, column: Prepared, ranges: list[tuple[int, int]]) -> Prepared:
        """The rows of a prepared column in ``ranges``, in order, as a column ``pop`` accepts."""

    def pop(
        self,
        columns: Sequence[Prepared],
        mask: Tensor | None,
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
        row_weights: Tensor,
        shares: ShareBuffer | None,
    ) -> Tensor:
        """⊕_{k,u} col_k[row, (u, y)] ⊗ γ'[k][(u, y), r] -> (B, rows, N); ``row_weights`` α of the rows."""


@dataclass(frozen=True)
class ReferenceContraction:
    """Every term materialised and reduced in ``semiring``: the definition, for tests and Viterbi."""

    semiring: type[Semiring]

    def prepare(
        self,
        column: Tensor,
        alpha: Tensor,
        row_weights: Tensor,
        shares: ShareBuffer | None,
        index: int | None,
        num_states: int,
        expected_columns: int | None = None,
    ) -> tuple[Prepared, ShareBuffer | None]:
        return (column,), None

    def matmul(self, left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
        return self.semiring.sum(self.semiring.times(left.unsqueeze(-1), right.unsqueeze(-3)), dim=-2)

    def prepared_matmul(self, column: Prepared, right: Tensor, shift: Tensor) -> Tensor:
        return self.matmul(column[0], right, shift)

    def rows(self, column: Prepared, ranges: list[tuple[int, int]]) -> Prepared:
        return (_rows(column[0], ranges),)

    def pop(
        self,
        columns: Sequence[Prepared],
        mask: Tensor | None,
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
        row_weights: Tensor,
        shares: ShareBuffer | None,
    ) -> Tensor:
        num_symbols = gamma_prime.size(2) // num_states
        dense = stack_columns([column[0] for column in columns], mask, self.semiring.zero)
        left = pop_left(dense, num_states, num_symbols)
        right = pop_right(gamma_prime, num_states, num_symbols)
        return pop_output(self.matmul(left, right, pop_shift(alpha, num_states, num_symbols)))


@dataclass(frozen=True)
class ShiftedLogContraction:
    """LOG only: products as real matrix products in a space shifted by log α (``kernels/shifted.py``).

    A column is kept as Ĝ = exp(γ − log α − ρ) (row maximum 1) for the products over the last
    column, and, without a window, also as shares Ŝ in one dense buffer that the pop reads as
    a view; with a window the pop stacks the D columns (Ĝ_k · exp(ρ_k − ℓ)) each step.
    """

    semiring: type[Semiring] = LOG

    def prepare(
        self,
        column: Tensor,
        alpha: Tensor,
        row_weights: Tensor,
        shares: ShareBuffer | None,
        index: int | None,
        num_states: int,
        expected_columns: int | None = None,
    ) -> tuple[Prepared, ShareBuffer | None]:
        left_hat, row_offset = prepare_column(column, alpha)
        share = column_shares(column, row_weights, alpha, num_states)
        if index is None:
            return (left_hat, row_offset, share), None
        return (left_hat, row_offset, share), append_share(shares, share.detach(), index, expected_columns)

    def matmul(self, left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
        if left.size(-2) == 1:
            # One row (α, the push of η): an exact log-sum-exp, reduced along the inner dimension.
            terms = (right + left.transpose(-1, -2)).transpose(-1, -2).contiguous()  # (..., J, C)
            return logsumexp(terms, dim=-1).unsqueeze(-2)
        return shifted_log_matmul(left, right, shift)

    def prepared_matmul(self, column: Prepared, right: Tensor, shift: Tensor) -> Tensor:
        return prepared_log_matmul((column[0], column[1]), right, shift)

    def rows(self, column: Prepared, ranges: list[tuple[int, int]]) -> Prepared:
        return (_rows(column[0], ranges), _rows(column[1], ranges))

    def pop(
        self,
        columns: Sequence[Prepared],
        mask: Tensor | None,
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
        row_weights: Tensor,
        shares: ShareBuffer | None,
    ) -> Tensor:
        if len(columns[0]) == 2:  # rows picked out of prepared columns (the window's bottom row)
            return prepared_log_pop(
                [(column[0], column[1]) for column in columns], mask, gamma_prime, alpha, num_states
            )
        return share_pop([column[2] for column in columns], shares, mask, row_weights, gamma_prime, alpha)


FAST = ShiftedLogContraction()


def _one_hot(semiring: type[Semiring], size: int, index: int, like: Tensor) -> Tensor:
    positions = torch.arange(size, device=like.device)
    return torch.where(positions == index, semiring.one, semiring.zero).to(like.dtype)


def initial_tables(
    sizes: PDASizes,
    batch_size: int,
    bottom: Tensor | None,
    engine: Contraction,
    like: Tensor,
    max_steps: int | None = None,
) -> PDATables:
    """t = 0: α[0] = 𝟙[q0, ⊥]; the bottom row −1 (weight 𝟙 if it may be replaced); η[0] = v₀ at (q0, ⊥).

    ``bottom``: v₀ (B, m) in the semiring's representation, or None without vectors;
    ``max_steps``, when known, sizes the fast engine's buffer once.
    """
    semiring = engine.semiring
    num_configurations = sizes.num_configurations
    options = {"dtype": like.dtype, "device": like.device}
    first_configuration = _one_hot(semiring, num_configurations, 0, like)  # (N,)
    slots = sizes.slots(0)
    bottom_slot = sizes.slot(-1)
    bottom_push = semiring.zeros(num_configurations, num_configurations, **options)
    if sizes.bottom_replaceable:
        bottom_push = torch.where(
            torch.eye(num_configurations, device=like.device, dtype=torch.bool), first_configuration, semiring.zero
        )
    slot_positions = torch.arange(slots, device=like.device).view(slots, 1, 1)
    gamma_rows = torch.where(slot_positions == bottom_slot, bottom_push, semiring.zero)  # (slots, N, N)
    gamma_rows = gamma_rows.reshape(1, slots * num_configurations, num_configurations).expand(batch_size, -1, -1)
    alpha_bottom = first_configuration if sizes.bottom_replaceable else semiring.zeros(num_configurations, **options)
    alpha_rows = torch.where(slot_positions.view(slots, 1) == bottom_slot, alpha_bottom, semiring.zero)
    alpha_rows = alpha_rows.unsqueeze(0).expand(batch_size, -1, -1).contiguous()
    alpha = first_configuration.unsqueeze(0).expand(batch_size, -1).contiguous()
    eta = None
    column = gamma_rows.contiguous()
    if sizes.vector_size > 0:
        if bottom is None:
            raise ValueError("a PDA with vectors needs a bottom vector")
        eta = semiring.times(bottom.to(like.dtype).unsqueeze(-1), first_configuration)  # (B, m, N)
        groups = sizes.eta_groups
        group_positions = torch.arange(groups, device=like.device).view(1, groups, 1, 1)
        bottom_group = bottom_slot if sizes.window is not None else 0
        eta_rows = torch.where(group_positions == bottom_group, eta.unsqueeze(1), semiring.zero)
        column = torch.cat(
            [eta_rows.reshape(batch_size, groups * sizes.vector_size, num_configurations), column], dim=1
        )
    prepared, shares = engine.prepare(
        column,
        alpha,
        _row_weights(sizes, alpha_rows, semiring),
        None,
        0 if sizes.window is None else None,
        sizes.num_states,
        None if max_steps is None else max_steps + 1,
    )
    return PDATables(
        steps=0, first_column=0, columns=(prepared,), alpha_rows=alpha_rows, alpha=alpha, eta=eta, shares=shares
    )


def _row_weights(sizes: PDASizes, alpha_rows: Tensor, semiring: type[Semiring]) -> Tensor:
    """α of each row of a column (B, G·m + slots·N): 1̄ for η rows, which carry α already."""
    batch_size = alpha_rows.size(0)
    gamma_rows = alpha_rows.reshape(batch_size, -1)
    if sizes.eta_rows == 0:
        return gamma_rows
    return torch.cat([gamma_rows.new_full((batch_size, sizes.eta_rows), semiring.one), gamma_rows], dim=1)


def _valid_rows(sizes: PDASizes, rows: list[int], below: Tensor) -> Tensor:
    """(G·m + slots·N, K) bool: rows i of the frame that are < k, for each k in ``below`` (K,)."""
    row_index = torch.tensor(rows, device=below.device)
    valid = row_index.unsqueeze(-1) < below  # (slots, K)
    gamma_valid = valid.repeat_interleave(sizes.num_configurations, dim=0)
    if sizes.vector_size == 0:
        return gamma_valid
    eta_valid = valid.repeat_interleave(sizes.vector_size, dim=0)
    return torch.cat([eta_valid, gamma_valid], dim=0)


def push_term(transitions: Transitions) -> Tensor:
    """γ[t−1→t][q,x→r,y] = Δ⁺_t[q,x→r,y] -> (B, N, N)."""
    return transitions.push


def push_vector_term(alpha: Tensor, transitions: Transitions, engine: Contraction) -> Tensor:
    """η[t−1→t][r,y,:] = (Σ_{q,x} α[t−1][q,x] Δ⁺_t[q,x→r,y]) v_t -> (B, m, N)."""
    if transitions.pushed is None:
        raise ValueError("a PDA with vectors needs the pushed vector of every step")
    reached = engine.matmul(alpha.unsqueeze(1), transitions.push, alpha).squeeze(1)  # (B, N)
    return engine.semiring.times(transitions.pushed.unsqueeze(-1), reached.unsqueeze(1))


def replace_and_pop_prime_terms(
    previous: Prepared, alpha: Tensor, transitions: Transitions, sizes: PDASizes, engine: Contraction
) -> tuple[Tensor, Tensor]:
    """Both products of column t−1 over (s, z), done as one:

        replace:  Σ_{s,z} γ[i→t−1][q,x→s,z] Δ^R_t[s,z→r,y]  -> (B, rows, N), every row (η rows too)
        γ'_t[k][u,y,r] = Σ_{s,z} γ[k→t−1][u,y→s,z] Δ⁻_t[s,z→r]  -> (B, slots(t−1), N, Q), γ rows (k, u, y)

    ``previous``: column t−1; ``alpha``: α[t−1]. A row that a window drops gets the push instead.
    """
    num_configurations = sizes.num_configurations
    products = engine.prepared_matmul(previous, torch.cat([transitions.replace, transitions.pop], dim=-1), alpha)
    replaced = products[..., :num_configurations]
    gamma_prime = products[:, sizes.eta_rows :, num_configurations:]
    return replaced, gamma_prime.reshape(products.size(0), -1, num_configurations, sizes.num_states)


def pop_term(
    columns: Sequence[Prepared],
    mask: Tensor | None,
    gamma_prime: Tensor,
    alpha: Tensor,
    row_weights: Tensor,
    shares: ShareBuffer | None,
    sizes: PDASizes,
    engine: Contraction,
) -> Tensor:
    """Σ_k Σ_u γ[i→k][q,x→u,y] γ'_t[k][u,y,r] (and the same for η rows) -> (B, rows, N).

    ``columns``: column k for each split point k; ``gamma_prime``: (B, K, N, Q); ``alpha``:
    α[k] (B, K, N); ``row_weights``: α of the output rows (B, rows).
    """
    return engine.pop(columns, mask, gamma_prime, alpha, sizes.num_states, row_weights, shares)


def bottom_pop_term(
    columns: Sequence[Prepared],
    gamma_prime: Tensor,
    alpha: Tensor,
    row_weights: Tensor,
    sizes: PDASizes,
    engine: Contraction,
) -> Tensor:
    """Σ_{k ∈ {t−1−D, t−D}} Σ_u γ[−1→k][q0,⊥→u,y] γ'_t[k][u,y,r] -> (B, bottom rows, N).

    With a window, the split points k whose elements still fit (t−1−k ≤ D) but that rows
    i ≥ t−D cannot use: only the exempt bottom row (and its η group) reaches them.
    """
    bottom = [engine.rows(column, sizes.bottom_rows()) for column in columns]
    return engine.pop(bottom, None, gamma_prime, alpha, sizes.num_states, row_weights, None)


def _rows(tensor: Tensor, ranges: list[tuple[int, int]]) -> Tensor:
    """The rows (dimension 1) of ``tensor`` in ``ranges``, in order."""
    return torch.cat([tensor[:, start:stop] for start, stop in ranges], dim=1)


def _plus_at_rows(semiring: type[Semiring], body: Tensor, ranges: list[tuple[int, int]], addend: Tensor) -> Tensor:
    """``body`` with ``addend`` (its rows, range after range) ⊕-added to the rows in ``ranges``."""
    pieces = []
    cursor = 0
    offset = 0
    for start, stop in ranges:
        pieces.append(body[:, cursor:start])
        pieces.append(semiring.plus(body[:, start:stop], addend[:, offset : offset + stop - start]))
        offset += stop - start
        cursor = stop
    pieces.append(body[:, cursor:])
    return torch.cat(pieces, dim=1)


def alpha_term(alpha_rows: Tensor, gamma: Tensor, engine: Contraction) -> Tensor:
    """α[t][r,y] = Σ_{i,q,x} α[i][q,x] γ[i→t][q,x→r,y] -> (B, N); ``gamma`` (B, slots·N, N)."""
    flat = alpha_rows.reshape(alpha_rows.size(0), 1, -1)
    return engine.matmul(flat, gamma, flat.squeeze(1)).squeeze(1)


def advance(tables: PDATables, transitions: Transitions, sizes: PDASizes, engine: Contraction) -> PDATables:
    """The tables after step t = tables.steps + 1."""
    semiring = engine.semiring
    step = tables.steps + 1
    batch_size = tables.alpha.size(0)
    num_configurations = sizes.num_configurations
    eta_rows = sizes.eta_rows
    device = tables.alpha.device
    previous = tables.columns[-1]
    frame = sizes.slot_rows(step)
    push_slot = sizes.slot(step - 1)

    # α of the rows of column t: row t−1 enters (and, with a window, row t−1−D leaves).
    if sizes.window is None:
        alpha_rows = torch.cat([tables.alpha_rows, tables.alpha.unsqueeze(1)], dim=1)
    else:
        entering = (torch.arange(sizes.slots(step), device=device) == push_slot).view(1, -1, 1)
        alpha_rows = torch.where(entering, tables.alpha.unsqueeze(1), tables.alpha_rows)

    # body (B, rows(t−1), N); gamma_prime (B, slots(t−1), N, Q)
    body, gamma_prime = replace_and_pop_prime_terms(previous, tables.alpha, transitions, sizes, engine)

    first_split = max(tables.first_column, 0 if sizes.window is None else step - sizes.window + 1)
    splits = list(range(first_split, step - 1))
    if splits:
        columns = [tables.columns[k - tables.first_column] for k in splits]
        split_slots = torch.tensor([sizes.slot(k) for k in splits], device=device)
        mask = None if sizes.window is None else _valid_rows(sizes, frame, torch.tensor(splits, device=device))
        row_weights = _row_weights(sizes, alpha_rows, semiring)[
            :, : max(tensor.size(1) for column in columns for tensor in column[:1])
        ]
        popped = pop_term(
            columns,
            mask,
            gamma_prime.index_select(1, split_slots),
            alpha_rows.index_select(1, split_slots),
            row_weights,
            tables.shares,
            sizes,
            engine,
        )
        missing = body.size(1) - popped.size(1)
        if missing > 0:
            popped = torch.cat(
                [popped, semiring.zeros(batch_size, missing, num_configurations, dtype=popped.dtype, device=device)],
                dim=1,
            )
        body = semiring.plus(body, popped)
    if sizes.window is not None and sizes.bottom_replaceable:
        bottom_splits = [
            k for k in (step - 1 - sizes.window, step - sizes.window) if tables.first_column <= k <= step - 2
        ]
        if bottom_splits:
            bottom_slots = torch.tensor([sizes.slot(k) for k in bottom_splits], device=device)
            popped = bottom_pop_term(
                [tables.columns[k - tables.first_column] for k in bottom_splits],
                gamma_prime.index_select(1, bottom_slots),
                tables.alpha_rows.index_select(1, bottom_slots),
                _rows(_row_weights(sizes, alpha_rows, semiring), sizes.bottom_rows()),
                sizes,
                engine,
            )
            body = _plus_at_rows(semiring, body, sizes.bottom_rows(), popped)

    push = push_term(transitions)  # (B, N, N)
    if sizes.window is None:
        parts = [body[:, eta_rows:], push]
        if eta_rows:
            parts.insert(0, semiring.plus(body[:, :eta_rows], push_vector_term(tables.alpha, transitions, engine)))
        column = torch.cat(parts, dim=1)
    else:
        slots = sizes.slots(step)
        entering_slot = (torch.arange(slots, device=device) == push_slot).view(1, -1, 1, 1)
        gamma = body[:, eta_rows:].view(batch_size, slots, num_configurations, num_configurations)
        gamma = torch.where(entering_slot, push.unsqueeze(1), gamma)
        parts = [gamma.reshape(batch_size, -1, num_configurations)]
        if eta_rows:
            eta = body[:, :eta_rows].view(batch_size, slots, sizes.vector_size, num_configurations)
            eta = torch.where(entering_slot, push_vector_term(tables.alpha, transitions, engine).unsqueeze(1), eta)
            parts.insert(0, eta.reshape(batch_size, -1, num_configurations))
        column = torch.cat(parts, dim=1)

    alpha = alpha_term(alpha_rows, column[:, eta_rows:], engine)
    eta_total = None
    if eta_rows:
        groups = column[:, :eta_rows].view(batch_size, sizes.eta_groups, sizes.vector_size, num_configurations)
        eta_total = groups[:, 0] if sizes.eta_groups == 1 else semiring.sum(groups, dim=1)

    prepared, shares = engine.prepare(
        column,
        alpha,
        _row_weights(sizes, alpha_rows, semiring),
        tables.shares,
        step if sizes.window is None else None,
        sizes.num_states,
    )
    columns = tables.columns + (prepared,)
    first_column = tables.first_column
    if sizes.window is not None:
        # The bottom row reaches two split points further back than the other rows.
        keep_from = min(step, step - sizes.window + (0 if sizes.bottom_replaceable else 2))
        drop = max(0, keep_from - first_column)
        columns = columns[drop:]
        first_column += drop
    return PDATables(
        steps=step,
        first_column=first_column,
        columns=columns,
        alpha_rows=alpha_rows,
        alpha=alpha,
        eta=eta_total,
        shares=shares,
    )


def from_log(semiring: type[Semiring], log_weights: Tensor) -> Tensor:
    """Log weights in the semiring's representation (LOG and MAX_PLUS keep them, REAL exponentiates)."""
    if semiring.zero == -math.inf:
        return log_weights
    return log_weights.exp()


def engine_for(semiring: type[Semiring], fast: bool) -> Contraction:
    """The shifted real-space products for LOG when ``fast``, else every term materialised."""
    if fast and semiring is LOG:
        return FAST
    return ReferenceContraction(semiring)


def normalize(semiring: type[Semiring], weights: Tensor, total: Tensor) -> Tensor:
    """weights ⊘ total as real numbers (the readings are ratios of weights); 0 when no run exists."""
    reachable = total != semiring.zero
    if semiring.zero == -math.inf:
        return torch.where(reachable, (weights - torch.where(reachable, total, 0.0)).exp(), 0.0)
    return torch.where(reachable, weights / torch.where(reachable, total, 1.0), 0.0)
