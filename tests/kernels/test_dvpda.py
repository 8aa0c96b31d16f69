"""The compiled dVPDA kernel against brute-force runs and the PyTorch DP: readings, gradients, float32.

Every test runs on ``accelerate(…, "cpu-compiled")``, so a kernel that fails to build fails them (no fallback).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor

from tests.kernels.recorded_ops import RecordedOps
from tests.stacks.test_vector_nondeterministic import brute_force_readings, random_actions, superposition_as_dvpda
from stacklm.kernels import build as compiled
from stacklm.kernels.backend import accelerate
from stacklm.kernels.dvpda import (
    CompiledState,
    CompiledVectorNondeterministicInterface,
    CompiledVectorNondeterministicStack,
    SequenceRun,
    compiled_state,
    packed_logits,
    packed_readings,
)
from stacklm.models.stack_interface import VectorNondeterministicSpec, build_interface
from stacklm.stacks.superposition import SuperpositionActions, SuperpositionStack
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions, VectorNondeterministicStack, VectorNondeterministicState


def stacks(states: int, symbols: int, vector_size: int, **options: object) -> tuple[VectorNondeterministicStack, ...]:
    """The same dVPDA with the compiled kernel and with the PyTorch DP (float64, one w₀)."""
    result = []
    for backend in ("cpu-compiled", "torch"):
        stack = accelerate(VectorNondeterministicStack(states, symbols, vector_size, **options).double(), backend)
        if stack.bottom_logits is not None:
            with torch.no_grad():
                stack.bottom_logits.copy_(torch.linspace(-1.0, 1.5, vector_size, dtype=torch.float64))
        result.append(stack)
    return tuple(result)


def mapped(actions: VectorNondeterministicActions, function: Callable[[Tensor], Tensor]) -> VectorNondeterministicActions:
    """``function`` applied to push, replace, pop and pushed."""
    tensors = (actions.push, actions.replace, actions.pop, actions.pushed)
    return VectorNondeterministicActions(*(function(tensor) for tensor in tensors))


def flat_logits(actions: VectorNondeterministicActions) -> Tensor:
    return torch.cat([actions.push.flatten(2), actions.replace.flatten(2), actions.pop.flatten(2)], dim=-1)


def actions_of(logits: Tensor, log_pushed: Tensor, states: int, symbols: int) -> VectorNondeterministicActions:
    configurations = states * symbols
    push, replace, pop = logits.split([configurations**2, configurations**2, configurations * states], dim=-1)
    lead = logits.shape[:2]
    return VectorNondeterministicActions(
        push.reshape(*lead, states, symbols, states, symbols),
        replace.reshape(*lead, states, symbols, states, symbols),
        pop.reshape(*lead, states, symbols, states),
        log_pushed,
    )


def readings_and_gradients(
    stack: VectorNondeterministicStack, actions: VectorNondeterministicActions, dtype: torch.dtype
) -> tuple[Tensor, ...]:
    """Readings and the gradients of a fixed linear function of them (logits, log v_t, w₀)."""
    states, symbols = actions.pop.shape[2:4]
    logits = flat_logits(actions).to(dtype).requires_grad_()
    log_pushed = actions.pushed.to(dtype).clone().requires_grad_()
    stack = stack.to(dtype)
    stack.zero_grad()
    readings = stack.readings(actions_of(logits, log_pushed, states, symbols))
    weights = torch.linspace(-1, 1, readings.numel(), dtype=dtype).view_as(readings)
    (readings * weights).sum().backward()
    gradients = [logits.grad, log_pushed.grad]
    if stack.bottom_logits is not None:
        gradients.append(stack.bottom_logits.grad)
    return (readings, *gradients)


@pytest.mark.parametrize("states, symbols, steps", [(1, 1, 5), (1, 2, 5), (2, 2, 4), (3, 2, 4), (2, 3, 4)])
@pytest.mark.parametrize("bottom", ["learned", "zero", "one"])
def test_readings_equal_brute_force(states: int, symbols: int, steps: int, bottom: str) -> None:
    actions = random_actions(2, steps, states, symbols, 3, seed=states * 10 + symbols)
    stack, _ = stacks(states, symbols, 3, bottom=bottom)
    assert isinstance(stack, CompiledVectorNondeterministicStack)
    expected = brute_force_readings(actions, stack.log_bottom(actions.pop))
    torch.testing.assert_close(stack.readings(actions), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("states, symbols, vector_size, steps", [(3, 3, 5, 12), (2, 3, 2, 9), (1, 1, 1, 6)])
@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_readings_and_gradients_equal_the_pytorch_dp(
    states: int, symbols: int, vector_size: int, steps: int, scale: float
) -> None:
    actions = random_actions(3, steps, states, symbols, vector_size, seed=steps, scale=scale)
    compiled, reference = stacks(states, symbols, vector_size)
    for got, expected in zip(
        readings_and_gradients(compiled, actions, torch.float64),
        readings_and_gradients(reference, actions, torch.float64),
    ):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * max(1.0, expected.abs().max().item()))


def test_gradcheck() -> None:
    actions = random_actions(2, 5, 2, 2, 2, seed=5)
    stack, _ = stacks(2, 2, 2)
    bottom_logits = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)

    def readings(logits: Tensor, log_pushed: Tensor, bottom_logits: Tensor) -> Tensor:
        return torch.func.functional_call(
            stack, {"bottom_logits": bottom_logits}, (actions_of(logits, log_pushed, 2, 2),)
        )

    inputs = (flat_logits(actions).requires_grad_(), actions.pushed.clone().requires_grad_(), bottom_logits)
    assert torch.autograd.gradcheck(readings, inputs)


def test_weights_of_zero() -> None:
    # Transitions of weight 0 (log −∞) everywhere but a few: the superposition stack as a dVPDA.
    generator = torch.Generator().manual_seed(3)
    probabilities = torch.randn(2, 7, 3, generator=generator, dtype=torch.float64).softmax(dim=-1)
    pushed = torch.randn(2, 7, 4, generator=generator, dtype=torch.float64).sigmoid()
    expected = SuperpositionStack(4, length_hint=False).readings(SuperpositionActions(probabilities, pushed))
    dvpda = accelerate(VectorNondeterministicStack(1, 2, 4, bottom="zero").double(), "cpu-compiled")
    log_probabilities = probabilities.clone().requires_grad_()
    actions = superposition_as_dvpda(log_probabilities, pushed.log())
    readings = dvpda.readings(actions).view(2, 7, 1, 2, 4)
    torch.testing.assert_close(readings.sum(dim=(2, 3)), expected, rtol=1e-10, atol=1e-12)
    readings.sum().backward()
    assert torch.isfinite(log_probabilities.grad).all()


@pytest.mark.parametrize("steps", [16, 64])
@pytest.mark.parametrize("scale, tolerance", [(1.0, 1e-4), (10.0, 1e-3)])
def test_float32_agrees_with_float64(steps: int, scale: float, tolerance: float) -> None:
    actions = random_actions(2, steps, 3, 3, 5, seed=13 + steps, scale=scale)
    stack, _ = stacks(3, 3, 5)
    exact = readings_and_gradients(stack, actions, torch.float64)
    approximate = readings_and_gradients(stack, actions, torch.float32)
    for value, reference in zip(approximate, exact):
        assert value.dtype == torch.float32
        assert torch.isfinite(value).all()
        assert (value.double() - reference).abs().max() <= tolerance * reference.abs().max()


@pytest.mark.parametrize("steps, scale, tolerance", [(128, 1.0, 1e-4), (128, 10.0, 1e-3), (160, 30.0, 3e-3)])
def test_float32_agrees_with_float64_on_long_sequences(steps: int, scale: float, tolerance: float) -> None:
    """The γ rows' shares are sums in real space relative to the largest term's offset: over long
    runs with extreme weights (log α in the thousands, most shares flushed to 0) float32 stays
    within the tolerance of float64 (the log-space kernel before it: 1.3e-3 at scale 30)."""
    actions = random_actions(2, steps, 3, 3, 5, seed=steps + int(scale), scale=scale)
    stack, _ = stacks(3, 3, 5)
    exact = readings_and_gradients(stack, actions, torch.float64)
    approximate = readings_and_gradients(stack, actions, torch.float32)
    for value, reference in zip(approximate, exact):
        assert torch.isfinite(value).all()
        assert (value.double() - reference).abs().max() <= tolerance * reference.abs().max()


def test_long_sequences_equal_the_pytorch_dp() -> None:
    actions = random_actions(2, 128, 3, 3, 5, seed=128, scale=10.0)
    compiled, reference = stacks(3, 3, 5)
    for got, expected in zip(
        readings_and_gradients(compiled, actions, torch.float64),
        readings_and_gradients(reference, actions, torch.float64),
    ):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * max(1.0, expected.abs().max().item()))


@pytest.mark.parametrize("absent", ["push", "replace", "pop", "pop_at_odd_steps"])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-9), (torch.float32, 1e-4)])
def test_a_kind_of_transition_of_weight_zero(absent: str, dtype: torch.dtype, tolerance: float) -> None:
    """Every push, replace or pop of weight 0 (log −∞): a column without that term takes its
    scale from the terms present (with a term of weight 0 setting it, every share would underflow).
    Every logit is lowered by 10, so that log α falls far below float32's exponent range."""
    actions = mapped(random_actions(2, 20, 3, 3, 5, seed=7, scale=3.0), lambda tensor: tensor - 10.0)
    actions = VectorNondeterministicActions(actions.push, actions.replace, actions.pop, actions.pushed + 10.0)
    if absent == "pop_at_odd_steps":
        pop = actions.pop.clone()
        pop[:, 1::2] = -math.inf
        actions = VectorNondeterministicActions(actions.push, actions.replace, pop, actions.pushed)
    else:
        kinds = {"push": actions.push, "replace": actions.replace, "pop": actions.pop}
        kinds[absent] = torch.full_like(kinds[absent], -math.inf)
        actions = VectorNondeterministicActions(kinds["push"], kinds["replace"], kinds["pop"], actions.pushed)
    compiled, reference = stacks(3, 3, 5)
    for got, expected in zip(
        readings_and_gradients(compiled, actions, dtype), readings_and_gradients(reference, actions, torch.float64)
    ):
        assert torch.isfinite(got).all()
        assert (got.double() - expected).abs().max() <= tolerance * max(1.0, expected.abs().max().item())


