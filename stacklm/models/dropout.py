"""Dropout (Srivastava et al. 2014), and its fusions with a residual add and the layer norm after it.

Dropout keeps each element with probability 1 − p and scales it by 1/(1 − p); with p = 0 or in
evaluation mode it is the identity. The masks are ``F.dropout``'s. ``stacklm.kernels.dropout``
computes the same functions on a compiled CPU kernel whose masks come from another random stream
(other masks for the same seed), in place of these where a command asks for that backend.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Dropout(nn.Dropout):
    """``nn.Dropout``; ``add`` adds its output to a residual, ``add_norm`` and ``norm`` also give the layer norm of the sum."""

    def add(self, residual: Tensor, x: Tensor) -> Tensor:
        """residual + self(x)."""
        return residual + self(x)

    def add_norm(self, residual: Tensor, x: Tensor, norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
        """(s, norm(s)) for s = residual + self(x)."""
        total = self.add(residual, x)
        return total, norm(total)

    def norm(self, x: Tensor, norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
        """(s, norm(s)) for s = self(x)."""
        total = self(x)
        return total, norm(total)


class ReLUDropout(Dropout):
    """Dropout(ReLU(x))."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(torch.relu(x))
