"""The metrics of one trained model on a syntactic-transformation task (DuSell & Cotterell (2025) §5, App. E).

For a data set D of (x, y) pairs, with y the reference under a rule (hierarchical, or linear
on the generalization set):

- ``cross_entropy``: −Σ log p(x·y·EOS) / Σ (|x| + |y| + 1), nats per token, EOS included;
- ``conditional_cross_entropy``: −Σ log p(y·EOS | x) / Σ (|y| + 1) (the reference's "CCE");
- ``full_accuracy`` = FA(M, D) = (1/|D|) Σ p(y·EOS | x), exact (eq. 4);
- ``partial_accuracy``, exact: first word p(y_1 | x) (question tasks), or second word
  Σ_a p(a | x) p(y_2 | x a) (passivization);
- ``partial_accuracy_sampled``: the share of ``samples_per_input`` seeded samples per input
  that the task's ``partial_match`` accepts (tense reinflection; passivization beside the
  exact value, as the paper estimated it);
- ``log_ratio`` = log(FA(M, D_hier) / FA(M, D_lin)) and ``partial_log_ratio`` likewise for the
  partial accuracy (App. E), computed in log space so that tiny accuracies do not underflow;
  ``partial_log_ratio_sampled`` from the sampled one where both exist;
- ``mean_log_ratio`` = (1/|D|) Σ [log p(y_hier | x) − log p(y_lin | x)], what the authors'
  code reports as its log ratio (``docs/design/authors-code.md#log-ratio``).

At each training checkpoint, ``TaskEvaluator.checkpoint_scores`` gives the generalization
curves: FA and the task's partial accuracy (exact where it exists, else sampled) on a fixed
subset (``curve_subset``) of the test set and of the generalization set under both rules.

``TaskEvaluator.construction_scores`` gives the generalization metrics of each construction's
examples (question formation: the subject's relative clause, ``Task.generalization_construction``).
Every metric of a split, of a rule and of a subset is ``ReferenceScores.rows``: the per-example
scores of the subset, averaged as those of the whole split.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import torch
from torch import Tensor, nn

from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import StacklmError
from stacklm.evaluation.probabilities import ConditionalScores, score_outputs, second_token_log_probabilities
from stacklm.evaluation.sampling import sample_outputs
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.tasks.base import PartialAccuracyKind, Task
from stacklm.tasks.example import Example

Match = Callable[[Sequence[str], Sequence[str]], bool]
DecidedBy = Callable[[Sequence[str]], int]


@dataclass(frozen=True)
class PartialAccuracy:
    """A task's partial-accuracy check: its kind, its match of an output against a reference, and
    how many output tokens decide that match (``Task.partial_decided_by``)."""

    kind: PartialAccuracyKind
    match: Match
    decided_by: DecidedBy

    @classmethod
    def of(cls, task: Task) -> PartialAccuracy:
        """The task's own: ``Task.partial_accuracy_kind``, ``partial_match``, ``partial_decided_by``."""
        return cls(task.partial_accuracy_kind, task.partial_match, task.partial_decided_by)

    @property
    def exact(self) -> bool:
        return self.kind in ("first_word", "second_word")

    @property
    def sampled(self) -> bool:
        return self.kind in ("second_word", "pos_main_word")


@dataclass(frozen=True)
class MetricValue:
    split: Literal["validation", "test", "generalization"]
    rule: Literal["hierarchical", "linear"] | None
    metric: str
    value: float


@dataclass(frozen=True)
class ReferenceScores:
    """Examples scored against one rule's references, per example in data order: what the
    metrics (``rows``) average, over a whole split or over a subset of it (``select``)."""

    scores: ConditionalScores
    partial: Tensor | None  # (N,) the exact partial log-probabilities, where the task has them
    matches: list[list[bool]] | None  # per example, whether each of its samples partial-matches; None: none drawn

    def select(self, index: Sequence[int]) -> ReferenceScores:
        """The scores of the examples at ``index``, in its order."""
        positions = torch.tensor(index, dtype=torch.long)
        return ReferenceScores(
            self.scores.select(positions),
            None if self.partial is None else self.partial[positions],
            None if self.matches is None else [self.matches[position] for position in index],
        )

    def rows(self, split: Literal["test", "generalization"], rule: Literal["hierarchical", "linear"] | None) -> list[MetricValue]:
        """Cross-entropies, FA and the partial accuracies (exact and sampled, where there are) of these examples."""
        scores = self.scores
        rows = [
            MetricValue(split, rule, "cross_entropy", float(-scores.string.sum() / scores.string_tokens.sum())),
            MetricValue(split, rule, "conditional_cross_entropy", float(-scores.output.sum() / scores.output_tokens.sum())),
            MetricValue(split, rule, "full_accuracy", float(scores.output.exp().mean())),
        ]
        if self.partial is not None:
            rows.append(MetricValue(split, rule, "partial_accuracy", float(self.partial.exp().mean())))
        if self.matches is not None:
            matches = [match for example in self.matches for match in example]
            rows.append(MetricValue(split, rule, "partial_accuracy_sampled", sum(matches) / len(matches)))
        return rows


