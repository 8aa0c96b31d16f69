"""Log-space matrix products computed as real matrix products in a shifted space.

A log-semiring product out[i, j] = log Σ_c exp(L[i, c] + R[c, j]) is computed as

    L̂[i, c] = exp(L[i, c] − a[c] − ℓ[i]),   ℓ[i] = max_c (L[i, c] − a[c])
    R̂[c, j] = exp(R[c, j] + a[c] − ρ[j]),   ρ[j] = log Σ_c exp(R[c, j] + a[c])   (exact)
    out[i, j] = log (L̂ R̂)[i, j] + ℓ[i] + ρ[j]

where a[c] = log α of the configuration that c stands for (the total weight of reaching it).
The shifts cancel exactly, so any finite a is correct; this choice keeps float32 in range
(``docs/design/stack-dp.md#float32-and-the-shifted-products``): every column of R̂ is a
distribution over c, every row of L̂ has maximum 1, so (L̂ R̂)[i, j] ∈ [0, 1] is a weighted
average of L̂[i, ·], and it underflows only when a term is ~1e−38 smaller than its row's largest
share. Shifting instead by row and column maxima fails, because their sum drifts away from the
true maximum of each sum.

Columns c with a[c] = −∞ (configurations of weight zero) are dropped: a left entry there can
only belong to a row that itself has weight zero, so no reading depends on it.

Backward (no term tensor is kept): with G = g / (L̂ R̂) (0 where the sum is empty),
∂/∂L = L̂ ⊙ (G R̂ᵀ) and ∂/∂R = R̂ ⊙ (L̂ᵀ G). The shift receives no gradient.

The stack's tables are read many times, so each column is converted once, when it is made:

- :func:`prepare_column`: Ĝ = exp(γ − log α − ρ) with row maxima 1, the left operand of the
  products over the last column (:func:`prepared_log_matmul`) and of the windowed pop
  (:func:`prepared_log_pop`, which rescales column k by exp(ρ_k − ℓ) to a common row shift);
- :func:`column_shares`: Ŝ = α[i] γ[i→k] / α[k] ∈ [0, 1] (shares of each row in the weight of
  each configuration), kept side by side in a :class:`ShareBuffer` that the full stack's pop
  (:func:`share_pop`) reads as a view. Shares lose only terms below ~1e−38 of a configuration's
  weight; the products over the last column use Ĝ, whose rows keep their own scale.

The pops receive the columns as inputs (for their gradients) and build or view the dense
operand inside the autograd function, so what is kept for backward is a reference to each
column and O(rows·K) numbers, never the O(t²) operand of each step.

Every tensor of these functions but a window's mask leads with the batch dimension B. Under
``torch.func.vmap`` (the models of several training runs in one step,
``stacklm.training.grouped``) the vmapped dimension K is folded into B: one call over K·B
(:class:`_BatchFolding`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx


def _finite_or_zero(x: Tensor) -> Tensor:
    return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def _positive(log_weight: Tensor) -> Tensor:
    """Where a log weight is not log 0 (log weights are never +∞ or NaN here; one op, not isfinite's four)."""
    return log_weight > -math.inf


def _scaled_operands(left: Tensor, right: Tensor, shift: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """L̂ (..., I, C), R̂ (..., C, J) and the log offsets ℓ (..., I, 1), ρ (..., 1, J)."""
    right_hat, column_offset = _right_hat(right, shift)
    usable = _positive(shift)
    left_shifted = torch.where(usable.unsqueeze(-2), left - _finite_or_zero(shift).unsqueeze(-2), -math.inf)
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


class _BatchFolding(torch.autograd.Function):
    """An autograd function whose forward returns its result and then the tensors its backward
    keeps (``setup_context`` saves them, as torch.func asks), and whose vmap rule folds the
    vmapped dimension K into the leading batch dimension B of every tensor argument but those at
    ``shared`` (a window's mask, the same for every row): one call over K·B, the result unfolded.
    An argument that vmap does not batch but that leads with B is repeated K times."""

    shared: tuple[int, ...] = ()

    @classmethod
    def fold(cls, info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        folded = []
        for position, (arg, dim) in enumerate(zip(args, in_dims)):
            if not isinstance(arg, Tensor) or position in cls.shared:
                if dim is not None:
                    raise ValueError(f"{cls.__name__}: argument {position} is shared by every row and cannot differ between the vmapped runs")
                folded.append(arg)
                continue
            batched = arg.expand(info.batch_size, *arg.shape) if dim is None else arg.movedim(dim, 0)  # (K, B, …)
            folded.append(batched.flatten(0, 1))  # (K·B, …)
        outputs = cls.apply(*folded)
        return tuple(output.unflatten(0, (info.batch_size, -1)) for output in outputs), (0,) * len(outputs)


class _ShiftedLogMatmul(_BatchFolding):
    @staticmethod
    def forward(left: Tensor, right: Tensor, shift: Tensor) -> tuple[Tensor, ...]:
        left_hat, right_hat, row_offset, column_offset = _scaled_operands(left, right, shift)
        total = left_hat @ right_hat
        return _log_of_sum(total, row_offset, column_offset), left_hat, right_hat, total

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        ctx.save_for_backward(*output[1:])
        ctx.mark_non_differentiable(*output[1:])

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        return _ShiftedLogMatmul.fold(info, in_dims, *args)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *kept: Tensor | None) -> tuple[Tensor | None, ...]:
        left_hat, right_hat, total = ctx.saved_tensors
        grad_left, grad_right = _gradients(left_hat, right_hat, total, grad)
        return grad_left, grad_right, None


def shifted_log_matmul(left: Tensor, right: Tensor, shift: Tensor) -> Tensor:
    """log Σ_c exp(left[..., i, c] + right[..., c, j]); ``shift`` (..., C) is log α of each c.

    ``left`` (..., I, C), ``right`` (..., C, J) and ``shift`` share their batch dimensions.
    """
    return _ShiftedLogMatmul.apply(left, right, shift.detach())[0]


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


def _right_hat(right: Tensor, shift: Tensor) -> tuple[Tensor, Tensor]:
    """R̂ (..., C, J), each column a distribution over c, and its log offset ρ (..., 1, J)."""
    usable = _positive(shift)
    right_shifted = torch.where(usable.unsqueeze(-1), right + _finite_or_zero(shift).unsqueeze(-1), -math.inf)
    # A reduction over the inner dimension: PyTorch's CPU amax over dim −2 is ~10× slower.
    column_max = _finite_or_zero(right_shifted.transpose(-1, -2).contiguous().amax(dim=-1).unsqueeze(-2))
    column_total = (right_shifted - column_max).exp().sum(dim=-2, keepdim=True)
    column_offset = torch.where(column_total > 0, column_total.log() + column_max, column_max)
    return (right_shifted - column_offset).exp(), column_offset


def prepare_column(column: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
    """A table column (B, rows, N) of log weights as Ĝ = exp(column − log α − ρ) and ρ (B, rows).

    ``alpha`` (B, N) is log α of the column's own step, the shift of every later product over
    the column's configurations; ρ is the row maximum, so each row of Ĝ has maximum 1. Done
    once per column, so no later step takes an exponential of the table.
    """
    alpha = alpha.detach()
    usable = _positive(alpha).unsqueeze(1)
    shifted = torch.where(usable, column - _finite_or_zero(alpha).unsqueeze(1), -math.inf)
    row_offset = _finite_or_zero(shifted.detach().amax(dim=-1))
    return (shifted - row_offset.unsqueeze(-1)).exp(), row_offset


class _PreparedLogMatmul(_BatchFolding):
    @staticmethod
    def forward(left_hat: Tensor, row_offset: Tensor, right: Tensor, shift: Tensor) -> tuple[Tensor, ...]:
        right_hat, column_offset = _right_hat(right, shift)
        total = left_hat @ right_hat
        return _log_of_sum(total, row_offset.unsqueeze(-1), column_offset), right_hat, total

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        ctx.save_for_backward(inputs[0], *output[1:])
        ctx.mark_non_differentiable(*output[1:])

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        return _PreparedLogMatmul.fold(info, in_dims, *args)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *kept: Tensor | None) -> tuple[Tensor | None, ...]:
        left_hat, right_hat, total = ctx.saved_tensors
        scaled = torch.where(total > 0, grad / torch.where(total > 0, total, 1.0), 0.0)
        grad_left = scaled @ right_hat.transpose(-1, -2)
        grad_right = right_hat * (left_hat.transpose(-1, -2) @ scaled)
        return grad_left, None, grad_right, None


def prepared_log_matmul(prepared: tuple[Tensor, Tensor], right: Tensor, shift: Tensor) -> Tensor:
    """log Σ_c exp(column[..., i, c] + right[..., c, j]) from a prepared column (Ĝ, ρ).

    ``shift`` must be the log α the column was prepared with. Returns (B, rows, J).
    """
    left_hat, row_offset = prepared
    return _PreparedLogMatmul.apply(left_hat, row_offset, right, shift.detach())[0]


def _dense_pop_left(
    left_hats: Sequence[Tensor], row_offsets: Sequence[Tensor], mask: Tensor | None, rows: int, num_states: int
) -> tuple[Tensor, Tensor, Tensor]:
    """L̂ (B, S, rows, K·Q) for the pop, with its row offset ℓ (B, rows, 1) and scales (B, rows, K).

    Column k enters as Ĝ_k · exp(ρ_k − ℓ), ℓ = max_k ρ_k per row: the common row shift.
    """
    batch, _, configurations = left_hats[0].shape
    num_symbols = configurations // num_states
    splits = len(left_hats)
    dense = left_hats[0].new_zeros(batch, num_symbols, rows, splits, num_states)
    offsets = left_hats[0].new_full((batch, rows, splits), -math.inf)
    for split, (left_hat, row_offset) in enumerate(zip(left_hats, row_offsets)):
        size = min(rows, left_hat.size(1))
        dense[:, :, :size, split] = left_hat[:, :size].view(batch, size, num_states, num_symbols).permute(0, 3, 1, 2)
        offsets[:, :size, split] = row_offset[:, :size]
    if mask is not None:
        offsets = torch.where(mask, offsets, -math.inf)
    row_shift = _finite_or_zero(offsets.amax(dim=-1, keepdim=True))
    scales = (offsets - row_shift).exp()
    dense.mul_(scales.view(batch, 1, rows, splits, 1))
    return dense.view(batch, num_symbols, rows, splits * num_states), row_shift, scales


class _PreparedLogPop(_BatchFolding):
    shared = (2,)  # the mask

    @staticmethod
    def forward(gamma_prime: Tensor, alpha: Tensor, mask: Tensor | None, num_states: int, rows: int, *prepared: Tensor) -> tuple[Tensor, ...]:
        splits = len(prepared) // 2
        left_hats, row_offsets = prepared[:splits], prepared[splits:]
        num_symbols = gamma_prime.size(2) // num_states
        left, row_shift, scales = _dense_pop_left(left_hats, row_offsets, mask, rows, num_states)
        right_hat, column_offset = _right_hat(
            pop_right(gamma_prime, num_states, num_symbols), pop_shift(alpha, num_states, num_symbols)
        )
        total = left @ right_hat
        return pop_output(_log_of_sum(total, row_shift.unsqueeze(1), column_offset)), right_hat, total, scales

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        _, _, mask, num_states, rows, *prepared = inputs
        splits = len(prepared) // 2
        ctx.save_for_backward(*output[1:], *prepared[:splits])
        ctx.mark_non_differentiable(*output[1:])
        ctx.mask = mask
        ctx.shape = (num_states, rows, prepared[splits:])

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        return _PreparedLogPop.fold(info, in_dims, *args)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *kept: Tensor | None) -> tuple[Tensor | None, ...]:
        right_hat, total, scales, *left_hats = ctx.saved_tensors
        num_states, rows, row_offsets = ctx.shape
        batch, _, configurations = grad.shape
        num_symbols = configurations // num_states
        splits = len(left_hats)
        left, _, _ = _dense_pop_left(left_hats, row_offsets, ctx.mask, rows, num_states)
        grad_per_symbol = grad.view(batch, rows, num_states, num_symbols).permute(0, 3, 1, 2)
        scaled = torch.where(total > 0, grad_per_symbol / torch.where(total > 0, total, 1.0), 0.0)
        grad_right = right_hat * (left.transpose(-1, -2) @ scaled)
        grad_left = (scaled @ right_hat.transpose(-1, -2)).view(batch, num_symbols, rows, splits, num_states)
        grad_left.mul_(scales.view(batch, 1, rows, splits, 1))
        grad_left_hats = [
            grad_left[:, :, : left_hat.size(1), split].permute(0, 2, 3, 1).reshape(left_hat.shape)
            for split, left_hat in enumerate(left_hats)
        ]
        # grad_right (B, S, K·Q(u), Q(r)) -> γ' layout (B, K, N, Q).
        grad_gamma_prime = (
            grad_right.view(batch, num_symbols, splits, num_states, num_states)
            .permute(0, 2, 3, 1, 4)
            .reshape(batch, splits, configurations, num_states)
        )
        return (grad_gamma_prime, None, None, None, None, *grad_left_hats, *([None] * splits))


def prepared_log_pop(
    prepared: Sequence[tuple[Tensor, Tensor]], mask: Tensor | None, gamma_prime: Tensor, alpha: Tensor, num_states: int
) -> Tensor:
    """The pop contraction out[row, (r, y)] = log Σ_{k,u} exp(col_k[row, (u, y)] + γ'[k, (u, y), r]).

    ``prepared``: (Ĝ_k, ρ_k) of each split point k, Ĝ_k (B, rows_k, N); ``mask``: (rows, K) or
    None; ``gamma_prime``: (B, K, N, Q); ``alpha``: log α[k] (B, K, N), the columns' shifts.
    Returns (B, rows, N), rows = the longest column. Keeps for backward only references to the
    columns and O(rows·K) numbers; the dense operand is rebuilt.
    """
    rows = max(left_hat.size(1) for left_hat, _ in prepared)
    left_hats = [left_hat for left_hat, _ in prepared]
    row_offsets = [row_offset for _, row_offset in prepared]
    return _PreparedLogPop.apply(gamma_prime, alpha.detach(), mask, num_states, rows, *left_hats, *row_offsets)[0]


class ShareBuffer:
    """The share columns Ŝ_k of a full stack, per symbol y and transposed: (B, S, K·Q, rows).

    Ŝ_k[(i, a), (u, y)] = α[i][a] γ[i→k][a, (u, y)] / α[k][u, y] ∈ [0, 1], the share of row
    (i, a) in the weight of (k, u, y), is stored at [y, (k, u), (i, a)]. Column k is written
    once, when it is made; step t reads the block of columns 0 … t−2, a view, so no step copies
    the table, and the pop is one batched product per (b, y): [Q × K·Q] @ [K·Q × rows] (this
    orientation is ~2× faster on CPU than [rows × K·Q] @ [K·Q × Q]). The buffer is outside
    autograd: each pop also receives the columns themselves, for their gradients, and a region
    is never written after a step has read it. A state advanced twice (two continuations of one
    prefix) gets its own copy, because ``filled`` tells who wrote last.
    """

    def __init__(self, tensor: Tensor, filled: int) -> None:
        self.tensor = tensor
        self.filled = filled

    def transform(self, function: Callable[[Tensor], Tensor]) -> ShareBuffer:
        return ShareBuffer(function(self.tensor).clone(), self.filled)


def append_share(
    buffer: ShareBuffer | None, share: Tensor, index: int, expected_columns: int | None = None
) -> ShareBuffer:
    """``buffer`` with column ``index`` (B, S, Q, rows_k) written into it, reallocated when needed
    (to ``expected_columns`` columns if that is enough, else to twice the columns so far)."""
    batch, num_symbols, num_states, rows = share.shape
    configurations = num_states * num_symbols
    if (
        buffer is None
        or buffer.filled != index
        or buffer.tensor.size(3) < rows
        or buffer.tensor.size(2) < (index + 1) * num_states
    ):
        if expected_columns is not None and expected_columns > index:
            columns = expected_columns
        else:
            columns = max(16, 2 * (index + 1))
        capacity_rows = rows + (columns - index - 1) * configurations
        tensor = share.new_zeros(batch, num_symbols, columns * num_states, capacity_rows)
        if buffer is not None and index > 0:
            kept = buffer.tensor[:, :, : index * num_states, : min(capacity_rows, buffer.tensor.size(3))]
            tensor[:, :, : kept.size(2), : kept.size(3)] = kept
        buffer = ShareBuffer(tensor, index)
    with torch.no_grad():
        buffer.tensor[:, :, index * num_states : (index + 1) * num_states, :rows] = share
    buffer.filled = index + 1
    return buffer


def column_shares(column: Tensor, row_weights: Tensor, alpha: Tensor, num_states: int) -> Tensor:
    """Ŝ = exp(column + log α[i][a] − log α[k][b]), 0 where a weight is 0, per symbol: (B, S, Q, rows).

    ``column`` (B, rows, N) with N = (u, y); the result is a view [y, u, row] of (B, rows, N).
    """
    alpha = alpha.detach()
    row_weights = row_weights.detach()
    usable = _positive(alpha).unsqueeze(1) & _positive(row_weights).unsqueeze(-1)
    exponent = column + _finite_or_zero(row_weights).unsqueeze(-1) - _finite_or_zero(alpha).unsqueeze(1)
    shares = torch.where(usable, exponent, -math.inf).exp()
    batch, rows, configurations = shares.shape
    return shares.view(batch, rows, num_states, configurations // num_states).permute(0, 3, 2, 1)


def _share_left(
    buffer: Tensor | None, shares: Sequence[Tensor], mask: Tensor | None, rows: int, shape: tuple[int, int, int, int]
) -> Tensor:
    """The pop's left operand (B·S, K·Q, rows): a view of the buffer, or the columns stacked and masked.

    ``shape`` is (B, S, Q, K).
    """
    batch, num_symbols, num_states, splits = shape
    if buffer is not None:
        left = buffer[:, :, : splits * num_states, :rows]
    else:
        left = torch.cat(list(shares), dim=2)
        if mask is not None:
            left = torch.where(mask.transpose(0, 1).repeat_interleave(num_states, dim=0), left, 0.0)
    return left.reshape(batch * num_symbols, splits * num_states, rows)


class _SharePop(_BatchFolding):
    shared = (4,)  # the mask

    @staticmethod
    def forward(
        gamma_prime: Tensor,
        alpha: Tensor,
        row_weights: Tensor,
        buffer: Tensor | None,
        mask: Tensor | None,
        *shares: Tensor,
    ) -> tuple[Tensor, ...]:
        batch, splits, configurations, num_states = gamma_prime.shape
        num_symbols = configurations // num_states
        rows = row_weights.size(1)
        # log W[y, (k, u), r] = log α[k][u, y] + γ'[k][u, y, r], normalised per output (r, y) over (k, u).
        right_hat, column_offset = _right_hat(
            pop_right(gamma_prime, num_states, num_symbols), pop_shift(alpha, num_states, num_symbols)
        )
        left = _share_left(buffer, shares, mask, rows, (batch, num_symbols, num_states, splits))
        right_transposed = right_hat.transpose(-1, -2).reshape(batch * num_symbols, num_states, splits * num_states)
        total = right_transposed @ left  # (B·S, Q(r), rows)
        total = (
            total.view(batch, num_symbols, num_states, rows).permute(0, 3, 2, 1).reshape(batch, rows, configurations)
        )
        # column offset (B, S(y), 1, Q(r)) -> (B, 1, N) in (r, y) order.
        offset = column_offset.view(batch, num_symbols, num_states).transpose(1, 2).reshape(batch, 1, configurations)
        nonempty = (total > 0) & _positive(row_weights).unsqueeze(-1)
        logs = torch.where(nonempty, total, 1.0).log() + offset - _finite_or_zero(row_weights).unsqueeze(-1)
        return torch.where(nonempty, logs, -math.inf), right_hat, total

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        _, _, row_weights, buffer, mask, *shares = inputs
        # With a buffer the columns are read from it again; only their sizes are needed.
        ctx.save_for_backward(*output[1:], row_weights, *(shares if buffer is None else ()))
        ctx.mark_non_differentiable(*output[1:])
        ctx.buffer = buffer
        ctx.mask = mask
        ctx.share_shape = (*shares[0].shape[:3], [share.size(-1) for share in shares])

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, ...], *args: Any) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        return _SharePop.fold(info, in_dims, *args)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *kept: Tensor | None) -> tuple[Tensor | None, ...]:
        right_hat, total, row_weights, *shares = ctx.saved_tensors
        batch, num_symbols, num_states, share_rows = ctx.share_shape
        rows = grad.size(1)
        splits = len(share_rows)
        left = _share_left(ctx.buffer, shares, ctx.mask, rows, (batch, num_symbols, num_states, splits))
        nonempty = (total > 0) & _positive(row_weights).unsqueeze(-1)
        scaled = torch.where(nonempty, grad / torch.where(nonempty, total, 1.0), 0.0)
        # (B, rows, Q(r), S(y)) -> (B·S, Q(r), rows)
        scaled = scaled.view(batch, rows, num_states, num_symbols).permute(0, 3, 2, 1)
        scaled = scaled.reshape(batch * num_symbols, num_states, rows)
        grad_left = right_hat.reshape(batch * num_symbols, splits * num_states, num_states) @ scaled
        if ctx.mask is not None:
            grad_left = torch.where(ctx.mask.transpose(0, 1).repeat_interleave(num_states, dim=0), grad_left, 0.0)
        grad_left = grad_left.view(batch, num_symbols, splits, num_states, rows)
        grad_right_hat = (scaled @ left.transpose(-1, -2)).transpose(-1, -2).reshape(right_hat.shape)  # (B, S, K·Q, Q)
        grad_log_weight = right_hat * grad_right_hat
        grad_gamma_prime = (
            grad_log_weight.view(batch, num_symbols, splits, num_states, num_states)
            .permute(0, 2, 3, 1, 4)
            .reshape(batch, splits, num_symbols * num_states, num_states)
        )
        grad_shares = [grad_left[:, :, split, :, :size] for split, size in enumerate(share_rows)]
        return (grad_gamma_prime, None, None, None, None, *grad_shares)


