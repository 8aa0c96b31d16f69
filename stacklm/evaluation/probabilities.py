"""Exact conditional probabilities of outputs given prompts, batched under a token budget.

For a prompt x and an output y, the model reads w = x·y once; prediction t targets w_{t+1}
(EOS after the last token), so

    log p_M(y·EOS | x) = Σ_{t=|x|}^{|x|+|y|} log p_M(w_{t+1} | w_1 … w_t),

the first output token's distribution is prediction |x|, and the whole-string score
log p_M(w·EOS) adds the prompt's positions t < |x|. The expected full accuracy of a data set
(DuSell & Cotterell (2025) eq. 4) is the mean of p_M(y·EOS | x) — exact, no sampling.

The second output token's probability sums over the first (exact second-word accuracy):

    p_M(y'_2 = r_2 | x) = Σ_{a ≠ EOS} p_M(a | x) · p_M(r_2 | x a),

computed from the model's state after x (read once, step by step), copied for every
candidate a and advanced by one step: the prompt is not read again for each a.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import torch
from torch import Tensor, nn

from stacklm.models.base import ModelState
from stacklm.training.batching import group_by_token_budget, make_batch
from stacklm.training.loss import position_log_probabilities


@dataclass(frozen=True)
class ConditionalScores:
    """Per example, in data order (float64)."""

    string: Tensor  # (N,) log p(x·y·EOS)
    output: Tensor  # (N,) log p(y·EOS | x)
    first_token: Tensor  # (N,) log p(y_1 | x) (of EOS when y is empty)
    string_tokens: Tensor  # (N,) |x| + |y| + 1
    output_tokens: Tensor  # (N,) |y| + 1

    def select(self, index: Tensor) -> ConditionalScores:
        """The scores of the examples at ``index`` (a long tensor), in its order."""
        return ConditionalScores(*(getattr(self, field.name)[index] for field in fields(self)))


def score_outputs(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    outputs: Sequence[Sequence[int]],
    *,
    eos_index: int,
    tokens_per_batch: int,
    device: torch.device | str = "cpu",
) -> ConditionalScores:
    """Scores of every (prompt, output) pair, one forward pass per batch."""
    strings = [list(prompt) + list(output) for prompt, output in zip(prompts, outputs, strict=True)]
    count = len(strings)
    string_scores = torch.zeros(count, dtype=torch.float64)
    output_scores = torch.zeros(count, dtype=torch.float64)
    first_scores = torch.zeros(count, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for group in group_by_token_budget([len(string) for string in strings], range(count), tokens_per_batch):
            batch = make_batch(strings, group, eos_index).to(torch.device(device))
            positions = position_log_probabilities(model, batch.inputs, batch.targets).double().cpu()  # (B, n + 1)
            positions = positions.masked_fill(~batch.mask.cpu(), 0.0)
            prompt_lengths = torch.tensor([len(prompts[index]) for index in group])  # (B,)
            in_output = torch.arange(positions.size(1)).unsqueeze(0) >= prompt_lengths.unsqueeze(1)  # (B, n + 1)
            index = torch.tensor(group)
            string_scores[index] = positions.sum(dim=1)
            output_scores[index] = positions.masked_fill(~in_output, 0.0).sum(dim=1)
            first_scores[index] = positions.gather(1, prompt_lengths.unsqueeze(1)).squeeze(1)
    return ConditionalScores(
        string=string_scores,
        output=output_scores,
        first_token=first_scores,
        string_tokens=torch.tensor([len(string) + 1 for string in strings], dtype=torch.float64),
        output_tokens=torch.tensor([len(output) + 1 for output in outputs], dtype=torch.float64),
    )


def same_length_chunks(lengths: Sequence[int], rows_per_prompt: int, tokens_per_batch: int) -> list[list[int]]:
    """Prompts of identical length, as many per chunk as keep rows · (length + 1) within the budget."""
    by_length: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        by_length.setdefault(length, []).append(index)
    chunks = []
    for length, members in sorted(by_length.items()):
        size = max(1, tokens_per_batch // (rows_per_prompt * (length + 1)))
        chunks.extend(members[start : start + size] for start in range(0, len(members), size))
    return chunks


def prompt_states(model: nn.Module, prompts: Tensor, copies: int = 1) -> ModelState:
    """The model's state after reading ``prompts`` (B, n), all of one length, each row then
    repeated ``copies`` times in place (B · copies rows): the prompts are read once."""
    state = model.initial_state(prompts.size(0))
    for step in range(prompts.size(1)):
        state = state.next(prompts[:, step])
    return state if copies == 1 else state.transform_tensors(lambda tensor: tensor.repeat_interleave(copies, dim=0))


def second_token_log_probabilities(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    second_tokens: Sequence[int | None],
    *,
    eos_index: int,
    tokens_per_batch: int,
    device: torch.device | str = "cpu",
) -> Tensor:
    """log p_M(y'_2 = r_2 | x) for each prompt x and reference second token r_2: (N,) float64.

    Each chunk of same-length prompts (at most ``tokens_per_batch`` prompt tokens) is read
    once; its state is copied V − 1 times per prompt and advanced by every first token a ≠ EOS.
    ``None`` (a reference without a second token) can never be matched: −inf.
    """
    device = torch.device(device)
    candidates = eos_index  # first tokens 0 … V − 2; EOS ends the output before a second token
    result = torch.full((len(prompts),), -torch.inf, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for chunk in same_length_chunks([len(prompt) for prompt in prompts], 1, tokens_per_batch):
            chunk = [index for index in chunk if second_tokens[index] is not None]
            if not chunk:
                continue
            tokens = torch.tensor([list(prompts[index]) for index in chunk], dtype=torch.long, device=device)  # (B, n)
            state = prompt_states(model, tokens, copies=candidates)  # B·(V − 1) rows, each prompt V − 1 times
            first = torch.log_softmax(state.output()[::candidates].double(), dim=-1)[:, :candidates]  # (B, V − 1): p(a | x)
            state = state.next(torch.arange(candidates, device=device).repeat(len(chunk)))  # x a, for every a
            references = torch.tensor([second_tokens[index] for index in chunk], device=device).repeat_interleave(candidates)  # (B·(V − 1),)
            second = torch.log_softmax(state.output().double(), dim=-1).gather(1, references.unsqueeze(1)).view(len(chunk), candidates)  # (B, V − 1): p(r_2 | x a)
            result[torch.tensor(chunk)] = torch.logsumexp(first + second, dim=1).cpu()
    return result
