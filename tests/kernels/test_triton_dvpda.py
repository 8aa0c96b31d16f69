"""The Triton dVPDA (the ``cuda-triton`` backend) on the CPU under Triton's interpreter, against the compiled
C++ kernel and the PyTorch DP: float64 readings and gradients at odd batch sizes and lengths, log σ of the
pushed part taken in the kernel, transitions of weight zero, float32, and the backend that puts it in place.

The interpreter runs each program's tensor operations one by one in NumPy (about a second per call
at these sizes), so the cases are few and small. No GPU runs them here: that both programs compile
for CUDA (Triton's compiler and its bundled ptxas, no device needed) is checked apart, in a process
without the interpreter.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import Tensor

from stacklm.errors import StacklmError
from stacklm.kernels import triton_dvpda
from stacklm.kernels.backend import accelerate, resolve
from stacklm.kernels.dvpda import compiled_readings
from stacklm.kernels.triton_dvpda import (
    TritonSequenceState,
    TritonVectorNondeterministicInterface,
    TritonVectorNondeterministicStack,
    triton_readings,
)
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model
from stacklm.models.stack_interface import VectorNondeterministicSpec, build_interface
from stacklm.stacks.superposition import SuperpositionActions, SuperpositionStack
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions, VectorNondeterministicStack
from tests.kernels.test_dvpda import readings_and_gradients
from tests.models.conftest import TOY_VOCABULARY_SIZE, tiny_model
from tests.models.test_recurrent import logits_and_gradients
from tests.stacks.test_vector_nondeterministic import random_actions, superposition_as_dvpda


@pytest.fixture(scope="module", autouse=True)
def interpreted() -> Iterator[ModuleType]:
    """The kernels under Triton's interpreter, which tests/conftest.py turns on for the whole test
    process before anything imports Triton."""
    kernels = importlib.import_module("stacklm.kernels.triton_dvpda_kernels")
    assert kernels.INTERPRETED, "the Triton kernels were imported without TRITON_INTERPRET=1 (tests/conftest.py sets it)"
    yield kernels


@pytest.fixture(scope="module", autouse=True)
def uninitialized_memory_is_nan() -> Iterator[None]:
    """torch.empty fills with NaN (deterministic mode): a program that reads an entry it did not write
    (a mask left off) fails the tests, where it would read whatever the memory held."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(previous)


def stacks(states: int, symbols: int, vector_size: int) -> tuple[VectorNondeterministicStack, ...]:
    """The same dVPDA on the Triton kernel, the compiled kernel and the PyTorch DP (float64, one w₀)."""
    result = []
    for backend in ("cuda-triton", "cpu-compiled", "torch"):
        stack = accelerate(VectorNondeterministicStack(states, symbols, vector_size).double(), backend)
        with torch.no_grad():
            stack.bottom_logits.copy_(torch.linspace(-1.0, 1.5, vector_size, dtype=torch.float64))
        result.append(stack)
    assert isinstance(result[0], TritonVectorNondeterministicStack)
    return tuple(result)


def assert_equal(got: Tensor, expected: Tensor) -> None:
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * max(1.0, expected.abs().max().item()))


@pytest.mark.parametrize("states, symbols, vector_size", [(2, 2, 3), (1, 3, 2), (3, 1, 1)])
def test_readings_and_gradients_equal_the_compiled_kernel_and_the_pytorch_dp(
    states: int, symbols: int, vector_size: int
) -> None:
    """B = 3, n = 7: readings and the gradients of every logit, log v_t and w₀."""
    actions = random_actions(3, 7, states, symbols, vector_size, seed=states * 10 + symbols, scale=3.0)
    triton, compiled, reference = stacks(states, symbols, vector_size)
    got = readings_and_gradients(triton, actions, torch.float64)
    for other_stack in (compiled, reference):
        for value, other in zip(got, readings_and_gradients(other_stack, actions, torch.float64), strict=True):
            assert_equal(value, other)


def test_log_sigmoid_of_the_pushed_part_is_taken_in_the_kernel() -> None:
    """The packed outputs of a stack-attention layer as they are: the readings and the gradients of the
    whole tensor and of log v₀ equal the compiled kernel's."""
    generator = torch.Generator().manual_seed(4)
    states, symbols, vector_size = 2, 3, 2
    outputs = 2.0 * torch.randn(1, 5, 6 * (12 + 2) + vector_size, dtype=torch.float64, generator=generator)
    bottom = torch.randn(1, vector_size, dtype=torch.float64, generator=generator).sigmoid().log()
    results = []
    for readings_of in (triton_readings, compiled_readings):
        leaves = outputs.clone().requires_grad_(), bottom.clone().requires_grad_()
        readings = readings_of(*leaves, states, symbols, True)
        (readings * torch.linspace(-1, 1, readings.numel(), dtype=torch.float64).view_as(readings)).sum().backward()
        results.append([readings, *(leaf.grad for leaf in leaves)])
    for value, expected in zip(*results, strict=True):
        assert_equal(value, expected)