def test_float32_gradients_where_pop_totals_are_subnormal() -> None:
    """Large logits over 32 steps make some pop totals subnormal in float32: the backward
    forms ∂r · share / total, never share / total alone, which overflows there."""
    actions = random_actions(2, 32, 3, 3, 5, seed=2, scale=10.0)
    stack, _ = stacks(3, 3, 5)
    exact = readings_and_gradients(stack, actions, torch.float64)
    approximate = readings_and_gradients(stack, actions, torch.float32)
    for value, reference in zip(approximate, exact):
        assert torch.isfinite(value).all()
        assert (value.double() - reference).abs().max() <= 1e-3 * reference.abs().max()


def test_batch_elements_and_padding_are_independent() -> None:
    actions = random_actions(3, 8, 2, 3, 2, seed=11)
    stack, _ = stacks(2, 3, 2)
    batched = stack.readings(actions)
    for element in range(3):
        single = VectorNondeterministicActions(
            actions.push[element : element + 1, :5],
            actions.replace[element : element + 1, :5],
            actions.pop[element : element + 1, :5],
            actions.pushed[element : element + 1, :5],
        )
        torch.testing.assert_close(stack.readings(single)[0], batched[element, :5], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch", [1, 7, 9, 33])
def test_batches_of_any_size_equal_the_pytorch_dp(batch: int) -> None:
    """The whole-sequence kernel runs groups of eight elements in vector lanes: a group of fewer
    pads its lanes, and what they give is dropped."""
    actions = random_actions(batch, 6, 3, 3, 5, seed=batch, scale=3.0)
    compiled, reference = stacks(3, 3, 5)
    for got, expected in zip(
        readings_and_gradients(compiled, actions, torch.float64),
        readings_and_gradients(reference, actions, torch.float64),
    ):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * max(1.0, expected.abs().max().item()))


