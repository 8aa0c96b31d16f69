"""The transformer (``stacklm.models.transformer``) on compiled CPU kernels (``attention.cpp``, ``dropout.cpp``).

Causal self-attention of a whole sequence from the packed projection [q ; k ; v]: for each head,
softmax_{j ≤ i}(q_i · k_j / √(d/heads)), dropout on the probabilities, times v_j, one call for the
forward and one for the backward, reading q, k and v where the projection put them and writing
the heads side by side, so no head layout is copied (the PyTorch operations copy q, k and v into
(B·heads, n, d/heads) and back, and their gradients too). The dropout mask comes from the Philox
stream of ``stacklm.kernels.dropout``, keyed by one draw from torch's generator per call, drawn in
tiles of 8 keys × 8 queries (``attention.cpp`` gives the mapping), so it is not the mask
``dropout`` would draw for the probabilities from the same seed; with dropout off the results
equal those of the PyTorch operations within float rounding. Off the CPU and for dtypes other
than float32/float64 the modules run their PyTorch operations.

In training with dropout, :func:`attention_layers` runs whole pre-norm layers in a row (each:
the packed projection, this attention, the output projection, both residual adds with their
dropout and layer norms, and the FFN) as one autograd node, one compiled call each way
(``layers_forward`` and ``layers_backward`` in ``attention.cpp``): the same kernel calls and
matrix products, in the same order, drawing the same four keys per layer, as the modules' own
forward and backward on these kernels (so the same results bit for bit), without an autograd
node, saved-tensor bookkeeping, module call and Python dispatch per operation (about 30 of them
per layer and step). The input (embedding, encoding, dropout and the first norm) is one node
too (:class:`_EncodedInput`).

:class:`CompiledCausalSelfAttention` and :class:`CompiledTransformer` take the place of the
models' classes (``stacklm.kernels.backend``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.kernels import build
from stacklm.kernels.dropout import draw_key, draw_keys, fuses_norm, runs_on_kernel
from stacklm.models.transformer import Block, CausalSelfAttention, Transformer


class _CausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, projected: Tensor, num_heads: int, p: float, key: int) -> Tensor:
        attended, probabilities = torch.ops.stacklm_attention.forward(projected, num_heads, p, key)
        ctx.save_for_backward(projected, probabilities)
        ctx.num_heads, ctx.p = num_heads, p
        return attended

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        projected, probabilities = ctx.saved_tensors
        grad_projected = torch.ops.stacklm_attention.backward(grad.contiguous(), projected, probabilities, ctx.num_heads, ctx.p)
        return grad_projected, None, None, None


def causal_attention(projected: Tensor, num_heads: int, p: float, training: bool) -> Tensor:
    """projected (B, n, 3d), each position's [q ; k ; v] with heads side by side → (B, n, d), heads side by side.

    On the CPU, float32 or float64 (``runs_on_kernel``)."""
    build.load()
    dropping = training and p > 0
    return _CausalAttention.apply(projected.contiguous(), num_heads, p if dropping else 0.0, draw_key() if dropping else 0)


@dataclass(frozen=True)
class LayerSettings:
    """What :func:`attention_layers` needs besides tensors: heads, the dropout rate, per layer the eps
    of its FFN's norm and of the next norm, and per layer the Philox keys of the attention, the
    first residual, the FFN's ReLU and the second residual."""

    num_heads: int
    p: float
    eps: tuple[float, ...]  # 2 per layer
    keys: tuple[int, ...]  # 4 per layer


class _AttentionLayers(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, normed: Tensor, *tensors: Any) -> tuple[Tensor, Tensor]:
        *parameters, settings = tensors
        output, output_normed, *saved = torch.ops.stacklm_attention.layers_forward(
            x, normed, parameters, settings.num_heads, settings.p, settings.eps, settings.keys
        )
        ctx.save_for_backward(*saved)
        ctx.num_heads, ctx.p = settings.num_heads, settings.p
        ctx.set_materialize_grads(False)
        return output, output_normed

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor | None, grad_output_normed: Tensor | None) -> tuple[Tensor | None, ...]:
        grads = torch.ops.stacklm_attention.layers_backward(grad_output, grad_output_normed, ctx.saved_tensors, ctx.num_heads, ctx.p)
        return (*grads, None)


