"""The language-model interface every architecture implements, and initialisation helpers.

A language model over V output symbols (the ordinary tokens and EOS = index V − 1) computes,
for tokens w_1 … w_n, logits y_0 … y_n with p(b | w_1 … w_t) = softmax(y_t)_b (DuSell & Cotterell (2025) §4).
It runs two ways:

- over a whole sequence: ``model(tokens)`` with tokens (B, n) gives logits (B, n + 1, V);
  y_t depends on w_1 … w_t only, so a batch padded at the end (with any valid index) gives
  its shorter sequences the same logits at positions ≤ their length; EOS is never an input;
- step by step with explicit, immutable state (sampling, exact conditional probabilities):
  ``state = model.initial_state(B)``, ``state.output()`` = y_t (B, V),
  ``state = state.next(w_{t+1})``. Both ways give the same logits.

Models do no printing, I/O, device choice or seeding; ``initialize(generator)`` sets every
parameter once from a ``torch.Generator``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Callable, Generic, Iterable, Iterator, Self, TypeVar, cast

import torch
from torch import Tensor, nn

# U(−0.1, 0.1): App. D's initialisation of every parameter that is not a Xavier layer or a layer norm.
UNIFORM_BOUND = 0.1
TANH_GAIN = 5 / 3
RELU_GAIN = math.sqrt(2)


ModuleT = TypeVar("ModuleT", bound=nn.Module)


class Layers(nn.ModuleList, Generic[ModuleT]):
    """An ``nn.ModuleList`` whose items keep their type."""

    def __init__(self, modules: Iterable[ModuleT]) -> None:
        super().__init__(modules)

    def __getitem__(self, index: int) -> ModuleT:  # type: ignore[override]
        return cast(ModuleT, super().__getitem__(index))

    def __iter__(self) -> Iterator[ModuleT]:
        return cast(Iterator[ModuleT], super().__iter__())


class ModelState(ABC):
    """A model after reading a prefix w_1 … w_t, for a batch of B prefixes."""

    @abstractmethod
    def output(self) -> Tensor:
        """y_t, the logits of the next symbol: (B, V)."""

    @abstractmethod
    def next(self, tokens: Tensor) -> Self:
        """The state after reading w_{t+1} = ``tokens`` (B,)."""

    @abstractmethod
    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        """The same state with ``function`` applied to every tensor it holds."""

    @abstractmethod
    def batch_size(self) -> int: ...

    def detach(self) -> Self:
        return self.transform_tensors(lambda tensor: tensor.detach())

    def slice_batch(self, index: slice | Tensor) -> Self:
        return self.transform_tensors(lambda tensor: tensor[index])


class LanguageModel(nn.Module, ABC):
    """A language model over ``vocabulary_size`` output symbols, EOS last."""

    vocabulary_size: int

    @abstractmethod
    def forward(self, tokens: Tensor) -> Tensor:
        """Logits y_0 … y_n for tokens (B, n): (B, n + 1, V)."""

    @abstractmethod
    def initial_state(self, batch_size: int) -> ModelState:
        """The state before any token, whose output is y_0."""

    @abstractmethod
    def initialize(self, generator: torch.Generator) -> None:
        """Set every parameter (App. D), drawing from ``generator``."""


def uniform_(parameter: Tensor, generator: torch.Generator) -> None:
    """U(−0.1, 0.1)."""
    with torch.no_grad():
        nn.init.uniform_(parameter, -UNIFORM_BOUND, UNIFORM_BOUND, generator=generator)


def xavier_(layer: nn.Linear, gain: float, generator: torch.Generator) -> None:
    """Xavier-uniform weight with ``gain``, zero bias."""
    with torch.no_grad():
        nn.init.xavier_uniform_(layer.weight, gain=gain, generator=generator)
        if layer.bias is not None:
            layer.bias.zero_()


def uniform_layer_(layer: nn.Linear, generator: torch.Generator) -> None:
    """U(−0.1, 0.1) for the weight and bias of a plain linear layer."""
    for parameter in layer.parameters():
        uniform_(parameter, generator)


def layer_norm_(norm: nn.LayerNorm) -> None:
    with torch.no_grad():
        norm.weight.fill_(1)
        norm.bias.zero_()
