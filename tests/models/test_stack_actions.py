"""The action types of a nondeterministic-stack RNN on one string (DuSell & Chiang (2022), Figure 2)."""

from __future__ import annotations

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.models.options import ModelOptions
from stacklm.models.recurrent import RecurrentLanguageModel
from stacklm.models.registry import build_model
from stacklm.models.stack_actions import string_action_types

VOCABULARY = 4  # marked reversal: 0, 1, #, EOS
PDA = ModelOptions(cfl_num_states=2, cfl_num_symbols=3)  # |Q| = 2, |Γ| = 3: 6 configurations


def ns_model(name: str, seed: int = 1) -> RecurrentLanguageModel:
    model = build_model(name, VOCABULARY, options=PDA, generator=torch.Generator().manual_seed(seed))
    assert isinstance(model, RecurrentLanguageModel)
    return model.double()


def with_fixed_weights(model: RecurrentLanguageModel) -> RecurrentLanguageModel:
    """Action logits independent of h: 0 everywhere but the two pops of configuration (q0, ⊥), log 100."""
    assert model.interface is not None
    layer = model.interface.action_layer
    with torch.no_grad():
        layer.weight.zero_()
        bias = torch.zeros(6, 6 + 6 + 2, dtype=torch.float64)  # per (q, x): 6 push, 6 replace, 2 pop
        bias[0, 12:] = torch.tensor(100.0).log()
        layer.bias.copy_(bias.reshape(-1))
    return model


def test_unnormalized_weights_are_summed_as_they_are() -> None:
    # push 6 × 6 = 36, replace 36, pop 2 × 100 + 5 × 2 = 210
    model = with_fixed_weights(ns_model("cfl/NS+S+U"))
    probabilities = string_action_types(model, [0, 1, 2, 1, 0])
    expected = torch.tensor([36.0, 36.0, 210.0], dtype=torch.float64) / 282
    torch.testing.assert_close(probabilities, expected.expand(4, 3))


def test_normalized_weights_count_each_configuration_once() -> None:
    # eq. 1 per (q, x): (q0, ⊥) has 6 + 6 + 200 = 212 (push 6/212, replace 6/212, pop 200/212),
    # the 5 others 14 each (6/14, 6/14, 2/14); the three sums over the 6 configurations make 6
    model = with_fixed_weights(ns_model("cfl/NS+S"))
    probabilities = string_action_types(model, [0, 1, 2, 1, 0])
    push = 6 / 212 + 5 * 6 / 14
    pop = 200 / 212 + 5 * 2 / 14
    expected = torch.tensor([push, push, pop], dtype=torch.float64) / 6
    torch.testing.assert_close(probabilities, expected.expand(4, 3))


@pytest.mark.parametrize("name", ["cfl/NS", "cfl/NS+S", "cfl/NS+U", "cfl/NS+S+U"])
def test_one_row_per_update_each_from_the_prefix_read_so_far(name: str) -> None:
    model = ns_model(name)
    first = string_action_types(model, [0, 1, 1, 2, 1, 1, 0])
    second = string_action_types(model, [0, 1, 1, 0, 0, 1, 1])
    assert first.shape == (6, 3)  # n − 1 updates, from h_1 … h_{n−1}
    torch.testing.assert_close(first.sum(dim=1), torch.ones(6, dtype=torch.float64))
    torch.testing.assert_close(first[:3], second[:3])  # h_1 … h_3 read the same prefix
    assert not torch.allclose(first[3:], second[3:])
    assert string_action_types(model, [2]).shape == (0, 3)


@pytest.mark.parametrize("name", ["cfl/LSTM", "cfl/JM"])
def test_other_models_are_refused(name: str) -> None:
    options = ModelOptions(cfl_stack_vector_size=2) if name == "cfl/JM" else None
    model = build_model(name, VOCABULARY, options=options, generator=torch.Generator().manual_seed(1))
    with pytest.raises(StacklmError, match="nondeterministic-stack RNN"):
        string_action_types(model, [0, 2, 0])
