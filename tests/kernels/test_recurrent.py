"""The stack RNNs' whole-sequence forward on the compiled kernels (``SequenceSteps``, the dVPDA's
one-step op) against the model's own forward: logits and gradients, dropout on (the same masks)."""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

import pytest
import torch
from torch import Tensor

from stacklm.kernels import build, recurrent
from stacklm.kernels.backend import accelerate
from stacklm.kernels.recurrent import step_parts
from stacklm.models.recurrent import RecurrentConfig, RecurrentLanguageModel
from stacklm.models.stack_interface import VectorNondeterministicSpec
from tests.kernels.recorded_ops import RecordedOps
from tests.models.conftest import TOY_VOCABULARY_SIZE, tiny_model
from tests.models.test_recurrent import logits_and_gradients


def compiled_model(name: str, seed: int, dropout: float = 0.0) -> RecurrentLanguageModel:
    model = accelerate(tiny_model(name, seed=seed, dropout=dropout).double(), "cpu-compiled")
    assert isinstance(model, recurrent.CompiledRecurrentLanguageModel)
    return model


@pytest.mark.parametrize("name", ["RNN+Nd", "RNN+Nd+R", "LSTM+Nd", "LSTM+Nd+R"])
def test_compiled_step_equals_the_pytorch_dp(name: str) -> None:
    """The torch backend's model (the PyTorch DP, every operation through autograd) against the compiled one."""
    compiled = compiled_model(name, seed=3)
    reference = accelerate(copy.deepcopy(compiled), "torch")
    assert type(reference) is RecurrentLanguageModel
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 9), generator=torch.Generator().manual_seed(4))
    for got, expected in zip(logits_and_gradients(compiled, tokens), logits_and_gradients(reference, tokens)):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def logits_and_gradients_of(model: RecurrentLanguageModel, logits: Tensor, positions: int) -> list[Tensor]:
    """The logits and every parameter's gradient of a weighted sum of the first ``positions`` outputs."""
    used = logits[:, :positions]
    weights = torch.linspace(-1, 1, used.numel(), dtype=used.dtype).view_as(used)
    model.zero_grad()
    (used * weights).sum().backward()
    return [logits.detach()] + [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


def assert_equals_the_models_forward(
    model: RecurrentLanguageModel, tokens: Tensor, positions: int, seed: int, rtol: float = 1e-9, atol: float = 1e-11
) -> None:
    """``model``'s forward on the kernels (``SequenceSteps``) against autograd through ``advance`` (the
    model's own forward, the reference), both after ``torch.manual_seed(seed)`` (the same dropout
    masks): the logits and every parameter's gradient of the first ``positions`` outputs' weighted sum."""
    torch.manual_seed(seed)
    got = logits_and_gradients_of(model, model(tokens), positions)
    torch.manual_seed(seed)
    expected = logits_and_gradients_of(model, RecurrentLanguageModel.forward(model, tokens), positions)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "name", ["RNN+Nd", "RNN+Nd+R", "LSTM+Nd", "LSTM+Nd+R", "RNN+Sup+R", "LSTM+Sup", "cfl/NS+S", "cfl/Gref", "cfl/JM"]
)
@pytest.mark.parametrize("length", [0, 1, 2, 7])
def test_sequence_steps_equal_the_incremental_step_with_dropout(name: str, length: int) -> None:
    """SequenceSteps (the compiled step, its backward and the deferred weight gradients) against
    autograd through ``advance`` (the model's own forward, its dropout on the kernel): dropout on (the same
    masks), both variants, every kind of stack, a loss of all outputs and one of the first only (the
    later steps get gradients of 0)."""
    model = compiled_model(name, seed=9, dropout=0.0 if name.startswith("cfl/") else 0.3).train()
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, length), generator=torch.Generator().manual_seed(10))
    for positions in {length + 1, max(length - 2, 1)}:
        assert_equals_the_models_forward(model, tokens, positions, seed=11)


@pytest.mark.parametrize("name", ["RNN+Nd", "LSTM+Nd+R"])
def test_sequence_steps_hand_a_raw_pushed_vector_over_unchanged(name: str) -> None:
    """With ``pushed_vector="raw"`` (log v_t = W_v h + b_v, no log σ) the compiled step hands the
    dVPDA its parts as they are: logits and gradients equal autograd through ``advance``."""
    model = compiled_model(name, seed=16, dropout=0.3).train()
    assert model.interface is not None
    model.interface.pushed_vector = "raw"  # type: ignore[assignment]
    assert step_parts(model.interface)[1] is False
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 6), generator=torch.Generator().manual_seed(17))
    assert_equals_the_models_forward(model, tokens, 7, seed=18)