@pytest.mark.parametrize("batch", [9, 33])
@pytest.mark.parametrize("log_sigmoid", [True, False])
def test_packed_outputs_equal_their_actions_apart(batch: int, log_sigmoid: bool) -> None:
    """``packed_readings`` of an input layer's whole output (B, n, N·(2N + Q) + m), read in place
    with log σ of the pushed part in the kernel, equals the composition it replaces (split, log σ,
    the actions' tensors apart) on the compiled kernel and the PyTorch DP: readings and the one
    gradient of the output, and w₀'s."""
    states, symbols, vector_size, steps = 3, 3, 5, 7
    configurations = states * symbols
    width = configurations * (2 * configurations + states)
    generator = torch.Generator().manual_seed(batch)
    output = 3.0 * torch.randn(batch, steps, width + vector_size, generator=generator, dtype=torch.float64)
    compiled_stack, reference = stacks(states, symbols, vector_size)

    def results(stack: VectorNondeterministicStack, packed: bool) -> tuple[Tensor, ...]:
        stack.zero_grad()
        leaf = output.clone().requires_grad_()
        if packed:
            readings = packed_readings(stack, leaf, log_sigmoid)
        else:
            logits, pushed = leaf.split([width, vector_size], dim=-1)
            log_pushed = torch.nn.functional.logsigmoid(pushed) if log_sigmoid else pushed
            actions = VectorNondeterministicActions.from_logits(logits.contiguous(), log_pushed.contiguous(), states, symbols)
            readings = stack.readings(mapped(actions, Tensor.contiguous))
        (readings * torch.linspace(-1, 1, readings.numel(), dtype=torch.float64).view_as(readings)).sum().backward()
        return readings, leaf.grad, stack.bottom_logits.grad

    got = results(compiled_stack, packed=True)
    for expected, tolerance in ((results(compiled_stack, packed=False), 1e-12), (results(reference, packed=False), 1e-9)):
        for value, reference_value in zip(got, expected):
            torch.testing.assert_close(
                value, reference_value, rtol=tolerance, atol=tolerance * max(1.0, reference_value.abs().max().item())
            )