def attention_layers(x: Tensor, normed: Tensor, parameters: list[Tensor], settings: LayerSettings) -> tuple[Tensor, Tensor]:
    """(x, LN_next(x)) after L pre-norm layers in a row, each x ← x' + Dropout(FFN(LN(x'))) for
    x' = x + Dropout(Attention(LN(x))), LN(x) the previous layer's LN_next, on the kernels, as one
    autograd node; x and normed (B, n, d), contiguous.

    ``parameters``: per layer the q, k, v weights (d, d) and biases (d,), the output projection's
    weight and bias, LN's weight and bias, the FFN's W₁ (2d, d), b₁, W₂ (d, 2d), b₂, and the next
    norm's weight and bias, all contiguous and of x's dtype."""
    build.load()
    return _AttentionLayers.apply(x, normed, *parameters, settings)


def layer_parameters(block: Block, next_norm: nn.LayerNorm) -> list[Tensor]:
    """The parameters ``attention_layers`` takes for an attention layer, in its order."""
    attention, feedforward = block.sublayer, block.feedforward
    assert isinstance(attention, CausalSelfAttention)
    return [
        attention.query.weight, attention.key.weight, attention.value.weight,
        attention.query.bias, attention.key.bias, attention.value.bias, attention.out.weight, attention.out.bias,
        block.feedforward_norm.weight, block.feedforward_norm.bias, feedforward.expand.weight, feedforward.expand.bias,
        feedforward.project.weight, feedforward.project.bias, next_norm.weight, next_norm.bias,
    ]  # fmt: skip


def runs_as_one_node(block: Block, x: Tensor, next_norm: nn.LayerNorm) -> bool:
    """Whether the layer runs on ``attention_layers`` (:func:`run_as_one_node`) rather than its ``forward``:
    an attention layer, in training with dropout (elsewhere the modules skip the masks), on the
    kernels, one dropout rate, the norms affine in x's dtype (only x's dtype and device are read)."""
    p = block.dropout.p
    attention = block.sublayer
    if not (block.training and p > 0 and isinstance(attention, CausalSelfAttention) and runs_on_kernel(x)):
        return False
    if attention.dropout.p != p or block.feedforward.dropout.p != p:
        return False
    norms = (block.feedforward_norm, next_norm)
    return all(norm.weight is not None and norm.bias is not None and norm.weight.dtype == x.dtype for norm in norms)


def run_as_one_node(layers: list[tuple[Block, nn.LayerNorm]], x: Tensor, normed: Tensor) -> tuple[Tensor, Tensor]:
    """Blocks in a row, each with its next norm and :func:`runs_as_one_node`, as one ``attention_layers``
    node: the keys drawn in the order of the modules' forwards (per layer: attention, first residual,
    ReLU, second residual), in one draw."""
    parameters = [parameter for block, next_norm in layers for parameter in layer_parameters(block, next_norm)]
    eps = tuple(value for block, next_norm in layers for value in (block.feedforward_norm.eps, next_norm.eps))
    first = layers[0][0]
    assert isinstance(first.sublayer, CausalSelfAttention)
    settings = LayerSettings(first.sublayer.num_heads, first.dropout.p, eps, tuple(draw_keys(4 * len(layers))))
    return attention_layers(x.contiguous(), normed.contiguous(), parameters, settings)


