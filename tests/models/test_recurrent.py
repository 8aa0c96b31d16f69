"""The RNN and LSTM forward and gradients against PyTorch's own ``nn.RNN``/``nn.LSTM``; the stack
RNNs' forward against their equations written with one product per weight block, step and action layer."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from stacklm.models.recurrent import RecurrentLanguageModel
from tests.models.conftest import TOY_VOCABULARY_SIZE, tiny_model


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
