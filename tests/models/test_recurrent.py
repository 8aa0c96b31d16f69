"""The RNN and LSTM forward and gradients against PyTorch's own ``nn.RNN``/``nn.LSTM``; the stack
RNNs' forward on the compiled dVPDA step against the PyTorch DP's, and against their equations
written with one product per weight block, step and action layer."""

from __future__ import annotations

import copy
import gc
import weakref
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from stacklm.models import recurrent
from stacklm.models.recurrent import RecurrentLanguageModel
from tests.models.conftest import TOY_VOCABULARY_SIZE, tiny_model
from tests.stacks.recorded_ops import RecordedOps


@pytest.mark.parametrize("name", ["RNN", "LSTM"])
def test_forward_equals_torch_recurrent_layers(name: str) -> None:
    """App. C.1–C.2 by PyTorch's cuDNN-style layers with the same weights: h_0 = tanh(w_0), c_0 = 0,
    one bias per gate (PyTorch's second bias 0), gates in the order i, f, g, o."""
    model = tiny_model(name, seed=5).double()
    assert isinstance(model, RecurrentLanguageModel)
    config = model.config
    layers_class = torch.nn.LSTM if config.cell == "lstm" else torch.nn.RNN
    reference = layers_class(model.token_width, config.hidden_units, config.num_layers, batch_first=True).double()
    with torch.no_grad():
        for index, layer in enumerate(model.layers):
            getattr(reference, f"weight_ih_l{index}").copy_(layer.input_weight)
            getattr(reference, f"weight_hh_l{index}").copy_(layer.recurrent_weight)
            getattr(reference, f"bias_ih_l{index}").copy_(layer.bias)
            getattr(reference, f"bias_hh_l{index}").zero_()
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 8), generator=torch.Generator().manual_seed(6))
    assert model.initial_hidden is not None
    initial = torch.tanh(model.initial_hidden).unsqueeze(1).expand(-1, 3, -1).contiguous()  # (L, B, d)
    start = (initial, torch.zeros_like(initial)) if config.cell == "lstm" else initial
    hidden, _ = reference(model._tokens(tokens), start)  # (B, n, d)
    expected = model._logits(torch.cat([initial[-1].unsqueeze(1), hidden], dim=1))
    got = model(tokens)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    weights = torch.linspace(-1, 1, got.numel(), dtype=got.dtype).view_as(got)
    ((got + expected) * weights).sum().backward()  # each side's parameters get their own gradients
    for index, layer in enumerate(model.layers):
        for ours, theirs in ((layer.input_weight, "weight_ih"), (layer.recurrent_weight, "weight_hh"), (layer.bias, "bias_ih")):
            torch.testing.assert_close(ours.grad, getattr(reference, f"{theirs}_l{index}").grad, rtol=1e-9, atol=1e-11)


def logits_and_gradients(model: RecurrentLanguageModel, tokens: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    logits = model(tokens)
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weights).sum().backward()
    return [logits.detach()] + [parameter.grad for parameter in model.parameters()]


