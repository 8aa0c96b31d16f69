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
"""

from __future__ import annotations

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
