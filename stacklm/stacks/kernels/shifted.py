"""Log-space matrix products computed as real matrix products in a shifted space.

A log-semiring product out[i, j] = log Σ_c exp(L[i, c] + R[c, j]) is computed as

    L̂[i, c] = exp(L[i, c] − a[c] − ℓ[i]),   ℓ[i] = max_c (L[i, c] − a[c])
    R̂[c, j] = exp(R[c, j] + a[c] − ρ[j]),   ρ[j] = log Σ_c exp(R[c, j] + a[c])   (exact)
    out[i, j] = log (L̂ R̂)[i, j] + ℓ[i] + ρ[j]

where a[c] = log α of the configuration that c stands for (the total weight of reaching it).
The shifts cancel exactly, so any finite a is correct; this choice keeps float32 in range
(``stack-performance.md`` §2): every column of R̂ is a distribution over c, every row of L̂
has maximum 1, so (L̂ R̂)[i, j] ∈ [0, 1] is a weighted average of L̂[i, ·], and it underflows
only when a term is ~1e−38 smaller than its row's largest share. Shifting instead by row and
column maxima fails, because their sum drifts away from the true maximum of each sum.

Columns c with a[c] = −∞ (configurations of weight zero) are dropped: a left entry there can
only belong to a row that itself has weight zero, so no reading depends on it.

Backward (no term tensor is kept): with G = g / (L̂ R̂) (0 where the sum is empty),
∂/∂L = L̂ ⊙ (G R̂ᵀ) and ∂/∂R = R̂ ⊙ (L̂ᵀ G). The shift receives no gradient.

:func:`shifted_log_pop` is the same product whose left operand is a list of table columns
(one per split point k); it builds the dense operand inside the autograd function, so what
is kept for backward is a reference to each column, never the O(t²) operand of each step.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor


def _finite_or_zero(x: Tensor) -> Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


def _scaled_operands(left: Tensor, right: Tensor, shift: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """L̂ (..., I, C), R̂ (..., C, J) and the log offsets ℓ (..., I, 1), ρ (..., 1, J)."""
    usable = torch.isfinite(shift)
    shift = _finite_or_zero(shift)
    right_shifted = torch.where(usable.unsqueeze(-1), right + shift.unsqueeze(-1), -math.inf)
    column_max = _finite_or_zero(right_shifted.amax(dim=-2, keepdim=True))
    column_total = (right_shifted - column_max).exp().sum(dim=-2, keepdim=True)
    column_offset = torch.where(column_total > 0, column_total.log() + column_max, column_max)
    right_hat = (right_shifted - column_offset).exp()
    left_shifted = torch.where(usable.unsqueeze(-2), left - shift.unsqueeze(-2), -math.inf)
    row_offset = _finite_or_zero(left_shifted.amax(dim=-1, keepdim=True))
    left_hat = (left_shifted - row_offset).exp()
    return left_hat, right_hat, row_offset, column_offset


def _log_of_sum(total: Tensor, row_offset: Tensor, column_offset: Tensor) -> Tensor:
    nonempty = total > 0
    return torch.where(nonempty, torch.where(nonempty, total, 1.0).log() + row_offset + column_offset, -math.inf)


def _gradients(left_hat: Tensor, right_hat: Tensor, total: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    scaled = torch.where(total > 0, grad / torch.where(total > 0, total, 1.0), 0.0)
    grad_left = left_hat * (scaled @ right_hat.transpose(-1, -2))
    grad_right = right_hat * (left_hat.transpose(-1, -2) @ scaled)
    return grad_left, grad_right


class _ShiftedLogMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
        left_hat, right_hat, row_offset, column_offset = _scaled_operands(left, right, shift)
        total = left_hat @ right_hat
        ctx.save_for_backward(left_hat, right_hat, total)
        return _log_of_sum(total, row_offset, column_offset)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        left_hat, right_hat, total = ctx.saved_tensors
        grad_left, grad_right = _gradients(left_hat, right_hat, total, grad)
        return grad_left, grad_right, None


def shifted_log_matmul(left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
    """log Σ_c exp(left[..., i, c] + right[..., c, j]); ``shift`` (..., C) is log α of each c.

    ``left`` (..., I, C), ``right`` (..., C, J) and ``shift`` share their batch dimensions.
    """
    return _ShiftedLogMatmul.apply(left, right, shift.detach())


def stack_columns(columns: Sequence[Tensor], mask: Tensor | None, fill: float) -> Tensor:
    """The dense operand (B, rows, K, N) of columns (B, rows_k, N), padded with ``fill``.

    ``mask`` (rows, K), when given, marks the entries that belong to each column; the others
    are replaced by ``fill`` (a window's slots hold rows that a column does not have).
    """
    if all(column.size(1) == columns[0].size(1) for column in columns):
        dense = torch.stack(list(columns), dim=2)
    else:
        padded = torch.nn.utils.rnn.pad_sequence([column.transpose(0, 1) for column in columns], padding_value=fill)
        dense = padded.permute(2, 0, 1, 3)  # (rows, K, B, N) -> (B, rows, K, N)
    if mask is not None:
        dense = torch.where(mask.unsqueeze(-1), dense, fill)
    return dense


def pop_left(dense: Tensor, num_states: int, num_symbols: int) -> Tensor:
    """(B, rows, K, N) with N = (u, y) -> (B, S, rows, K·Q): the left operand per symbol y."""
    batch, rows, splits, _ = dense.shape
    per_symbol = dense.reshape(batch, rows, splits, num_states, num_symbols).permute(0, 4, 1, 2, 3)
    return per_symbol.reshape(batch, num_symbols, rows, splits * num_states)


def pop_right(gamma_prime: Tensor, num_states: int, num_symbols: int) -> Tensor:
    """γ' (B, K, N, Q) with N = (u, y) -> (B, S, K·Q, Q): the right operand per symbol y."""
    batch, splits = gamma_prime.shape[:2]
    per_symbol = gamma_prime.reshape(batch, splits, num_states, num_symbols, num_states).permute(0, 3, 1, 2, 4)
    return per_symbol.reshape(batch, num_symbols, splits * num_states, num_states)


def pop_shift(alpha: Tensor, num_states: int, num_symbols: int) -> Tensor:
    """log α[k] (B, K, N) with N = (u, y) -> (B, S, K·Q)."""
    batch, splits = alpha.shape[:2]
    per_symbol = alpha.reshape(batch, splits, num_states, num_symbols).permute(0, 3, 1, 2)
    return per_symbol.reshape(batch, num_symbols, splits * num_states)


def pop_output(per_symbol: Tensor) -> Tensor:
    """(B, S, rows, Q) indexed [y, row, r] -> (B, rows, N) with N = (r, y)."""
    batch, num_symbols, rows, num_states = per_symbol.shape
    return per_symbol.permute(0, 2, 3, 1).reshape(batch, rows, num_states * num_symbols)


class _ShiftedLogPop(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gamma_prime: Tensor, alpha: Tensor, mask: Tensor | None, num_states: int, *columns: Tensor) -> Tensor:
        num_symbols = gamma_prime.size(2) // num_states
        dense = stack_columns(columns, mask, -math.inf)
        left = pop_left(dense, num_states, num_symbols)
        right = pop_right(gamma_prime, num_states, num_symbols)
        shift = pop_shift(alpha, num_states, num_symbols)
        left_hat, right_hat, row_offset, column_offset = _scaled_operands(left, right, shift)
        total = left_hat @ right_hat
        ctx.save_for_backward(gamma_prime, alpha, total, *columns)
        ctx.mask = mask
        ctx.num_states = num_states
        return pop_output(_log_of_sum(total, row_offset, column_offset))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        gamma_prime, alpha, total, *columns = ctx.saved_tensors
        num_states = ctx.num_states
        num_symbols = gamma_prime.size(2) // num_states
        dense = stack_columns(columns, ctx.mask, -math.inf)
        left = pop_left(dense, num_states, num_symbols)
        right = pop_right(gamma_prime, num_states, num_symbols)
        shift = pop_shift(alpha, num_states, num_symbols)
        left_hat, right_hat, _, _ = _scaled_operands(left, right, shift)
        batch, rows, _ = grad.shape
        grad_per_symbol = grad.reshape(batch, rows, num_states, num_symbols).permute(0, 3, 1, 2)
        grad_left, grad_right = _gradients(left_hat, right_hat, total, grad_per_symbol)
        splits = len(columns)
        # grad_left (B, S, rows, K·Q) -> (K, B, rows, Q, S) so that each column's part is one slice.
        grad_left = grad_left.reshape(batch, num_symbols, rows, splits, num_states).permute(3, 0, 2, 4, 1)
        grad_columns = [
            grad_left[k, :, : column.size(1)].reshape(batch, column.size(1), num_states * num_symbols)
            for k, column in enumerate(columns)
        ]
        # grad_right (B, S, K·Q(u), Q(r)) -> γ' layout (B, K, N, Q).
        grad_gamma_prime = (
            grad_right.reshape(batch, num_symbols, splits, num_states, num_states)
            .permute(0, 2, 3, 1, 4)
            .reshape(gamma_prime.shape)
        )
        return (grad_gamma_prime, None, None, None, *grad_columns)


def shifted_log_pop(columns: Sequence[Tensor], mask: Tensor | None, gamma_prime: Tensor, alpha: Tensor, num_states: int) -> Tensor:
    """The pop contraction out[row, (r, y)] = log Σ_{k,u} exp(col_k[row, (u, y)] + γ'[k, (u, y), r]).

    ``columns``: K tensors (B, rows_k, N); ``mask``: (rows, K) or None; ``gamma_prime``:
    (B, K, N, Q); ``alpha``: log α[k] (B, K, N), the shift. Returns (B, rows, N).
    """
    return _ShiftedLogPop.apply(gamma_prime, alpha.detach(), mask, num_states, *columns)