class _EncodedInput(torch.autograd.Function):
    """(s, LN(s)) for s = Dropout(scale · Ẽ_w + PE), one node: the modules' operations (the embedding,
    the scaling, the encoding's add, ``dropout_add_norm``'s kernel without a residual) and the backwards
    autograd would run for them (the embedding's as ``index_add_``, the same sums in the same order),
    so the same results bit for bit."""

    @staticmethod
    def forward(
        ctx: Any, matrix: Tensor, tokens: Tensor, encoding: Tensor, weight: Tensor, bias: Tensor, settings: tuple[float, float, float, int]
    ) -> tuple[Tensor, Tensor]:
        scale, eps, p, key = settings
        encoded = F.embedding(tokens, matrix) * scale + encoding  # (B, n, d)
        total, normed, mean, rstd, keep = torch.ops.stacklm_dropout.dropout_add_norm(None, encoded, weight, bias, eps, p, key)
        ctx.save_for_backward(tokens, total, weight, mean, rstd, keep)
        ctx.scale, ctx.p, ctx.rows = scale, p, matrix.size(0)
        ctx.set_materialize_grads(False)
        return total, normed

    @staticmethod
    def backward(ctx: Any, grad_total: Tensor | None, grad_normed: Tensor | None) -> tuple[Tensor | None, ...]:
        tokens, total, weight, mean, rstd, keep = ctx.saved_tensors
        grad_normed = torch.zeros_like(total) if grad_normed is None else grad_normed.contiguous()
        grad_total = None if grad_total is None else grad_total.contiguous()
        _, grad_encoded, grad_weight, grad_bias = torch.ops.stacklm_dropout.dropout_add_norm_backward(
            grad_total, grad_normed, total, weight, mean, rstd, keep, ctx.p
        )
        # Each token's gradient added into its row in token order, as embedding_backward adds them
        # (one operation per token there): (rows, d).
        grad_rows = (grad_encoded * ctx.scale).view(-1, grad_encoded.size(-1))  # (B·n, d)
        grad_matrix = grad_encoded.new_zeros(ctx.rows, grad_encoded.size(-1)).index_add_(0, tokens.view(-1), grad_rows)
        return grad_matrix, None, None, grad_weight, grad_bias, None


class CompiledCausalSelfAttention(CausalSelfAttention):
    """A whole sequence's attention on the kernel (:func:`causal_attention`), dropout on its probabilities inside it."""

    def forward(self, x: Tensor) -> Tensor:
        if not runs_on_kernel(x):
            return super().forward(x)
        return self.out(causal_attention(self.project(x), self.num_heads, self.dropout.p, self.training))


class CompiledTransformer(Transformer):
    """In training, the input as one node (:class:`_EncodedInput`) and each run of attention layers
    between stack layers as another (:func:`run_as_one_node`): the modules' operations on the
    kernels, the same results bit for bit."""

    def _encode_norm(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        norm = self.blocks[0].sublayer_norm
        matrix = self.embedding.matrix()  # (rows, d)
        if not fuses_norm(matrix, norm, self.input_dropout.p, self.input_dropout.training):
            return super()._encode_norm(tokens)
        encoding = self._positional_encoding(0, tokens.size(1), matrix)
        settings = (math.sqrt(self.config.width), norm.eps, self.input_dropout.p, draw_key())
        return _EncodedInput.apply(matrix, tokens, encoding, norm.weight, norm.bias, settings)

    def forward(self, tokens: Tensor) -> Tensor:
        bos = tokens.new_full((tokens.size(0), 1), self.bos_index)
        x, normed = self._encode_norm(torch.cat([bos, tokens], dim=1))  # (B, n + 1, d) each
        layers = list(zip(self.blocks, self.next_norms()))
        one_node = [runs_as_one_node(block, x, next_norm) for block, next_norm in layers]  # x's dtype and device hold throughout
        # Attention layers in a row that run as one node run as one node together.
        for fused, run in itertools.groupby(zip(one_node, layers), key=lambda item: item[0]):
            run_layers = [layer for _, layer in run]
            if fused:
                x, normed = run_as_one_node(run_layers, x, normed)
            else:
                for block, next_norm in run_layers:
                    x, normed = block(x, normed, next_norm)
        return self.embedding.logits(normed, self.vocabulary_size)  # (B, n + 1, V)
