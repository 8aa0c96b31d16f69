"""Every architecture fits a 20-example toy task: a prompt of two distinct symbols, then the two reversed."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from stacklm.models.base import LanguageModel
from stacklm.models.registry import ARCHITECTURES

NUM_SYMBOLS = 5
VOCABULARY_SIZE = NUM_SYMBOLS + 1  # EOS last
PROMPT_LENGTH = 2
TARGET_LOSS = 0.05  # nats per example: −log p(target · EOS | prompt)
WIDTH = 32
# Adam's learning rate per base model. At 0.03 the transformers' runs are chaotic: Tf+Nd+Nd+Syn (seed 0)
# stalls at loss 0.45 for 500 steps and flipped between fitting and not on 1e-6 changes in the stack's
# readings; at 0.01 every transformer fits in 35–56 steps for seeds 0, 1 and 2. The recurrent models fit
# at 0.03 for those seeds in 45–390 steps, where at 0.01 RNN+Sup and RNN+Nd (seed 2) do not fit in 800.
LEARNING_RATES = {"transformer": 0.01, "rnn": 0.03, "lstm": 0.03}
MAX_STEPS = 800


def toy_task() -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (20, 4) = a b b a for 20 pairs a ≠ b; next tokens (20, 4), EOS last."""
    pairs = torch.tensor([(a, b) for a in range(NUM_SYMBOLS) for b in range(NUM_SYMBOLS) if a != b])  # (20, 2)
    inputs = torch.cat([pairs, pairs.flip(1)], dim=1)
    eos = torch.full((len(pairs), 1), VOCABULARY_SIZE - 1)
    return inputs, torch.cat([inputs, eos], dim=1)[:, 1:]


def conditional_loss(model: LanguageModel, inputs: torch.Tensor, next_tokens: torch.Tensor) -> torch.Tensor:
    """Mean over examples of −log p(target · EOS | prompt)."""
    logits = model(inputs)[:, PROMPT_LENGTH:]  # (20, 3, V): the predictions of b, a and EOS
    targets = next_tokens[:, PROMPT_LENGTH - 1 :]
    return F.cross_entropy(logits.reshape(-1, VOCABULARY_SIZE), targets.reshape(-1), reduction="sum") / len(inputs)


def test_toy_task_has_twenty_examples() -> None:
    inputs, next_tokens = toy_task()
    assert inputs.shape == (20, 4) and next_tokens[:, -1].eq(VOCABULARY_SIZE - 1).all()


def test_fits_toy_task(architecture_name: str, tiny_model: Callable[..., LanguageModel]) -> None:
    model = tiny_model(architecture_name, seed=0, vocabulary_size=VOCABULARY_SIZE, width=WIDTH)
    inputs, next_tokens = toy_task()
    initial_loss = conditional_loss(model, inputs, next_tokens).item()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATES[ARCHITECTURES[architecture_name].base])
    for _ in range(MAX_STEPS):
        optimizer.zero_grad()
        loss = conditional_loss(model, inputs, next_tokens)
        if loss.item() < TARGET_LOSS / 2:
            break
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
    model.eval()
    with torch.no_grad():
        final_loss = conditional_loss(model, inputs, next_tokens).item()
    assert initial_loss > 3.0  # log 6 per prediction at the start: the task is not solved by initialisation
    assert final_loss < TARGET_LOSS