@dataclass(frozen=True)
class ConstructionMetrics:
    """The generalization metrics, under both rules, of the ``count`` examples of one construction."""

    construction: str
    count: int
    rows: list[MetricValue]


def curve_subset(examples: Sequence[Example], size: int) -> list[Example]:
    """The same ``size`` examples for every run and checkpoint: a fixed-seed sample, in file order."""
    if size >= len(examples):
        return list(examples)
    return [examples[index] for index in sorted(random.Random("generalization-curves").sample(range(len(examples)), size))]


def linear_targets(generalization: Sequence[Example]) -> list[tuple[str, ...]]:
    """The linear-rule target of every generalization example (its third column)."""
    targets = []
    for number, example in enumerate(generalization, start=1):
        if example.linear is None:
            raise StacklmError(f"generalization example {number} has no linear-rule target (a third column)")
        targets.append(example.linear)
    return targets


def log_mean_exp(log_values: Tensor) -> float:
    """log((1/N) Σ exp(v_i)), stable."""
    return float(torch.logsumexp(log_values, dim=0)) - math.log(log_values.numel())


def log_ratio(numerator: float, denominator: float) -> float:
    """log(numerator / denominator) of two accuracies in [0, 1]: ±inf at a zero, NaN for 0/0."""
    if numerator == 0.0 and denominator == 0.0:
        return math.nan
    if numerator == 0.0:
        return -math.inf
    if denominator == 0.0:
        return math.inf
    return math.log(numerator) - math.log(denominator)


