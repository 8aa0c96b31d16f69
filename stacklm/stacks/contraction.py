"""How the weighted-PDA dynamic program's sums of products are computed (``pda.py`` is the DP).

A column of the tables (B, rows, N) is handed to its engine once, when it is made, with α of
its step (the shift of every later product over its configurations), and kept in the form
that engine's later products read: its own typed column. Two engines:

- ``ReferenceContraction`` materialises every term in the semiring (the definition; REAL,
  LOG, MAX_PLUS) and keeps a column as it is (``ReferenceColumn``);
- ``ShiftedLogContraction`` (LOG) turns each product into a real matrix product shifted by
  log α (``shifted.py``) and keeps a column as ``ShiftedColumn``: Ĝ = exp(γ − log α − ρ)
  with row maxima 1 for the products over the last column, the shares
  Ŝ = α[i]γ[i→k]/α[k] ∈ [0, 1] for the pop, and, when every column is kept (no window), one
  dense buffer of the shares of this column and every earlier one, which the pop reads as a view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Protocol, Sequence, TypeVar

import torch
from torch import Tensor

from stacklm.semiring import LOG, Semiring, logsumexp
from stacklm.stacks.shifted import (
    ShareBuffer,
    append_share,
    column_shares,
    pop_left,
    pop_output,
    pop_right,
    pop_shift,
    prepare_column,
    prepared_log_matmul,
    prepared_log_pop,
    share_pop,
    shifted_log_matmul,
    stack_columns,
)

ColumnT = TypeVar("ColumnT")


class Contraction(Protocol[ColumnT]):
    """The DP's sums of products over columns kept as ``ColumnT``; the DP itself never changes."""

    semiring: type[Semiring]

    def prepare(
        self,
        column: Tensor,
        alpha: Tensor,
        row_weights: Tensor,
        num_states: int,
        previous: ColumnT | None,
        index: int | None,
        expected_columns: int | None = None,
    ) -> ColumnT:
        """Column (B, rows, N), α (B, N) of its step and α of its rows (B, rows) -> the kept column.

        ``previous``: the column before it (None at t = 0); ``index``: the column's k when every
        column is kept (no window), else None; ``expected_columns``: how many columns the
        sequence will have, when known.
        """

    def matmul(self, left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
        """⊕_c left[..., i, c] ⊗ right[..., c, j]; ``shift`` (..., C) is α of each c."""

    def prepared_matmul(self, column: ColumnT, right: Tensor, shift: Tensor) -> Tensor:
        """``matmul`` with a kept column (B, rows, N) as the left operand -> (B, rows, J)."""

    def pop(
        self,
        columns: Sequence[ColumnT],
        mask: Tensor | None,
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
        row_weights: Tensor,
    ) -> Tensor:
        """⊕_{k,u} col_k[row, (u, y)] ⊗ γ'[k][(u, y), r] -> (B, rows, N), rows = the longest column.

        ``columns``: the split points k, in order; ``mask`` (rows, K): the rows each column has,
        or None; ``gamma_prime`` (B, K, N, Q); ``alpha``: α[k] (B, K, N); ``row_weights``: α of
        the output rows (B, rows).
        """

    def pop_rows(
        self,
        columns: Sequence[ColumnT],
        ranges: list[tuple[int, int]],
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
    ) -> Tensor:
        """``pop`` over the rows of the columns in ``ranges`` only, in order -> (B, rows in ranges, N)."""

    def transform(self, columns: tuple[ColumnT, ...], function: Callable[[Tensor], Tensor]) -> tuple[ColumnT, ...]:
        """The kept columns with ``function`` applied to every tensor they hold."""


def rows_in(tensor: Tensor, ranges: list[tuple[int, int]]) -> Tensor:
    """The rows (dimension 1) of ``tensor`` in ``ranges``, in order."""
    return torch.cat([tensor[:, start:stop] for start, stop in ranges], dim=1)


class ReferenceColumn(NamedTuple):
    """A column as it is, in the semiring's representation."""

    weights: Tensor  # (B, rows, N): γ (and η) rows × configurations (r, y)


@dataclass(frozen=True)
class ReferenceContraction:
    """Every term materialised and reduced in ``semiring``: the definition, for tests and Viterbi."""

    semiring: type[Semiring]

    def prepare(
        self,
        column: Tensor,
        alpha: Tensor,
        row_weights: Tensor,
        num_states: int,
        previous: ReferenceColumn | None,
        index: int | None,
        expected_columns: int | None = None,
    ) -> ReferenceColumn:
        return ReferenceColumn(column)

    def matmul(self, left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
        return self.semiring.sum(self.semiring.times(left.unsqueeze(-1), right.unsqueeze(-3)), dim=-2)

    def prepared_matmul(self, column: ReferenceColumn, right: Tensor, shift: Tensor) -> Tensor:
        return self.matmul(column.weights, right, shift)

    def pop(
        self,
        columns: Sequence[ReferenceColumn],
        mask: Tensor | None,
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
        row_weights: Tensor,
    ) -> Tensor:
        return self._pop([column.weights for column in columns], mask, gamma_prime, alpha, num_states)

    def pop_rows(
        self,
        columns: Sequence[ReferenceColumn],
        ranges: list[tuple[int, int]],
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
    ) -> Tensor:
        return self._pop([rows_in(column.weights, ranges) for column in columns], None, gamma_prime, alpha, num_states)

    def _pop(
        self, columns: list[Tensor], mask: Tensor | None, gamma_prime: Tensor, alpha: Tensor, num_states: int
    ) -> Tensor:
        num_symbols = gamma_prime.size(2) // num_states
        dense = stack_columns(columns, mask, self.semiring.zero)  # (B, rows, K, N)
        left = pop_left(dense, num_states, num_symbols)
        right = pop_right(gamma_prime, num_states, num_symbols)
        return pop_output(self.matmul(left, right, pop_shift(alpha, num_states, num_symbols)))

    def transform(
        self, columns: tuple[ReferenceColumn, ...], function: Callable[[Tensor], Tensor]
    ) -> tuple[ReferenceColumn, ...]:
        return tuple(ReferenceColumn(function(column.weights)) for column in columns)


class ShiftedColumn(NamedTuple):
    """A column as the shifted real-space products read it (``shifted.py``)."""

    left_hat: Tensor  # (B, rows, N): Ĝ = exp(γ − log α − ρ), row maxima 1
    row_offset: Tensor  # (B, rows): ρ
    shares: Tensor  # (B, S, Q, rows): Ŝ = α[i]γ[i→k]/α[k]
    buffer: ShareBuffer | None  # no window: Ŝ of this column and every earlier one, dense; else None


@dataclass(frozen=True)
class ShiftedLogContraction:
    """LOG only: products as real matrix products in a space shifted by log α (``shifted.py``).

    The products over the last column read Ĝ; the pop reads the shares Ŝ, as a view of the
    buffer when every column is kept, else stacked with the window's mask each step; the
    window's bottom rows are popped from Ĝ (each column rescaled by exp(ρ_k − ℓ)).
    """

    semiring: type[Semiring] = LOG

    def prepare(
        self,
        column: Tensor,
        alpha: Tensor,
        row_weights: Tensor,
        num_states: int,
        previous: ShiftedColumn | None,
        index: int | None,
        expected_columns: int | None = None,
    ) -> ShiftedColumn:
        left_hat, row_offset = prepare_column(column, alpha)
        shares = column_shares(column, row_weights, alpha, num_states)
        if index is None:
            return ShiftedColumn(left_hat, row_offset, shares, None)
        earlier = None if previous is None else previous.buffer
        return ShiftedColumn(
            left_hat, row_offset, shares, append_share(earlier, shares.detach(), index, expected_columns)
        )

    def matmul(self, left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
        if left.size(-2) == 1:
            # One row (α, the push of η): an exact log-sum-exp, reduced along the inner dimension.
            terms = (right + left.transpose(-1, -2)).transpose(-1, -2).contiguous()  # (..., J, C)
            return logsumexp(terms, dim=-1).unsqueeze(-2)
        return shifted_log_matmul(left, right, shift)

    def prepared_matmul(self, column: ShiftedColumn, right: Tensor, shift: Tensor) -> Tensor:
        return prepared_log_matmul((column.left_hat, column.row_offset), right, shift)

    def pop(
        self,
        columns: Sequence[ShiftedColumn],
        mask: Tensor | None,
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
        row_weights: Tensor,
    ) -> Tensor:
        # Full stack: the newest split column's buffer holds the shares of every split column, in
        # order, and is read as a view; with a window (no buffer) the shares are stacked and masked.
        shares = [column.shares for column in columns]
        return share_pop(shares, columns[-1].buffer, mask, row_weights, gamma_prime, alpha)

    def pop_rows(
        self,
        columns: Sequence[ShiftedColumn],
        ranges: list[tuple[int, int]],
        gamma_prime: Tensor,
        alpha: Tensor,
        num_states: int,
    ) -> Tensor:
        prepared = [(rows_in(column.left_hat, ranges), rows_in(column.row_offset, ranges)) for column in columns]
        return prepared_log_pop(prepared, None, gamma_prime, alpha, num_states)

    def transform(
        self, columns: tuple[ShiftedColumn, ...], function: Callable[[Tensor], Tensor]
    ) -> tuple[ShiftedColumn, ...]:
        """Each buffer is copied once, however many columns share it."""
        buffers: dict[int, ShareBuffer] = {}
        for column in columns:
            if column.buffer is not None and id(column.buffer) not in buffers:
                buffers[id(column.buffer)] = column.buffer.transform(function)
        return tuple(
            ShiftedColumn(
                function(column.left_hat),
                function(column.row_offset),
                function(column.shares),
                None if column.buffer is None else buffers[id(column.buffer)],
            )
            for column in columns
        )


FAST = ShiftedLogContraction()


def engine_for(semiring: type[Semiring], fast: bool) -> ReferenceContraction | ShiftedLogContraction:
    """The shifted real-space products for LOG when ``fast``, else every term materialised."""
    if fast and semiring is LOG:
        return FAST
    return ReferenceContraction(semiring)
