"""Batches padded to their bucket (``stacklm/training/buckets.py``): the loss and gradients of the
eager step, for every architecture."""

from __future__ import annotations

import pytest
import torch

from stacklm.models.registry import ARCHITECTURES
from stacklm.training.batching import make_batch
from stacklm.training.buckets import bucket_size, pad_to_bucket, padded_loss
from stacklm.training.loss import batch_loss
from tests.models.conftest import tiny_model

STRINGS = [[1, 2, 3, 4, 5], [2, 3], [4, 4, 1, 2, 3, 5, 1], [3], [5, 1, 2]]  # B = 5, n = 7: bucket (5, 8)
EOS = 6


def test_bucket_sizes_follow_the_grid() -> None:
    assert [bucket_size(size) for size in range(1, 14)] == [1, 2, 3, 4, 5, 6, 8, 8, 10, 10, 12, 12, 16]
    assert [bucket_size(size) for size in (17, 21, 25, 33, 100, 1000)] == [20, 24, 32, 40, 128, 1024]
    assert all(size <= bucket_size(size) < 4 * size / 3 + 1 for size in range(1, 2000))


def test_a_padded_batch_keeps_the_strings_and_weighs_padding_zero() -> None:
    batch = make_batch(STRINGS[:3], range(3), EOS)
    padded = pad_to_bucket(batch)
    assert padded.shape == (3, 8)
    assert torch.equal(padded.inputs[:, :7], batch.inputs) and torch.equal(padded.mask[:, :8], batch.mask)
    assert not padded.mask[:, 8:].any()
    assert padded.row_weights.tolist() == pytest.approx([1 / 3] * 3)
    padded = pad_to_bucket(make_batch(STRINGS, range(5), EOS))
    assert padded.shape == (5, 8)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_the_padded_loss_and_gradients_equal_the_eager_ones(name: str) -> None:
    model = tiny_model(name).double().train()  # dropout 0: the same function on both shapes
    strings = STRINGS + [[2, 2, 2, 2, 2, 2], [1]]  # B = 7 → 8 rows, n = 7 → 8 positions
    batch = make_batch(strings, range(len(strings)), EOS)
    padded = pad_to_bucket(batch)
    assert padded.shape == (8, 8)
    eager = batch_loss(model, batch)
    eager_gradients = torch.autograd.grad(eager, list(model.parameters()), allow_unused=True)
    loss = padded_loss(model, padded)
    gradients = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(loss, eager, rtol=1e-6, atol=0.0)
    for parameter_name, expected, actual in zip((name for name, _ in model.named_parameters()), eager_gradients, gradients):
        if expected is None:
            assert actual is None, parameter_name
        else:
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-9, msg=parameter_name)
