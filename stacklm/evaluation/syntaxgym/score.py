"""Surprisals, region values, prediction results and suite accuracies (``docs/design/cfl-and-ptb.md#sg-score``,
steps 3 and 5–7; DuSell & Chiang (2022) §5.2).

The language model is a ``TokenLogProbs``: given the input tokens and the target tokens of one
sentence, the natural-log probability of each target after the inputs up to it, from a fresh
initial state. Each sentence is scored on its own: the inputs are ``<eos>`` followed by the
sentence's tokens but its last, the targets its tokens, so the first token is predicted after
``<eos>`` (as the model was trained, sentences separated by ``<eos>``) and the ``<eos>`` after
the sentence is not scored. A token's surprisal is −log₂ p (bits); a region's value is the sum
of its tokens' surprisals (0 for a region without tokens).

A suite's accuracy is the share of (item, prediction) pairs whose formula holds: each
prediction counts on its own (not Hu et al.'s all-predictions-per-item).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.alignment import AlignmentError, align, sentence, tokenize
from stacklm.evaluation.syntaxgym.suite import Condition, Suite

EOS = "<eos>"


class TokenLogProbs(Protocol):
    def __call__(self, inputs: tuple[str, ...], targets: tuple[str, ...]) -> Sequence[float]:
        """ln p(targets[k] | inputs[0], …, inputs[k]) for every k, from the initial state."""
        ...


@dataclass(frozen=True)
class PredictionResult:
    item: int  # item_number
    prediction: int  # 1-based, in the suite's order
    holds: bool


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    results: tuple[PredictionResult, ...]  # items in file order, then predictions

    @property
    def accuracy(self) -> float:
        return sum(result.holds for result in self.results) / len(self.results)


def token_surprisals(tokens: tuple[str, ...], log_probs: TokenLogProbs) -> tuple[float, ...]:
    """−log₂ p(token_k | <eos>, token_1 … token_{k−1}) for each token; the final <eos> is not scored."""
    if not tokens:
        return ()
    values = log_probs((EOS,) + tokens[:-1], tokens)
    if len(values) != len(tokens):
        raise StacklmError(f"the language model gave {len(values)} log-probabilities for {len(tokens)} tokens")
    return tuple(-value / math.log(2) for value in values)


def region_values(condition: Condition, vocabulary: Collection[str], log_probs: TokenLogProbs) -> dict[int, float]:
    """Region number → summed surprisal (bits) of the region's tokens in this condition's sentence."""
    tokens = tokenize(sentence(condition), vocabulary)
    surprisals = token_surprisals(tokens, log_probs)
    positions = align([region.content for region in condition.regions], tokens)
    return {region.number: sum(surprisals[k] for k in assigned) for region, assigned in zip(condition.regions, positions)}


def score_suite(suite: Suite, vocabulary: Collection[str], log_probs: TokenLogProbs) -> SuiteResult:
    """Every (item, prediction) result of ``suite`` under the language model."""
    results: list[PredictionResult] = []
    for item in suite.items:
        values: dict[tuple[str, int], float] = {}
        for condition in item.conditions:
            try:
                by_region = region_values(condition, vocabulary, log_probs)
            except AlignmentError as error:
                raise StacklmError(f"{suite.source}: item {item.number}, condition {condition.name!r}: {error}") from None
            values.update(((condition.name, number), value) for number, value in by_region.items())
        for index, formula in enumerate(suite.predictions, start=1):
            results.append(PredictionResult(item.number, index, formula.evaluate(values)))
    return SuiteResult(suite.name, tuple(results))
