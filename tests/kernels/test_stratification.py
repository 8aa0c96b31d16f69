"""The compiled stratification stack against the PyTorch stack (``stacklm.stacks.stratification``):
readings and gradients in float64, gradcheck, strengths at 0 and 1 and ties, a stack RNN on either backend.

A kernel that fails to build fails these tests (no fallback).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from stacklm.kernels.backend import accelerate
from stacklm.kernels.one_step import next_step
from stacklm.kernels.stratification import CompiledStratificationInterface, StratificationRun, StratificationTables
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model
from stacklm.stacks.stratification import StratificationActions, StratificationStack
from tests.kernels.stack_runs import assert_kernel_equals_pytorch
from tests.kernels.recorded_ops import RecordedOps


def compiled_readings(logits: Tensor) -> Tensor:
    """r_1 … r_n (B, n, m) of the layers' outputs (B, n, 2 + m), one kernel step per step."""
    batch, steps, width = logits.shape
    tables = StratificationTables(batch, steps, width - 2, logits)
    order = logits.new_zeros(batch, 0)
    readings = []
    for step in range(steps):
        reading, order = next_step(tables, logits[:, step], order)
        readings.append(reading)
    return torch.stack(readings, dim=1)


def pytorch_readings(logits: Tensor) -> Tensor:
    """The same readings from the PyTorch stack, its actions as ``StratificationInterface`` makes them."""
    strengths = torch.sigmoid(logits[..., :2])
    actions = StratificationActions(pop_strength=strengths[..., 0], push_strength=strengths[..., 1], pushed=torch.tanh(logits[..., 2:]))
    stack = StratificationStack(vector_size=logits.size(-1) - 2)
    state = stack.initial_state(logits.size(0), logits)
    readings = []
    for step in range(logits.size(1)):
        state = state.next(stack.step_actions(actions, step))
        readings.append(state.reading())
    return torch.stack(readings, dim=1)


def readings_and_gradient(readings_of: Any, logits: Tensor) -> tuple[Tensor, Tensor]:
    """The readings and the gradient of a weighted sum of them with respect to the logits."""
    logits = logits.detach().requires_grad_()
    readings = readings_of(logits)
    weights = torch.linspace(-1, 1, readings.numel(), dtype=readings.dtype).view_as(readings)
    (gradient,) = torch.autograd.grad((readings * weights).sum(), logits)
    return readings.detach(), gradient


def random_logits(batch: int, steps: int, vector_size: int, seed: int, scale: float = 2.0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return scale * torch.randn(batch, steps, 2 + vector_size, dtype=torch.float64, generator=generator)


@pytest.mark.parametrize("vector_size", [2, 20, 40])
@pytest.mark.parametrize("batch, steps", [(1, 1), (3, 2), (10, 7), (11, 23), (5, 80)])
def test_readings_and_gradients_equal_the_pytorch_stack(batch: int, steps: int, vector_size: int) -> None:
    logits = random_logits(batch, steps, vector_size, seed=steps)
    got = readings_and_gradient(compiled_readings, logits)
    expected = readings_and_gradient(pytorch_readings, logits)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-13)


def test_strengths_at_zero_and_one_and_ties_pass_pytorchs_gradients() -> None:
    """Strength logits of ±800 and 0 give u_t, d_t of exactly 0, 1 and ½: pops that empty an element
    to 0 exactly (relu's kink), readings whose budget meets a strength (minimum's tie: half to each
    side) and an empty reading budget; the kernel's gradients are PyTorch's there too."""
    generator = torch.Generator().manual_seed(5)
    logits = random_logits(7, 12, 3, seed=6)
    choices = torch.tensor([-800.0, 0.0, 800.0], dtype=torch.float64)
    logits[..., :2] = choices[torch.randint(0, 3, (7, 12, 2), generator=generator)]
    strengths = torch.sigmoid(logits[..., :2])
    assert {0.0, 0.5, 1.0} == set(strengths.unique().tolist())
    got = readings_and_gradient(compiled_readings, logits)
    expected = readings_and_gradient(pytorch_readings, logits)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-13)


def test_gradcheck() -> None:
    logits = random_logits(3, 6, 4, seed=7).requires_grad_()
    assert torch.autograd.gradcheck(compiled_readings, (logits,))


def test_the_empty_stack_reads_zero() -> None:
    model = build_model("cfl/Gref", 4, options=ModelOptions(), generator=torch.Generator().manual_seed(0))
    like = torch.zeros(3, dtype=torch.float64)
    run = StratificationRun(accelerate(model, "cpu-compiled").interface, 3, like, 5)
    assert torch.equal(run.reading(), model.interface.initial_state(3, like).reading())


def test_tables_refuse_a_step_past_their_capacity() -> None:
    logits = random_logits(1, 2, 2, seed=8)
    tables = StratificationTables(1, 1, 2, logits)
    _, order = next_step(tables, logits[:, 0], logits.new_zeros(1, 0))
    with pytest.raises(ValueError, match="hold 1 steps"):
        next_step(tables, logits[:, 1], order)


@pytest.mark.parametrize("vector_size", [2, 40])
def test_a_stack_rnn_on_the_kernel_equals_it_on_the_pytorch_stack(vector_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """cfl/Gref's loss and gradients on the torch backend, then with ``accelerate`` putting the compiled
    interface in place (its stack run), float64."""
    assert_kernel_equals_pytorch("cfl/Gref", StratificationRun, CompiledStratificationInterface, vector_size, monkeypatch)


def test_step_ops_declare_the_tables_they_write() -> None:
    """opcheck's schema test: the tables each op writes are ``Tensor(a!)`` in its schema, and a call
    is one op that tracing sees."""
    logits = random_logits(3, 4, 5, seed=9).requires_grad_()
    tables = StratificationTables(3, 4, 5, logits)
    order = logits.new_zeros(3, 0)
    for step in range(3):
        _, order = next_step(tables, logits[:, step].detach(), order)
    grad_values, grad_strengths = torch.randn_like(tables.values), torch.randn(3, 4, dtype=torch.float64)
    namespace = torch.ops.stacklm_stratification
    calls = {
        namespace.step: (4, logits[:, 3].detach().contiguous(), tables.values, tables.strengths),
        namespace.step_backward: (3, torch.randn(3, 5, dtype=torch.float64), logits[:, 2].detach().contiguous(), tables.values,
                                  tables.strengths, grad_values, grad_strengths),
    }  # fmt: skip
    for op, arguments in calls.items():
        with RecordedOps() as recorded:
            op(*arguments)
        assert recorded.names == [op._qualified_op_name]
        torch.library.opcheck(op, arguments, test_utils=("test_schema",))
