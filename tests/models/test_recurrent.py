"""The stack RNNs' whole-sequence forward on the compiled dVPDA step equals the PyTorch DP's."""

from __future__ import annotations

import copy

import pytest
import torch

from stacklm.models.recurrent import RecurrentLanguageModel
from tests.models.conftest import TOY_VOCABULARY_SIZE, tiny_model


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
    assert type(state).__name__ == "CompiledSequenceState"
    for got, expected in zip(logits_and_gradients(compiled, tokens), logits_and_gradients(reference, tokens)):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)
