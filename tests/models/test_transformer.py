"""Transformer details: sinusoidal encodings, BOS, scaled embeddings, attention against PyTorch's."""

from __future__ import annotations

import math

import pytest
import torch

from stacklm.models.transformer import CausalSelfAttention, Transformer, TransformerConfig, sinusoidal_encoding


def test_sinusoidal_encoding_values() -> None:
    encoding = sinusoidal_encoding(torch.arange(3), 4)
    expected = torch.tensor(
        [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(3)], dtype=torch.float64
    )
    torch.testing.assert_close(encoding, expected)


def test_positional_encodings_are_those_of_each_position_whatever_came_before() -> None:
    """The model's table of encodings, grown by later, longer requests and rebuilt for another dtype,
    gives each position's sinusoidal encoding, in the dtype asked for."""
    model = Transformer(TransformerConfig(vocabulary_size=5, width=8, layers=(None,)))
    for first, length, dtype in [(0, 3, torch.float32), (2, 9, torch.float32), (0, 4, torch.float32), (30, 1, torch.float64), (5, 2, torch.float32)]:
        expected = sinusoidal_encoding(torch.arange(first, first + length), 8).to(dtype)
        torch.testing.assert_close(model._positional_encoding(first, length, torch.zeros(1, dtype=dtype)), expected, rtol=0, atol=1e-15)


def test_first_logits_come_from_bos_alone() -> None:
    config = TransformerConfig(vocabulary_size=5, width=8, layers=(None, None), dropout=0.0)
    model = Transformer(config)
    model.initialize(torch.Generator().manual_seed(0))
    x = model.embedding(torch.tensor([[5]])) * math.sqrt(8) + sinusoidal_encoding(torch.arange(1), 8).float()
    for block in model.blocks:
        x = x + block.sublayer(block.sublayer_norm(x))
        x = x + block.feedforward(block.feedforward_norm(x))
    expected = model.final_norm(x) @ model.embedding.matrix()[:5].t()
    torch.testing.assert_close(model(torch.tensor([[1, 2]]))[:, 0], expected[:, 0])


@pytest.mark.parametrize("training", [False, True])
def test_attention_equals_pytorch_scaled_dot_product_attention(training: bool) -> None:
    """The attention layer against PyTorch's, gradients included; in training, the same dropout
    mask (``F.dropout``'s from the same seed) on the probabilities of PyTorch's math."""
    attention = CausalSelfAttention(8, 4, dropout=0.3).double().train(training)
    x = torch.randn(3, 6, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    results = []
    for written_out in (True, False):
        inputs = x.clone().requires_grad_()
        torch.manual_seed(2)
        if written_out:
            output = attention(inputs)
        else:
            queries, keys, values = [attention._heads(layer(inputs)) for layer in (attention.query, attention.key, attention.value)]
            if training:
                causal = torch.ones(6, 6, dtype=torch.bool).tril()
                probabilities = torch.softmax((queries @ keys.transpose(-1, -2) / math.sqrt(2)).masked_fill(~causal, -math.inf), dim=-1)
                attended = torch.nn.functional.dropout(probabilities, 0.3, True) @ values
            else:
                attended = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, is_causal=True)
            output = attention.out(attended.transpose(1, 2).reshape(3, 6, 8))
        output.square().sum().backward()
        results.append((output, inputs.grad))
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
