"""The RNN and LSTM forward against PyTorch's own ``nn.RNN``/``nn.LSTM``; the stack RNNs' forward
on the compiled dVPDA step against the PyTorch DP's."""

from __future__ import annotations

import copy

import pytest
import torch

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
    with torch.no_grad():
        start = (initial, torch.zeros_like(initial)) if config.cell == "lstm" else initial
        hidden, _ = reference(model._tokens(tokens), start)  # (B, n, d)
        expected = model._logits(torch.cat([initial[-1].unsqueeze(1), hidden], dim=1))
        torch.testing.assert_close(model(tokens), expected, rtol=1e-10, atol=1e-12)


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
