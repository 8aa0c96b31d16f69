"""The two engines agree on the pops (float64), and the fast engine copies each buffer once."""

from __future__ import annotations

import torch
from torch import Tensor

from stacklm.semiring import LOG
from stacklm.stacks.contraction import FAST, ReferenceContraction, ShiftedColumn

NUM_STATES, NUM_SYMBOLS = 2, 2
CONFIGURATIONS = NUM_STATES * NUM_SYMBOLS


def random(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_engines_agree_on_pop_and_pop_rows() -> None:
    """Columns of growing rows (a full stack: the fast engine's buffer) and of equal rows (a window)."""
    reference = ReferenceContraction(LOG)
    splits = 3
    alphas = random(2, splits, CONFIGURATIONS, seed=0)
    row_weights = random(2, splits * CONFIGURATIONS, seed=1)
    gamma_prime = random(2, splits, CONFIGURATIONS, NUM_STATES, seed=2)
    for growing in (True, False):
        kept_reference, kept_fast = [], []
        for split in range(splits):
            rows = (split + 1 if growing else splits) * CONFIGURATIONS
            column = random(2, rows, CONFIGURATIONS, seed=3 + split)
            arguments = (column, alphas[:, split], row_weights[:, :rows], NUM_STATES)
            index = split if growing else None
            kept_reference.append(reference.prepare(*arguments, None, index))
            kept_fast.append(FAST.prepare(*arguments, kept_fast[-1] if kept_fast else None, index))
        expected = reference.pop(kept_reference, None, gamma_prime, alphas, NUM_STATES, row_weights)
        torch.testing.assert_close(FAST.pop(kept_fast, None, gamma_prime, alphas, NUM_STATES, row_weights), expected)
    ranges = [(0, 2), (CONFIGURATIONS, 2 * CONFIGURATIONS)]
    torch.testing.assert_close(
        FAST.pop_rows(kept_fast, ranges, gamma_prime, alphas, NUM_STATES),
        reference.pop_rows(kept_reference, ranges, gamma_prime, alphas, NUM_STATES),
    )


def test_fast_transform_copies_each_buffer_once() -> None:
    alpha = random(2, CONFIGURATIONS, seed=10)
    columns: list[ShiftedColumn] = []
    for index in range(3):
        rows = (index + 1) * CONFIGURATIONS
        column = random(2, rows, CONFIGURATIONS, seed=11 + index)
        row_weights = random(2, rows, seed=14 + index)
        columns.append(FAST.prepare(column, alpha, row_weights, NUM_STATES, columns[-1] if columns else None, index, 3))
    assert len({id(column.buffer) for column in columns}) == 1
    moved = FAST.transform(tuple(columns), lambda tensor: tensor[:1])
    assert len({id(column.buffer) for column in moved}) == 1
    assert moved[0].buffer is not None and columns[0].buffer is not None
    assert moved[0].buffer is not columns[0].buffer
    torch.testing.assert_close(moved[0].buffer.tensor, columns[0].buffer.tensor[:1])
    assert moved[0].buffer.filled == columns[0].buffer.filled
