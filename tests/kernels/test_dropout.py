"""Dropout on the compiled kernel: Philox4x32-10 masks, Bernoulli(1 − p) statistics, 1/(1 − p) scaling,
the same masks from the same seed, and the backward's mask equal to the forward's."""

from __future__ import annotations

import math

import pytest
import torch

import torch.nn.functional as F
from torch import nn

from stacklm.kernels import build
from stacklm.kernels.backend import accelerate
from stacklm.kernels.dropout import draw_key, draw_keys, dropout, dropout_add, dropout_add_norm, relu_dropout
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model

MASK32 = 0xFFFFFFFF

pytestmark = pytest.mark.skipif(not build.available()[0], reason="the compiled kernels do not build here")


def philox4x32_10(counter: tuple[int, int, int, int], key: tuple[int, int]) -> tuple[int, int, int, int]:
    """Salmon et al. (2011): 10 rounds of the Philox S-box, the key bumped by the Weyl constants."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        product0, product1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (product1 >> 32) ^ c1 ^ k0, product1 & MASK32, (product0 >> 32) ^ c3 ^ k1, product0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def test_philox_reference_gives_the_known_answers() -> None:
    """The known-answer vectors of Random123's kat_vectors for philox4x32_10."""
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox4x32_10((MASK32,) * 4, (MASK32, MASK32)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    pi = philox4x32_10((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0))
    assert pi == (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


@pytest.mark.parametrize("size", [1, 63, 64, 65, 200])
@pytest.mark.parametrize("key", [0, 12345, -(2**63), 2**63 - 1])
def test_mask_is_the_philox_stream_against_the_threshold(size: int, key: int) -> None:
    """Element i is kept iff word i of Philox(counter ⌊i/4⌋, key) ≥ round(p · 2³²), also across blocks and tails."""
    p = 0.3
    x = torch.arange(1, size + 1, dtype=torch.float64)
    key_words = (key % 2**64 & MASK32, key % 2**64 >> 32)
    words = [word for group in range((size + 3) // 4) for word in philox4x32_10((group, 0, 0, 0), key_words)][:size]
    expected = torch.tensor([1 / (1 - p) if word >= round(p * 2**32) else 0.0 for word in words], dtype=torch.float64) * x
    torch.testing.assert_close(torch.ops.stacklm_dropout.dropout(x, p, key), expected, rtol=1e-15, atol=0)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_masks_are_bernoulli_with_the_inverse_keep_scaling(p: float) -> None:
    """Kept fraction within 5σ of 1 − p overall, per stream word lane and per call; neighbours
    independent (P(both kept) within 5σ of (1 − p)²); kept values are exactly x / (1 − p)."""
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 0.5
    out = dropout(x, p, True)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] * (1 / (1 - p)), rtol=1e-6, atol=0)
    count = kept.numel()
    assert abs(kept.double().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / count)
    for lane in range(4):
        lane_kept = kept.flatten()[lane::4].double()
        assert abs(lane_kept.mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / lane_kept.numel())
    flat = kept.flatten()
    both = (flat[:-1] & flat[1:]).double().mean().item()
    keep_both = (1 - p) ** 2
    assert abs(both - keep_both) < 5 * math.sqrt(keep_both * (1 - keep_both) / count)
    second = dropout(x, p, True) != 0
    assert not torch.equal(kept, second)
    agreement = (kept == second).double().mean().item()
    assert abs(agreement - ((1 - p) ** 2 + p**2)) < 0.01


def test_same_seed_same_masks_and_the_generator_advances() -> None:
    x = torch.ones(10_000)
    torch.manual_seed(7)
    first, after_first = dropout(x, 0.1, True), torch.rand(1)
    torch.manual_seed(7)
    second, after_second = dropout(x, 0.1, True), torch.rand(1)
    assert torch.equal(first, second) and torch.equal(after_first, after_second)
    torch.manual_seed(7)
    assert not torch.equal(torch.rand(1), after_first)  # dropout drew from torch's generator


def test_keys_drawn_together_are_those_drawn_one_by_one() -> None:
    """draw_keys(k): the keys of k calls of draw_key, the generator left in the same state."""
    torch.manual_seed(3)
    one_by_one = [draw_key() for _ in range(20)]
    state = torch.random.get_rng_state()
    torch.manual_seed(3)
    assert draw_keys(20) == one_by_one
    assert torch.equal(torch.random.get_rng_state(), state)


def test_backward_applies_the_forward_mask() -> None:
    x = torch.randn(37, 29, dtype=torch.float64, requires_grad=True)
    residual = torch.randn(37, 29, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    out = dropout(x, 0.4, True)
    out.backward(torch.full_like(out, 2.0))
    assert x.grad is not None
    torch.testing.assert_close(x.grad, 2.0 * (out != 0).double() / 0.6, rtol=1e-15, atol=0)
    x.grad = None
    torch.manual_seed(3)
    fused = dropout_add(residual, x, 0.4, True)
    torch.testing.assert_close(fused, residual + out, rtol=1e-15, atol=1e-15)
    fused.backward(torch.full_like(out, 2.0))
    assert residual.grad is not None
    torch.testing.assert_close(x.grad, 2.0 * (out != 0).double() / 0.6, rtol=1e-15, atol=0)
    torch.testing.assert_close(residual.grad, torch.full_like(out, 2.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_dropout_equals_dropout_of_relu(dtype: torch.dtype) -> None:
    """The same mask as ``dropout`` of ReLU(x) from the same seed, and the same gradient, zeros and
    negative inputs included; off, it is ReLU."""
    x = torch.randn(33, 65, dtype=dtype, generator=torch.Generator().manual_seed(0))
    x[0, :10] = 0
    grad = torch.randn(33, 65, dtype=dtype, generator=torch.Generator().manual_seed(1))
    results = []
    for fused in (True, False):
        inputs = x.clone().requires_grad_()
        torch.manual_seed(5)
        output = relu_dropout(inputs, 0.3, True) if fused else dropout(torch.relu(inputs), 0.3, True)
        output.backward(grad)
        results.append((output, inputs.grad))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(relu_dropout(x, 0.3, False), torch.relu(x), rtol=0, atol=0)
    torch.testing.assert_close(relu_dropout(x, 0.0, True), torch.relu(x), rtol=0, atol=0)


@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("sum_read_after", [True, False])
def test_dropout_add_norm_equals_dropout_add_then_pytorch_layer_norm(with_residual: bool, sum_read_after: bool) -> None:
    """The sum and its norm against ``dropout_add`` (``dropout``) then ``F.layer_norm`` from the same
    seed, in float64, and the gradients of the residual, the input, the norm's weight and bias,
    with the sum read after the norm (the residual path) or by the norm alone."""
    generator = torch.Generator().manual_seed(0)
    x, residual = (torch.randn(3, 11, 68, dtype=torch.float64, generator=generator) for _ in range(2))
    norm = nn.LayerNorm(68).double()
    with torch.no_grad():
        norm.weight.copy_(torch.rand(68, dtype=torch.float64, generator=generator) + 0.5)
        norm.bias.copy_(torch.randn(68, dtype=torch.float64, generator=generator))
    grad_total, grad_normed = (torch.randn(3, 11, 68, dtype=torch.float64, generator=generator) for _ in range(2))
    results = []
    for fused in (True, False):
        inputs = [x.clone().requires_grad_(), residual.clone().requires_grad_()]
        norm.zero_grad()
        torch.manual_seed(4)
        if fused:
            total, normed = dropout_add_norm(inputs[1] if with_residual else None, inputs[0], norm, 0.3, True)
        else:
            total = dropout_add(inputs[1], inputs[0], 0.3, True) if with_residual else dropout(inputs[0], 0.3, True)
            normed = F.layer_norm(total, (68,), norm.weight, norm.bias, norm.eps)
        loss = (normed * grad_normed).sum() + ((total * grad_total).sum() if sum_read_after else 0)
        loss.backward()
        grads = [tensor.grad for tensor in (*inputs, norm.weight, norm.bias)]
        results.append((total, normed, *grads))
    assert (results[0][0] == 0).any() or with_residual  # without a residual, dropped elements are 0
    for got, expected in zip(*results):
        if expected is None:
            assert got is None
        else:
            torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_dropout_add_norm_float32_as_close_to_float64_as_pytorch_float32() -> None:
    """At the paper's width (68) and batch (32 × 33) in float32: the error against the float64 PyTorch
    operations on the same mask at most twice that of the float32 PyTorch operations, for the
    sum, the norm and every gradient (the weight's and the bias's sum 1,056 rows)."""
    generator = torch.Generator().manual_seed(1)
    x, residual, grad_normed = (torch.randn(32, 33, 68, generator=generator) for _ in range(3))
    norm = nn.LayerNorm(68)
    results = {}
    for way in ("fused", torch.float32, torch.float64):
        inputs = [x.clone().requires_grad_(), residual.clone().requires_grad_()]
        norm.zero_grad()
        torch.manual_seed(4)
        if way == "fused":
            total, normed = dropout_add_norm(inputs[1], inputs[0], norm, 0.1, True)
        else:
            total = dropout_add(inputs[1].to(way), inputs[0].to(way), 0.1, True)
            normed = F.layer_norm(total, (68,), norm.weight.to(way), norm.bias.to(way), norm.eps)
        (normed * grad_normed).sum().backward()
        results[way] = [tensor.double() for tensor in (total, normed, *(leaf.grad for leaf in (*inputs, norm.weight, norm.bias)))]
    for fused, single, double in zip(results["fused"], results[torch.float32], results[torch.float64]):
        error, pytorch_error = (fused - double).abs().max().item(), (single - double).abs().max().item()
        assert error <= max(2 * pytorch_error, 1e-7 * double.abs().max().item())


def test_off_is_the_identity() -> None:
    x = torch.randn(5, 4)
    assert dropout(x, 0.1, False) is x and dropout(x, 0.0, True) is x
    residual = torch.randn(5, 4)
    torch.testing.assert_close(dropout_add(residual, x, 0.1, False), residual + x, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["cpu-compiled", "torch"])
@pytest.mark.parametrize("name", ["Tf", "Tf+Nd", "RNN", "LSTM", "RNN+Nd", "LSTM+Nd+R", "LSTM+Sup"])
def test_a_training_step_is_the_same_from_the_same_seed(name: str, backend: str) -> None:
    """Same seed, same masks: the same loss and gradients, twice; another seed, another loss."""
    model = build_model(name, 6, options=ModelOptions(width=16), generator=torch.Generator().manual_seed(0))
    model = accelerate(model, backend).train()
    tokens = torch.randint(0, 5, (4, 7), generator=torch.Generator().manual_seed(1))
    results = []
    for seed in (5, 5, 6):
        model.zero_grad()
        torch.manual_seed(seed)
        loss = model(tokens).logsumexp(dim=-1).sum()
        loss.backward()
        results.append((loss.detach(), [parameter.grad.clone() for parameter in model.parameters() if parameter.grad is not None]))
    assert torch.equal(results[0][0], results[1][0]) and not torch.equal(results[0][0], results[2][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


@pytest.mark.parametrize("name", ["Tf", "LSTM+Nd"])
def test_the_backends_draw_other_masks_from_the_same_seed(name: str) -> None:
    """What a run's recorded backend makes visible: the same model and seed, another loss."""
    losses = []
    for backend in ("cpu-compiled", "torch"):
        model = build_model(name, 6, options=ModelOptions(width=16), generator=torch.Generator().manual_seed(0))
        model = accelerate(model, backend).train()
        torch.manual_seed(5)
        losses.append(model(torch.randint(0, 5, (4, 7), generator=torch.Generator().manual_seed(1))).logsumexp(dim=-1).sum())
    assert not torch.equal(*losses)