LOGIT_SCALES = (0.1, 1.0, 10.0, 30.0)


def mixed_scale_actions(batch: int, steps: int, seed: int) -> VectorNondeterministicActions:
    """Element b's logits scaled by LOGIT_SCALES[b mod 4]: lanes of one group far apart in log α."""
    actions = random_actions(batch, steps, 3, 3, 5, seed=seed)
    scales = torch.tensor(LOGIT_SCALES, dtype=actions.push.dtype).repeat(batch)[:batch]

    def scaled(tensor: Tensor) -> Tensor:
        return tensor * scales.view(-1, *([1] * (tensor.dim() - 1)))

    return VectorNondeterministicActions(scaled(actions.push), scaled(actions.replace), scaled(actions.pop), actions.pushed)


def test_mixed_logit_scales_in_one_group_equal_the_pytorch_dp() -> None:
    actions = mixed_scale_actions(11, 12, seed=21)
    compiled, reference = stacks(3, 3, 5)
    for got, expected in zip(
        readings_and_gradients(compiled, actions, torch.float64),
        readings_and_gradients(reference, actions, torch.float64),
    ):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * max(1.0, expected.abs().max().item()))


def test_mixed_logit_scales_in_one_group_equal_each_element_alone() -> None:
    """In float32, each element's readings and gradients in a group of elements of other logit
    scales equal those of its run alone (a group of one)."""
    actions = mixed_scale_actions(9, 24, seed=22)
    stack, _ = stacks(3, 3, 5)
    stack = stack.float()

    def readings_and_gradients_per_element(actions: VectorNondeterministicActions) -> tuple[Tensor, Tensor, Tensor]:
        """Readings and the gradients of Σ readings · w, one w (n, N·m) for every element."""
        logits = flat_logits(actions).float().requires_grad_()
        log_pushed = actions.pushed.float().requires_grad_()
        readings = stack.readings(actions_of(logits, log_pushed, 3, 3))
        weights = torch.linspace(-1, 1, readings[0].numel()).view_as(readings[0])
        (readings * weights).sum().backward()
        return readings, logits.grad, log_pushed.grad

    batched = readings_and_gradients_per_element(actions)
    for element in range(9):
        alone = readings_and_gradients_per_element(mapped(actions, lambda tensor: tensor[element : element + 1]))
        for got, expected in zip(alone, batched):
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got[0], expected[element], rtol=1e-5, atol=1e-6 * expected[element].abs().max().item())


