"""The interface every differentiable stack implements.

A stack receives, at each step t = 1 … n, the actions of that step (a frozen dataclass of
tensors with a leading batch dimension B; for vector stacks it includes the pushed vector
v_t) and exposes a reading r_t of size ``reading_size``. It runs in two ways:

- step by step, with explicit state (stack RNNs, sampling): ``state = stack.initial_state(B, …)``,
  then ``state = state.next(actions_t)`` and ``state.reading()``; states are immutable;
- over a whole sequence when every action is known in advance (stack attention):
  ``stack.readings(actions)``, where ``actions`` holds a time dimension at index 1, returns the
  readings after each step, shape (B, n, reading_size). The default is built from ``next``;
  fast overrides must equal it, which the tests check.

Readings are causal: r_t depends on the actions of steps 1 … t only, so padding a batch at
the end never changes the readings of its shorter sequences.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Generic, Self, TypeVar

import torch
from torch import Tensor

ActionsT = TypeVar("ActionsT")


class StackState(ABC, Generic[ActionsT]):
    """The stack after some number of steps, for one batch of B sequences."""

    @abstractmethod
    def next(self, actions: ActionsT) -> Self:
        """The state after applying one step of ``actions`` (tensors of shape (B, …))."""

    @abstractmethod
    def reading(self) -> Tensor:
        """r_t, shape (B, reading_size)."""

    @abstractmethod
    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        """The same state with ``function`` applied to every tensor it holds."""

    def detach(self) -> Self:
        return self.transform_tensors(lambda tensor: tensor.detach())

    def slice_batch(self, index: slice | Tensor) -> Self:
        return self.transform_tensors(lambda tensor: tensor[index])


class Stack(ABC, Generic[ActionsT]):
    """A stack of fixed sizes: builds initial states and runs whole sequences."""

    reading_size: int

    @abstractmethod
    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> StackState[ActionsT]:
        """The empty stack for ``batch_size`` sequences, with the dtype and device of ``like``.

        ``max_steps``, when known, lets an implementation allocate its tables once.
        """

    @abstractmethod
    def step_actions(self, actions: ActionsT, step: int) -> ActionsT:
        """The actions of one step (0-based) out of actions that hold a time dimension at index 1."""

    @abstractmethod
    def num_steps(self, actions: ActionsT) -> int:
        """n, the length of the time dimension of whole-sequence ``actions``."""

    def readings(self, actions: ActionsT, initial: StackState[ActionsT] | None = None) -> Tensor:
        """r_1 … r_n for whole-sequence ``actions``, shape (B, n, reading_size)."""
        steps = self.num_steps(actions)
        state = initial
        outputs = []
        for step in range(steps):
            current = self.step_actions(actions, step)
            if state is None:
                state = self.initial_state(_batch_size(current), _any_tensor(current), max_steps=steps)
            state = state.next(current)
            outputs.append(state.reading())
        if not outputs:
            raise ValueError("readings() needs at least one step, or an initial state to read from")
        return torch.stack(outputs, dim=1)


def _any_tensor(actions: object) -> Tensor:
    for value in vars(actions).values():
        if isinstance(value, Tensor):
            return value
    raise TypeError(f"{type(actions).__name__} holds no tensor")


def _batch_size(actions: object) -> int:
    return _any_tensor(actions).size(0)