def test_weights_of_zero() -> None:
    """The superposition stack as a dVPDA: most transitions of log weight −∞."""
    generator = torch.Generator().manual_seed(3)
    probabilities = torch.randn(2, 5, 3, generator=generator, dtype=torch.float64).softmax(dim=-1)
    pushed = torch.randn(2, 5, 4, generator=generator, dtype=torch.float64).sigmoid()
    expected = SuperpositionStack(4, length_hint=False).readings(SuperpositionActions(probabilities, pushed))
    dvpda = accelerate(VectorNondeterministicStack(1, 2, 4, bottom="zero").double(), "cuda-triton")
    log_probabilities = probabilities.clone().requires_grad_()
    readings = dvpda.readings(superposition_as_dvpda(log_probabilities, pushed.log())).view(2, 5, 1, 2, 4)
    torch.testing.assert_close(readings.sum(dim=(2, 3)), expected, rtol=1e-10, atol=1e-12)
    readings.sum().backward()
    assert torch.isfinite(log_probabilities.grad).all()


@pytest.mark.parametrize("absent", ["push", "replace", "pop"])
def test_a_kind_of_transition_of_weight_zero(absent: str) -> None:
    actions = random_actions(1, 6, 2, 2, 2, seed=7, scale=3.0)
    kinds = {"push": actions.push, "replace": actions.replace, "pop": actions.pop}
    kinds[absent] = torch.full_like(kinds[absent], -math.inf)
    actions = VectorNondeterministicActions(kinds["push"], kinds["replace"], kinds["pop"], actions.pushed)
    triton, _, reference = stacks(2, 2, 2)
    for got, expected in zip(
        readings_and_gradients(triton, actions, torch.float64), readings_and_gradients(reference, actions, torch.float64)
    ):
        assert torch.isfinite(got).all()
        assert_equal(got, expected)


def test_float32_agrees_with_float64() -> None:
    actions = random_actions(2, 7, 2, 2, 3, seed=9, scale=3.0)
    triton, compiled, _ = stacks(2, 2, 3)
    exact = readings_and_gradients(compiled, actions, torch.float64)
    approximate = readings_and_gradients(triton, actions, torch.float32)
    for value, reference in zip(approximate, exact, strict=True):
        assert value.dtype == torch.float32
        assert (value.double() - reference).abs().max() <= 1e-5 * max(1.0, reference.abs().max().item())


def test_interface_readings_from_one_product_equal_those_of_the_pytorch_dp() -> None:
    """A stack-attention layer's readings (one product with the stacked weights, log σ in the kernel)
    and the gradients of h, every weight and w₀, on a batch of three."""
    interface = build_interface(VectorNondeterministicSpec(), 6, bias=True, pushed_vector="sigmoid").double()
    interface.initialize(torch.Generator().manual_seed(2))
    hidden = 2.0 * torch.randn(3, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def results(backend: str) -> list[Tensor]:
        accelerate(interface, backend)
        interface.zero_grad()
        leaf = hidden.clone().requires_grad_()
        readings = interface.readings(leaf)
        (readings * torch.linspace(-1, 1, readings.numel(), dtype=torch.float64).view_as(readings)).sum().backward()
        return [readings, leaf.grad, *(parameter.grad for parameter in interface.parameters())]

    got = results("cuda-triton")
    assert isinstance(interface, TritonVectorNondeterministicInterface)
    for value, expected in zip(got, results("torch"), strict=True):
        assert_equal(value, expected)


@pytest.mark.parametrize("name", ["RNN+Nd", "LSTM+Nd+R"])
def test_a_stack_rnn_on_the_one_step_programs_equals_the_pytorch_dp(name: str) -> None:
    """A stack RNN's whole-sequence forward takes one launch per step (and per step of the backward):
    its logits and every parameter's gradient, B = 3, n = 5."""
    model = tiny_model(name, seed=3).double()
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 5), generator=torch.Generator().manual_seed(4))
    expected = logits_and_gradients(accelerate(model, "torch"), tokens)
    accelerate(model, "cuda-triton")
    assert isinstance(model.interface.initial_state(3, tokens.double(), 5), TritonSequenceState)
    for got, other in zip(logits_and_gradients(model, tokens), expected, strict=True):
        assert_equal(got, other)