def test_empty_sequence() -> None:
    actions = random_actions(2, 0, 2, 2, 3, seed=1)
    stack, _ = stacks(2, 2, 3)
    assert stack.readings(actions).shape == (2, 0, 12)


def test_the_kernel_runs_the_full_stack_from_the_empty_stack() -> None:
    """``accelerate`` leaves a stack with a window on the PyTorch DP; given an initial state (a
    chunk), the compiled stack's readings are the PyTorch DP's."""
    assert type(accelerate(VectorNondeterministicStack(2, 2, 2, window=3), "cpu-compiled")) is VectorNondeterministicStack
    actions = random_actions(2, 4, 2, 2, 2, seed=7)
    compiled_stack, reference = stacks(2, 2, 2)
    initial = reference.initial_state(2, actions.pop)
    torch.testing.assert_close(compiled_stack.readings(actions, initial), reference.readings(actions, initial), rtol=0, atol=0)


def test_memory_kept_for_backward_grows_as_n_squared() -> None:
    def saved_megabytes(steps: int) -> float:
        storages: dict[int, int] = {}

        def pack(tensor: Tensor) -> Tensor:
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        actions = random_actions(2, steps, 2, 2, 2, seed=18)
        logits = actions.push.clone().requires_grad_()
        stack, _ = stacks(2, 2, 2)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            stack.readings(VectorNondeterministicActions(logits, actions.replace, actions.pop, actions.pushed))
        return sum(storages.values()) / 2**20

    assert saved_megabytes(64) <= 4.6 * saved_megabytes(32)
    assert math.isfinite(saved_megabytes(8))


def test_each_checkout_builds_into_a_folder_of_its_own(monkeypatch, tmp_path):
    """Two clones on one machine keep two builds, under $TORCH_EXTENSIONS_DIR when it is set."""
    from stacklm.kernels import build as kernel

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    folders = set()
    for checkout in ("a", "b"):
        monkeypatch.setattr(kernel, "SOURCE", tmp_path / checkout / "dvpda.cpp")
        folders.add(kernel.build_directory())
        assert kernel.build_directory().parent == tmp_path and kernel.build_directory().name.startswith(kernel.extension_name() + "-")
    assert len(folders) == 2
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert kernel.build_directory().parent == tmp_path / "cache" / "stacklm" / "extensions"


def fed_back_readings(
    stack: VectorNondeterministicStack, actions: VectorNondeterministicActions, sequence: bool
) -> tuple[Tensor, ...]:
    """r_0 … r_n of states advanced step by step, each step's actions shifted by the previous
    reading (as a stack RNN's controller does), and the gradients of a fixed linear function of
    them (logits, log v_t, w₀). ``sequence``: a :class:`SequenceRun` on the kernel, else ``initial_state``'s states."""
    states, symbols = actions.pop.shape[2:4]
    batch, steps = actions.pop.shape[:2]
    logits = flat_logits(actions).clone().requires_grad_()
    log_pushed = actions.pushed.clone().requires_grad_()
    stack.zero_grad()
    run = actions_of(logits, log_pushed, states, symbols)
    state = SequenceRun(stack, batch, logits, steps) if sequence else stack.initial_state(batch, logits, steps)
    outputs = [state.reading()]
    for step in range(steps):
        current = stack.step_actions(run, step)
        feedback = outputs[-1].sum(dim=-1)  # (B,)
        fed_back = VectorNondeterministicActions(
            current.push + 0.3 * feedback.view(-1, 1, 1, 1, 1),
            current.replace,
            current.pop - 0.2 * feedback.view(-1, 1, 1, 1),
            current.pushed + 0.1 * feedback.view(-1, 1),
        )
        if isinstance(state, SequenceRun):
            state.next((packed_logits(fed_back), fed_back.pushed))
        else:
            state = state.next(fed_back)
        outputs.append(state.reading())
    readings = torch.stack(outputs, dim=1)
    (readings * torch.linspace(-1, 1, readings.numel(), dtype=readings.dtype).view_as(readings)).sum().backward()
    gradients = [logits.grad, log_pushed.grad]
    if stack.bottom_logits is not None:
        gradients.append(stack.bottom_logits.grad)
    return (readings, *gradients)


