"""Dropout (``stacklm.models.dropout``) whose masks come from a counter-based generator, on a compiled CPU kernel (``dropout.cpp``).

Dropout keeps each element with probability 1 − p and scales it by 1/(1 − p). PyTorch's CPU
dropout draws its Bernoulli mask from the Mersenne twister one element at a time, a quarter of
a transformer's training step here. This one draws one 64-bit key from torch's default
generator per call (so ``torch.manual_seed`` and the saved RNG state still fix every mask) and
derives the mask from it with Philox4x32-10, computed in SIMD lanes and fused with the scaling:
element i is kept iff the i-th 32-bit word of the stream is ≥ round(p · 2³²). The backward
recomputes the mask from the same key instead of storing it.

The masks differ from ``F.dropout``'s for the same seed, and are the same for the same seed on
every CPU that builds the kernel. Off the CPU and for dtypes other than float32/float64 it is
``F.dropout``. With p = 0 or in evaluation mode it is the identity. :class:`CompiledDropout` and
:class:`CompiledReLUDropout` take the place of the models' modules (``stacklm.kernels.backend``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.models.dropout import Dropout, ReLUDropout


def draw_key() -> int:
    """One 64-bit key from torch's default CPU generator."""
    return int(torch.randint(-(2**63), 2**63 - 1, (), dtype=torch.int64))


def draw_keys(count: int) -> list[int]:
    """``count`` keys in one draw: those of ``count`` calls of :func:`draw_key`, the generator left as they leave it."""
    return torch.randint(-(2**63), 2**63 - 1, (count,), dtype=torch.int64).tolist()


def runs_on_kernel(x: Tensor) -> bool:
    """Whether dropout of tensors like ``x`` runs on the kernel: on the CPU, float32 or float64."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float, key: int) -> Tensor:
        ctx.p, ctx.key = p, key
        return torch.ops.stacklm_dropout.dropout(x, p, key)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return torch.ops.stacklm_dropout.dropout(grad.contiguous(), ctx.p, ctx.key), None, None


class _DropoutAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, residual: Tensor, x: Tensor, p: float, key: int) -> Tensor:
        ctx.p, ctx.key = p, key
        return torch.ops.stacklm_dropout.dropout_add(residual, x, p, key)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None, None]:
        return grad, torch.ops.stacklm_dropout.dropout(grad.contiguous(), ctx.p, ctx.key), None, None


class _DropoutAddNorm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, residual: Tensor | None, x: Tensor, weight: Tensor, bias: Tensor, eps: float, p: float, key: int
    ) -> tuple[Tensor, Tensor]:
        total, normed, mean, rstd, keep = torch.ops.stacklm_dropout.dropout_add_norm(residual, x, weight, bias, eps, p, key)
        ctx.save_for_backward(total, weight, mean, rstd, keep)
        ctx.p, ctx.has_residual = p, residual is not None
        ctx.set_materialize_grads(False)
        return total, normed

    @staticmethod
    def backward(ctx: Any, grad_total: Tensor | None, grad_normed: Tensor | None) -> tuple[Tensor | None, ...]:
        total, weight, mean, rstd, keep = ctx.saved_tensors
        if grad_normed is None:
            grad_normed = torch.zeros_like(total)
        if grad_total is not None:
            grad_total = grad_total.contiguous()
        grad_sum, grad_x, grad_weight, grad_bias = torch.ops.stacklm_dropout.dropout_add_norm_backward(
            grad_total, grad_normed.contiguous(), total, weight, mean, rstd, keep, ctx.p
        )
        return grad_sum if ctx.has_residual else None, grad_x, grad_weight, grad_bias, None, None, None


class _ReLUDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float, key: int) -> Tensor:
        output = torch.ops.stacklm_dropout.relu_dropout(x, p, key)
        ctx.p = p
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (output,) = ctx.saved_tensors
        return torch.ops.stacklm_dropout.relu_dropout_backward(grad.contiguous(), output, ctx.p), None, None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout(x): x · mask / (1 − p), mask ~ Bernoulli(1 − p) elementwise."""
    if not training or p == 0:
        return x
    if not runs_on_kernel(x):
        return F.dropout(x, p, training)
    return _Dropout.apply(x.contiguous(), p, draw_key())


def dropout_add(residual: Tensor, x: Tensor, p: float, training: bool) -> Tensor:
    """residual + Dropout(x) in one pass, the same mask as ``dropout(x, p, training)`` would draw."""
    if not training or p == 0:
        return residual + x
    if not runs_on_kernel(x):
        return residual + F.dropout(x, p, training)
    return _DropoutAdd.apply(residual.contiguous(), x.contiguous(), p, draw_key())


def fuses_norm(x: Tensor, norm: nn.LayerNorm, p: float, training: bool) -> bool:
    """Whether :func:`dropout_add_norm` of tensors like ``x`` runs on the kernel, the layer norm in the same call."""
    return training and p > 0 and runs_on_kernel(x) and norm.weight is not None and norm.bias is not None and norm.weight.dtype == x.dtype


def dropout_add_norm(residual: Tensor | None, x: Tensor, norm: nn.LayerNorm, p: float, training: bool) -> tuple[Tensor, Tensor]:
    """(s, norm(s)) for s = residual + Dropout(x), or s = Dropout(x) without a residual: the mask that
    ``dropout_add`` (``dropout``) would draw, and on the kernel the layer norm (over the last
    dimension) in the same call, its backward in one call too, the mask kept as bytes."""
    if not fuses_norm(x, norm, p, training):
        total = dropout(x, p, training) if residual is None else dropout_add(residual, x, p, training)
        return total, norm(total)
    if norm.normalized_shape != (x.size(-1),):
        raise ValueError(f"dropout_add_norm: a layer norm over the last dimension ({x.size(-1)}), not {norm.normalized_shape}")
    residual = None if residual is None else residual.contiguous()
    return _DropoutAddNorm.apply(residual, x.contiguous(), norm.weight.contiguous(), norm.bias.contiguous(), norm.eps, p, draw_key())


def relu_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout(ReLU(x)) in one pass, the mask that ``dropout(torch.relu(x), p, training)`` would draw;
    its backward reads the output (> 0 where the gradient passes), not the mask."""
    if not training or p == 0:
        return torch.relu(x)
    if not runs_on_kernel(x):
        return F.dropout(torch.relu(x), p, training)
    return _ReLUDropout.apply(x.contiguous(), p, draw_key())


class CompiledDropout(Dropout):
    """``Dropout`` on the kernel; ``add``, ``add_norm`` and ``norm`` fused with it."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def add(self, residual: Tensor, x: Tensor) -> Tensor:
        return dropout_add(residual, x, self.p, self.training)

    def add_norm(self, residual: Tensor, x: Tensor, norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
        return dropout_add_norm(residual, x, norm, self.p, self.training)

    def norm(self, x: Tensor, norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
        return dropout_add_norm(None, x, norm, self.p, self.training)


class CompiledReLUDropout(ReLUDropout):
    """``ReLUDropout`` in one pass on the kernel (:func:`relu_dropout`)."""

    def forward(self, x: Tensor) -> Tensor:
        return relu_dropout(x, self.p, self.training)
