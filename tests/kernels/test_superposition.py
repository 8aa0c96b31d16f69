"""The compiled superposition stack against the PyTorch stack (``stacklm.stacks.superposition``):
readings and gradients in float64 with and without the depth limit and length hint, σ and raw pushed
vectors, one-hot actions, gradcheck, stack RNNs on either backend.

A kernel that fails to build fails these tests (no fallback).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from stacklm.kernels.backend import accelerate
from stacklm.kernels.one_step import next_step
from stacklm.kernels.superposition import CompiledSuperpositionInterface, SuperpositionRun, SuperpositionTables
from stacklm.models.stack_interface import SuperpositionInterface
from stacklm.stacks.superposition import SuperpositionActions, SuperpositionStack
from tests.kernels.stack_runs import assert_kernel_equals_pytorch
from tests.kernels.recorded_ops import RecordedOps
from tests.kernels.test_stratification import readings_and_gradient
from tests.models.conftest import TOY_VOCABULARY_SIZE, tiny_model


def stack_of(logits: Tensor, max_depth: int | None, length_hint: bool) -> SuperpositionStack:
    return SuperpositionStack(vector_size=logits.size(-1) - 3, max_depth=max_depth, length_hint=length_hint)


def compiled_readings(logits: Tensor, max_depth: int | None = None, length_hint: bool = True, raw_pushed: bool = False) -> Tensor:
    """r_1 … r_n (B, n, m) of the layers' outputs (B, n, 3 + m), one kernel step per step, at the
    heights of the PyTorch stack of the same depth limit and length hint."""
    batch, steps, _ = logits.shape
    state = stack_of(logits, max_depth, length_hint).initial_state(batch, logits, steps)
    heights = [state.height_after(step) for step in range(1, steps + 1)]
    tables = SuperpositionTables(batch, heights, logits.size(-1) - 3, raw_pushed, logits)
    order = logits.new_zeros(batch, 0)
    readings = []
    for step in range(steps):
        reading, order = next_step(tables, logits[:, step], order)
        readings.append(reading)
    return torch.stack(readings, dim=1)


def pytorch_readings(logits: Tensor, max_depth: int | None = None, length_hint: bool = True, raw_pushed: bool = False) -> Tensor:
    """The same readings from the PyTorch stack, its actions as ``SuperpositionInterface`` makes them."""
    pushed = logits[..., 3:] if raw_pushed else torch.sigmoid(logits[..., 3:])
    actions = SuperpositionActions(probabilities=torch.softmax(logits[..., :3], dim=-1), pushed=pushed)
    stack = stack_of(logits, max_depth, length_hint)
    state = stack.initial_state(logits.size(0), logits, logits.size(1))
    readings = []
    for step in range(logits.size(1)):
        state = state.next(stack.step_actions(actions, step))
        readings.append(state.reading())
    return torch.stack(readings, dim=1)


def random_logits(batch: int, steps: int, vector_size: int, seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 2 * torch.randn(batch, steps, 3 + vector_size, dtype=torch.float64, generator=generator)


def assert_equal_readings_and_gradients(logits: Tensor, **options: Any) -> None:
    got = readings_and_gradient(lambda x: compiled_readings(x, **options), logits)
    expected = readings_and_gradient(lambda x: pytorch_readings(x, **options), logits)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("vector_size", [2, 20, 40])
@pytest.mark.parametrize("batch, steps", [(1, 1), (3, 2), (10, 7), (11, 23), (5, 80)])
def test_readings_and_gradients_equal_the_pytorch_stack(batch: int, steps: int, vector_size: int) -> None:
    assert_equal_readings_and_gradients(random_logits(batch, steps, vector_size, seed=steps))


@pytest.mark.parametrize("max_depth", [None, 1, 3, 10])
@pytest.mark.parametrize("length_hint", [True, False])
@pytest.mark.parametrize("raw_pushed", [True, False])
def test_depth_limit_length_hint_and_raw_vectors(max_depth: int | None, length_hint: bool, raw_pushed: bool) -> None:
    logits = random_logits(3, 15, 5, seed=2)
    assert_equal_readings_and_gradients(logits, max_depth=max_depth, length_hint=length_hint, raw_pushed=raw_pushed)


def test_one_hot_actions() -> None:
    """Action logits of ±800: a_t one-hot (exact pushes, pops of the empty stack, no-ops) beside mixtures."""
    logits = random_logits(6, 12, 4, seed=3)
    action = torch.randint(0, 3, (6, 12), generator=torch.Generator().manual_seed(4))
    hard = torch.rand(6, 12, generator=torch.Generator().manual_seed(5)) < 0.7
    logits[..., :3] = torch.where(hard.unsqueeze(-1), -800 + 1600 * torch.nn.functional.one_hot(action, 3), logits[..., :3])
    assert_equal_readings_and_gradients(logits)


@pytest.mark.parametrize("max_depth", [None, 2])
def test_gradcheck(max_depth: int | None) -> None:
    logits = random_logits(3, 6, 4, seed=6).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: compiled_readings(x, max_depth=max_depth), (logits,))


def test_the_empty_stack_reads_zero() -> None:
    model = accelerate(tiny_model("LSTM+Sup", seed=0), "cpu-compiled")
    like = torch.zeros(3)
    run = SuperpositionRun(model.interface, 3, like, 5)
    assert torch.equal(run.reading(), torch.zeros(3, model.interface.stack.vector_size))


def test_tables_refuse_a_step_past_their_capacity() -> None:
    logits = random_logits(1, 2, 2, seed=7)
    tables = SuperpositionTables(1, [1], 2, False, logits)
    _, order = next_step(tables, logits[:, 0], logits.new_zeros(1, 0))
    with pytest.raises(ValueError, match="hold 1 steps"):
        next_step(tables, logits[:, 1], order)


@pytest.mark.parametrize("vector_size", [2, 40])
def test_a_cfl_stack_rnn_on_the_kernel_equals_it_on_the_pytorch_stack(vector_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """cfl/JM's loss and gradients on the torch backend, then with ``accelerate`` putting the compiled
    interface in place (its stack run), float64."""
    assert_kernel_equals_pytorch("cfl/JM", SuperpositionRun, CompiledSuperpositionInterface, vector_size, monkeypatch)


def test_stack_attention_keeps_the_pytorch_readings() -> None:
    """Tf+Sup's stack-attention layers take the compiled interface, whose whole-sequence readings are
    the PyTorch stack's: the cpu-compiled model's logits bit for bit those with the interfaces' class
    put back."""
    model = accelerate(tiny_model("Tf+Sup", seed=1, dropout=0.0), "cpu-compiled").eval()
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (2, 6), generator=torch.Generator().manual_seed(2))
    got = model(tokens)
    interfaces = [module for module in model.modules() if isinstance(module, CompiledSuperpositionInterface)]
    assert interfaces
    for interface in interfaces:
        interface.__class__ = SuperpositionInterface
    torch.testing.assert_close(got, model(tokens), rtol=0, atol=0)


def test_step_ops_declare_the_tables_they_write() -> None:
    """opcheck's schema test: the table each op writes is ``Tensor(a!)`` in its schema, and a call is
    one op that tracing sees."""
    logits = random_logits(3, 4, 5, seed=8)
    tables = SuperpositionTables(3, [1, 2, 2, 1], 5, False, logits)
    order = logits.new_zeros(3, 0)
    for step in range(3):
        _, order = next_step(tables, logits[:, step], order)
    namespace = torch.ops.stacklm_superposition
    calls = {
        namespace.step: (*tables.rows(4), logits[:, 3].contiguous(), False, tables.elements),
        namespace.step_backward: (*tables.rows(3), torch.randn(3, 5, dtype=torch.float64), logits[:, 2].contiguous(), False,
                                  tables.elements, torch.randn_like(tables.elements)),
    }  # fmt: skip
    for op, arguments in calls.items():
        with RecordedOps() as recorded:
            op(*arguments)
        assert recorded.names == [op._qualified_op_name]
        torch.library.opcheck(op, arguments, test_utils=("test_schema",))
