"""Maximum-likelihood rule weights from the parses of observed sentences.

For a sentence with parses t_1 … t_k, each parse counts 1/k (a uniform split of the sentence
over its parses; only German question formation has k = 2, and there both parses agree on
everything but the determiner/pronoun reading). With c(r) = Σ_sentences Σ_parses (1/k) ·
#uses of rule r, the maximum-likelihood estimate is P(r) = c(r) / Σ_{r': lhs(r') = lhs(r)} c(r'),
so the counts themselves are written as the weights.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

from stacklm.errors import StacklmError
from stacklm.grammars.derivation import CompiledGrammar
from stacklm.grammars.grammar import Grammar


def rule_counts(grammar: CompiledGrammar, sentences: Iterable[Sequence[str]]) -> Counter:
    """c(r) over ``sentences``; a sentence the grammar cannot parse is an error naming it."""
    counts: Counter = Counter()
    for sentence in sentences:
        parses = grammar.parse(sentence)
        if not parses:
            raise StacklmError(f"{grammar.grammar.path}: cannot parse {' '.join(sentence)!r}")
        share = 1.0 / len(parses)
        for parse in parses:
            for key in parse.rule_keys():
                counts[key] += share
    return counts


def estimated(grammar: CompiledGrammar, sentences: Iterable[Sequence[str]]) -> Grammar:
    """The grammar with each rule's weight set to its count c(r) (rounded to 1/1000)."""
    counts = rule_counts(grammar, sentences)
    return grammar.grammar.reweighted({key: round(count, 3) for key, count in counts.items()})
