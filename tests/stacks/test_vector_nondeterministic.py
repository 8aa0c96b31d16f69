"""The dVPDA against brute-force VPDA runs (DuSell & Cotterell (2025) eq. 6), App. B.2, windows, chunks, gradients."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from tests.stacks.pda_runs import follow_runs
from stacklm.semiring import LOG, REAL
from stacklm.stacks.base import Stack
from stacklm.stacks.nondeterministic import num_action_logits
from stacklm.stacks.superposition import PUSH_INDEX, POP_INDEX, NOOP_INDEX, SuperpositionActions, SuperpositionStack
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions, VectorNondeterministicStack


def random_actions(
    batch: int,
    steps: int,
    states: int,
    symbols: int,
    vector_size: int,
    seed: int,
    scale: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> VectorNondeterministicActions:
    generator = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, steps, num_action_logits(states, symbols), generator=generator, dtype=dtype)
    log_pushed = torch.nn.functional.logsigmoid(
        torch.randn(batch, steps, vector_size, generator=generator, dtype=dtype)
    )
    return VectorNondeterministicActions.from_logits(logits, log_pushed, states, symbols)


def brute_force_readings(
    actions: VectorNondeterministicActions, log_bottom: Tensor, window: int | None = None
) -> Tensor:
    """Eq. 6 by hand: Σ over runs of weight × top vector, divided by the total weight."""
    readings = []
    for element in range(actions.pop.size(0)):
        history = follow_runs(
            actions.push[element].exp(),
            actions.replace[element].exp(),
            actions.pop[element].exp(),
            bottom_replaceable=True,
            window=window,
            pushed=actions.pushed[element].exp(),
            bottom=log_bottom.exp(),
        )
        readings.append(torch.stack([(sums.vector / sums.weight.sum()).flatten() for sums in history[1:]]))
    return torch.stack(readings)


@pytest.mark.parametrize("states, symbols, steps", [(1, 1, 5), (1, 2, 5), (2, 2, 4), (3, 2, 4), (2, 3, 4)])
@pytest.mark.parametrize("bottom", ["learned", "zero", "one"])
def test_readings_equal_brute_force(states: int, symbols: int, steps: int, bottom: str) -> None:
    actions = random_actions(2, steps, states, symbols, 3, seed=states * 10 + symbols)
    for semiring, fast in [(LOG, True), (LOG, False), (REAL, False)]:
        stack = VectorNondeterministicStack(states, symbols, 3, bottom=bottom, semiring=semiring, fast=fast).double()
        if stack.bottom_logits is not None:
            with torch.no_grad():
                stack.bottom_logits.copy_(torch.tensor([0.5, -1.0, 2.0]))
        expected = brute_force_readings(actions, stack.log_bottom(actions.pop))
        torch.testing.assert_close(stack.readings(actions), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("window", [1, 2, 3])
def test_window_equals_brute_force(window: int) -> None:
    actions = random_actions(2, 6, 2, 2, 2, seed=window)
    for fast in (True, False):
        stack = VectorNondeterministicStack(2, 2, 2, window=window, fast=fast).double()
        expected = brute_force_readings(actions, stack.log_bottom(actions.pop), window=window)
        torch.testing.assert_close(stack.readings(actions), expected, rtol=1e-9, atol=1e-9)


def test_initial_reading_is_the_bottom_vector() -> None:
    stack = VectorNondeterministicStack(2, 2, 3).double()
    with torch.no_grad():
        stack.bottom_logits.copy_(torch.tensor([0.0, 1.0, -1.0]))
    reading = stack.initial_state(1, torch.zeros(1, dtype=torch.float64)).reading().view(2, 2, 3)
    expected = torch.zeros(2, 2, 3, dtype=torch.float64)
    expected[0, 0] = torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64).sigmoid()
    torch.testing.assert_close(reading, expected)


def test_two_runs_to_one_configuration_average_their_vectors() -> None:
    # Two runs of weight 1 end in (q0, y=1): one pushes v1 then replaces, one pushes v2 on top
    # of another symbol. Mixing one run's state with the other's vector (a "spurious" run) has weight 0.
    states, symbols = 3, 2
    push = torch.full((1, 2, states, symbols, states, symbols), -math.inf, dtype=torch.float64)
    replace = push.clone()
    pop = torch.full((1, 2, states, symbols, states), -math.inf, dtype=torch.float64)
    push[0, 0, 0, 0, 1, 1] = 0.0  # q0,⊥ → q1, push 1 (vector v1)
    push[0, 0, 0, 0, 2, 0] = 0.0  # q0,⊥ → q2, push ⊥ (vector v1)
    replace[0, 1, 1, 1, 0, 1] = 0.0  # q1,1 → q0, replace by 1 (keeps v1)
    push[0, 1, 2, 0, 0, 1] = 0.0  # q2,⊥ → q0, push 1 (vector v2)
    pushed = torch.log(torch.tensor([[[0.2, 0.4], [0.6, 0.9]]], dtype=torch.float64))
    actions = VectorNondeterministicActions(push, replace, pop, pushed)
    for fast in (True, False):
        reading = VectorNondeterministicStack(states, symbols, 2, bottom="zero", fast=fast).double().readings(actions)
        expected = torch.zeros(states, symbols, 2, dtype=torch.float64)
        expected[0, 1] = torch.tensor([(0.2 + 0.6) / 2, (0.4 + 0.9) / 2])
        torch.testing.assert_close(reading[0, 1].view(states, symbols, 2), expected)


def superposition_as_dvpda(probabilities: Tensor, log_pushed: Tensor) -> VectorNondeterministicActions:
    """The dVPDA that computes the superposition stack (DuSell & Cotterell (2025) App. B.2, made exact).

    One state q0; symbols ⊥ (the empty stack) and a (every pushed element); v₀ = 0. From any
    top, push a with a^push; replace a by a with a^noop; pop a with a^pop. The superposition's
    pop of the empty stack leaves it empty, so on ⊥ the replace weighs a^noop + a^pop. (App. B.2
    names Γ = {⊥} with replaces before the first push weighted 1; no dVPDA can weight the bottom
    apart from a pushed ⊥, so the exact special case needs the second symbol.)
    """
    batch, steps = probabilities.shape[:2]
    log_probabilities = probabilities.log()
    push = torch.full((batch, steps, 1, 2, 1, 2), -math.inf, dtype=probabilities.dtype)
    replace = push.clone()
    pop = torch.full((batch, steps, 1, 2, 1), -math.inf, dtype=probabilities.dtype)
    push[:, :, 0, :, 0, 1] = log_probabilities[..., PUSH_INDEX].unsqueeze(-1)
    replace[:, :, 0, 1, 0, 1] = log_probabilities[..., NOOP_INDEX]
    replace[:, :, 0, 0, 0, 0] = (probabilities[..., NOOP_INDEX] + probabilities[..., POP_INDEX]).log()
    pop[:, :, 0, 1, 0] = log_probabilities[..., POP_INDEX]
    return VectorNondeterministicActions(push, replace, pop, log_pushed)


@pytest.mark.parametrize("fast", [True, False])
def test_superposition_is_a_special_case(fast: bool) -> None:
    generator = torch.Generator().manual_seed(3)
    probabilities = torch.randn(2, 7, 3, generator=generator, dtype=torch.float64).softmax(dim=-1)
    pushed = torch.randn(2, 7, 4, generator=generator, dtype=torch.float64).sigmoid()
    expected = SuperpositionStack(4, length_hint=False).readings(SuperpositionActions(probabilities, pushed))
    dvpda = VectorNondeterministicStack(1, 2, 4, bottom="zero", fast=fast).double()
    readings = dvpda.readings(superposition_as_dvpda(probabilities, pushed.log())).view(2, 7, 1, 2, 4)
    torch.testing.assert_close(readings.sum(dim=(2, 3)), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("fast", [True, False])
def test_gradcheck(window: int | None, fast: bool) -> None:
    actions = random_actions(2, 5, 2, 2, 2, seed=5)
    logits = torch.cat(
        [actions.push.flatten(2), actions.replace.flatten(2), actions.pop.flatten(2)], dim=-1
    ).requires_grad_()
    log_pushed = actions.pushed.clone().requires_grad_()
    bottom_logits = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    stack = VectorNondeterministicStack(2, 2, 2, window=window, fast=fast).double()

    def readings(logits: Tensor, log_pushed: Tensor, bottom_logits: Tensor) -> Tensor:
        push, replace, pop = logits.split([16, 16, 8], dim=-1)
        step_actions = VectorNondeterministicActions(
            push.view(2, 5, 2, 2, 2, 2), replace.view(2, 5, 2, 2, 2, 2), pop.view(2, 5, 2, 2, 2), log_pushed
        )
        return torch.func.functional_call(stack, {"bottom_logits": bottom_logits}, (step_actions,))

    assert torch.autograd.gradcheck(readings, (logits, log_pushed, bottom_logits), fast_mode=True)


def test_window_at_least_length_equals_full_stack() -> None:
    actions = random_actions(2, 8, 2, 3, 3, seed=8)
    full = VectorNondeterministicStack(2, 3, 3).double().readings(actions)
    for window in (8, 12):
        torch.testing.assert_close(
            VectorNondeterministicStack(2, 3, 3, window=window).double().readings(actions), full, rtol=1e-12, atol=1e-12
        )


def chunk(actions: VectorNondeterministicActions, start: int, stop: int) -> VectorNondeterministicActions:
    return VectorNondeterministicActions(
        actions.push[:, start:stop],
        actions.replace[:, start:stop],
        actions.pop[:, start:stop],
        actions.pushed[:, start:stop],
    )


@pytest.mark.parametrize("window", [None, 4])
def test_chunked_equals_unchunked(window: int | None) -> None:
    actions = random_actions(2, 13, 2, 2, 3, seed=9)
    stack = VectorNondeterministicStack(2, 2, 3, window=window).double()
    whole, _ = stack.run(actions)
    state = None
    pieces = []
    for start, stop in [(0, 5), (5, 6), (6, 11), (11, 13)]:
        readings, state = stack.run(chunk(actions, start, stop), state)
        state = state.detach()
        pieces.append(readings)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=1e-12, atol=1e-12)


def test_batch_elements_and_padding_are_independent() -> None:
    actions = random_actions(3, 6, 2, 2, 2, seed=11)
    stack = VectorNondeterministicStack(2, 2, 2).double()
    batched = stack.readings(actions)
    for element in range(3):
        single = VectorNondeterministicActions(
            actions.push[element : element + 1, :3],
            actions.replace[element : element + 1, :3],
            actions.pop[element : element + 1, :3],
            actions.pushed[element : element + 1, :3],
        )
        torch.testing.assert_close(stack.readings(single)[0], batched[element, :3], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("window", [None, 16])
@pytest.mark.parametrize("scale, tolerance", [(1.0, 1e-4), (10.0, 1e-3)])
def test_float32_agrees_with_float64(scale: float, tolerance: float, window: int | None) -> None:
    actions = random_actions(2, 64, 3, 3, 5, seed=13, scale=scale)
    results = {}
    for dtype in (torch.float64, torch.float32):
        logits = (
            torch.cat([actions.push.flatten(2), actions.replace.flatten(2), actions.pop.flatten(2)], dim=-1)
            .to(dtype)
            .requires_grad_()
        )
        log_pushed = actions.pushed.to(dtype).clone().requires_grad_()
        push, replace, pop = logits.split([81, 81, 27], dim=-1)
        step_actions = VectorNondeterministicActions(
            push.view(2, 64, 3, 3, 3, 3), replace.view(2, 64, 3, 3, 3, 3), pop.view(2, 64, 3, 3, 3), log_pushed
        )
        stack = VectorNondeterministicStack(3, 3, 5, window=window).to(dtype)
        readings = stack.readings(step_actions)
        (readings * torch.linspace(-1, 1, 45, dtype=dtype)).sum().backward()
        results[dtype] = (
            readings.double(),
            logits.grad.double(),
            log_pushed.grad.double(),
            stack.bottom_logits.grad.double(),
        )
    for exact, approximate in zip(results[torch.float64], results[torch.float32]):
        assert torch.isfinite(approximate).all()
        assert (approximate - exact).abs().max() <= tolerance * exact.abs().max()


def test_two_continuations_of_one_state_are_independent() -> None:
    # The fast path keeps the full stack's columns in a shared buffer; advancing one state twice
    # (sampling, beam search) must not let one continuation overwrite the other's columns.
    first, second = random_actions(1, 20, 2, 2, 2, seed=14), random_actions(1, 20, 2, 2, 2, seed=15)
    stack = VectorNondeterministicStack(2, 2, 2).double()
    prefix = chunk(first, 0, 18)
    _, state = stack.run(prefix)
    one, _ = stack.run(chunk(first, 18, 20), state)
    other, _ = stack.run(chunk(second, 18, 20), state)
    again, _ = stack.run(chunk(first, 18, 20), state)
    torch.testing.assert_close(one, stack.readings(first)[:, 18:], rtol=1e-12, atol=1e-12)
    whole_other = torch.cat([prefix.push, second.push[:, 18:]], dim=1), torch.cat(
        [prefix.replace, second.replace[:, 18:]], dim=1
    )
    mixed = VectorNondeterministicActions(
        whole_other[0],
        whole_other[1],
        torch.cat([prefix.pop, second.pop[:, 18:]], dim=1),
        torch.cat([prefix.pushed, second.pushed[:, 18:]], dim=1),
    )
    torch.testing.assert_close(other, stack.readings(mixed)[:, 18:], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(again, one, rtol=1e-12, atol=1e-12)


def test_gradients_of_a_continuation_survive_another() -> None:
    first, second = random_actions(1, 20, 2, 2, 2, seed=16), random_actions(1, 20, 2, 2, 2, seed=17)
    stack = VectorNondeterministicStack(2, 2, 2).double()
    gradients = []
    for interleave in (False, True):
        push = first.push.clone().requires_grad_()
        actions = VectorNondeterministicActions(push, first.replace, first.pop, first.pushed)
        _, state = stack.run(chunk(actions, 0, 18))
        readings, _ = stack.run(chunk(actions, 18, 20), state)
        if interleave:
            stack.run(chunk(second, 18, 20), state)
        (readings * torch.linspace(-1, 1, readings.size(-1), dtype=torch.float64)).sum().backward()
        gradients.append(push.grad)
    torch.testing.assert_close(gradients[1], gradients[0], rtol=1e-12, atol=1e-12)


def saved_megabytes(steps: int, window: int | None) -> float:
    """Distinct storages autograd keeps for backward after a forward pass of ``steps`` steps."""
    storages: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    actions = random_actions(2, steps, 2, 2, 2, seed=18)
    logits = actions.push.clone().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        VectorNondeterministicStack(2, 2, 2, window=window).double().readings(
            VectorNondeterministicActions(logits, actions.replace, actions.pop, actions.pushed)
        )
    return sum(storages.values()) / 2**20


@pytest.mark.parametrize("window, growth", [(None, 4.6), (4, 2.3)])
def test_memory_kept_for_backward_grows_as_n_squared_or_with_a_window_as_n(window: int | None, growth: float) -> None:
    # Doubling n multiplies it by ~4 (O(n²) tables), or ~2 with a window; never ~8 (O(n³)).
    assert saved_megabytes(64, window) <= growth * saved_megabytes(32, window)


def test_readings_equal_the_step_by_step_readings() -> None:
    actions = random_actions(2, 7, 2, 3, 2, seed=20)
    stack = VectorNondeterministicStack(2, 3, 2).double()
    expected = Stack.readings(stack, actions)  # the interface's default: next, then reading, per step
    torch.testing.assert_close(stack.readings(actions), expected, rtol=1e-12, atol=1e-12)
