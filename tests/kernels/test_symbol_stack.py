"""The compiled symbol stack against brute-force runs and the PyTorch DP: readings, gradients, float32.

A kernel that fails to build fails these tests (no fallback).
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from tests.stacks.test_nondeterministic import VARIANTS, brute_force_readings, random_actions
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model
from stacklm.kernels.backend import accelerate
from stacklm.kernels.one_step import next_step
from stacklm.kernels.symbol_stack import CompiledNondeterministicStack, SymbolStackRun, SymbolStackTables
from stacklm.stacks.nondeterministic import NondeterministicActions, NondeterministicStack


def compiled_readings(logits: Tensor, states: int, symbols: int, normalize: bool, states_in_reading: bool) -> Tensor:
    """r_1 … r_n (B, n, reading size) of the action logits (B, n, Q·S·(2QS + Q)), one kernel step per step."""
    batch, steps = logits.shape[:2]
    tables = SymbolStackTables(batch, steps, states, symbols, states_in_reading, normalize, logits)
    order = logits.new_zeros(batch, 0)
    readings = []
    for step in range(steps):
        reading, order = next_step(tables, logits[:, step], order)
        readings.append(reading)
    return torch.stack(readings, dim=1)


@pytest.mark.parametrize("normalize, states_in_reading", VARIANTS)
@pytest.mark.parametrize("states, symbols, steps", [(1, 1, 5), (2, 2, 5), (2, 3, 4), (3, 2, 4), (3, 3, 4)])
def test_readings_equal_brute_force(normalize: bool, states_in_reading: bool, states: int, symbols: int, steps: int) -> None:
    logits = random_actions(2, steps, states, symbols, seed=states * 10 + symbols)
    actions = NondeterministicActions.from_logits(logits, states, symbols, normalize)
    torch.testing.assert_close(compiled_readings(logits, states, symbols, normalize, states_in_reading), brute_force_readings(actions, states_in_reading), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("normalize, states_in_reading", VARIANTS)
# The two compiled-in sizes and the generic code, whose N = 4 and N = 8 leave the forward's pop of a
# full group (three rows together) a last block of one row and of two.
@pytest.mark.parametrize("states, symbols", [(2, 3), (3, 3), (2, 2), (2, 4)])
def test_readings_and_gradients_equal_the_pytorch_dp(normalize: bool, states_in_reading: bool, states: int, symbols: int) -> None:
    """Float64, a batch of 11 (two groups of lanes, the second padded), 9 steps, logits of std 3."""
    logits = random_actions(11, 9, states, symbols, seed=7, scale=3.0).requires_grad_()
    weights = torch.randn(11, 9, states * symbols if states_in_reading else symbols, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    expected = NondeterministicStack(states, symbols, states_in_reading).readings(NondeterministicActions.from_logits(logits, states, symbols, normalize))
    (expected_gradient,) = torch.autograd.grad((expected * weights).sum(), logits)
    readings = compiled_readings(logits, states, symbols, normalize, states_in_reading)
    (gradient,) = torch.autograd.grad((readings * weights).sum(), logits)
    torch.testing.assert_close(readings, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gradient, expected_gradient, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("batch", [1, 2, 3, 5, 9, 10, 11, 13, 17])
def test_every_width_of_the_last_group_equals_the_pytorch_dp(batch: int, normalize: bool) -> None:
    """A batch's last batch mod 8 elements in a group of 2, 4 or 8 lanes (10: 8 + 2, 11: 8 + 4, 13: 8 + 8,
    17: 8 + 8 + 2): readings and gradients in float64, 7 steps, NS+S and NS+S+U."""
    logits = random_actions(batch, 7, 2, 3, seed=batch, scale=3.0).requires_grad_()
    weights = torch.randn(batch, 7, 6, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    expected = NondeterministicStack(2, 3, True).readings(NondeterministicActions.from_logits(logits, 2, 3, normalize))
    (expected_gradient,) = torch.autograd.grad((expected * weights).sum(), logits)
    readings = compiled_readings(logits, 2, 3, normalize, True)
    (gradient,) = torch.autograd.grad((readings * weights).sum(), logits)
    torch.testing.assert_close(readings, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gradient, expected_gradient, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("normalize", [True, False])
def test_gradcheck(normalize: bool) -> None:
    logits = random_actions(3, 4, 2, 2, seed=3).requires_grad_()

    def readings(logits: Tensor) -> Tensor:
        return compiled_readings(logits, 2, 2, normalize, True)

    assert torch.autograd.gradcheck(readings, (logits,))


def test_one_step_reads_the_push() -> None:
    """After step 1 only the push from (q0, ⊥) has run: r_1 ∝ Δ⁺_1[(q0, ⊥) → ·]."""
    logits = random_actions(2, 1, 2, 3, seed=4)
    actions = NondeterministicActions.from_logits(logits, 2, 3, normalize=False)
    expected = actions.push[:, 0, 0, 0].reshape(2, 6).softmax(dim=-1).unsqueeze(1)
    torch.testing.assert_close(compiled_readings(logits, 2, 3, False, True), expected)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("scale", [3.0, 30.0])
def test_float32_follows_float64(normalize: bool, scale: float) -> None:
    """Float32 at n = 80, logits of std 3 and 30 (transition weights e^±90 apart): readings and
    gradients near float64's (each target's own scale keeps every part in float32's range)."""
    logits = random_actions(10, 80, 2, 3, seed=5, scale=scale)
    weights = torch.randn(10, 80, 6, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    results = []
    for dtype in (torch.float64, torch.float32):
        leaf = logits.to(dtype).requires_grad_()
        readings = compiled_readings(leaf, 2, 3, normalize, True)
        (gradient,) = torch.autograd.grad((readings * weights.to(dtype)).sum(), leaf)
        results.append((readings.double(), gradient.double()))
    (readings64, gradient64), (readings32, gradient32) = results
    torch.testing.assert_close(readings32, readings64, rtol=0, atol=1e-4)
    torch.testing.assert_close(gradient32, gradient64, rtol=0, atol=1e-3 * gradient64.abs().max().item())


def test_tables_refuse_a_step_past_their_capacity() -> None:
    logits = random_actions(1, 2, 1, 2, seed=1)
    tables = SymbolStackTables(1, 1, 1, 2, False, True, logits)
    _, order = next_step(tables, logits[:, 0], logits.new_zeros(1, 0))
    with pytest.raises(ValueError, match="hold 1 steps"):
        next_step(tables, logits[:, 1], order)


@pytest.mark.parametrize("name", ["cfl/NS", "cfl/NS+S+U"])
def test_a_stack_rnn_on_the_kernel_equals_it_on_the_pytorch_dp(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CFL model's loss and gradients on the torch backend, then with ``accelerate`` putting the
    compiled stack in place (its sequence state), float64."""
    steps: list[int] = []
    monkeypatch.setattr(SymbolStackRun, "next", lambda self, parts, next=SymbolStackRun.next: steps.append(1) or next(self, parts))
    options = ModelOptions(cfl_num_states=2, cfl_num_symbols=3)
    model = build_model(name, 4, options=options, generator=torch.Generator().manual_seed(0)).double()
    tokens = torch.randint(0, 3, (10, 12), generator=torch.Generator().manual_seed(1))
    results = []
    for backend in ("torch", "cpu-compiled"):
        accelerate(model, backend)
        assert isinstance(model.interface.stack, CompiledNondeterministicStack) == (backend == "cpu-compiled")
        model.zero_grad()
        loss = model(tokens).logsumexp(dim=-1).sum()
        loss.backward()
        results.append((loss.detach(), [parameter.grad.clone() for parameter in model.parameters()]))
    (loss, gradients), (compiled_loss, compiled_gradients) = results
    assert len(steps) == 11  # the kernel ran the n − 1 updates, on the cpu-compiled backend only
    torch.testing.assert_close(compiled_loss, loss)
    for gradient, compiled_gradient in zip(gradients, compiled_gradients):
        torch.testing.assert_close(compiled_gradient, gradient)


def test_a_windowed_symbol_stack_stays_on_the_pytorch_dp() -> None:
    """The kernel holds the full stack only: the memory-limited stack (window D) is not swapped."""
    options = ModelOptions(cfl_num_states=2, cfl_num_symbols=3)
    model = build_model("cfl/NS+S+U", 4, options=options, generator=torch.Generator().manual_seed(0))
    model.interface.stack = NondeterministicStack(2, 3, True, window=5)
    assert type(accelerate(model, "cpu-compiled").interface.stack) is NondeterministicStack
