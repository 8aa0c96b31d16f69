"""Causal self-attention of a whole sequence from the packed projection [q ; k ; v], on the compiled CPU kernel (``stacks/kernels/attention.cpp``).

For each head, softmax_{j ≤ i}(q_i · k_j / √(d/heads)), dropout on the probabilities, times v_j:
one call for the forward and one for the backward, reading q, k and v where the projection put
them and writing the heads side by side, so no head layout is copied (the PyTorch operations
copy q, k and v into (B·heads, n, d/heads) and back, and their gradients too). The dropout mask
comes from the Philox stream of ``stacklm.models.dropout``, keyed by one draw from torch's
generator per call, drawn in tiles of 8 keys × 8 queries (``attention.cpp`` gives the mapping),
so it is not the mask ``dropout`` would draw for the probabilities from the same seed; with
dropout off the results equal those of the PyTorch operations within float rounding. Off the
CPU, for dtypes other than float32/float64, or when the kernel cannot be built,
:func:`uses_attention_kernel` is false and the caller runs the PyTorch operations.

In training with dropout, :func:`attention_layers` runs whole pre-norm layers in a row (each:
the packed projection, this attention, the output projection, both residual adds with their
dropout and layer norms, and the FFN) as one autograd node, one compiled call each way
(``layers_forward`` and ``layers_backward`` in ``attention.cpp``): the same kernel calls and
matrix products, in the same order, drawing the same four keys per layer, as the modules' own
forward and backward (so the same results bit for bit), without an autograd node, saved-tensor
bookkeeping, module call and Python dispatch per operation (about 30 of them per layer and step)
or per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from stacklm.models.dropout import draw_key, uses_kernel
from stacklm.stacks.kernels import compiled


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


def uses_attention_kernel(x: Tensor) -> bool:
    """Whether attention over tensors like ``x`` runs on the compiled kernel."""
    return uses_kernel(x)


def causal_attention(projected: Tensor, num_heads: int, p: float, training: bool) -> Tensor:
    """projected (B, n, 3d), each position's [q ; k ; v] with heads side by side → (B, n, d), heads side by side.

    On the kernel (built here if not yet): for tensors where :func:`uses_attention_kernel` is true."""
    compiled.load()
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
    compiled.load()
    return _AttentionLayers.apply(x, normed, *parameters, settings)
