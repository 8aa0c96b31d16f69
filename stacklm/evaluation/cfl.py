"""The CFL metric of DuSell & Chiang (2022) §4: cross-entropy above the true distribution's
(``docs/design/cfl-and-ptb.md#true-cross-entropy``).

For a set S of strings, per-symbol cross-entropy under p, in nats (EOS counted):

    H(S, p) = −Σ_{w∈S} ln p(w·EOS) / Σ_{w∈S} (|w| + 1),

and the reported metric is Δ = H(S, p_M) − H(S, p_true) on the same strings (0 is optimal).
Overall, p_true includes the uniform length term ln N_valid; per length bin it does not (each
bin is scored with the PCFG conditioned on its length), so the caller passes the true
log-probabilities that fit the set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn

from stacklm.cfl.datasets import CflDataset
from stacklm.evaluation.probabilities import score_outputs


def cross_entropy(log_probabilities: Tensor, lengths: Sequence[int]) -> float:
    """H(S, p) from ln p(w·EOS) of each string (N,) and |w|."""
    return float(-log_probabilities.double().sum() / sum(length + 1 for length in lengths))


def cross_entropy_difference(model_log_probabilities: Tensor, true_log_probabilities: Tensor, lengths: Sequence[int]) -> float:
    """Δ = H(S, p_M) − H(S, p_true) over the whole set."""
    return cross_entropy(model_log_probabilities, lengths) - cross_entropy(true_log_probabilities, lengths)


def cross_entropy_difference_by_length(
    model_log_probabilities: Tensor, true_log_probabilities_given_length: Tensor, lengths: Sequence[int]
) -> dict[int, float]:
    """Δ of each length bin, with p_true conditioned on the length: {length: Δ}."""
    by_length: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        by_length.setdefault(length, []).append(index)
    result = {}
    for length, members in sorted(by_length.items()):
        index = torch.tensor(members)
        result[length] = cross_entropy_difference(model_log_probabilities[index], true_log_probabilities_given_length[index], [length] * len(members))
    return result


@dataclass(frozen=True)
class CflScores:
    """Δ of a model on a CFL data set: overall (length term included) and per length bin."""

    overall: float
    by_length: dict[int, float]


def score_cfl_dataset(
    model: nn.Module, dataset: CflDataset, *, eos_index: int, tokens_per_batch: int, device: torch.device | str = "cpu"
) -> CflScores:
    """Δ of ``model`` on ``dataset``, whose strings carry ln p_true(w) and ln p_G(w | |w|)."""
    strings = dataset.strings
    scores = score_outputs(model, [[] for _ in strings], strings, eos_index=eos_index, tokens_per_batch=tokens_per_batch, device=device)
    lengths = [len(string) for string in strings]
    return CflScores(
        overall=cross_entropy_difference(scores.string, torch.tensor(dataset.true_logprob, dtype=torch.float64), lengths),
        by_length=cross_entropy_difference_by_length(scores.string, torch.tensor(dataset.length_bin_logprob, dtype=torch.float64), lengths),
    )
