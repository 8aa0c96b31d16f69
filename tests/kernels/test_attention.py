"""The compiled causal attention against the same operations in PyTorch: outputs and gradients,
its dropout mask against a Python Philox, and whole transformers against the PyTorch path."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

import stacklm.kernels.attention as attention_kernels
import stacklm.models.transformer as transformer
from stacklm.kernels import build
from stacklm.kernels.backend import accelerate
from stacklm.kernels.dropout import draw_key
from stacklm.models.embedding import FeatureTable
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model
from stacklm.kernels.attention import causal_attention, runs_as_one_node
from tests.kernels.test_dropout import MASK32, philox4x32_10

pytestmark = pytest.mark.skipif(not build.available()[0], reason="the compiled kernels do not build here")

LANES = 8  # the kernel's tiles are LANES × LANES (keys × queries)


def kernel_mask(pairs: int, length: int, p: float, key: int) -> torch.Tensor:
    """The kept (True) elements (pairs, n_q, n_k): element (i, j) of pair g is kept iff word
    LANES · (j mod LANES) + (i mod LANES) of tile ((g · T + ⌊j/LANES⌋) · T + ⌊i/LANES⌋) is ≥ round(p · 2³²),
    T = ⌈n / LANES⌉, tile t being counters 16t … 16t + 15 of Philox4x32-10 keyed by ``key``."""
    tiles = -(-length // LANES)
    key_words = (key % 2**64 & MASK32, key % 2**64 >> 32)
    cut = round(p * 2**32)
    kept = torch.zeros(pairs, length, length, dtype=torch.bool)
    for pair in range(pairs):
        for tile_key in range(tiles):
            for tile_query in range(tile_key, tiles):
                tile = (pair * tiles + tile_key) * tiles + tile_query
                words = [word for counter in range(16 * tile, 16 * tile + 16) for word in philox4x32_10((counter, 0, 0, 0), key_words)]
                for row in range(LANES):
                    for lane in range(LANES):
                        i, j = tile_query * LANES + lane, tile_key * LANES + row
                        if i < length and j < length:
                            kept[pair, i, j] = words[row * LANES + lane] >= cut
    return kept


def reference_attention(projected: torch.Tensor, num_heads: int, kept: torch.Tensor | None, p: float) -> torch.Tensor:
    """softmax(q kᵀ / √(d/heads), causal) with the mask ``kept`` / (1 − p) on the probabilities, in PyTorch."""
    batch_size, length, packed = projected.shape
    head_width = packed // (3 * num_heads)
    heads = projected.view(batch_size, length, 3, num_heads, head_width).permute(2, 0, 3, 1, 4)  # (3, B, heads, n, d/heads)
    queries, keys, values = heads.unbind(0)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    scores = (queries @ keys.transpose(-1, -2) / math.sqrt(head_width)).masked_fill(~causal, -math.inf)
    probabilities = torch.softmax(scores, dim=-1)  # (B, heads, n, n)
    if kept is not None:
        probabilities = probabilities * kept.view(batch_size, num_heads, length, length) / (1 - p)
    return (probabilities @ values).transpose(1, 2).reshape(batch_size, length, num_heads * head_width)


@pytest.mark.parametrize("length", [1, 7, 8, 9, 17, 33])
@pytest.mark.parametrize("training", [False, True])
def test_attention_equals_pytorch_with_the_mask_of_its_tiles(length: int, training: bool) -> None:
    """float64, gradients included; in training the mask is that of ``kernel_mask``."""
    num_heads, head_width, p = 2, 5, 0.3
    generator = torch.Generator().manual_seed(length)
    projected = torch.randn(3, length, 3 * num_heads * head_width, dtype=torch.float64, generator=generator)
    grad = torch.randn(3, length, num_heads * head_width, dtype=torch.float64, generator=generator)
    results = []
    for compiled in (True, False):
        inputs = projected.clone().requires_grad_()
        torch.manual_seed(4)
        if compiled:
            output = causal_attention(inputs, num_heads, p, training)
        else:
            kept = kernel_mask(3 * num_heads, length, p, draw_key()) if training else None
            output = reference_attention(inputs, num_heads, kept, p)
        output.backward(grad)
        results.append((output, inputs.grad))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("length", [17, 33, 65])
def test_float32_at_paper_size_within_float_tolerance(length: int) -> None:
    """d = 68, 4 heads of 17: float32 kernel against the float64 reference, outputs and gradients."""
    generator = torch.Generator().manual_seed(0)
    projected = torch.randn(4, length, 3 * 68, dtype=torch.float64, generator=generator)
    grad = torch.randn(4, length, 68, dtype=torch.float64, generator=generator)
    results = []
    for dtype in (torch.float32, torch.float64):
        inputs = projected.to(dtype).requires_grad_()
        torch.manual_seed(1)
        if dtype == torch.float32:
            output = causal_attention(inputs, 4, 0.1, True)
        else:
            output = reference_attention(inputs, 4, kernel_mask(16, length, 0.1, draw_key()), 0.1)
        output.backward(grad.to(dtype))
        results.append((output.double(), inputs.grad.double()))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spread", [1.0, 30.0])
def test_float32_exp_over_the_whole_range_of_scores(spread: float) -> None:
    """Scores spread so far apart (spread 30: hundreds) that most exp(s − max) underflow below the
    normal floats: the kernel's own float32 exp against the float64 reference, dropout off."""
    generator = torch.Generator().manual_seed(5)
    projected = torch.randn(3, 40, 3 * 68, dtype=torch.float64, generator=generator) * math.sqrt(spread)
    grad = torch.randn(3, 40, 68, dtype=torch.float64, generator=generator)
    results = []
    for dtype in (torch.float32, torch.float64):
        inputs = projected.to(dtype).requires_grad_()
        output = causal_attention(inputs, 4, 0.0, False) if dtype == torch.float32 else reference_attention(inputs, 4, None, 0.0)
        output.backward(grad.to(dtype))
        results.append((output.double(), inputs.grad.double()))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * spread)


