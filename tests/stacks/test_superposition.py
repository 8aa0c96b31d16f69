"""The superposition stack against brute-force enumeration of discrete action sequences."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor

from stacklm.stacks.superposition import (
    NOOP_INDEX,
    POP_INDEX,
    PUSH_INDEX,
    SuperpositionActions,
    SuperpositionStack,
)

DTYPE = torch.float64


def random_actions(batch_size: int, steps: int, vector_size: int, seed: int) -> SuperpositionActions:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch_size, steps, 3, generator=generator, dtype=DTYPE)
    pushed = torch.randn(batch_size, steps, vector_size, generator=generator, dtype=DTYPE)
    return SuperpositionActions(probabilities=logits.softmax(dim=-1), pushed=pushed)


def step_by_step(stack: SuperpositionStack, actions: SuperpositionActions, max_steps: int | None) -> Tensor:
    """r_1 … r_n from ``next``, stacked: (B, n, m)."""
    batch_size = actions.pushed.size(0)
    state = stack.initial_state(batch_size, actions.pushed, max_steps=max_steps)
    readings = []
    for step in range(stack.num_steps(actions)):
        state = state.next(stack.step_actions(actions, step))
        readings.append(state.reading())
    return torch.stack(readings, dim=1)


def brute_force_readings(actions: SuperpositionActions, max_depth: int | None) -> Tensor:
    """E[top of a discrete stack] after each step, over all 3^n independent action sequences: (B, n, m).

    Push puts v_t on top (discarding the bottom row of a stack already holding ``max_depth``
    rows), no-op keeps the stack, pop removes the top row and leaves the empty stack empty; the
    empty stack's top reads 0.
    """
    batch_size, steps, vector_size = actions.pushed.shape
    expected = torch.zeros(batch_size, steps, vector_size, dtype=DTYPE)
    for batch in range(batch_size):
        for sequence in itertools.product((PUSH_INDEX, POP_INDEX, NOOP_INDEX), repeat=steps):
            weight = torch.prod(actions.probabilities[batch, torch.arange(steps), torch.tensor(sequence)])
            stack: list[Tensor] = []  # stack[-1] is the top
            for step, action in enumerate(sequence):
                if action == PUSH_INDEX:
                    stack.append(actions.pushed[batch, step])
                    if max_depth is not None and len(stack) > max_depth:
                        stack.pop(0)
                elif action == POP_INDEX and stack:
                    stack.pop()
                if stack:
                    expected[batch, step] += weight * stack[-1]
    # Every step's probabilities sum to 1, so summing over whole sequences marginalises later steps.
    return expected


@pytest.mark.parametrize("steps", [1, 2, 5, 6])
@pytest.mark.parametrize("max_depth", [None, 1, 2, 3])
@pytest.mark.parametrize("length_hint", [False, True])
def test_equals_expectation_over_discrete_runs(steps: int, max_depth: int | None, length_hint: bool) -> None:
    actions = random_actions(batch_size=2, steps=steps, vector_size=3, seed=steps)
    stack = SuperpositionStack(vector_size=3, max_depth=max_depth, length_hint=length_hint)
    torch.testing.assert_close(stack.readings(actions), brute_force_readings(actions, max_depth), rtol=0, atol=1e-6)


def test_hand_traced_three_steps() -> None:
    # push v1 for sure; then a 50/50 push v2 / no-op; then pop for sure.
    # r1 = v1; V_2 = [½v2 + ½v1, ½v1]; r2 = ½(v1 + v2); V_3 = [½v1] so r3 = ½v1.
    probabilities = torch.tensor([[[1.0, 0.0, 0.0], [0.5, 0.0, 0.5], [0.0, 1.0, 0.0]]], dtype=DTYPE)
    pushed = torch.tensor([[[2.0, 0.0], [0.0, 4.0], [8.0, 8.0]]], dtype=DTYPE)
    expected = torch.tensor([[[2.0, 0.0], [1.0, 2.0], [1.0, 0.0]]], dtype=DTYPE)
    actions = SuperpositionActions(probabilities=probabilities, pushed=pushed)
    torch.testing.assert_close(SuperpositionStack(vector_size=2).readings(actions), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("steps", [1, 2, 7, 8])
@pytest.mark.parametrize("max_depth", [None, 3])
def test_readings_equal_next_and_length_hint_changes_nothing(steps: int, max_depth: int | None) -> None:
    actions = random_actions(batch_size=3, steps=steps, vector_size=4, seed=10 + steps)
    hinted = SuperpositionStack(vector_size=4, max_depth=max_depth, length_hint=True)
    unhinted = SuperpositionStack(vector_size=4, max_depth=max_depth, length_hint=False)
    reference = step_by_step(unhinted, actions, max_steps=None)
    torch.testing.assert_close(step_by_step(hinted, actions, max_steps=steps), reference, rtol=0, atol=1e-12)
    torch.testing.assert_close(hinted.readings(actions), reference, rtol=0, atol=1e-12)
    torch.testing.assert_close(unhinted.readings(actions), reference, rtol=0, atol=1e-12)


def test_length_hint_bounds_the_height() -> None:
    actions = random_actions(batch_size=1, steps=9, vector_size=2, seed=3)
    stack = SuperpositionStack(vector_size=2, length_hint=True)
    state = stack.initial_state(1, actions.pushed, max_steps=9)
    heights = []
    for step in range(9):
        state = state.next(stack.step_actions(actions, step))
        heights.append(state.elements.size(1))
    assert heights == [1, 2, 3, 4, 5, 4, 3, 2, 1]
    with pytest.raises(ValueError, match="max_steps=9"):
        state.next(stack.step_actions(actions, 0))


def test_depth_limit_bounds_the_height() -> None:
    actions = random_actions(batch_size=1, steps=6, vector_size=2, seed=4)
    stack = SuperpositionStack(vector_size=2, max_depth=2, length_hint=False)
    state = stack.initial_state(1, actions.pushed)
    for step in range(6):
        state = state.next(stack.step_actions(actions, step))
        assert state.elements.size(1) == min(step + 1, 2)


def test_initial_reading_is_zero() -> None:
    like = torch.zeros(1, dtype=DTYPE)
    state = SuperpositionStack(vector_size=5).initial_state(3, like, max_steps=4)
    torch.testing.assert_close(state.reading(), torch.zeros(3, 5, dtype=DTYPE), rtol=0, atol=0)
    assert state.reading().dtype == DTYPE


def test_readings_continue_from_an_initial_state() -> None:
    actions = random_actions(batch_size=2, steps=6, vector_size=3, seed=5)
    stack = SuperpositionStack(vector_size=3, length_hint=False)
    first = SuperpositionActions(actions.probabilities[:, :2], actions.pushed[:, :2])
    rest = SuperpositionActions(actions.probabilities[:, 2:], actions.pushed[:, 2:])
    state = stack.initial_state(2, actions.pushed)
    for step in range(2):
        state = state.next(stack.step_actions(first, step))
    torch.testing.assert_close(stack.readings(rest, initial=state), stack.readings(actions)[:, 2:], rtol=0, atol=1e-12)


def test_causal_and_batch_independent() -> None:
    actions = random_actions(batch_size=3, steps=7, vector_size=2, seed=6)
    stack = SuperpositionStack(vector_size=2)
    full = stack.readings(actions)
    # A shorter sequence padded at the end with arbitrary actions reads the same on its prefix.
    for length in range(1, 7):
        prefix = SuperpositionActions(actions.probabilities[:, :length], actions.pushed[:, :length])
        torch.testing.assert_close(stack.readings(prefix), full[:, :length], rtol=0, atol=1e-12)
    for batch in range(3):
        single = SuperpositionActions(actions.probabilities[batch : batch + 1], actions.pushed[batch : batch + 1])
        torch.testing.assert_close(stack.readings(single), full[batch : batch + 1], rtol=0, atol=1e-12)


def test_transform_tensors_and_slice_batch() -> None:
    actions = random_actions(batch_size=3, steps=4, vector_size=2, seed=7)
    stack = SuperpositionStack(vector_size=2, length_hint=False)
    state = stack.initial_state(3, actions.pushed)
    for step in range(3):
        state = state.next(stack.step_actions(actions, step))
    sliced = state.slice_batch(torch.tensor([2, 0]))
    torch.testing.assert_close(sliced.reading(), state.reading()[[2, 0]], rtol=0, atol=0)
    last = SuperpositionActions(actions.probabilities[[2, 0], 3], actions.pushed[[2, 0], 3])
    whole = state.next(stack.step_actions(actions, 3))
    torch.testing.assert_close(sliced.next(last).reading(), whole.reading()[[2, 0]])
    halved = state.transform_tensors(lambda tensor: tensor.to(torch.float32))
    assert halved.elements.dtype == torch.float32 and halved.reading().dtype == torch.float32


@pytest.mark.parametrize("max_depth", [None, 2])
def test_gradcheck(max_depth: int | None) -> None:
    actions = random_actions(batch_size=2, steps=5, vector_size=2, seed=8)
    stack = SuperpositionStack(vector_size=2, max_depth=max_depth)
    probabilities = actions.probabilities.clone().requires_grad_()
    pushed = actions.pushed.clone().requires_grad_()

    def readings(probabilities: Tensor, pushed: Tensor) -> Tensor:
        return stack.readings(SuperpositionActions(probabilities=probabilities, pushed=pushed))

    assert torch.autograd.gradcheck(readings, (probabilities, pushed))


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="vector_size"):
        SuperpositionStack(vector_size=0)
    with pytest.raises(ValueError, match="max_depth"):
        SuperpositionStack(vector_size=2, max_depth=0)
