"""Semirings over which every dynamic program of stacklm is written once.

A semiring (K, ⊕, ⊗, 0̄, 1̄) is given by static operations on tensors that hold its elements:

=========  ===================  ===============  ======  ======
name       ⊕                    ⊗                0̄       1̄
=========  ===================  ===============  ======  ======
REAL       a + b                a · b            0       1
LOG        log(eᵃ + eᵇ)          a + b            −∞      0
MAX_PLUS   max(a, b)            a + b            −∞      0
=========  ===================  ===============  ======  ======

LOG computes inside weights (partition functions) in log space; MAX_PLUS turns the same
recurrence into Viterbi. Log-zero is −∞, never a large negative number, and
:func:`logsumexp` gives a zero gradient (not NaN) on slices whose every term is −∞.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def logsumexp(x: Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> Tensor:
    """log Σ exp(x) over ``dim``, −∞ on all-−∞ slices, with a zero gradient there.

    ``torch.logsumexp`` returns the right value on an all-−∞ slice but a NaN gradient; here the
    shifted sum is replaced by 1 where it is 0, so no term receives 0 · ∞.
    """
    shift = x.detach().amax(dim=dim, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    total = (x - shift).exp().sum(dim=dim, keepdim=True)
    empty = total == 0
    result = torch.where(empty, -math.inf, torch.where(empty, 1.0, total).log() + shift)
    if not keepdim:
        result = result.squeeze(dim)
    return result


class Semiring:
    """Static operations of one semiring; subclasses set ``zero`` and ``one``."""

    zero: float
    one: float

    @staticmethod
    def plus(a: Tensor, b: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def times(a: Tensor, b: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def sum(x: Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> Tensor:
        raise NotImplementedError

    @classmethod
    def zeros(cls, *shape: int, **kwargs) -> Tensor:
        return torch.full(shape, cls.zero, **kwargs)

    @classmethod
    def ones(cls, *shape: int, **kwargs) -> Tensor:
        return torch.full(shape, cls.one, **kwargs)

    @staticmethod
    def from_real(x: Tensor) -> Tensor:
        """Map nonnegative real weights into the semiring's representation."""
        raise NotImplementedError

    @staticmethod
    def to_real(x: Tensor) -> Tensor:
        raise NotImplementedError


class Real(Semiring):
    zero = 0.0
    one = 1.0

    @staticmethod
    def plus(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    @staticmethod
    def times(a: Tensor, b: Tensor) -> Tensor:
        return a * b

    @staticmethod
    def sum(x: Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> Tensor:
        return x.sum(dim=dim, keepdim=keepdim)

    @staticmethod
    def from_real(x: Tensor) -> Tensor:
        return x

    @staticmethod
    def to_real(x: Tensor) -> Tensor:
        return x


class Log(Semiring):
    zero = -math.inf
    one = 0.0

    @staticmethod
    def plus(a: Tensor, b: Tensor) -> Tensor:
        a, b = torch.broadcast_tensors(a, b)
        return logsumexp(torch.stack((a, b)), dim=0)

    @staticmethod
    def times(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    @staticmethod
    def sum(x: Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> Tensor:
        return logsumexp(x, dim=dim, keepdim=keepdim)

    @staticmethod
    def from_real(x: Tensor) -> Tensor:
        return x.log()

    @staticmethod
    def to_real(x: Tensor) -> Tensor:
        return x.exp()


class MaxPlus(Semiring):
    zero = -math.inf
    one = 0.0

    @staticmethod
    def plus(a: Tensor, b: Tensor) -> Tensor:
        return torch.maximum(a, b)

    @staticmethod
    def times(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    @staticmethod
    def sum(x: Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> Tensor:
        return x.amax(dim=dim, keepdim=keepdim)

    @staticmethod
    def from_real(x: Tensor) -> Tensor:
        return x.log()

    @staticmethod
    def to_real(x: Tensor) -> Tensor:
        return x.exp()


REAL = Real
LOG = Log
MAX_PLUS = MaxPlus
