"""Ancestral sampling of outputs given prompts, for the sampled partial accuracies.

DuSell & Cotterell (2025) §5 estimates tense reinflection's (and passivization's) partial accuracy from 10
outputs sampled per input; the authors' code draws them with seed 123 and at most 50 tokens
(``docs/design/authors-code.md#evaluation-and-sampling``). Prompts of identical length are sampled together,
as many as keep samples · (prompt length + 1) within the token budget:
each is read once, its state copied ``num_samples`` times, and extended one token at a time from
softmax(y_t) until every row has produced EOS or reached its prompt's length: ``max_length``,
or fewer where ``lengths`` says that the first tokens decide everything the caller asks of a
sample. A sample is its first tokens up to EOS or to that length, drawn as the uncut one:
each batch draws from a generator of its own, seeded in turn from ``random.Random(seed)``,
and every step draws for the whole batch, so stopping sooner changes no draw.
"""

from __future__ import annotations

import random
from typing import Sequence

import torch
from torch import nn

from stacklm.evaluation.probabilities import prompt_states, same_length_chunks


def sample_outputs(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    num_samples: int,
    max_length: int,
    seed: int,
    eos_index: int,
    tokens_per_batch: int,
    lengths: Sequence[int] | None = None,
    device: torch.device | str = "cpu",
) -> list[list[tuple[int, ...]]]:
    """``num_samples`` outputs (EOS removed; cut at ``max_length`` tokens, or at ``lengths[i]``
    for prompt i when that is shorter) for each prompt."""
    device = torch.device(device)
    batch_seeds = random.Random(seed)
    samples: list[list[tuple[int, ...]]] = [[] for _ in prompts]
    model.eval()
    with torch.no_grad():
        for chunk in same_length_chunks([len(prompt) for prompt in prompts], num_samples, tokens_per_batch):
            generator = torch.Generator(device=device).manual_seed(batch_seeds.getrandbits(63))
            tokens = torch.tensor([list(prompts[index]) for index in chunk], dtype=torch.long, device=device)  # (B, n)
            state = prompt_states(model, tokens, copies=num_samples)  # B·S rows
            rows = tokens.size(0) * num_samples
            needed = [min(max_length, lengths[index] if lengths is not None else max_length) for index in chunk for _ in range(num_samples)]
            enough = torch.tensor(needed, device=device)  # (B·S,) tokens each row needs at most
            generated = torch.full((rows, max_length), eos_index, dtype=torch.long, device=device)
            finished = torch.zeros(rows, dtype=torch.bool, device=device)
            for step in range(max_length):
                probabilities = torch.softmax(state.output().double(), dim=-1)  # (B·S, V)
                drawn = torch.multinomial(probabilities, 1, generator=generator).squeeze(1)  # (B·S,)
                drawn = drawn.masked_fill(finished, eos_index)
                generated[:, step] = drawn
                finished |= drawn == eos_index
                if bool((finished | (enough <= step + 1)).all()):
                    break
                state = state.next(drawn.masked_fill(finished, 0))
            for row, output in enumerate(generated.tolist()):
                end = min(output.index(eos_index) if eos_index in output else max_length, needed[row])
                samples[chunk[row // num_samples]].append(tuple(output[:end]))
    return samples
