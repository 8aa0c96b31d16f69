"""The stratification stack against a loop over the equations of RNS-RNN App. 7.1."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from stacklm.stacks.stratification import StratificationActions, StratificationStack

DTYPE = torch.float64


def random_actions(batch_size: int, steps: int, vector_size: int, seed: int) -> StratificationActions:
    generator = torch.Generator().manual_seed(seed)
    return StratificationActions(
        pop_strength=torch.rand(batch_size, steps, generator=generator, dtype=DTYPE),
        push_strength=torch.rand(batch_size, steps, generator=generator, dtype=DTYPE),
        pushed=torch.randn(batch_size, steps, vector_size, generator=generator, dtype=DTYPE).tanh(),
    )


def loop_readings(actions: StratificationActions) -> Tensor:
    """r_1 … r_n by the paper's equations, element by element, bottom (i = 1) first: (B, n, m)."""
    batch_size, steps, vector_size = actions.pushed.shape
    expected = torch.zeros(batch_size, steps, vector_size, dtype=DTYPE)
    for batch in range(batch_size):
        values: list[Tensor] = []
        strengths: list[float] = []
        for t in range(1, steps + 1):
            u = float(actions.pop_strength[batch, t - 1])
            old = list(strengths)
            for i in range(len(old)):
                above = sum(old[i + 1 :])
                strengths[i] = max(0.0, old[i] - max(0.0, u - above))
            values.append(actions.pushed[batch, t - 1])
            strengths.append(float(actions.push_strength[batch, t - 1]))
            for i in range(len(strengths)):
                above = sum(strengths[i + 1 :])
                expected[batch, t - 1] += min(strengths[i], max(0.0, 1.0 - above)) * values[i]
    return expected


def step_by_step(stack: StratificationStack, actions: StratificationActions) -> Tensor:
    state = stack.initial_state(actions.pushed.size(0), actions.pushed)
    readings = []
    for step in range(stack.num_steps(actions)):
        state = state.next(stack.step_actions(actions, step))
        readings.append(state.reading())
    return torch.stack(readings, dim=1)


def test_hand_computed_three_steps() -> None:
    # t=1: u=0.5 pops nothing, push (v1, 0.8): r1 = 0.8 v1.
    # t=2: u=0.1 leaves s1 = 0.7, push (v2, 0.5): r2 = 0.5 v2 + min(0.7, 0.5) v1.
    # t=3: u=0.9 empties s2 (0.5) and takes 0.4 of s1 → 0.3, push (v3, 0.3):
    #      r3 = 0.3 v3 + 0 v2 + min(0.3, 0.7) v1.
    actions = StratificationActions(
        pop_strength=torch.tensor([[0.5, 0.1, 0.9]], dtype=DTYPE),
        push_strength=torch.tensor([[0.8, 0.5, 0.3]], dtype=DTYPE),
        pushed=torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]], dtype=DTYPE),
    )
    expected = torch.tensor([[[0.8, 0.0], [0.5, 0.5], [0.6, 0.3]]], dtype=DTYPE)
    stack = StratificationStack(vector_size=2)
    torch.testing.assert_close(stack.readings(actions), expected, rtol=0, atol=1e-12)
    state = stack.initial_state(1, actions.pushed)
    for step in range(3):
        state = state.next(stack.step_actions(actions, step))
    torch.testing.assert_close(state.strengths, torch.tensor([[0.3, 0.0, 0.3]], dtype=DTYPE), rtol=0, atol=1e-12)


@pytest.mark.parametrize("steps", [1, 2, 5, 9])
def test_equals_loop_over_the_equations(steps: int) -> None:
    actions = random_actions(batch_size=3, steps=steps, vector_size=4, seed=steps)
    stack = StratificationStack(vector_size=4)
    torch.testing.assert_close(stack.readings(actions), loop_readings(actions), rtol=0, atol=1e-12)


