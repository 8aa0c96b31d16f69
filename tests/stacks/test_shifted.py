"""The shifted real-space log products against log-sum-exp over every term (float64)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from stacklm.stacks.shifted import (
    append_share,
    column_shares,
    prepare_column,
    prepared_log_matmul,
    prepared_log_pop,
    share_pop,
    shifted_log_matmul,
)


def log_matmul(left: Tensor, right: Tensor) -> Tensor:
    return torch.logsumexp(left.unsqueeze(-1) + right.unsqueeze(-3), dim=-2)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_shifted_log_matmul_equals_log_sum_exp_and_gradchecks() -> None:
    left = 5 * torch.randn(2, 4, 6, generator=generator(0), dtype=torch.float64)
    right = 5 * torch.randn(2, 6, 3, generator=generator(1), dtype=torch.float64)
    left[0, 1] = -math.inf  # an empty row
    shift = torch.randn(2, 6, generator=generator(2), dtype=torch.float64)
    expected = log_matmul(left, right)
    torch.testing.assert_close(shifted_log_matmul(left, right, shift), expected)
    left.requires_grad_()
    right.requires_grad_()
    output = shifted_log_matmul(left, right, shift)
    torch.autograd.grad(output[torch.isfinite(output)].sum(), (left, right))
    assert torch.autograd.gradcheck(
        lambda a, b: shifted_log_matmul(a, b, shift).clamp(min=-1e3), (left, right), fast_mode=True
    )


def test_empty_row_has_zero_gradient() -> None:
    left = torch.full((1, 2, 3), -math.inf, dtype=torch.float64)
    left[0, 0] = torch.tensor([0.0, 1.0, 2.0])
    left.requires_grad_()
    right = torch.randn(1, 3, 2, generator=generator(3), dtype=torch.float64, requires_grad=True)
    output = shifted_log_matmul(left, right, torch.zeros(1, 3, dtype=torch.float64))
    assert torch.isinf(output[0, 1]).all()
    grad_left, grad_right = torch.autograd.grad(output[0, 0].sum(), (left, right))
    assert torch.isfinite(grad_left).all() and torch.isfinite(grad_right).all()
    assert (grad_left[0, 1] == 0).all()


def test_prepared_matmul_equals_log_sum_exp() -> None:
    column = 3 * torch.randn(2, 5, 6, generator=generator(4), dtype=torch.float64)
    alpha = torch.randn(2, 6, generator=generator(5), dtype=torch.float64)
    alpha[1, 2] = -math.inf  # a configuration of weight zero: its entries must not matter
    column[1, :, 2] = -math.inf
    right = torch.randn(2, 6, 4, generator=generator(6), dtype=torch.float64, requires_grad=True)
    column.requires_grad_()
    output = prepared_log_matmul(prepare_column(column, alpha), right, alpha)
    torch.testing.assert_close(output, log_matmul(column, right))
    assert torch.autograd.gradcheck(
        lambda c, r: prepared_log_matmul(prepare_column(c, alpha), r, alpha), (column, right), fast_mode=True
    )


def dense_pop(columns: list[Tensor], gamma_prime: Tensor, num_states: int) -> Tensor:
    """log Σ_{k,u} col_k[row, (u, y)] + γ'[k, (u, y), r] term by term, rows padded with −∞."""
    batch, splits, configurations, _ = gamma_prime.shape
    num_symbols = configurations // num_states
    rows = max(column.size(1) for column in columns)
    output = torch.full((batch, rows, num_states, num_symbols), -math.inf, dtype=gamma_prime.dtype)
    for row in range(rows):
        for r in range(num_states):
            for y in range(num_symbols):
                terms = [
                    columns[k][:, row, u * num_symbols + y] + gamma_prime[:, k, u * num_symbols + y, r]
                    for k in range(splits)
                    for u in range(num_states)
                    if row < columns[k].size(1)
                ]
                output[:, row, r, y] = torch.logsumexp(torch.stack(terms, dim=-1), dim=-1)
    return output.reshape(batch, rows, configurations)