def small_stack_rnn(cell: str, num_layers: int, hidden_units: int, dropout: float, dtype: torch.dtype) -> RecurrentLanguageModel:
    """A stack RNN of the Bearing variant (learned h_0, expanded over the batch) with a small dVPDA
    (|Q| = |Γ| = 2, m = 3: two action parts, log σ of the pushed vector) on the kernels."""
    stack = VectorNondeterministicSpec(num_states=2, num_symbols=2, vector_size=3)
    config = RecurrentConfig(TOY_VOCABULARY_SIZE, hidden_units, cell, num_layers, stack, dropout=dropout)  # type: ignore[arg-type]
    model = RecurrentLanguageModel(config)
    model.initialize(torch.Generator().manual_seed(22))
    compiled = accelerate(model.to(dtype), "cpu-compiled").train()
    assert isinstance(compiled, recurrent.CompiledRecurrentLanguageModel) and compiled.interface is not None
    assert step_parts(compiled.interface) == ([compiled.interface.action_layer.out_features, 3], True)  # type: ignore[union-attr]
    return compiled


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("batch_size", [1, 3, 10])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_step_loops_equal_the_models_forward(cell: str, num_layers: int, batch_size: int, dropout: float) -> None:
    """The compiled step's loops (``recurrent.cpp``: the layers' products and cells, the action layers'
    two parts and log σ of the last, their backward and the weights' gradients) against the model's
    own forward in float64: d = 11, not a multiple of the 8 lanes (every product and cell has a
    tail), one and two layers (with dropout: masks between them), batches of 1, 3 and 10."""
    model = small_stack_rnn(cell, num_layers, 11, dropout, torch.float64)
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (batch_size, 6), generator=torch.Generator().manual_seed(24))
    for positions in (7, 3):
        assert_equals_the_models_forward(model, tokens, positions, seed=25)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_step_products_on_both_sides_of_the_loops_limit(cell: str) -> None:
    """d = 61, B = 10, two layers: B · inputs · gates of both LSTM layers (178,120 and 297,680) and the
    RNN's second (74,420) pass ``PRODUCT_LOOP_LIMIT`` (2¹⁶: ATen's addmm), the RNN's first (44,530) and the
    action layers' (26,230) do not (the loops): together they equal the model's forward."""
    model = small_stack_rnn(cell, 2, 61, 0.3, torch.float64)
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (10, 5), generator=torch.Generator().manual_seed(26))
    assert_equals_the_models_forward(model, tokens, 6, seed=27)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_step_loops_in_float32(cell: str) -> None:
    """float32's loops (8 floats a vector, libmvec's expf) against the model's forward in float32."""
    model = small_stack_rnn(cell, 2, 11, 0.3, torch.float32)
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 6), generator=torch.Generator().manual_seed(28))
    assert_equals_the_models_forward(model, tokens, 7, seed=29, rtol=1e-4, atol=1e-5)


def test_a_forwards_steps_are_freed_without_the_cycle_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """SequenceSteps' tables go when the graph does, by reference counting: no reference cycle
    through an autograd node's context (the cyclic collector is off)."""
    alive: list[weakref.ref[recurrent.SequenceSteps]] = []
    original = recurrent.SequenceSteps.__init__

    def tracked(self: recurrent.SequenceSteps, *arguments: Any) -> None:
        original(self, *arguments)
        alive.append(weakref.ref(self))

    monkeypatch.setattr(recurrent.SequenceSteps, "__init__", tracked)
    model = accelerate(tiny_model("LSTM+Nd+R", seed=14, dropout=0.2), "cpu-compiled").train()
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (2, 6), generator=torch.Generator().manual_seed(15))
    gc.disable()
    try:
        model(tokens).sum().backward()
        with torch.no_grad():
            model(tokens)
        assert len(alive) == 2 and all(reference() is None for reference in alive)
    finally:
        gc.enable()


@pytest.mark.parametrize("name", ["RNN+Nd", "LSTM+Nd+R"])
def test_step_op_declares_the_tables_it_writes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled step's op, called as a training forward calls it, passes opcheck's schema test
    (SchemaCheckMode): an op that writes into an input its schema does not mark ``Tensor(a!)``, or
    returns an alias of an input, fails it (torch.compile and functionalization rely on the schema).
    Its backward is its autograd node's, in C++ (no op of its own)."""
    build.load()
    namespace = torch.ops.stacklm_recurrent
    calls: dict[str, tuple[Any, ...]] = {}
    for op_name in ("step",):

        def recorded(*arguments: Any, op: Any = getattr(namespace, op_name), op_name: str = op_name) -> Any:
            calls.setdefault(op_name, arguments)
            return op(*arguments)

        monkeypatch.setattr(namespace, op_name, recorded)
    model = compiled_model(name, seed=19, dropout=0.3).train()
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (2, 4), generator=torch.Generator().manual_seed(20))
    model(tokens).sum().backward()
    monkeypatch.undo()
    assert set(calls) == {"step"}
    generator = torch.Generator().manual_seed(21)

    def fresh(argument: Any) -> Any:
        # random contents: a table written with the values it held already would show no write
        if isinstance(argument, Tensor):
            return torch.randn(argument.shape, dtype=argument.dtype, generator=generator)
        if isinstance(argument, (list, tuple)) and any(isinstance(item, Tensor) for item in argument):
            return [fresh(item) for item in argument]
        return argument

    for op_name, arguments in calls.items():
        op = getattr(namespace, op_name)
        inputs = [fresh(argument) for argument in arguments]
        with RecordedOps() as recorded:
            op(*inputs)
        assert recorded.names == [op._qualified_op_name]  # one op that tracing sees, not its insides
        torch.library.opcheck(op, inputs, test_utils=("test_schema",))
