"""Ancestral sampling of outputs given prompts, for the sampled partial accuracies.

Seed 000 §5 estimates tense reinflection's (and passivization's) partial accuracy from 10
outputs sampled per input; the reference draws them with seed 123 and at most 50 tokens
(``reference-implementation.md`` §10.6). Prompts of identical length are sampled together,
as many as keep samples · (prompt length + 1) within the token budget:
each is repeated ``num_samples`` times, read once, and extended one token at a time from
softmax(y_t) until every row has produced EOS or reached ``max_length`` tokens.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from stacklm.evaluation.probabilities import same_length_chunks
from stacklm.models.base import ModelState


def prompt_states(model: nn.Module, prompts: Tensor) -> ModelState:
    """The model's state after reading ``prompts`` (B, n), all of one length."""
    state = model.initial_state(prompts.size(0))
    for step in range(prompts.size(1)):
        state = state.next(prompts[:, step])
    return state


def sample_outputs(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    num_samples: int,
    max_length: int,
    seed: int,
    eos_index: int,
    tokens_per_batch: int,
    device: torch.device | str = "cpu",
) -> list[list[tuple[int, ...]]]:
    """``num_samples`` outputs (EOS removed; cut at ``max_length`` tokens) for each prompt."""
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(seed)
    samples: list[list[tuple[int, ...]]] = [[] for _ in prompts]
    model.eval()
    with torch.no_grad():
        for chunk in same_length_chunks([len(prompt) for prompt in prompts], num_samples, tokens_per_batch):
            tokens = torch.tensor([list(prompts[index]) for index in chunk], dtype=torch.long, device=device)  # (B, n)
            state = prompt_states(model, tokens.repeat_interleave(num_samples, dim=0))  # B·S rows
            rows = tokens.size(0) * num_samples
            generated = torch.full((rows, max_length), eos_index, dtype=torch.long, device=device)
            finished = torch.zeros(rows, dtype=torch.bool, device=device)
            for step in range(max_length):
                probabilities = torch.softmax(state.output().double(), dim=-1)  # (B·S, V)
                drawn = torch.multinomial(probabilities, 1, generator=generator).squeeze(1)  # (B·S,)
                drawn = drawn.masked_fill(finished, eos_index)
                generated[:, step] = drawn
                finished |= drawn == eos_index
                if bool(finished.all()):
                    break
                state = state.next(drawn.masked_fill(finished, 0))
            for row, output in enumerate(generated.tolist()):
                end = output.index(eos_index) if eos_index in output else max_length
                samples[chunk[row // num_samples]].append(tuple(output[:end]))
    return samples
