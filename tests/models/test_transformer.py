"""Transformer details: sinusoidal encodings, BOS, scaled embeddings."""

from __future__ import annotations

import math

import torch

from stacklm.models.transformer import Transformer, TransformerConfig, sinusoidal_encoding


def test_sinusoidal_encoding_values() -> None:
    encoding = sinusoidal_encoding(torch.arange(3), 4)
    expected = torch.tensor(
        [[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(3)], dtype=torch.float64
    )
    torch.testing.assert_close(encoding, expected)


def test_first_logits_come_from_bos_alone() -> None:
    config = TransformerConfig(vocabulary_size=5, width=8, layers=(None, None), dropout=0.0)
    model = Transformer(config)
    model.initialize(torch.Generator().manual_seed(0))
    x = model.embedding(torch.tensor([[5]])) * math.sqrt(8) + sinusoidal_encoding(torch.arange(1), 8).float()
    for block in model.blocks:
        x = block(x)
    expected = model.final_norm(x) @ model.embedding.matrix()[:5].t()
    torch.testing.assert_close(model(torch.tensor([[1, 2]]))[:, 0], expected[:, 0])
