"""NS, NS+S, NS+U, NS+S+U against brute-force PDA runs; engines, windows, chunks, gradients."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from tests.stacks.pda_runs import follow_runs
from stacklm.semiring import LOG, MAX_PLUS, REAL
from stacklm.stacks.base import Stack
from stacklm.stacks.nondeterministic import (
    ACTION_TYPES,
    NondeterministicActions,
    NondeterministicStack,
    action_type_probabilities,
    num_action_logits,
)

VARIANTS = [  # (normalize, states_in_reading): NS, NS+S, NS+U, NS+S+U
    pytest.param(True, False, id="NS"),
    pytest.param(True, True, id="NS+S"),
    pytest.param(False, False, id="NS+U"),
    pytest.param(False, True, id="NS+S+U"),
]


def random_actions(
    batch: int, steps: int, states: int, symbols: int, seed: int, scale: float = 1.0, dtype: torch.dtype = torch.float64
) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return scale * torch.randn(batch, steps, num_action_logits(states, symbols), generator=generator, dtype=dtype)


def brute_force_readings(
    actions: NondeterministicActions, states_in_reading: bool, window: int | None = None
) -> Tensor:
    """(B, n, reading size) from every run, normalised by hand."""
    readings = []
    for element in range(actions.pop.size(0)):
        history = follow_runs(
            actions.push[element].exp(),
            actions.replace[element].exp(),
            actions.pop[element].exp(),
            bottom_replaceable=False,
            window=window,
        )
        per_step = []
        for sums in history[1:]:
            weight = sums.weight if states_in_reading else sums.weight.sum(dim=0)
            per_step.append(weight.flatten() / sums.weight.sum())
        readings.append(torch.stack(per_step))
    return torch.stack(readings)


@pytest.mark.parametrize("normalize, states_in_reading", VARIANTS)
@pytest.mark.parametrize("states, symbols, steps", [(1, 1, 5), (2, 2, 5), (2, 3, 4), (3, 2, 4)])
def test_readings_equal_brute_force(
    normalize: bool, states_in_reading: bool, states: int, symbols: int, steps: int
) -> None:
    logits = random_actions(2, steps, states, symbols, seed=states * 10 + symbols)
    actions = NondeterministicActions.from_logits(logits, states, symbols, normalize)
    expected = brute_force_readings(actions, states_in_reading)
    for semiring, fast in [(LOG, True), (LOG, False), (REAL, False)]:
        stack = NondeterministicStack(states, symbols, states_in_reading, semiring=semiring, fast=fast)
        torch.testing.assert_close(stack.readings(actions), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("window", [1, 2, 3])
def test_window_equals_brute_force(window: int) -> None:
    logits = random_actions(2, 6, 2, 2, seed=window)
    actions = NondeterministicActions.from_logits(logits, 2, 2, normalize=False)
    expected = brute_force_readings(actions, True, window=window)
    for fast in (True, False):
        stack = NondeterministicStack(2, 2, True, window=window, fast=fast)
        torch.testing.assert_close(stack.readings(actions), expected, rtol=1e-9, atol=1e-9)


def test_normalized_weights_are_probabilities_per_configuration() -> None:
    logits = random_actions(3, 1, 2, 3, seed=0)
    actions = NondeterministicActions.from_logits(logits, 2, 3, normalize=True)
    total = (
        actions.push.exp().sum(dim=(-1, -2)) + actions.replace.exp().sum(dim=(-1, -2)) + actions.pop.exp().sum(dim=-1)
    )
    torch.testing.assert_close(total, torch.ones_like(total))


def test_unnormalized_weights_are_the_logits() -> None:
    logits = random_actions(1, 1, 2, 2, seed=1)
    actions = NondeterministicActions.from_logits(logits, 2, 2, normalize=False)
    per_configuration = logits.view(1, 1, 2, 2, 10)
    torch.testing.assert_close(actions.pop, per_configuration[..., 8:])
    torch.testing.assert_close(actions.push.reshape(1, 1, 2, 2, 4), per_configuration[..., :4])


@pytest.mark.parametrize(
    "states_in_reading, expected", [(False, [1.0, 0.0, 0.0]), (True, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0])]
)
def test_initial_reading_is_the_bottom(states_in_reading: bool, expected: list[float]) -> None:
    stack = NondeterministicStack(2, 3, states_in_reading)
    like = torch.zeros(1, dtype=torch.float64)
    torch.testing.assert_close(
        stack.initial_state(4, like).reading(), torch.tensor([expected] * 4, dtype=torch.float64)
    )


def deterministic_actions(
    states: int, symbols: int, script: list[tuple[str, int, int, int, int]]
) -> NondeterministicActions:
    """One run with weight 1: at step t only (kind, q, x → r, y) has log weight 0, all others −∞."""
    steps = len(script)
    push = torch.full((1, steps, states, symbols, states, symbols), -math.inf, dtype=torch.float64)
    replace = push.clone()
    pop = torch.full((1, steps, states, symbols, states), -math.inf, dtype=torch.float64)
    for step, (kind, q, x, r, y) in enumerate(script):
        if kind == "push":
            push[0, step, q, x, r, y] = 0.0
        elif kind == "replace":
            replace[0, step, q, x, r, y] = 0.0
        else:
            pop[0, step, q, x, r] = 0.0
    return NondeterministicActions(push, replace, pop)


def test_hand_traced_push_replace_push_pop() -> None:
    # A case of the authors' rau tests: push → replace → push → pop on a (Q=3, S=4) stack.
    script = [("push", 0, 0, 1, 2), ("replace", 1, 2, 2, 3), ("push", 2, 3, 0, 1), ("pop", 0, 1, 1, 0)]
    actions = deterministic_actions(3, 4, script)
    tops = [(1, 2), (2, 3), (0, 1), (1, 3)]
    for fast in (True, False):
        readings = NondeterministicStack(3, 4, True, fast=fast).readings(actions)
        assert torch.isfinite(readings).all()
        for step, (state, symbol) in enumerate(tops):
            expected = torch.zeros(12, dtype=torch.float64)
            expected[state * 4 + symbol] = 1.0
            torch.testing.assert_close(readings[0, step], expected)


def test_reading_without_runs_is_zero_and_has_no_nan_gradient() -> None:
    # Every transition has weight 0 at step 2: no run reaches t = 2.
    actions = deterministic_actions(2, 2, [("push", 0, 0, 1, 1), ("push", 0, 0, 0, 0)])
    for fast in (True, False):
        push = actions.push.clone().requires_grad_()
        readings = NondeterministicStack(2, 2, True, fast=fast).readings(
            NondeterministicActions(push, actions.replace, actions.pop)
        )
        torch.testing.assert_close(readings[0, 1], torch.zeros(4, dtype=torch.float64))
        readings.sum().backward()
        assert push.grad is not None and torch.isfinite(push.grad).all()


def test_gradients_have_no_nan_when_weights_are_zero() -> None:
    script = [("push", 0, 0, 1, 2), ("replace", 1, 2, 2, 3), ("pop", 2, 3, 0, 0)]
    actions = deterministic_actions(3, 4, script[:2])
    for fast in (True, False):
        push = actions.push.clone().requires_grad_()
        readings = NondeterministicStack(3, 4, True, fast=fast).readings(
            NondeterministicActions(push, actions.replace, actions.pop)
        )
        (readings * torch.arange(12, dtype=torch.float64)).sum().backward()
        assert push.grad is not None and torch.isfinite(push.grad).all()


@pytest.mark.parametrize("window", [None, 2, 3])
@pytest.mark.parametrize("fast", [True, False])
def test_gradcheck(window: int | None, fast: bool) -> None:
    logits = random_actions(2, 5, 2, 2, seed=5).requires_grad_()
    stack = NondeterministicStack(2, 2, True, window=window, fast=fast)

    def readings(logits: Tensor) -> Tensor:
        return stack.readings(NondeterministicActions.from_logits(logits, 2, 2, normalize=False))

    assert torch.autograd.gradcheck(readings, (logits,), fast_mode=True)


def test_real_and_log_semirings_agree_with_gradients() -> None:
    logits = random_actions(2, 6, 2, 3, seed=6)
    weights = {}
    for semiring in (LOG, REAL):
        leaf = logits.clone().requires_grad_()
        stack = NondeterministicStack(2, 3, False, semiring=semiring, fast=False)
        readings = stack.readings(NondeterministicActions.from_logits(leaf, 2, 3, normalize=True))
        (readings * torch.linspace(-1, 1, 3, dtype=torch.float64)).sum().backward()
        weights[semiring] = (readings, leaf.grad)
    torch.testing.assert_close(weights[LOG], weights[REAL])


def test_viterbi_is_the_best_run() -> None:
    logits = random_actions(1, 4, 2, 2, seed=7)
    actions = NondeterministicActions.from_logits(logits, 2, 2, normalize=False)
    stack = NondeterministicStack(2, 2, True, semiring=MAX_PLUS)
    state = stack.initial_state(1, logits)
    history = follow_runs(
        actions.push[0].exp(), actions.replace[0].exp(), actions.pop[0].exp(), bottom_replaceable=False, best=True
    )
    for step in range(4):
        state = state.next(stack.step_actions(actions, step))
        torch.testing.assert_close(state.tables.alpha[0].exp(), history[step + 1].weight.flatten())


def test_window_at_least_length_equals_full_stack() -> None:
    actions = NondeterministicActions.from_logits(random_actions(2, 9, 2, 3, seed=8), 2, 3, normalize=False)
    full = NondeterministicStack(2, 3, True).readings(actions)
    for window in (9, 10, 20):
        torch.testing.assert_close(
            NondeterministicStack(2, 3, True, window=window).readings(actions), full, rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("window", [None, 4])
def test_chunked_equals_unchunked(window: int | None) -> None:
    actions = NondeterministicActions.from_logits(random_actions(2, 13, 2, 2, seed=9), 2, 2, normalize=False)
    stack = NondeterministicStack(2, 2, True, window=window)
    whole, _ = stack.run(actions)
    state = None
    pieces = []
    for start, stop in [(0, 4), (4, 9), (9, 10), (10, 13)]:
        chunk = NondeterministicActions(
            actions.push[:, start:stop], actions.replace[:, start:stop], actions.pop[:, start:stop]
        )
        readings, state = stack.run(chunk, state)
        state = state.detach()
        pieces.append(readings)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=1e-12, atol=1e-12)


def test_window_state_stays_bounded() -> None:
    actions = NondeterministicActions.from_logits(random_actions(1, 30, 2, 2, seed=10), 2, 2, normalize=False)
    _, state = NondeterministicStack(2, 2, True, window=5).run(actions)
    assert len(state.tables.columns) <= 5
    assert all(column[0].size(1) == 5 * 4 for column in state.tables.columns)


def test_batch_elements_and_padding_are_independent() -> None:
    actions = NondeterministicActions.from_logits(random_actions(3, 7, 2, 2, seed=11), 2, 2, normalize=False)
    stack = NondeterministicStack(2, 2, True)
    batched = stack.readings(actions)
    for element in range(3):
        short = NondeterministicActions(
            actions.push[element : element + 1, :4],
            actions.replace[element : element + 1, :4],
            actions.pop[element : element + 1, :4],
        )
        torch.testing.assert_close(stack.readings(short)[0], batched[element, :4], rtol=1e-12, atol=1e-12)


def test_zero_and_one_steps() -> None:
    actions = NondeterministicActions.from_logits(random_actions(2, 1, 2, 2, seed=12), 2, 2, normalize=False)
    stack = NondeterministicStack(2, 2, True)
    empty = NondeterministicActions(actions.push[:, :0], actions.replace[:, :0], actions.pop[:, :0])
    readings, state = stack.run(empty)
    assert readings.shape == (2, 0, 4)
    torch.testing.assert_close(state.reading(), stack.initial_state(2, actions.pop).reading())
    one = stack.readings(actions)
    # The first action is necessarily a push from (q0, ⊥): r_1[r, y] ∝ Δ⁺_1[q0, ⊥ → r, y].
    expected = actions.push[:, 0, 0, 0].reshape(2, 4).softmax(dim=-1)
    torch.testing.assert_close(one[:, 0], expected)


@pytest.mark.parametrize("window", [None, 35])
@pytest.mark.parametrize("scale, tolerance", [(1.0, 1e-4), (10.0, 1e-3)])
def test_float32_agrees_with_float64(scale: float, tolerance: float, window: int | None) -> None:
    logits = random_actions(2, 64, 3, 3, seed=13, scale=scale)
    results = {}
    for dtype in (torch.float64, torch.float32):
        leaf = logits.to(dtype).clone().requires_grad_()
        readings = NondeterministicStack(3, 3, True, window=window).readings(
            NondeterministicActions.from_logits(leaf, 3, 3, normalize=False)
        )
        weights = torch.linspace(-1, 1, 9, dtype=dtype)
        (readings * weights).sum().backward()
        results[dtype] = (readings.double(), leaf.grad.double())
    for exact, approximate in zip(results[torch.float64], results[torch.float32]):
        assert torch.isfinite(approximate).all()
        assert (approximate - exact).abs().max() <= tolerance * exact.abs().max()


@pytest.mark.parametrize("states_in_reading", [False, True])
def test_readings_equal_the_step_by_step_readings(states_in_reading: bool) -> None:
    actions = NondeterministicActions.from_logits(random_actions(2, 7, 2, 3, seed=19), 2, 3, normalize=True)
    stack = NondeterministicStack(2, 3, states_in_reading)
    expected = Stack.readings(stack, actions)  # the interface's default: next, then reading, per step
    torch.testing.assert_close(stack.readings(actions), expected, rtol=1e-12, atol=1e-12)


# Q = 1, Γ = 2: per source symbol x, the weights of push x→0, x→1, replace x→0, x→1 and pop.
HAND_WEIGHTS = [[1.0, 2.0, 1.0, 1.0, 1.0], [3.0, 4.0, 1.0, 1.0, 5.0]]


def hand_logits() -> Tensor:
    return torch.tensor(HAND_WEIGHTS, dtype=torch.float64).log().reshape(1, -1)  # (B = 1, Q·S·(2QS + Q) = 10)


def test_action_types_of_unnormalized_weights_sum_the_raw_weights() -> None:
    # push 1 + 2 + 3 + 4 = 10, replace 4 × 1 = 4, pop 1 + 5 = 6, of 20 in all
    actions = NondeterministicActions.from_logits(hand_logits(), 1, 2, normalize=False)
    assert ACTION_TYPES == ("push", "replace", "pop")
    torch.testing.assert_close(action_type_probabilities(actions), torch.tensor([[0.5, 0.2, 0.3]], dtype=torch.float64))


def test_action_types_of_normalized_weights_weigh_each_configuration_equally() -> None:
    # eq. 1: x = 0 has 6 in all (push 3/6, replace 2/6, pop 1/6), x = 1 has 14 (7/14, 2/14, 5/14);
    # summed: push 1, replace 1/3 + 1/7 = 10/21, pop 1/6 + 5/14 = 11/21, of 2 in all
    actions = NondeterministicActions.from_logits(hand_logits(), 1, 2, normalize=True)
    expected = torch.tensor([[1 / 2, 5 / 21, 11 / 42]], dtype=torch.float64)
    torch.testing.assert_close(action_type_probabilities(actions), expected)


def test_action_types_keep_the_leading_dimensions() -> None:
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 5, num_action_logits(2, 3), generator=generator, dtype=torch.float64)
    actions = NondeterministicActions.from_logits(logits, 2, 3, normalize=False)
    probabilities = action_type_probabilities(actions)
    assert probabilities.shape == (2, 5, 3)
    step = NondeterministicActions(actions.push[1, 4], actions.replace[1, 4], actions.pop[1, 4])
    expected = torch.stack([step.push.exp().sum(), step.replace.exp().sum(), step.pop.exp().sum()])
    torch.testing.assert_close(probabilities[1, 4], expected / expected.sum())