def test_a_sequence_state_is_advanced_once() -> None:
    interface = accelerate(build_interface(VectorNondeterministicSpec(1, 1, 1), 2, bias=False).double(), "cuda-triton")
    hidden = torch.ones(1, 2, dtype=torch.float64)
    state = interface.initial_state(1, hidden, 2)
    state.next(interface.actions(hidden))
    with pytest.raises(ValueError, match="advanced once"):
        state.next(interface.actions(hidden))
    assert not isinstance(interface.initial_state(1, hidden), TritonSequenceState)  # incremental use


def test_an_empty_sequence_reads_nothing() -> None:
    bottom = torch.zeros(3, 2, dtype=torch.float64)
    assert triton_readings(torch.zeros(3, 0, 4 * 10 + 2, dtype=torch.float64), bottom, 2, 2, False).shape == (3, 0, 8)


def test_the_backend_swaps_only_the_dvpda_and_back() -> None:
    model = build_model("Tf+Nd", 7, options=ModelOptions(width=12), generator=torch.Generator().manual_seed(0))
    pytorch_classes = [type(module) for module in model.modules()]
    accelerate(model, "cuda-triton")
    swapped = {type(module) for module in model.modules()} - set(pytorch_classes)
    assert swapped == {TritonVectorNondeterministicInterface, TritonVectorNondeterministicStack}
    assert [type(module) for module in accelerate(model, "torch").modules()] == pytorch_classes
    windowed = accelerate(VectorNondeterministicStack(2, 2, 2, window=3), "cuda-triton")
    assert type(windowed) is VectorNondeterministicStack


def test_off_cuda_without_the_interpreter_the_pytorch_dp_runs(
    interpreted: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``accelerate`` precedes the move to CUDA (``stacklm train`` builds the model on the CPU): the
    classes take the kernel only where it runs."""
    actions = random_actions(1, 3, 2, 2, 2, seed=1)
    stack = accelerate(VectorNondeterministicStack(2, 2, 2).double(), "cuda-triton")
    monkeypatch.setattr(interpreted, "INTERPRETED", False)
    monkeypatch.setattr(triton_dvpda, "triton_readings", None)  # not called
    expected = accelerate(VectorNondeterministicStack(2, 2, 2).double(), "torch").readings(actions)
    torch.testing.assert_close(stack.readings(actions), expected, rtol=0, atol=0)


def test_the_backend_is_asked_for_by_name_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve("auto", torch.device("cuda")) == "torch"
    with pytest.raises(StacklmError, match="runs on CUDA, not on cpu"):
        resolve("cuda-triton", torch.device("cpu"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert triton_dvpda.available() == (False, "triton is not installed (pip install triton, or the test extras)")
    with pytest.raises(StacklmError, match="cuda-triton backend is not available: triton is not installed"):
        resolve("cuda-triton", torch.device("cuda"))


# Compiles every program for an sm_90 GPU (H100/H200) at the "+Nd" models' sizes (|Q| = |Γ| = 3, m = 5).
COMPILE_FOR_CUDA = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from stacklm.kernels import triton_dvpda, triton_dvpda_kernels as kernels

assert not kernels.INTERPRETED
sizes = triton_dvpda.block_sizes(3, 3, 5, log_sigmoid=True)
step_sizes = {key: sizes[key] for key in ("Q", "S", "M", "BN", "BM")}
arguments = {
    kernels.dvpda_forward: "logits batch_stride step_stride bottom table alpha prime readings steps table_size",
    kernels.dvpda_backward: "grad_readings logits batch_stride step_stride table alpha prime grad_table grad_alpha"
    " grad_prime grad_logits grad_bottom steps table_size",
    kernels.dvpda_start: "bottom table alpha table_size capacity",
    kernels.dvpda_step: "t logits logits_stride pushed table alpha prime reading table_size capacity",
    kernels.dvpda_step_backward: "t grad_reading logits logits_stride pushed table alpha prime grad_table grad_alpha"
    " grad_prime grad_logits grad_pushed table_size capacity",
}
scalars = {name: "i64" for name in ("batch_stride", "step_stride", "logits_stride", "table_size")}
scalars |= {name: "i32" for name in ("steps", "t", "capacity")}
# Each step's body in both dtypes: the whole-sequence programs in float32, the one-step programs in float64.
dtypes = {kernels.dvpda_forward: "fp32", kernels.dvpda_backward: "fp32"}
for program, names in arguments.items():
    pointer = "*" + dtypes.get(program, "fp64")
    constexprs = step_sizes if program is kernels.dvpda_start else sizes
    signature = {name: scalars.get(name, pointer) for name in names.split()} | {name: "constexpr" for name in constexprs}
    constants = {(list(signature).index(name),): value for name, value in constexprs.items()}
    compiled = triton.compile(ASTSource(program, signature, constants), target=GPUTarget("cuda", 90, 32))
    assert compiled.asm["cubin"], program
"""


def test_the_programs_compile_for_cuda_in_float32_and_float64(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    environment |= {"TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    result = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_CUDA], env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