def test_same_seed_same_mask_and_one_draw() -> None:
    projected = torch.randn(2, 20, 3 * 8)
    torch.manual_seed(9)
    first, after_first = causal_attention(projected, 2, 0.5, True), torch.rand(1)
    torch.manual_seed(9)
    second = causal_attention(projected, 2, 0.5, True)
    torch.manual_seed(9)
    draw_key()
    assert torch.equal(first, second) and torch.equal(after_first, torch.rand(1))
    assert not torch.equal(first, causal_attention(projected, 2, 0.5, True))


def test_two_threads_give_the_same_results() -> None:
    projected = torch.randn(8, 33, 3 * 68, generator=torch.Generator().manual_seed(2))
    grad = torch.randn(8, 33, 68, generator=torch.Generator().manual_seed(3))
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            inputs = projected.clone().requires_grad_()
            torch.manual_seed(3)
            output = causal_attention(inputs, 4, 0.1, True)
            output.backward(grad)
            results.append((output, inputs.grad))
    finally:
        torch.set_num_threads(threads)
    for got, expected in zip(*results):
        assert torch.equal(got, expected)


def test_first_use_loads_the_kernel() -> None:
    """``causal_attention`` in a fresh process, before anything else has loaded the library."""
    code = "import torch; from stacklm.kernels.attention import causal_attention; print(tuple(causal_attention(torch.ones(1, 3, 12), 2, 0.0, False).shape))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "(1, 3, 4)"


def test_kept_fraction_is_one_minus_p() -> None:
    kept = kernel_mask(2, 40, 0.25, 123)
    visible = torch.ones(40, 40, dtype=torch.bool).tril().expand(2, 40, 40)
    fraction = kept[visible].double().mean().item()
    assert abs(fraction - 0.75) < 5 * math.sqrt(0.25 * 0.75 / visible.sum().item())


