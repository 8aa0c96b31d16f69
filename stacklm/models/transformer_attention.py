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

In training with dropout, :func:`attention_layer` runs a whole pre-norm layer (the packed
projection, this attention, the output projection, both residual adds with their dropout and
layer norms, and the FFN) as one autograd node: the same kernel calls and matrix products, in
the same order, drawing the same four keys, as the modules' own forward and backward (so the
same results bit for bit), without an autograd node, saved-tensor bookkeeping and module call
per operation (about 30 of them per layer and step).
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
    """What :func:`attention_layer` needs besides tensors: heads, the dropout rate, the two norms' eps
    and the Philox keys of the attention, the first residual, the FFN's ReLU and the second residual."""

    num_heads: int
    p: float
    feedforward_eps: float
    next_eps: float
    keys: tuple[int, int, int, int]


def _linear_backward(grad: Tensor, inputs: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of addmm(bias, inputs, weightᵀ) (rows, out) from grad (rows, out): (inputs, weight, bias),
    as autograd computes them for ``F.linear`` (grad · W, gradᵀ · inputs, Σ_rows grad)."""
    return grad.mm(weight), grad.t().mm(inputs), grad.sum(0)


class _AttentionLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, normed: Tensor, *tensors: Any) -> tuple[Tensor, Tensor]:
        *parameters, settings = tensors
        (query_weight, key_weight, value_weight, query_bias, key_bias, value_bias, out_weight, out_bias,
         norm_weight, norm_bias, expand_weight, expand_bias, project_weight, project_bias, next_weight, next_bias) = parameters  # fmt: skip
        attention_key, sublayer_key, relu_key, feedforward_key = settings.keys
        batch_size, length, width = x.shape
        rows = batch_size * length
        p = settings.p
        weight = torch.cat([query_weight, key_weight, value_weight])  # (3d, d)
        bias = torch.cat([query_bias, key_bias, value_bias])  # (3d,)
        inputs = normed.view(rows, width)
        projected = torch.addmm(bias, inputs, weight.t()).view(batch_size, length, 3 * width)  # q, k, v
        attended, probabilities = torch.ops.stacklm_attention.forward(projected, settings.num_heads, p, attention_key)
        attended_rows = attended.view(rows, width)
        sublayer = torch.addmm(out_bias, attended_rows, out_weight.t()).view(batch_size, length, width)
        middle, middle_normed, middle_mean, middle_rstd, middle_keep = torch.ops.stacklm_dropout.dropout_add_norm(
            x, sublayer, norm_weight, norm_bias, settings.feedforward_eps, p, sublayer_key
        )
        feedforward_inputs = middle_normed.view(rows, width)
        hidden = torch.ops.stacklm_dropout.relu_dropout(torch.addmm(expand_bias, feedforward_inputs, expand_weight.t()), p, relu_key)  # (rows, 2d)
        feedforward = torch.addmm(project_bias, hidden, project_weight.t()).view(batch_size, length, width)
        output, output_normed, output_mean, output_rstd, output_keep = torch.ops.stacklm_dropout.dropout_add_norm(
            middle, feedforward, next_weight, next_bias, settings.next_eps, p, feedforward_key
        )
        ctx.save_for_backward(
            inputs, weight, projected, probabilities, attended_rows, out_weight, middle, norm_weight, middle_mean, middle_rstd,
            middle_keep, feedforward_inputs, expand_weight, hidden, project_weight, output, next_weight, output_mean, output_rstd,
            output_keep,
        )  # fmt: skip
        ctx.settings = settings
        ctx.set_materialize_grads(False)
        return output, output_normed

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor | None, grad_output_normed: Tensor | None) -> tuple[Tensor | None, ...]:
        (inputs, weight, projected, probabilities, attended_rows, out_weight, middle, norm_weight, middle_mean, middle_rstd,
         middle_keep, feedforward_inputs, expand_weight, hidden, project_weight, output, next_weight, output_mean, output_rstd,
         output_keep) = ctx.saved_tensors  # fmt: skip
        settings: LayerSettings = ctx.settings
        p = settings.p
        batch_size, length, width = middle.shape
        rows = batch_size * length
        if grad_output_normed is None:
            grad_output_normed = torch.zeros_like(output)
        if grad_output is not None:
            grad_output = grad_output.contiguous()
        grad_middle, grad_feedforward, grad_next_weight, grad_next_bias = torch.ops.stacklm_dropout.dropout_add_norm_backward(
            grad_output, grad_output_normed.contiguous(), output, next_weight, output_mean, output_rstd, output_keep, p
        )
        grad_hidden, grad_project_weight, grad_project_bias = _linear_backward(grad_feedforward.view(rows, width), hidden, project_weight)
        grad_expanded = torch.ops.stacklm_dropout.relu_dropout_backward(grad_hidden, hidden, p)
        grad_middle_normed, grad_expand_weight, grad_expand_bias = _linear_backward(grad_expanded, feedforward_inputs, expand_weight)
        grad_x, grad_sublayer, grad_norm_weight, grad_norm_bias = torch.ops.stacklm_dropout.dropout_add_norm_backward(
            grad_middle, grad_middle_normed.view(batch_size, length, width), middle, norm_weight, middle_mean, middle_rstd, middle_keep, p
        )
        grad_attended, grad_out_weight, grad_out_bias = _linear_backward(grad_sublayer.view(rows, width), attended_rows, out_weight)
        grad_projected = torch.ops.stacklm_attention.backward(
            grad_attended.view(batch_size, length, width), projected, probabilities, settings.num_heads, p
        )
        grad_inputs, grad_weight, grad_bias = _linear_backward(grad_projected.view(rows, 3 * width), inputs, weight)
        return (
            grad_x, grad_inputs.view(batch_size, length, width), *grad_weight.split(width), *grad_bias.split(width),
            grad_out_weight, grad_out_bias, grad_norm_weight, grad_norm_bias, grad_expand_weight, grad_expand_bias,
            grad_project_weight, grad_project_bias, grad_next_weight, grad_next_bias, None,
        )  # fmt: skip


def attention_layer(x: Tensor, normed: Tensor, parameters: list[Tensor], settings: LayerSettings) -> tuple[Tensor, Tensor]:
    """(x'', LN_next(x'')) of a pre-norm layer, x' = x + Dropout(Attention(normed)), x'' = x' + Dropout(FFN(LN(x'))),
    on the kernels, as one autograd node; x and normed (B, n, d), contiguous.

    ``parameters``: the q, k, v weights (d, d) and biases (d,), the output projection's weight and
    bias, LN's weight and bias, the FFN's W₁ (2d, d), b₁, W₂ (d, 2d), b₂, and the next norm's weight
    and bias, all contiguous and of x's dtype."""
    compiled.load()
    return _AttentionLayer.apply(x, normed, *parameters, settings)
