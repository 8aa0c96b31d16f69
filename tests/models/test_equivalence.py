"""Step-by-step logits equal whole-sequence logits; padding never changes a shorter sequence."""

from __future__ import annotations

from typing import Callable

import torch

from stacklm.models.base import LanguageModel
from stacklm.models.recurrent import RecurrentLanguageModel

TOY_VOCABULARY_SIZE = 7  # as in conftest.tiny_model


def step_by_step(model: LanguageModel, tokens: torch.Tensor) -> torch.Tensor:
    state = model.initial_state(tokens.size(0))
    outputs = [state.output()]
    for t in range(tokens.size(1)):
        state = state.next(tokens[:, t])
        outputs.append(state.output())
    return torch.stack(outputs, dim=1)  # (B, n + 1, V)


def random_tokens(batch_size: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TOY_VOCABULARY_SIZE - 1, (batch_size, length), generator=torch.Generator().manual_seed(seed))


def test_step_by_step_equals_whole_sequence(architecture_name: str, tiny_model: Callable[..., LanguageModel]) -> None:
    model = tiny_model(architecture_name).eval()
    tokens = random_tokens(3, 6, seed=1)
    with torch.no_grad():
        whole = model(tokens)
        steps = step_by_step(model, tokens)
    assert whole.shape == (3, 7, TOY_VOCABULARY_SIZE)
    torch.testing.assert_close(steps, whole, atol=1e-5, rtol=1e-5)


def test_empty_and_single_token_inputs(architecture_name: str, tiny_model: Callable[..., LanguageModel]) -> None:
    model = tiny_model(architecture_name).eval()
    with torch.no_grad():
        empty = model(torch.zeros(2, 0, dtype=torch.long))
        single = model(torch.tensor([[1], [2]]))
        initial = model.initial_state(2).output()
    assert empty.shape == (2, 1, TOY_VOCABULARY_SIZE)
    torch.testing.assert_close(empty[:, 0], initial, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(single[:, 0], initial, atol=1e-5, rtol=1e-5)


def test_padded_batch_equals_each_sequence_alone(architecture_name: str, tiny_model: Callable[..., LanguageModel]) -> None:
    model = tiny_model(architecture_name).eval()
    lengths = [2, 5, 3]
    sequences = [random_tokens(1, length, seed=10 + length)[0] for length in lengths]
    padded = torch.full((len(sequences), max(lengths)), TOY_VOCABULARY_SIZE - 2, dtype=torch.long)
    for index, sequence in enumerate(sequences):
        padded[index, : len(sequence)] = sequence
    with torch.no_grad():
        batch = model(padded)
        for index, sequence in enumerate(sequences):
            alone = model(sequence.unsqueeze(0))[0]
            torch.testing.assert_close(batch[index, : len(sequence) + 1], alone, atol=1e-5, rtol=1e-5)


def test_state_slicing_and_detach(architecture_name: str, tiny_model: Callable[..., LanguageModel]) -> None:
    model = tiny_model(architecture_name).eval()
    tokens = random_tokens(3, 4, seed=2)
    with torch.no_grad():
        state = model.initial_state(3)
        for t in range(2):
            state = state.next(tokens[:, t])
        sliced = state.slice_batch(slice(1, 3)).detach()
        assert sliced.batch_size() == 2
        for t in range(2, 4):
            sliced = sliced.next(tokens[1:, t])
        torch.testing.assert_close(sliced.output(), model(tokens)[1:, 4], atol=1e-5, rtol=1e-5)


def test_stack_rnn_actions_come_from_the_top_hidden_state_without_dropout(tiny_model: Callable[..., LanguageModel]) -> None:
    model = tiny_model("LSTM+Sup", dropout=0.5).train()
    assert isinstance(model, RecurrentLanguageModel) and model.interface is not None
    seen: list[torch.Tensor] = []
    actions_from_logits = model.interface.actions_from_logits

    def recording_actions(logits: torch.Tensor) -> object:
        seen.append(logits)
        return actions_from_logits(logits)

    model.interface.actions_from_logits = recording_actions  # type: ignore[method-assign]
    first = model.initial_state(2).next(torch.tensor([1, 2]))
    first.next(torch.tensor([3, 4]))
    assert len(seen) == 1  # the actions of h_1, applied lazily at step 2
    expected = torch.nn.functional.linear(first.hidden[-1], *model.interface.input_weight())  # from h_1 itself
    torch.testing.assert_close(seen[0], expected, rtol=0, atol=0)