@pytest.mark.parametrize("name", ["RNN+Nd", "RNN+Nd+R", "LSTM+Nd", "LSTM+Nd+R"])
def test_compiled_step_equals_the_pytorch_dp(name: str) -> None:
    compiled = tiny_model(name, seed=3).double()
    assert isinstance(compiled, RecurrentLanguageModel) and compiled.interface is not None
    reference = copy.deepcopy(compiled)
    reference.interface.stack.kernel = "torch"  # type: ignore[union-attr]
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 9), generator=torch.Generator().manual_seed(4))
    state = compiled._initial(3, 9, sequence=True).stack
    assert type(state).__name__ == "CompiledState"
    for got, expected in zip(logits_and_gradients(compiled, tokens), logits_and_gradients(reference, tokens)):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def written_out_logits(model: RecurrentLanguageModel, tokens: Tensor) -> Tensor:
    """The stack RNN of the module docstring, dropout off: at every step one product per block of
    W^(ℓ) (token, reading, h^(ℓ−1), h^(ℓ)_{t−1}), the action layers apart, on the PyTorch DP."""
    config, interface = model.config, model.interface
    assert interface is not None and model.initial_hidden is not None
    batch_size, length = tokens.shape
    updates = length if config.reading_to_output else length - 1
    stack = interface.initial_state(batch_size, model.initial_hidden, updates)  # with gradients: the PyTorch DP
    hidden = [torch.tanh(w).expand(batch_size, -1) for w in model.initial_hidden]
    cells = [torch.zeros_like(h) for h in hidden]
    first = model.layers[0]
    token_weight, reading_weight = first.input_weight.split([model.token_width, config.reading_size], dim=1)

    def pre_output() -> Tensor:
        return torch.cat([hidden[-1], stack.reading()], dim=-1) if config.reading_to_output else hidden[-1]

    outputs = [pre_output()]
    for t in range(length):
        if t > 0 and not config.reading_to_output:
            stack = stack.next(interface.actions(hidden[-1]))
        x = F.linear(model._tokens(tokens[:, t]), token_weight, first.bias) + F.linear(stack.reading(), reading_weight)
        for index, layer in enumerate(model.layers):
            if index > 0:
                x = F.linear(hidden[index - 1], layer.input_weight, layer.bias)
            gates = x + F.linear(hidden[index], layer.recurrent_weight)
            if config.cell == "rnn":
                hidden[index] = torch.tanh(gates)
            else:
                input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
                cells[index] = torch.sigmoid(forget_gate) * cells[index] + torch.sigmoid(input_gate) * torch.tanh(candidate)
                hidden[index] = torch.sigmoid(output_gate) * torch.tanh(cells[index])
        if config.reading_to_output:
            stack = stack.next(interface.actions(hidden[-1]))
        outputs.append(pre_output())
    return model._logits(torch.stack(outputs, dim=1))


@pytest.mark.parametrize("name", ["RNN+Nd", "RNN+Nd+R", "LSTM+Nd", "LSTM+Nd+R", "RNN+Sup", "LSTM+Sup+R"])
def test_joined_step_products_equal_the_written_out_equations(name: str) -> None:
    """One product per layer over [input ; h_{t−1}] and one for all action layers, gradients included."""
    model = tiny_model(name, seed=7).double()
    assert isinstance(model, RecurrentLanguageModel)
    reference = copy.deepcopy(model)
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 9), generator=torch.Generator().manual_seed(8))
    logits = written_out_logits(reference, tokens)
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weights).sum().backward()
    expected = [logits.detach()] + [parameter.grad for parameter in reference.parameters()]
    for got, wanted in zip(logits_and_gradients(model, tokens), expected, strict=True):
        torch.testing.assert_close(got, wanted, rtol=1e-9, atol=1e-11)


def logits_and_gradients_of(model: RecurrentLanguageModel, logits: Tensor, positions: int) -> list[Tensor]:
    """The logits and every parameter's gradient of a weighted sum of the first ``positions`` outputs."""
    used = logits[:, :positions]
    weights = torch.linspace(-1, 1, used.numel(), dtype=used.dtype).view_as(used)
    model.zero_grad()
    (used * weights).sum().backward()
    return [logits.detach()] + [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize(
    "name", ["RNN+Nd", "RNN+Nd+R", "LSTM+Nd", "LSTM+Nd+R", "RNN+Sup+R", "LSTM+Sup", "cfl/NS+S", "cfl/Gref", "cfl/JM"]
)
@pytest.mark.parametrize("length", [0, 1, 2, 7])
def test_sequence_steps_equal_the_incremental_step_with_dropout(name: str, length: int) -> None:
    """SequenceSteps (the compiled step, its backward and the deferred weight gradients) against
    autograd through ``advance`` (``_forward_stepwise``): dropout on (the same masks), both variants, every kind of stack, a loss of all
    outputs and one of the first only (the later steps get gradients of 0)."""
    model = tiny_model(name, seed=9, dropout=0.0 if name.startswith("cfl/") else 0.3).double().train()
    assert isinstance(model, RecurrentLanguageModel)
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, length), generator=torch.Generator().manual_seed(10))
    for positions in {length + 1, max(length - 2, 1)}:
        torch.manual_seed(11)
        got = logits_and_gradients_of(model, model(tokens), positions)
        torch.manual_seed(11)
        expected = logits_and_gradients_of(model, model._forward_stepwise(tokens), positions)
        for ours, theirs in zip(got, expected, strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", ["RNN+Nd", "LSTM+Nd+R"])
def test_sequence_steps_hand_a_raw_pushed_vector_over_unchanged(name: str) -> None:
    """With ``pushed_vector="raw"`` (log v_t = W_v h + b_v, no log σ) the compiled step hands the
    dVPDA its parts as they are: logits and gradients equal autograd through ``advance``."""
    model = tiny_model(name, seed=16, dropout=0.3).double().train()
    assert isinstance(model, RecurrentLanguageModel) and model.interface is not None
    model.interface.pushed_vector = "raw"  # type: ignore[assignment]
    assert model.interface.step_parts()[1] is False
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (3, 6), generator=torch.Generator().manual_seed(17))
    torch.manual_seed(18)
    got = logits_and_gradients_of(model, model(tokens), 7)
    torch.manual_seed(18)
    expected = logits_and_gradients_of(model, model._forward_stepwise(tokens), 7)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-11)


