"""Brute force for the nondeterministic stacks: every PDA run followed, written from the definitions.

A configuration is (state, stack), the stack a tuple of (symbol, push time) from the bottom up;
the bottom ⊥ = 0 has push time 0 and the vector v₀, an element pushed at step p has v_p.
Runs that reach the same configuration are merged (their weights summed, or maximised for
Viterbi), which is the sum over runs regrouped, with no recurrence of the papers involved.

Rules: push at step t appends (y, t); replace changes the top symbol and keeps its push time
(so its vector); pop removes the top and is impossible on the bottom alone. NS family: the ⊥ of
time 0 may never be on top again at t ≥ 1 (no replace of it, no pop down to it). Window D: the
element on top at any time τ must have been pushed at p with τ − p + 1 ≤ D; the bottom is exempt.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import Tensor

Configuration = tuple[int, tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class StepSums:
    """Σ (or max) over runs ending at step t, per (r, y), of the weight and of weight × top vector."""

    weight: Tensor  # (Q, S)
    vector: Tensor  # (Q, S, m)


def follow_runs(
    push: Tensor,
    replace: Tensor,
    pop: Tensor,
    *,
    bottom_replaceable: bool,
    window: int | None = None,
    pushed: Tensor | None = None,
    bottom: Tensor | None = None,
    best: bool = False,
) -> list[StepSums]:
    """Real weights of one sequence: push, replace (n, Q, S, Q, S), pop (n, Q, S, Q), pushed (n, m), bottom (m,).

    Returns the sums after steps 0 … n.
    """
    steps, num_states, num_symbols = pop.shape[:3]
    vector_size = 0 if pushed is None else pushed.size(-1)

    def vector_of(push_time: int) -> list[float]:
        if vector_size == 0:
            return []
        assert pushed is not None and bottom is not None
        return (bottom if push_time == 0 else pushed[push_time - 1]).tolist()

    def allowed(step: int, stack: tuple[tuple[int, int], ...]) -> bool:
        if not bottom_replaceable and len(stack) == 1:
            return False
        _, push_time = stack[-1]
        return window is None or push_time == 0 or step - push_time + 1 <= window

    def sums(configurations: dict[Configuration, float]) -> StepSums:
        weight = torch.zeros(num_states, num_symbols, dtype=torch.float64)
        vector = torch.zeros(num_states, num_symbols, vector_size, dtype=torch.float64)
        for (state, stack), value in configurations.items():
            symbol, push_time = stack[-1]
            if best:
                weight[state, symbol] = max(weight[state, symbol].item(), value)
            else:
                weight[state, symbol] += value
                vector[state, symbol] += value * torch.tensor(vector_of(push_time), dtype=torch.float64)
        return StepSums(weight, vector)

    current: dict[Configuration, float] = {(0, ((0, 0),)): 1.0}
    history = [sums(current)]
    for step in range(1, steps + 1):
        following: dict[Configuration, float] = defaultdict(float)

        def add(configuration: Configuration, value: float) -> None:
            if value == 0.0 or not allowed(step, configuration[1]):
                return
            if best:
                following[configuration] = max(following[configuration], value)
            else:
                following[configuration] += value

        for (state, stack), value in current.items():
            symbol, push_time = stack[-1]
            for target in range(num_states):
                for new_symbol in range(num_symbols):
                    add(
                        (target, stack + ((new_symbol, step),)),
                        value * push[step - 1, state, symbol, target, new_symbol].item(),
                    )
                    add(
                        (target, stack[:-1] + ((new_symbol, push_time),)),
                        value * replace[step - 1, state, symbol, target, new_symbol].item(),
                    )
                if len(stack) > 1:
                    add((target, stack[:-1]), value * pop[step - 1, state, symbol, target].item())
        current = dict(following)
        history.append(sums(current))
    return history