def test_pops_equal_the_sum_over_split_points() -> None:
    num_states, num_symbols, batch = 2, 2, 2
    configurations = num_states * num_symbols
    sizes = [3, 5, 7]  # column k has rows 0 … sizes[k]−1, as in the full stack
    columns = [
        2 * torch.randn(batch, size, configurations, generator=generator(10 + k), dtype=torch.float64)
        for k, size in enumerate(sizes)
    ]
    gamma_prime = torch.randn(
        batch, len(sizes), configurations, num_states, generator=generator(20), dtype=torch.float64
    )
    alpha = torch.randn(batch, len(sizes), configurations, generator=generator(21), dtype=torch.float64)
    row_weights = torch.randn(batch, max(sizes), generator=generator(22), dtype=torch.float64)
    expected = dense_pop(columns, gamma_prime, num_states)

    prepared = [prepare_column(column, alpha[:, k]) for k, column in enumerate(columns)]
    torch.testing.assert_close(prepared_log_pop(prepared, None, gamma_prime, alpha, num_states), expected)

    buffer = None
    shares = []
    for k, column in enumerate(columns):
        share = column_shares(column, row_weights[:, : column.size(1)], alpha[:, k], num_states)
        buffer = append_share(buffer, share, k)
        shares.append(share)
    torch.testing.assert_close(share_pop(shares, buffer, None, row_weights, gamma_prime, alpha), expected)


def test_masked_share_pop_equals_the_sum_over_allowed_entries() -> None:
    num_states, batch, rows = 2, 2, 5
    columns = [torch.randn(batch, rows, 4, generator=generator(50 + k), dtype=torch.float64) for k in range(3)]
    mask = torch.rand(rows, 3, generator=generator(53)) < 0.6
    gamma_prime = torch.randn(batch, 3, 4, num_states, generator=generator(54), dtype=torch.float64)
    alpha = torch.randn(batch, 3, 4, generator=generator(55), dtype=torch.float64)
    row_weights = torch.randn(batch, rows, generator=generator(56), dtype=torch.float64)
    hidden = [torch.where(mask[:, k].view(1, rows, 1), column, -math.inf) for k, column in enumerate(columns)]
    shares = [column_shares(column, row_weights, alpha[:, k], num_states) for k, column in enumerate(columns)]
    output = share_pop(shares, None, mask, row_weights, gamma_prime, alpha)
    torch.testing.assert_close(output, dense_pop(hidden, gamma_prime, num_states))


def test_pop_gradients() -> None:
    num_states, batch = 2, 1
    sizes = [2, 4]
    columns = [
        torch.randn(batch, size, 4, generator=generator(30 + k), dtype=torch.float64, requires_grad=True)
        for k, size in enumerate(sizes)
    ]
    gamma_prime = torch.randn(batch, 2, 4, num_states, generator=generator(40), dtype=torch.float64, requires_grad=True)
    alpha = torch.randn(batch, 2, 4, generator=generator(41), dtype=torch.float64)
    row_weights = torch.randn(batch, 4, generator=generator(42), dtype=torch.float64)

    def with_prepared(gamma_prime: Tensor, first: Tensor, second: Tensor) -> Tensor:
        prepared = [prepare_column(first, alpha[:, 0]), prepare_column(second, alpha[:, 1])]
        return prepared_log_pop(prepared, None, gamma_prime, alpha, num_states)

    def with_shares(gamma_prime: Tensor, first: Tensor, second: Tensor) -> Tensor:
        shares = [
            column_shares(first, row_weights[:, :2], alpha[:, 0], num_states),
            column_shares(second, row_weights, alpha[:, 1], num_states),
        ]
        buffer = append_share(append_share(None, shares[0].detach(), 0), shares[1].detach(), 1)
        return share_pop(shares, buffer, None, row_weights, gamma_prime, alpha)

    for function in (with_prepared, with_shares):
        assert torch.autograd.gradcheck(function, (gamma_prime, *columns))