@pytest.mark.parametrize("name", ["Tf", "Tf+Nd"])
@pytest.mark.parametrize("training", [False, True])
def test_transformers_equal_their_pytorch_attention_without_dropout(
    name: str, training: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paper width (68), dropout 0: logits and gradients with the compiled attention equal those
    of the PyTorch operations it replaces, within float32 tolerance."""
    model = build_model(name, 9, options=ModelOptions(dropout=0.0), generator=torch.Generator().manual_seed(0)).train(training)
    tokens = torch.randint(0, 8, (5, 21), generator=torch.Generator().manual_seed(1))
    results = []
    for backend in ("cpu-compiled", "torch"):
        accelerate(model, backend)
        model.zero_grad()
        logits = model(tokens)
        logits.logsumexp(dim=-1).sum().backward()
        results.append((logits.detach(), [parameter.grad.clone() for parameter in model.parameters() if parameter.grad is not None]))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    for got, expected in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["Tf", "Tf+Nd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layers_as_one_node_equal_the_modules_bit_for_bit(name: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """In training with dropout, attention layers run as one ``attention_layers`` node: the same
    masks (the same four keys, drawn in the modules' order), logits, gradients of every parameter
    and the generator's state after the step as the modules' own path (``runs_as_one_node``
    false), bit for bit; the last layer's output x reaches nothing (its gradient is None)."""
    model = build_model(name, 9, options=ModelOptions(dropout=0.3), generator=torch.Generator().manual_seed(0)).to(dtype).train()
    accelerate(model, "cpu-compiled")
    tokens = torch.randint(0, 8, (5, 21), generator=torch.Generator().manual_seed(1))
    one_node = [runs_as_one_node(block, torch.zeros(1, dtype=dtype), block.feedforward_norm) for block in model.blocks]
    assert one_node == [isinstance(block.sublayer, transformer.CausalSelfAttention) for block in model.blocks]
    results = []
    for one_node in (True, False):
        if not one_node:
            monkeypatch.setattr(attention_kernels, "runs_as_one_node", lambda block, x, next_norm: False)
        model.zero_grad()
        torch.manual_seed(4)
        logits = model(tokens)
        logits.logsumexp(dim=-1).sum().backward()
        results.append((logits.detach(), [parameter.grad.clone() for parameter in model.parameters()], torch.rand(1)))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(got, expected) for got, expected in zip(results[0][1], results[1][1]))
    assert torch.equal(results[0][2], results[1][2])


@pytest.mark.parametrize(("name", "runs"), [("Tf", [5]), ("Tf+Nd", [2, 2])])
def test_attention_layers_in_a_row_run_as_one_node(name: str, runs: list[int]) -> None:
    """In training with dropout, each run of attention layers between stack layers is one node of the graph."""
    model = accelerate(build_model(name, 9, options=ModelOptions(dropout=0.1), generator=torch.Generator().manual_seed(0)), "cpu-compiled").train()
    logits = model(torch.randint(0, 8, (3, 6), generator=torch.Generator().manual_seed(1)))
    nodes = [node for node in _graph_nodes(logits) if type(node).__name__ == "_AttentionLayersBackward"]
    parameters_per_layer = 16
    assert sorted(len(node.next_functions) - 2 for node in nodes) == sorted(parameters_per_layer * run for run in runs)


@pytest.mark.parametrize("syntax", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_encoded_input_as_one_node_equals_the_modules_bit_for_bit(syntax: bool, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """In training with dropout, Dropout(√d · Ẽ_w + PE) and the first layer's norm run as one node
    (``_EncodedInput``): logits, every gradient (the tied embedding's through its input and output
    uses; with +Syn the feature embeddings too) and the generator's state after the step equal those
    of the modules' own path (the embedding, scaling, add and ``Dropout.norm``), bit for bit."""
    features = FeatureTable.from_rows([{"pos": "N", "case": "none", "subword": "whole"}] * 4 + [{"pos": "V", "case": "acc", "subword": "whole"}] * 4)
    name, token_features = ("Tf+Syn", features) if syntax else ("Tf", None)
    options = ModelOptions(dropout=0.3, width=40)
    model = build_model(name, 9, token_features=token_features, options=options, generator=torch.Generator().manual_seed(0)).to(dtype).train()
    accelerate(model, "cpu-compiled")
    tokens = torch.randint(0, 8, (5, 21), generator=torch.Generator().manual_seed(1))
    results, nodes = [], []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(attention_kernels, "fuses_norm", lambda x, norm, p, training: False)
        model.zero_grad()
        torch.manual_seed(4)
        logits = model(tokens)
        nodes.append({type(node).__name__ for node in _graph_nodes(logits)})
        logits.logsumexp(dim=-1).sum().backward()
        results.append((logits.detach(), [parameter.grad.clone() for parameter in model.parameters()], torch.rand(1)))
    assert "_EncodedInputBackward" in nodes[0] and "_EncodedInputBackward" not in nodes[1]
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(got, expected) for got, expected in zip(results[0][1], results[1][1]))
    assert torch.equal(results[0][2], results[1][2])


def _graph_nodes(output: torch.Tensor) -> list:
    """The autograd nodes ``output`` was computed through."""
    nodes, seen, pending = [], set(), [output.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return nodes


def test_layers_run_as_one_node_only_in_training_with_dropout() -> None:
    model = build_model("Tf+Nd", 9, options=ModelOptions(dropout=0.1), generator=torch.Generator().manual_seed(0))
    x = torch.zeros(1)
    attention_layers = [isinstance(block.sublayer, transformer.CausalSelfAttention) for block in model.blocks]
    assert [runs_as_one_node(block, x, block.feedforward_norm) for block in model.train().blocks] == attention_layers
    assert not any(runs_as_one_node(block, x, block.feedforward_norm) for block in model.eval().blocks)
    assert not any(runs_as_one_node(block, x.double(), block.feedforward_norm) for block in model.train().blocks)
    unregularized = build_model("Tf", 9, options=ModelOptions(dropout=0.0), generator=torch.Generator().manual_seed(0)).train()
    assert not any(runs_as_one_node(block, x, block.feedforward_norm) for block in unregularized.blocks)