def test_strengths_above_one_pop_several_elements() -> None:
    # Pop and push strengths outside (0, 1) follow the same equations (u_t > 1 pops several layers).
    generator = torch.Generator().manual_seed(11)
    actions = StratificationActions(
        pop_strength=2.5 * torch.rand(2, 8, generator=generator, dtype=DTYPE),
        push_strength=1.5 * torch.rand(2, 8, generator=generator, dtype=DTYPE),
        pushed=torch.randn(2, 8, 3, generator=generator, dtype=DTYPE),
    )
    stack = StratificationStack(vector_size=3)
    torch.testing.assert_close(stack.readings(actions), loop_readings(actions), rtol=0, atol=1e-12)


@pytest.mark.parametrize("steps", [1, 6])
def test_readings_equal_next(steps: int) -> None:
    actions = random_actions(batch_size=2, steps=steps, vector_size=3, seed=20 + steps)
    stack = StratificationStack(vector_size=3)
    torch.testing.assert_close(stack.readings(actions), step_by_step(stack, actions), rtol=0, atol=0)


def test_initial_reading_is_zero() -> None:
    state = StratificationStack(vector_size=5).initial_state(3, torch.zeros(1, dtype=DTYPE))
    torch.testing.assert_close(state.reading(), torch.zeros(3, 5, dtype=DTYPE), rtol=0, atol=0)
    assert state.reading().dtype == DTYPE


def test_causal_and_batch_independent() -> None:
    actions = random_actions(batch_size=3, steps=7, vector_size=2, seed=6)
    stack = StratificationStack(vector_size=2)
    full = stack.readings(actions)
    for length in range(1, 7):
        prefix = StratificationActions(
            actions.pop_strength[:, :length], actions.push_strength[:, :length], actions.pushed[:, :length]
        )
        torch.testing.assert_close(stack.readings(prefix), full[:, :length], rtol=0, atol=0)
    for batch in range(3):
        rows = slice(batch, batch + 1)
        single = StratificationActions(actions.pop_strength[rows], actions.push_strength[rows], actions.pushed[rows])
        torch.testing.assert_close(stack.readings(single), full[rows], rtol=0, atol=1e-12)


def test_readings_continue_from_an_initial_state() -> None:
    actions = random_actions(batch_size=2, steps=6, vector_size=3, seed=5)
    stack = StratificationStack(vector_size=3)
    state = stack.initial_state(2, actions.pushed)
    for step in range(2):
        state = state.next(stack.step_actions(actions, step))
    rest = StratificationActions(actions.pop_strength[:, 2:], actions.push_strength[:, 2:], actions.pushed[:, 2:])
    torch.testing.assert_close(stack.readings(rest, initial=state), stack.readings(actions)[:, 2:], rtol=0, atol=0)


def test_transform_tensors_covers_every_tensor() -> None:
    actions = random_actions(batch_size=3, steps=4, vector_size=2, seed=7)
    stack = StratificationStack(vector_size=2)
    state = stack.initial_state(3, actions.pushed)
    for step in range(3):
        state = state.next(stack.step_actions(actions, step))
    converted = state.transform_tensors(lambda tensor: tensor.to(torch.float32))
    assert converted.values.dtype == converted.strengths.dtype == torch.float32
    sliced = state.slice_batch(torch.tensor([2, 0]))
    last = StratificationActions(
        actions.pop_strength[[2, 0], 3], actions.push_strength[[2, 0], 3], actions.pushed[[2, 0], 3]
    )
    whole = state.next(stack.step_actions(actions, 3))
    torch.testing.assert_close(sliced.next(last).reading(), whole.reading()[[2, 0]])


def test_gradcheck() -> None:
    actions = random_actions(batch_size=2, steps=5, vector_size=2, seed=8)
    stack = StratificationStack(vector_size=2)
    tensors = (actions.pop_strength, actions.push_strength, actions.pushed)
    inputs = tuple(tensor.clone().requires_grad_() for tensor in tensors)

    def readings(pop_strength: Tensor, push_strength: Tensor, pushed: Tensor) -> Tensor:
        return stack.readings(StratificationActions(pop_strength, push_strength, pushed))

    assert torch.autograd.gradcheck(readings, inputs)


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="vector_size"):
        StratificationStack(vector_size=0)