def share_pop(
    shares: Sequence[Tensor],
    buffer: ShareBuffer | None,
    mask: Tensor | None,
    row_weights: Tensor,
    gamma_prime: Tensor,
    alpha: Tensor,
) -> Tensor:
    """The pop contraction from share columns: log Σ_{k,u} γ[i→k][a,(u,y)] γ'[k][(u,y),r].

    ``shares``: Ŝ_k (B, S, Q, rows_k) of the split points, which are the first K columns of
    ``buffer`` (full stack), or, without a buffer, stacked here with ``mask`` (rows, K) hiding
    the rows a column does not have (window); ``row_weights``: log α[i][a] of the output rows
    (0 for η rows), (B, rows); ``gamma_prime``: (B, K, N, Q); ``alpha``: log α[k] (B, K, N).
    Returns (B, rows, N).

    Per symbol y, the real product W̃ᵀ Ŝ with W̃[(k, u), r] = α[k][u,y] γ'[k][u,y,r] / Σ_{k,u}(…),
    then out = log(Ŝ W̃) + log Σ_{k,u}(…) − log α[i][a]. Backward keeps O(K·N·Q) numbers and
    references to the columns.
    """
    tensor = None if buffer is None else buffer.tensor
    return _SharePop.apply(gamma_prime, alpha.detach(), row_weights.detach(), tensor, mask, *shares)[0]
