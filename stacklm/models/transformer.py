"""Transformer and stack-attention transformer language models (DuSell & Cotterell (2025) App. C.3, C.4).

Input: BOS, then w_1 … w_n; x_0 … x_n = √d · Ẽ_{input} + PE (sinusoidal, Vaswani et al.), then
dropout. Each of the L layers is pre-norm:

    x ← x + Dropout(Sublayer(LN(x))),   x ← x + Dropout(FFN(LN(x))),
    FFN(x) = W_2 Dropout(ReLU(W_1 x + b_1)) + b_2   (hidden size 2d),

where Sublayer is causal scaled dot-product attention with 4 heads (dropout on its
probabilities) or, in a stack-attention layer, y_t = W_y r_t with r_t the reading of a stack
driven by a'_t = W_a LN(x)_t and v_t = σ(W_v LN(x)_t) after its t-th step (one step per input
position, BOS included). After the last layer: LN, then the tied output y_t = Ẽ_{:V} x_t (no
bias). Position t's output (BOS = position 0) gives the logits of w_{t+1}; position n's, EOS.

Each residual add is computed with the layer norm that reads its sum (the next sublayer's, or
the final one: ``Dropout.add_norm``), so that a faster implementation can fuse them
(``stacklm.kernels.attention`` runs this model on compiled CPU kernels).

Step by step, the state caches the keys and values of every attention layer and the stack
state of every stack layer, so each new token costs one position.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.models.base import RELU_GAIN, LanguageModel, Layers, ModelState, layer_norm_, uniform_layer_, xavier_
from stacklm.models.dropout import Dropout, ReLUDropout
from stacklm.models.embedding import FeatureTable, TiedEmbedding
from stacklm.models.options import ReferenceBehaviour
from stacklm.models.stack_interface import StackInterface, StackSpec, build_interface
from stacklm.stacks.base import StackState


@dataclass(frozen=True)
class TransformerConfig:
    vocabulary_size: int  # V, output symbols (EOS last); the input adds BOS = index V
    width: int  # d, divisible by num_heads and even (sinusoidal encodings)
    layers: tuple[StackSpec | None, ...]  # one entry per layer: None = attention, else its stack
    num_heads: int = 4
    feedforward_factor: int = 2  # FFN hidden size = factor · d
    dropout: float = 0.1
    syntax_feature_width: int | None = None  # f of the +Syn embedding; None = plain embedding
    reference: ReferenceBehaviour = field(default_factory=ReferenceBehaviour)

    def __post_init__(self) -> None:
        if self.width % self.num_heads or self.width % 2:
            raise ValueError(f"width {self.width} must be even and divisible by num_heads = {self.num_heads}")
        if not self.layers:
            raise ValueError("a transformer needs at least one layer")


def sinusoidal_encoding(positions: Tensor, width: int) -> Tensor:
    """PE[p, 2i] = sin(p / 10000^{2i/d}), PE[p, 2i+1] = cos(p / 10000^{2i/d}): (len(positions), d)."""
    exponents = torch.arange(0, width, 2, dtype=torch.float64, device=positions.device)
    frequencies = torch.exp(exponents * (-math.log(10000.0) / width))  # (d/2,)
    angles = positions.to(torch.float64).unsqueeze(1) * frequencies  # (n, d/2)
    return torch.stack([angles.sin(), angles.cos()], dim=2).flatten(1)  # (n, d)


def causal_mask(length: int, like: Tensor) -> Tensor:
    """(n, n): 0 on and below the diagonal, −∞ above it (position i attends to j ≤ i)."""
    return torch.full((length, length), -math.inf, dtype=like.dtype, device=like.device).triu(1)


@dataclass(frozen=True)
class AttentionCache:
    keys: Tensor  # (B, heads, t, d/heads)
    values: Tensor  # (B, heads, t, d/heads)

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> AttentionCache:
        return AttentionCache(function(self.keys), function(self.values))


class CausalSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention, causally masked; 4d(d + 1) parameters."""

    def __init__(self, width: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.dropout = Dropout(dropout)  # on the attention probabilities
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def _heads(self, x: Tensor) -> Tensor:
        batch_size, length, width = x.shape
        return x.view(batch_size, length, self.num_heads, width // self.num_heads).transpose(1, 2)  # (B, heads, n, d/heads)

    def _attend(self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None) -> Tensor:
        """softmax(q kᵀ / √(d/heads) + mask) v, dropout on the probabilities; (B·heads, ·, d/heads) in, (B, ·, d) out.

        Written out rather than ``F.scaled_dot_product_attention``: with dropout, PyTorch's CPU
        path is its reference implementation, whose safe softmax adds a comparison, a reduction
        and a select per layer. Here the scaled scores and the mask are one ``baddbmm``.
        """
        scale = queries.size(-1) ** -0.5
        if mask is None:
            scores = torch.bmm(queries, keys.transpose(1, 2)) * scale  # (B·heads, n_q, n_k)
        else:
            scores = torch.baddbmm(mask, queries, keys.transpose(1, 2), alpha=scale)  # (B·heads, n_q, n_k)
        probabilities = self.dropout(torch.softmax(scores, dim=-1))
        attended = torch.bmm(probabilities, values)  # (B·heads, n_q, d/heads)
        heads, length, head_width = attended.shape
        attended = attended.view(heads // self.num_heads, self.num_heads, length, head_width).transpose(1, 2)
        return self.out(attended.reshape(heads // self.num_heads, length, self.num_heads * head_width))  # (B, n, d)

    def project(self, x: Tensor) -> Tensor:
        """[q ; k ; v] of x (B, n, d) from one product, the three layers' weights side by side: (B, n, 3d),
        each of q, k and v with its heads side by side."""
        weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3d, d)
        bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])  # (3d,)
        return F.linear(x, weight, bias)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, n, d) → (B, n, d)."""
        batch_size, length, width = x.shape
        projected = self.project(x).view(batch_size, length, 3, self.num_heads, width // self.num_heads)
        heads = projected.permute(2, 0, 3, 1, 4).reshape(3, batch_size * self.num_heads, length, width // self.num_heads)
        queries, keys, values = heads.unbind(0)  # (B·heads, n, d/heads) each
        return self._attend(queries, keys, values, causal_mask(length, x))

    def step(self, x: Tensor, cache: AttentionCache) -> tuple[Tensor, AttentionCache]:
        """One new position x (B, 1, d), attending to the cached ones and itself."""
        cache = AttentionCache(
            torch.cat([cache.keys, self._heads(self.key(x))], dim=2), torch.cat([cache.values, self._heads(self.value(x))], dim=2)
        )
        return self._attend(*(heads.flatten(0, 1) for heads in (self._heads(self.query(x)), cache.keys, cache.values)), None), cache

    def empty_cache(self, batch_size: int, like: Tensor) -> AttentionCache:
        width = self.query.in_features
        empty = like.new_zeros(batch_size, self.num_heads, 0, width // self.num_heads)
        return AttentionCache(empty, empty)

    def initialize(self, generator: torch.Generator) -> None:
        for layer in (self.query, self.key, self.value, self.out):
            uniform_layer_(layer, generator)


class StackAttention(nn.Module):
    """y_t = W_y r_t, r_t the reading of the stack after the actions of positions 1 … t."""

    def __init__(self, width: int, interface: StackInterface) -> None:
        super().__init__()
        self.interface = interface
        self.output_layer = nn.Linear(interface.reading_size, width, bias=False)  # W_y

    def forward(self, x: Tensor) -> Tensor:
        """x = LN(x̄) (B, n, d) → (B, n, d)."""
        return self.output_layer(self.interface.readings(x))

    def step(self, x: Tensor, stack: StackState[Any]) -> tuple[Tensor, StackState[Any]]:
        stack = stack.next(self.interface.actions(x.squeeze(1)))
        return self.output_layer(stack.reading()).unsqueeze(1), stack

    def empty_cache(self, batch_size: int, like: Tensor) -> StackState[Any]:
        return self.interface.initial_state(batch_size, like)

    def initialize(self, generator: torch.Generator) -> None:
        self.interface.initialize(generator)
        xavier_(self.output_layer, 1.0, generator)


class FeedForward(nn.Module):
    def __init__(self, width: int, hidden_size: int, dropout: float) -> None:
        super().__init__()
        self.expand = nn.Linear(width, hidden_size)
        self.dropout = ReLUDropout(dropout)  # Dropout(ReLU(·)) in one pass
        self.project = nn.Linear(hidden_size, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.project(self.dropout(self.expand(x)))

    def initialize(self, generator: torch.Generator, xavier: bool) -> None:
        if xavier:
            xavier_(self.expand, RELU_GAIN, generator)
            xavier_(self.project, 1.0, generator)
        else:
            uniform_layer_(self.expand, generator)
            uniform_layer_(self.project, generator)


class Block(nn.Module):
    """One pre-norm layer: a causal attention or stack-attention sublayer, then the FFN."""

    def __init__(self, config: TransformerConfig, spec: StackSpec | None) -> None:
        super().__init__()
        width = config.width
        self.sublayer_norm = nn.LayerNorm(width)
        self.sublayer: CausalSelfAttention | StackAttention
        if spec is None:
            self.sublayer = CausalSelfAttention(width, config.num_heads, config.dropout)
        else:
            interface = build_interface(spec, width, bias=False, pushed_vector=config.reference.pushed_vector)
            self.sublayer = StackAttention(width, interface)
        self.feedforward_norm = nn.LayerNorm(width)
        self.feedforward = FeedForward(width, config.feedforward_factor * width, config.dropout)
        self.dropout = Dropout(config.dropout)
        # Reference: the FFN of a standard layer is U(−0.1, 0.1), of a stack layer Xavier.
        self.xavier_feedforward = spec is not None or config.reference.initialization == "paper"

    def forward(self, x: Tensor, normed: Tensor, next_norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
        """x (B, n, d) and LN(x) by ``sublayer_norm`` → the layer's output and ``next_norm`` of it.

        x ← x + Dropout(Sublayer(LN(x))), then x ← x + Dropout(FFN(LN(x))): each add in one call
        with the layer norm that reads its sum (the FFN's, then the next layer's or the final one)."""
        x, normed = self.dropout.add_norm(x, self.sublayer(normed), self.feedforward_norm)
        return self.dropout.add_norm(x, self.feedforward(normed), next_norm)

    def step(self, x: Tensor, cache: Any) -> tuple[Tensor, Any]:
        sublayer_output, cache = self.sublayer.step(self.sublayer_norm(x), cache)
        x = self.dropout.add(x, sublayer_output)
        return self.dropout.add(x, self.feedforward(self.feedforward_norm(x))), cache

    def initialize(self, generator: torch.Generator) -> None:
        layer_norm_(self.sublayer_norm)
        layer_norm_(self.feedforward_norm)
        self.sublayer.initialize(generator)
        self.feedforward.initialize(generator, self.xavier_feedforward)


class Transformer(LanguageModel):
    def __init__(self, config: TransformerConfig, features: FeatureTable | None = None) -> None:
        super().__init__()
        if (features is None) != (config.syntax_feature_width is None):
            raise ValueError("a feature table is needed exactly when syntax_feature_width is set")
        self.config = config
        self.vocabulary_size = config.vocabulary_size
        self.bos_index = config.vocabulary_size
        self.embedding = TiedEmbedding(config.vocabulary_size + 1, config.width, features, config.syntax_feature_width or 0)
        self.input_dropout = Dropout(config.dropout)
        self.blocks = Layers(Block(config, spec) for spec in config.layers)
        self.final_norm = nn.LayerNorm(config.width)
        self._encodings: Tensor | None = None  # PE of positions 0 … (:meth:`_positional_encoding`), not state

    def _positional_encoding(self, first_position: int, length: int, like: Tensor) -> Tensor:
        """PE of positions first_position … first_position + length − 1, in like's dtype and device: (n, d),
        rows of a table kept for the longest sequence so far (each row computed as for its position alone)."""
        end = first_position + length
        table = self._encodings
        if table is None or table.size(0) < end or table.dtype != like.dtype or table.device != like.device:
            rows = max(end, 2 * table.size(0) if table is not None else 0)
            table = sinusoidal_encoding(torch.arange(rows, device=like.device), self.config.width).to(like.dtype)  # (rows, d)
            self._encodings = table
        return table[first_position:end]

    def _encode(self, tokens: Tensor, first_position: int) -> Tensor:
        """√d · Ẽ_w + PE for tokens (B, n) at positions first_position …: (B, n, d)."""
        encoding = self._positional_encoding(first_position, tokens.size(1), self.embedding.token_weight)  # (n, d)
        return self.embedding(tokens) * math.sqrt(self.config.width) + encoding

    def _encode_norm(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """x = Dropout(√d · Ẽ_w + PE) for tokens (B, n) from position 0, and its norm by the first layer's
        sublayer_norm: (B, n, d) each."""
        return self.input_dropout.norm(self._encode(tokens, 0), self.blocks[0].sublayer_norm)

    def _embed(self, tokens: Tensor, first_position: int) -> Tensor:
        """Dropout(√d · Ẽ_w + PE): (B, n, d)."""
        return self.input_dropout(self._encode(tokens, first_position))

    def _logits(self, x: Tensor) -> Tensor:
        return self.embedding.logits(self.final_norm(x), self.vocabulary_size)

    def forward(self, tokens: Tensor) -> Tensor:
        bos = tokens.new_full((tokens.size(0), 1), self.bos_index)
        x, normed = self._encode_norm(torch.cat([bos, tokens], dim=1))  # (B, n + 1, d) each
        for block, next_norm in zip(self.blocks, self.next_norms()):
            x, normed = block(x, normed, next_norm)
        return self.embedding.logits(normed, self.vocabulary_size)  # (B, n + 1, V)

    def next_norms(self) -> list[nn.LayerNorm]:
        """The norm after each layer: the next layer's sublayer norm, the final norm after the last."""
        return [block.sublayer_norm for block in self.blocks][1:] + [self.final_norm]

    def initial_state(self, batch_size: int) -> TransformerState:
        like = self.embedding.token_weight
        caches = tuple(block.sublayer.empty_cache(batch_size, like) for block in self.blocks)
        empty = TransformerState(self, 0, caches, like.new_zeros(batch_size, self.vocabulary_size))
        return empty._read(torch.full((batch_size,), self.bos_index, dtype=torch.long, device=like.device))

    def initialize(self, generator: torch.Generator) -> None:
        self.embedding.initialize(generator)
        for block in self.blocks:
            block.initialize(generator)
        layer_norm_(self.final_norm)


@dataclass(frozen=True)
class TransformerState(ModelState):
    model: Transformer
    position: int  # the position the next input will take (BOS is position 0)
    caches: tuple[Any, ...]  # per layer: AttentionCache or the stack state
    logits: Tensor  # (B, V)

    def _read(self, tokens: Tensor) -> TransformerState:
        x = self.model._embed(tokens.unsqueeze(1), self.position)  # (B, 1, d)
        caches = []
        for block, cache in zip(self.model.blocks, self.caches):
            x, cache = block.step(x, cache)
            caches.append(cache)
        return TransformerState(self.model, self.position + 1, tuple(caches), self.model._logits(x).squeeze(1))

    def output(self) -> Tensor:
        return self.logits

    def next(self, tokens: Tensor) -> TransformerState:
        return self._read(tokens)

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> TransformerState:
        caches = tuple(cache.transform_tensors(function) for cache in self.caches)
        return dataclasses.replace(self, caches=caches, logits=function(self.logits))

    def batch_size(self) -> int:
        return self.logits.size(0)