@pytest.mark.parametrize("states, symbols, vector_size, steps", [(3, 3, 5, 10), (2, 3, 2, 7), (1, 1, 1, 1)])
@pytest.mark.parametrize("bottom", ["learned", "zero"])
def test_sequence_run_equals_the_pytorch_steps(
    states: int, symbols: int, vector_size: int, steps: int, bottom: str
) -> None:
    """The compiled step (forward and its backward) against the PyTorch DP's states, with the
    actions of each step depending on the previous reading, gradients included."""
    actions = random_actions(3, steps, states, symbols, vector_size, seed=30 + steps, scale=3.0)
    compiled, reference = stacks(states, symbols, vector_size, bottom=bottom)
    got = fed_back_readings(compiled, actions, sequence=True)
    expected = fed_back_readings(reference, actions, sequence=False)
    for value, reference_value in zip(got, expected):
        torch.testing.assert_close(
            value, reference_value, rtol=1e-9, atol=1e-9 * max(1.0, reference_value.abs().max().item())
        )


@pytest.mark.parametrize("batch", [1, 7, 9, 33])
def test_sequence_run_of_any_batch_equals_the_pytorch_steps(batch: int) -> None:
    """The compiled step keeps its tables in groups of eight lanes: one element alone, a group
    short of full, one past it and four and one, readings and gradients as the PyTorch DP's."""
    actions = random_actions(batch, 6, 3, 3, 5, seed=60 + batch, scale=3.0)
    compiled, reference = stacks(3, 3, 5)
    got = fed_back_readings(compiled, actions, sequence=True)
    expected = fed_back_readings(reference, actions, sequence=False)
    for value, reference_value in zip(got, expected):
        torch.testing.assert_close(
            value, reference_value, rtol=1e-9, atol=1e-9 * max(1.0, reference_value.abs().max().item())
        )


def test_sequence_run_reads_the_controllers_logits() -> None:
    """Actions from ``from_logits`` over columns of a wider output (rows of stride N·(2N + Q) + m,
    as a stack RNN's controller gives them) run the compiled step on those columns, no copy:
    readings and the gradient of the whole output equal the PyTorch DP's."""
    states, symbols, vector_size, steps = 3, 2, 4, 9
    configurations = states * symbols
    width = configurations * (2 * configurations + states)
    generator = torch.Generator().manual_seed(44)
    output = 2.0 * torch.randn(2, steps, width + vector_size, generator=generator, dtype=torch.float64)
    results = []
    for stack in stacks(states, symbols, vector_size):
        leaf = output.clone().requires_grad_()
        logits, pushed = leaf.split([width, vector_size], dim=-1)
        log_pushed = torch.nn.functional.logsigmoid(pushed)
        actions = VectorNondeterministicActions.from_logits(logits, log_pushed, states, symbols)
        assert actions.logits is not None and actions.logits.stride(1) == width + vector_size
        readings = []
        if isinstance(stack, CompiledVectorNondeterministicStack):
            run = SequenceRun(stack, 2, leaf, steps)
            for step in range(steps):
                run.next((actions.logits[:, step], log_pushed[:, step]))
                readings.append(run.reading())
        else:
            state = stack.initial_state(2, leaf, steps)
            for step in range(steps):
                state = state.next(stack.step_actions(actions, step))
                readings.append(state.reading())
        stacked = torch.stack(readings, dim=1)
        (stacked * torch.linspace(-1, 1, stacked.numel(), dtype=torch.float64).view_as(stacked)).sum().backward()
        results.append((stacked, leaf.grad))
    (got, got_grad), (expected, expected_grad) = results
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(got_grad, expected_grad, rtol=1e-9, atol=1e-9 * expected_grad.abs().max().item())


