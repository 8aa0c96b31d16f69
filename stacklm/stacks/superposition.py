"""The superposition stack of Joulin & Mikolov (2015), as defined in Bearing Syntactic Fruit §3.1.

At step t the controller gives a distribution a_t = (a_t^push, a_t^pop, a_t^noop) over three
actions and a pushed vector v_t ∈ ℝ^m. The stack V_t holds vectors, row 0 on top; V_0 is empty
(equivalently, it holds a single 0 vector: missing rows read as 0). The new stack superposes the
three stacks the actions would produce (RNS-RNN App. 7.2, with k = 0 the top):

    V_t[k] = a_t^push · V_{t−1}[k−1] + a_t^noop · V_{t−1}[k] + a_t^pop · V_{t−1}[k+1],
    V_{t−1}[−1] = v_t,  V_{t−1}[k] = 0 below the bottom,

and the reading is the top row, r_t = V_t[0] (0 for the empty stack).

Meaning. Because a_t does not depend on the stack, V_t[k] is the expectation of row k of a
discrete stack of vectors driven by independent actions τ_1 … τ_t with P(τ_s) = a_s^{τ_s}, where
push puts v_s on top, no-op keeps the stack, pop removes the top row and **pop of the empty stack
leaves it empty**; rows that do not exist count as 0. (Bearing Syntactic Fruit eq. 5 writes r_t
as a normalised sum over runs that never pop the empty stack; the recurrence above, which both
papers' code computes, is this unnormalised expectation instead.)

Depth limit D (RNS-RNN App. 7.2, PTB uses D = 10): rows k ≥ D are dropped, i.e. the discrete
stack keeps at most D rows and a push onto a full stack discards its bottom row.

Length hint: when the caller announces that it reads the stack after at most N steps, a row at
depth k after step t needs k pops to reach the top, so rows with k > N − t can never be read
again and are dropped. After step t the stack holds

    h_t = min(t, D, N − t + 1) rows,

which leaves every reading r_1 … r_N unchanged and roughly halves time and memory; a step past N
is refused.

Shapes: V_t is (B, h_t, m). Cost: O(B m Σ_t h_t) time and autograd memory, i.e. O(B m n²/2) for
n steps, O(B m n²/4) with the length hint and O(B m n D) with a depth limit; n sequential steps.
Whole-sequence ``readings`` is the default loop over ``next``: a chunked alternative (√n steps,
transfer matrices between chunks) was measured on CPU and was slower except for tiny batches.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from stacklm.stacks.base import Stack, StackState

# Positions of the three actions along the last dimension of ``SuperpositionActions.probabilities``.
PUSH_INDEX = 0
POP_INDEX = 1
NOOP_INDEX = 2


@dataclass(frozen=True)
class SuperpositionActions:
    """a_t and v_t for one step, or for n steps with the time dimension at index 1."""

    probabilities: Tensor  # (B, 3) or (B, n, 3): (a^push, a^pop, a^noop), each row summing to 1
    pushed: Tensor  # (B, m) or (B, n, m): v_t


def padded_rows(elements: Tensor, pushed: Tensor) -> Tensor:
    """[v_t ; V_{t−1} ; 0 ; 0], the rows every term reads from: (B, h_{t−1} + 3, m).

    Row k + 1 of it is V_{t−1}[k] for k = −1 … h_{t−1} + 1, with V_{t−1}[−1] = v_t and zeros below
    the bottom, so each term below is a view of it.
    """
    below = elements.new_zeros(elements.size(0), 2, elements.size(2))  # (B, 2, m)
    return torch.cat([pushed.unsqueeze(1), elements, below], dim=1)


def push_term(rows: Tensor, depth: int) -> Tensor:
    """V_{t−1}[k − 1] for k = 0 … depth − 1 (v_t at k = 0): (B, depth, m)."""
    return rows[:, 0:depth]


def noop_term(rows: Tensor, depth: int) -> Tensor:
    """V_{t−1}[k] for k = 0 … depth − 1: (B, depth, m)."""
    return rows[:, 1 : depth + 1]


def pop_term(rows: Tensor, depth: int) -> Tensor:
    """V_{t−1}[k + 1] for k = 0 … depth − 1: (B, depth, m)."""
    return rows[:, 2 : depth + 2]


def superpose(probabilities: Tensor, rows: Tensor, depth: int) -> Tensor:
    """V_t = a^push · push_term + a^noop · noop_term + a^pop · pop_term: (B, depth, m)."""
    weight = probabilities.unsqueeze(-1).unsqueeze(-1)  # (B, 3, 1, 1)
    return (
        weight[:, PUSH_INDEX] * push_term(rows, depth)
        + weight[:, NOOP_INDEX] * noop_term(rows, depth)
        + weight[:, POP_INDEX] * pop_term(rows, depth)
    )


@dataclass(frozen=True)
class SuperpositionState(StackState[SuperpositionActions]):
    """V_t after ``steps`` = t steps; ``max_depth`` = D and ``max_steps`` = N bound its height."""

    elements: Tensor  # (B, h_t, m); row 0 = top
    steps: int
    max_depth: int | None
    max_steps: int | None  # N when the length hint is on, else None

    def height_after(self, step: int) -> int:
        """h_t = min(t, D, N − t + 1), leaving out the bounds that are not set."""
        height = step
        if self.max_depth is not None:
            height = min(height, self.max_depth)
        if self.max_steps is not None:
            height = min(height, self.max_steps - step + 1)
        return height

    def next(self, actions: SuperpositionActions) -> SuperpositionState:
        step = self.steps + 1
        if self.max_steps is not None and step > self.max_steps:
            raise ValueError(
                f"step {step} of a superposition stack sized by its length hint for max_steps={self.max_steps}"
            )
        depth = self.height_after(step)
        elements = superpose(actions.probabilities, padded_rows(self.elements, actions.pushed), depth)
        return dataclasses.replace(self, elements=elements, steps=step)

    def reading(self) -> Tensor:
        """r_t = V_t[0], or 0 for the empty stack: (B, m)."""
        if self.elements.size(1) == 0:
            return self.elements.new_zeros(self.elements.size(0), self.elements.size(2))
        return self.elements[:, 0]

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> SuperpositionState:
        return dataclasses.replace(self, elements=function(self.elements))


@dataclass(frozen=True)
class SuperpositionStack(Stack[SuperpositionActions]):
    """Superposition stacks of vectors of size m = ``vector_size``.

    ``max_depth`` = D drops rows at depth ≥ D (None: unbounded). ``length_hint`` applies the
    h_t ≤ N − t + 1 bound whenever ``initial_state`` receives ``max_steps`` = N; such a state then
    refuses step N + 1, so leave it off (or pass no ``max_steps``) to continue a state past N.
    """

    vector_size: int
    max_depth: int | None = None
    length_hint: bool = True

    def __post_init__(self) -> None:
        if self.vector_size < 1:
            raise ValueError(f"vector_size must be positive, got {self.vector_size}")
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"max_depth must be positive or None, got {self.max_depth}")

    @property
    def reading_size(self) -> int:
        return self.vector_size

    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> SuperpositionState:
        """V_0, the empty stack: elements of shape (B, 0, m)."""
        return SuperpositionState(
            elements=like.new_zeros(batch_size, 0, self.vector_size),
            steps=0,
            max_depth=self.max_depth,
            max_steps=max_steps if self.length_hint else None,
        )

    def step_actions(self, actions: SuperpositionActions, step: int) -> SuperpositionActions:
        return SuperpositionActions(probabilities=actions.probabilities[:, step], pushed=actions.pushed[:, step])

    def num_steps(self, actions: SuperpositionActions) -> int:
        return actions.probabilities.size(1)