def test_without_the_compiled_library_the_forward_runs_stepwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernels do not build, the whole-sequence forward is ``_forward_stepwise``'s (and
    the dVPDA the PyTorch DP), with the same logits and gradients as the compiled step's."""
    model = tiny_model("LSTM+Nd+R", seed=12).double()
    assert isinstance(model, RecurrentLanguageModel)
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (2, 5), generator=torch.Generator().manual_seed(13))
    expected = logits_and_gradients_of(model, model(tokens), 6)

    def no_sequence_steps(*arguments: object) -> None:
        raise AssertionError("SequenceSteps used without the compiled library")

    monkeypatch.setattr(recurrent.compiled, "available", lambda: (False, "no compiler"))
    monkeypatch.setattr(recurrent, "SequenceSteps", no_sequence_steps)
    with pytest.warns(RuntimeWarning, match="using the PyTorch dVPDA"):  # the stack falls back too
        logits = model(tokens)
    for got, wanted in zip(logits_and_gradients_of(model, logits, 6), expected, strict=True):
        torch.testing.assert_close(got, wanted, rtol=1e-9, atol=1e-11)


def test_a_forwards_steps_are_freed_without_the_cycle_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """SequenceSteps' tables go when the graph does, by reference counting: no reference cycle
    through an autograd node's context (the cyclic collector is off)."""
    alive: list[weakref.ref[recurrent.SequenceSteps]] = []
    original = recurrent.SequenceSteps.__init__

    def tracked(self: recurrent.SequenceSteps, *arguments: Any) -> None:
        original(self, *arguments)
        alive.append(weakref.ref(self))

    monkeypatch.setattr(recurrent.SequenceSteps, "__init__", tracked)
    model = tiny_model("LSTM+Nd+R", seed=14, dropout=0.2).train()
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
def test_step_ops_declare_the_tables_they_write(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled step's ops, called as a training forward and backward call them, pass opcheck's
    schema test (SchemaCheckMode): an op that writes into an input its schema does not mark
    ``Tensor(a!)``, or returns an alias of an input, fails it (torch.compile and functionalization
    rely on the schema)."""
    recurrent.compiled.load()
    namespace = torch.ops.stacklm_recurrent
    calls: dict[str, tuple[Any, ...]] = {}
    for op_name in ("step", "step_backward"):

        def recorded(*arguments: Any, op: Any = getattr(namespace, op_name), op_name: str = op_name) -> Any:
            calls.setdefault(op_name, arguments)
            return op(*arguments)

        monkeypatch.setattr(namespace, op_name, recorded)
    model = tiny_model(name, seed=19, dropout=0.3).double().train()
    tokens = torch.randint(0, TOY_VOCABULARY_SIZE - 1, (2, 4), generator=torch.Generator().manual_seed(20))
    model(tokens).sum().backward()
    monkeypatch.undo()
    assert set(calls) == {"step", "step_backward"}
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