def test_sequence_run_in_float32_agrees_with_float64() -> None:
    actions = random_actions(2, 24, 3, 3, 5, seed=41)
    compiled, _ = stacks(3, 3, 5)
    exact = fed_back_readings(compiled, actions, sequence=True)
    approximate = fed_back_readings(
        compiled.float(), mapped(actions, Tensor.float), True
    )
    for value, reference in zip(approximate, exact):
        assert value.dtype == torch.float32
        assert (value.double() - reference).abs().max() <= 1e-4 * reference.abs().max()


def test_a_sequence_run_takes_the_steps_it_was_made_for() -> None:
    actions = random_actions(1, 3, 2, 2, 2, seed=42)
    stack, _ = stacks(2, 2, 2)
    run = SequenceRun(stack, 1, actions.pop, 1)
    step = stack.step_actions(actions, 0)
    run.next((packed_logits(step), step.pushed))
    with pytest.raises(ValueError, match="the tables hold 1 steps"):
        run.next((packed_logits(step), step.pushed))


def test_a_compiled_state_keeps_the_state_contract_and_refuses_actions_with_gradients() -> None:
    """Copied, sliced and detached with gradients on or off (``transform_tensors``); its actions carry no gradient."""
    actions = random_actions(2, 3, 2, 2, 2, seed=43)
    stack, reference = stacks(2, 2, 2)
    with torch.no_grad():
        state = compiled_state(stack, 2, actions.pop, 3).next(stack.step_actions(actions, 0))
    copies = (state.detach(), state.slice_batch(slice(0, 1)), state.transform_tensors(lambda tensor: tensor.clone()))
    assert all(isinstance(copy, CompiledState) for copy in copies) and [copy.reading().size(0) for copy in copies] == [2, 1, 2]
    expected = reference.readings(actions)[:, 1]
    with torch.no_grad():
        second = stack.step_actions(mapped(actions, lambda tensor: tensor[1:]), 1)
        torch.testing.assert_close(state.slice_batch(slice(1, 2)).next(second).reading(), expected[1:], rtol=1e-9, atol=1e-12)
    logits = flat_logits(actions)[:, 1].clone().requires_grad_()
    with pytest.raises(ValueError, match="runs without gradients"):
        state.next_from_logits(logits, actions.pushed[:, 1])


@pytest.mark.parametrize("batch", [1, 4, 7, 9, 33])
def test_incremental_states_without_gradients_equal_the_pytorch_dp(batch: int) -> None:
    """Without gradients a :class:`CompiledState` runs the compiled kernel: two continuations of one
    prefix, a copied and sliced state (its batch regrouped into lanes: 2B − 1 elements) and a run
    longer than its first tables (capacity 3) all read as the PyTorch DP's states do."""
    actions, other = random_actions(batch, 14, 3, 3, 5, seed=50), random_actions(batch, 14, 3, 3, 5, seed=51)
    copied = mapped(actions, lambda tensor: tensor.repeat_interleave(2, dim=0)[1:])
    compiled, reference = stacks(3, 3, 5)
    readings = []
    with torch.no_grad():
        for stack in (compiled, reference):
            state = compiled_state(stack, batch, actions.pop, 3) if stack is compiled else stack.initial_state(batch, actions.pop, max_steps=3)
            outputs = [state.reading()]
            for step in range(8):
                state = state.next(stack.step_actions(actions, step))
                outputs.append(state.reading())
            doubled = state.transform_tensors(lambda tensor: tensor.repeat_interleave(2, dim=0))
            sliced = doubled.slice_batch(slice(1, 2 * batch))
            for continuation, run in ((state, actions), (state, other), (state, actions), (sliced, copied)):
                for step in range(8, 14):
                    continuation = continuation.next(stack.step_actions(run, step))
                    outputs.append(continuation.reading())
            readings.append(outputs)
    for got, expected in zip(*readings):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)


def test_freed_tables_stay_with_the_process_on_glibc() -> None:
    """After ``keep_freed_memory`` a freed 64 MB block (past glibc's default mmap threshold) is
    kept for the next allocation, where by default it is unmapped and faulted back in."""
    statm = Path("/proc/self/statm")
    if not statm.exists() or not compiled.keep_freed_memory():
        pytest.skip("not Linux with glibc: the allocator is left as it is")

    def resident_mb() -> float:
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    block = torch.ones(16 * 2**20)  # 64 MB, every page touched
    before_free = resident_mb()
    del block
    assert resident_mb() > before_free - 8