class TaskEvaluator:
    """Scores one model on a task's splits; every method returns ``MetricValue`` rows."""

    def __init__(self, model: nn.Module, vocabulary: Vocabulary, partial: PartialAccuracy, settings: EvaluationSettings, device: torch.device | str = "cpu") -> None:
        self.model = model
        self.vocabulary = vocabulary
        self.partial = partial
        self.settings = settings
        self.device = torch.device(device)

    def scores(self, examples: Sequence[Example], outputs: Sequence[Sequence[str]]) -> ConditionalScores:
        return score_outputs(
            self.model,
            [self.vocabulary.encode(example.source) for example in examples],
            [self.vocabulary.encode(output) for output in outputs],
            eos_index=self.vocabulary.eos_index,
            tokens_per_batch=self.settings.tokens_per_batch,
            device=self.device,
        )

    def samples(self, examples: Sequence[Example], references: Sequence[Sequence[Sequence[str]]]) -> list[list[tuple[str, ...]]]:
        """``samples_per_input`` outputs of each example, each drawn only as far as decides its
        partial match against every one of the example's ``references``: the matches are those
        of the whole samples, for less sampling (an untrained model rarely stops before 50 tokens)."""
        drawn = sample_outputs(
            self.model,
            [self.vocabulary.encode(example.source) for example in examples],
            num_samples=self.settings.samples_per_input,
            max_length=self.settings.max_sample_length,
            seed=self.settings.sample_seed,
            eos_index=self.vocabulary.eos_index,
            tokens_per_batch=self.settings.tokens_per_batch,
            lengths=[max(self.partial.decided_by(reference) for reference in options) for options in references],
            device=self.device,
        )
        return [[self.vocabulary.decode(output) for output in outputs] for outputs in drawn]

    def exact_partial_log_probabilities(self, examples: Sequence[Example], references: Sequence[Sequence[str]], scores: ConditionalScores) -> Tensor:
        if self.partial.kind == "first_word":
            return scores.first_token
        return second_token_log_probabilities(
            self.model,
            [self.vocabulary.encode(example.source) for example in examples],
            [self.vocabulary.encode(reference[1:2])[0] if len(reference) > 1 else None for reference in references],
            eos_index=self.vocabulary.eos_index,
            tokens_per_batch=self.settings.tokens_per_batch,
            device=self.device,
        )

    def validation(self, examples: Sequence[Example]) -> list[MetricValue]:
        scores = self.scores(examples, [example.target for example in examples])
        return [MetricValue("validation", None, "cross_entropy", float(-scores.string.sum() / scores.string_tokens.sum()))]

    def references(
        self, examples: Sequence[Example], references: Sequence[Sequence[str]], samples: list[list[tuple[str, ...]]] | None
    ) -> ReferenceScores:
        """``examples`` scored against ``references`` (and their ``samples`` matched, where drawn)."""
        scores = self.scores(examples, references)
        partial = self.exact_partial_log_probabilities(examples, references, scores) if self.partial.exact else None
        matches = None
        if samples is not None:
            matches = [[self.partial.match(output, reference) for output in outputs] for outputs, reference in zip(samples, references, strict=True)]
        return ReferenceScores(scores, partial, matches)

    def scored_references(
        self, test: Sequence[Example], generalization: Sequence[Example], sample: bool = True
    ) -> tuple[ReferenceScores, ReferenceScores, ReferenceScores]:
        """``references`` of the test set and of the generalization set under each rule
        (``generalization_references``). Samples are drawn where the task has a sampled partial
        accuracy, unless ``sample`` is False."""
        sampled = sample and self.partial.sampled
        test_samples = self.samples(test, [[example.target] for example in test]) if sampled else None
        test_scores = self.references(test, [example.target for example in test], test_samples)
        return (test_scores, *self.generalization_references(generalization, sample))

    def generalization_references(self, generalization: Sequence[Example], sample: bool) -> tuple[ReferenceScores, ReferenceScores]:
        """``references`` of the generalization set under the hierarchical rule, then the linear
        one: the same samples scored against both rules' targets, drawn where the task has a
        sampled partial accuracy, unless ``sample`` is False."""
        linear = linear_targets(generalization)
        both = [[example.target, target] for example, target in zip(generalization, linear)]
        samples = self.samples(generalization, both) if sample and self.partial.sampled else None
        hierarchical = self.references(generalization, [example.target for example in generalization], samples)
        return hierarchical, self.references(generalization, linear, samples)

    def checkpoint_scores(self, test: Sequence[Example], generalization: Sequence[Example]) -> dict[str, float]:
        """``{test,hierarchical,linear}_{full,partial}_accuracy``: the points of the generalization
        curves (partial: the exact expectation where the task has one, else the sampled share; no
        sample is drawn where the exact one exists)."""
        test_scores, hierarchical, linear = self.scored_references(test, generalization, sample=not self.partial.exact)
        partial = "partial_accuracy" if self.partial.exact else "partial_accuracy_sampled"
        scores: dict[str, float] = {}
        for name, rows in (("test", test_scores.rows("test", None)), ("hierarchical", hierarchical.rows("generalization", "hierarchical")),
                           ("linear", linear.rows("generalization", "linear"))):
            values = {row.metric: row.value for row in rows}
            scores[f"{name}_full_accuracy"] = values["full_accuracy"]
            scores[f"{name}_partial_accuracy"] = values[partial]
        return scores

    def evaluate(self, validation: Sequence[Example], test: Sequence[Example], generalization: Sequence[Example]) -> list[MetricValue]:
        """Every metric: validation cross-entropy; test; generalization under both rules; log ratios."""
        test_scores, hierarchical, linear = self.scored_references(test, generalization)
        hierarchical_rows = hierarchical.rows("generalization", "hierarchical")
        linear_rows = linear.rows("generalization", "linear")
        rows = self.validation(validation) + test_scores.rows("test", None) + hierarchical_rows + linear_rows
        ratio = log_mean_exp(hierarchical.scores.output) - log_mean_exp(linear.scores.output)
        rows.append(MetricValue("generalization", None, "log_ratio", ratio))
        if hierarchical.partial is not None and linear.partial is not None:
            partial_ratio = log_mean_exp(hierarchical.partial) - log_mean_exp(linear.partial)
            rows.append(MetricValue("generalization", None, "partial_log_ratio", partial_ratio))
        sampled = {row.rule: row.value for row in hierarchical_rows + linear_rows if row.metric == "partial_accuracy_sampled"}
        if sampled:
            name = "partial_log_ratio_sampled" if self.partial.exact else "partial_log_ratio"
            rows.append(MetricValue("generalization", None, name, log_ratio(sampled["hierarchical"], sampled["linear"])))
        rows.append(MetricValue("generalization", None, "mean_log_ratio", float((hierarchical.scores.output - linear.scores.output).mean())))
        return rows

    def construction_scores(self, generalization: Sequence[Example], constructions: Sequence[str]) -> list[ConstructionMetrics]:
        """The metrics of ``generalization`` under both rules per construction (``constructions``:
        one label per example), in the order the labels first appear: the rows ``evaluate``
        computes for the whole set, computed alike on each construction's examples. Samples are
        drawn only where the partial accuracy has no exact value, as for ``checkpoint_scores``."""
        if len(constructions) != len(generalization):
            raise ValueError(f"{len(constructions)} construction labels for {len(generalization)} generalization examples")
        hierarchical, linear = self.generalization_references(generalization, sample=not self.partial.exact)
        members: dict[str, list[int]] = {}
        for position, construction in enumerate(constructions):
            members.setdefault(construction, []).append(position)
        return [
            ConstructionMetrics(construction, len(index), hierarchical.select(index).rows("generalization", "hierarchical") + linear.select(index).rows("generalization", "linear"))
            for construction, index in members.items()
        ]
