"""The stratification stack of Grefenstette et al. (2015), as written in RNS-RNN App. 7.1.

At step t the controller gives a pop strength u_t ∈ (0, 1), a push strength d_t ∈ (0, 1) and a
value v_t ∈ ℝ^m. The stack s_t = (V_t, s_t) holds t values V_t[i] with strengths s_t[i] ∈ [0, 1],
i = 1 … t from the bottom; V_0 and s_0 are empty. One step pops, then pushes:

    V_t[i] = V_{t−1}[i] (1 ≤ i < t),   V_t[t] = v_t,
    s_t[i] = max(0, s_{t−1}[i] − max(0, u_t − Σ_{j=i+1}^{t−1} s_{t−1}[j]))   (1 ≤ i < t),
    s_t[t] = d_t,

so a pop removes strength u_t walking down from the top. The reading spends a budget of 1
walking down from the top:

    r_t = Σ_{i=1}^{t} min(s_t[i], max(0, 1 − Σ_{j=i+1}^{t} s_t[j])) · V_t[i],

and the empty stack reads 0 (the authors' code adds a zero bottom vector, which changes nothing).

Here row 0 is the top (row k holds element i = t − k), so every "Σ over j above i" is an
exclusive cumulative sum along the rows; no Python loop runs over elements. Shapes: values
(B, t, m), strengths (B, t). Cost: O(B m t) per step, O(B m n²) for n steps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from stacklm.stacks.base import Stack, StackState


@dataclass(frozen=True)
class StratificationActions:
    """u_t, d_t and v_t for one step, or for n steps with the time dimension at index 1."""

    pop_strength: Tensor  # (B,) or (B, n): u_t
    push_strength: Tensor  # (B,) or (B, n): d_t
    pushed: Tensor  # (B, m) or (B, n, m): v_t


def strength_above(strengths: Tensor) -> Tensor:
    """Σ_{j above i} s[j] for each row i, an exclusive cumulative sum from the top: (B, t)."""
    running = strengths.cumsum(dim=1)  # (B, t); row k sums rows 0 … k
    return torch.cat([torch.zeros_like(strengths[:, :1]), running[:, :-1]], dim=1)


def pop(strengths: Tensor, pop_strength: Tensor) -> Tensor:
    """s_t[i] = max(0, s_{t−1}[i] − max(0, u_t − Σ_{j above i} s_{t−1}[j])): (B, t − 1)."""
    removed = torch.relu(pop_strength.unsqueeze(1) - strength_above(strengths))  # (B, t − 1)
    return torch.relu(strengths - removed)


def reading_weights(strengths: Tensor) -> Tensor:
    """min(s_t[i], max(0, 1 − Σ_{j above i} s_t[j])), the share of V_t[i] in r_t: (B, t)."""
    return torch.minimum(strengths, torch.relu(1 - strength_above(strengths)))


@dataclass(frozen=True)
class StratificationState(StackState[StratificationActions]):
    """(V_t, s_t) after t steps, row 0 on top."""

    values: Tensor  # (B, t, m); row 0 = top
    strengths: Tensor  # (B, t); row 0 = top

    def next(self, actions: StratificationActions) -> StratificationState:
        popped = pop(self.strengths, actions.pop_strength)  # (B, t − 1)
        strengths = torch.cat([actions.push_strength.unsqueeze(1), popped], dim=1)  # (B, t)
        values = torch.cat([actions.pushed.unsqueeze(1), self.values], dim=1)  # (B, t, m)
        return dataclasses.replace(self, values=values, strengths=strengths)

    def reading(self) -> Tensor:
        """r_t = Σ_i reading_weight_i · V_t[i], 0 for the empty stack: (B, m)."""
        return torch.einsum("bk,bkm->bm", reading_weights(self.strengths), self.values)

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> StratificationState:
        return dataclasses.replace(self, values=function(self.values), strengths=function(self.strengths))


@dataclass(frozen=True)
class StratificationStack(Stack[StratificationActions]):
    """Stratification stacks of values of size m = ``vector_size``."""

    vector_size: int

    def __post_init__(self) -> None:
        if self.vector_size < 1:
            raise ValueError(f"vector_size must be positive, got {self.vector_size}")

    @property
    def reading_size(self) -> int:
        return self.vector_size

    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> StratificationState:
        """The empty stack: values (B, 0, m), strengths (B, 0); ``max_steps`` is not needed."""
        return StratificationState(
            values=like.new_zeros(batch_size, 0, self.vector_size),
            strengths=like.new_zeros(batch_size, 0),
        )

    def step_actions(self, actions: StratificationActions, step: int) -> StratificationActions:
        return StratificationActions(
            pop_strength=actions.pop_strength[:, step],
            push_strength=actions.push_strength[:, step],
            pushed=actions.pushed[:, step],
        )

    def num_steps(self, actions: StratificationActions) -> int:
        return actions.pop_strength.size(1)