def test_ops_declare_the_tables_they_write() -> None:
    """Every op of the kernel passes opcheck's schema test (SchemaCheckMode) on tables of random
    contents: an op that writes into an input its schema does not mark ``Tensor(a!)`` (or is
    registered as composite, so that tracing never sees it) fails."""
    compiled.load()
    ops = torch.ops.stacklm_dvpda
    batch, steps, states, symbols, vector_size = 2, 3, 2, 2, 3
    configurations = states * symbols
    generator = torch.Generator().manual_seed(43)

    def random(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator)

    width = configurations * (2 * configurations + states)
    outputs, bottom = random(batch, steps, width + vector_size), random(batch, vector_size)
    logits, pushed = outputs[..., :width], outputs[..., width:]
    readings, *saved = ops.forward(outputs, bottom, states, symbols, True)
    *tables, alpha = ops.start(bottom, steps, states, symbols)
    reading = ops.step(1, logits[:, 0], pushed[:, 0].contiguous(), *tables, alpha)
    grad_gamma, grad_alpha = random(*tables[0].shape), random(*alpha.shape)
    calls = [
        (ops.forward, (outputs, bottom, states, symbols, True)),
        (ops.backward, (random(*readings.shape), outputs, readings, *saved, states, symbols, True)),
        (ops.start, (bottom, steps, states, symbols)),
        (ops.step, (2, logits[:, 1], pushed[:, 1].contiguous(), *[table.clone() for table in tables], alpha.clone())),
        (ops.step_backward, (1, random(*reading.shape), logits[:, 0], pushed[:, 0].contiguous(), reading, *tables, alpha, grad_gamma, grad_alpha)),
    ]  # fmt: skip
    for op, arguments in calls:
        with RecordedOps() as recorded:
            op(*arguments)
        assert recorded.names == [op._qualified_op_name]  # one op that tracing sees, not its insides
        torch.library.opcheck(op, arguments, test_utils=("test_schema",))


@pytest.mark.parametrize("pushed_vector", ["sigmoid", "raw"])
def test_interface_readings_from_one_product_equal_those_of_the_actions(pushed_vector: str) -> None:
    """On the compiled kernel the dVPDA interface's whole-sequence readings come from one product
    with the stacked weights, read in place (log σ in the kernel): readings and the gradients of
    h, every weight and w₀ equal those of its actions (separate layers, split, log σ) on the
    PyTorch DP, on a batch of nine (a group of eight lanes and one)."""
    interface = build_interface(VectorNondeterministicSpec(), 6, bias=False, pushed_vector=pushed_vector).double()
    interface.initialize(torch.Generator().manual_seed(2))
    hidden = 2.0 * torch.randn(9, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def results(backend: str) -> list[torch.Tensor]:
        accelerate(interface, backend)
        interface.zero_grad()
        leaf = hidden.clone().requires_grad_()
        readings = interface.readings(leaf)
        (readings * torch.linspace(-1, 1, readings.numel(), dtype=torch.float64).view_as(readings)).sum().backward()
        return [readings, leaf.grad, *(parameter.grad for parameter in interface.parameters())]

    got = results("cpu-compiled")
    assert isinstance(interface, CompiledVectorNondeterministicInterface)
    for value, expected in zip(got, results("torch"), strict=True):
        torch.testing.assert_close(value, expected, rtol=1e-9, atol=1e-9 * max(1.0, expected.abs().max().item()))


def test_interface_states_run_on_the_kernel_without_gradients_only() -> None:
    interface = accelerate(build_interface(VectorNondeterministicSpec(), 6, bias=True).double(), "cpu-compiled")
    like = torch.zeros(1, dtype=torch.float64)
    with torch.no_grad():
        assert isinstance(interface.initial_state(2, like), CompiledState)
    assert isinstance(interface.initial_state(2, like), VectorNondeterministicState)
    assert isinstance(interface.initial_state(2, like.float().to(torch.bfloat16)), VectorNondeterministicState)

