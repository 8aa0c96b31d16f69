"""What every syntactic-transformation task has: a grammar of source sentences, two markers,
two transformations, the ambiguity-breaking test of its split, and its partial-accuracy check.

An example's source is ``sentence · marker``. The identity marker's target is the sentence;
the transform marker's target is the hierarchical transformation of the sentence's parse tree
(train, validation, test, generalization) or, for the generalization set's second target, the
linear transformation of its tokens (which never looks at the tree, only at the words' parts
of speech). A transform example is *ambiguity-breaking* when the two rules tell apart on it;
such examples are kept out of train/validation/test and make up the generalization set.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar, Literal, Mapping, Sequence

from stacklm.errors import StacklmError
from stacklm.grammars import CompiledGrammar, Parse, Skeleton, compiled
from stacklm.tasks.example import Example

TransformRule = Literal["hierarchical", "linear"]
PartialAccuracyKind = Literal["first_word", "second_word", "pos_main_word"]
CASES = ("Nom", "Acc", "Dat")
MARKER_POS = "Marker"


@dataclass(frozen=True, eq=False)
class Task(ABC):
    name: str
    grammar_name: str
    transform_marker: str
    identity_marker: str
    target_words: Mapping[str, str]  # words only transformations produce → their part of speech
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    partial_accuracy_kind: ClassVar[PartialAccuracyKind]

    @property
    def grammar(self) -> CompiledGrammar:
        """The source sentences' grammar, weighted for the in-distribution draws."""
        return compiled(self.grammar_name)

    @property
    def generalization_grammar(self) -> CompiledGrammar:
        """The same rules, weighted for the generalization draws (``<name>.generalization.cfg``)."""
        return compiled(f"{self.grammar_name}.generalization")

    @property
    def markers(self) -> tuple[str, str]:
        return (self.transform_marker, self.identity_marker)

    # --- transformations -------------------------------------------------------------------

    @abstractmethod
    def hierarchical(self, parse: Parse) -> tuple[str, ...]:
        """The transform marker's target, read off the sentence's parse tree."""

    @abstractmethod
    def linear(self, sentence: Sequence[str]) -> tuple[str, ...]:
        """The transform marker's target under the linear rule, from the words alone."""

    def transform(self, source: Sequence[str], rule: TransformRule) -> tuple[str, ...]:
        """Target of ``source`` (sentence tokens then the marker) under ``rule``."""
        if not source:
            raise StacklmError(f"{self.name}: empty source")
        sentence, marker = tuple(source[:-1]), source[-1]
        if marker == self.identity_marker:
            return sentence
        if marker != self.transform_marker:
            raise StacklmError(f"{self.name}: {marker!r} is not a marker of this task ({' or '.join(self.markers)})")
        if rule == "linear":
            return self.linear(sentence)
        if rule != "hierarchical":
            raise StacklmError(f"unknown rule {rule!r}: expected 'hierarchical' or 'linear'")
        return self.hierarchical(self.parse(sentence))

    def parse(self, sentence: Sequence[str]) -> Parse:
        """The sentence's first parse (where there are two, both give the same targets)."""
        parses = self.grammar.parse(sentence)
        if not parses:
            raise StacklmError(f"{self.name}: not a sentence of the task's grammar: {' '.join(sentence)!r}")
        return parses[0]

    def example(self, parse: Parse, marker: str, with_linear: bool) -> Example:
        source = parse.tokens + (marker,)
        if marker == self.identity_marker:
            target = linear = parse.tokens
        else:
            target = self.hierarchical(parse)
            linear = self.linear(parse.tokens) if with_linear else None
        return Example(source, target, linear if with_linear else None)

    # --- split construction ----------------------------------------------------------------

    @abstractmethod
    def is_ambiguity_breaking(self, parse: Parse) -> bool:
        """Whether a transform example of this sentence would tell the two rules apart."""

    def generalization_group(self, parse: Parse) -> str | None:
        """The cap group of an ambiguity-breaking sentence, or None if the generalization
        filter rejects it. Default: no filter, one group."""
        return "all"

    def generalization_caps(self, size: int) -> dict[str, int]:
        return {"all": size}

    @abstractmethod
    def construction(self, parse: Parse) -> str:
        """A coarse label of the sentence's construction (for summaries and distribution checks)."""

    # --- constructions of the generalization set -------------------------------------------

    generalization_constructions: ClassVar[Mapping[str, str]] = {}  # label → what it is, in table order; none by default

    def generalization_construction(self, source: Sequence[str]) -> str | None:
        """The construction, a label of ``generalization_constructions``, of a generalization example
        (its source: sentence · transform marker), read off its words, by which the generalization
        metrics are also reported; None for a task whose generalization set has no constructions."""
        return None

    # --- partial accuracy --------------------------------------------------------------------

    def partial_match(self, output: Sequence[str], reference: Sequence[str]) -> bool:
        """first_word: o_1 = r_1; second_word: o_2 = r_2 (``docs/design/transformations-data.md#partial-accuracy``)."""
        index = 0 if self.partial_accuracy_kind == "first_word" else 1
        return len(output) > index and len(reference) > index and output[index] == reference[index]

    def partial_decided_by(self, reference: Sequence[str]) -> int:
        """How many output tokens decide :meth:`partial_match` against ``reference``: an output
        cut after that many tokens matches exactly when the whole output does (o_1 or o_2 here)."""
        return 1 if self.partial_accuracy_kind == "first_word" else 2

    # --- vocabulary and features -------------------------------------------------------------

    def vocabulary(self) -> tuple[str, ...]:
        """Every token of a source or a target, markers and punctuation included, sorted."""
        return tuple(sorted(set(self.grammar.grammar.lexicon) | set(self.target_words) | set(self.markers)))

    def parts_of_speech(self, token: str) -> tuple[str, ...]:
        """The preterminals that can produce ``token`` (grammar and target words), sorted."""
        tags = set(self.grammar.grammar.lexicon.get(token, ()))
        if token in self.target_words:
            tags.add(self.target_words[token])
        if token in self.markers:
            tags.add(MARKER_POS)
        if not tags:
            raise StacklmError(f"{self.name}: token {token!r} is not in the task's vocabulary")
        return tuple(sorted(tags))

    def token_features(self, token: str) -> dict[str, str]:
        """pos: the token's preterminals joined by '|' (an ambiguity class where a word has
        several); case: the German cases (Nom/Acc/Dat) those preterminals carry, joined by '|',
        else 'none'; subword: 'whole' (tokens are whole words)."""
        tags = self.parts_of_speech(token)
        cases = sorted({tag.rsplit("_", 1)[-1] for tag in tags} & set(CASES), key=CASES.index)
        return {"pos": "|".join(tags), "case": "|".join(cases) or "none", "subword": "whole"}

    # --- helpers for subclasses -------------------------------------------------------------

    def _skeleton_facts(self, skeleton: Skeleton, compute) -> object:
        """Per-skeleton analysis, computed once (skeletons are shared by many sentences)."""
        key = (compute.__name__, skeleton.index)
        if key not in self._cache:
            self._cache[key] = compute(skeleton)
        return self._cache[key]

    def _words_tagged(self, prefix: str) -> frozenset[str]:
        key = ("words", prefix)
        if key not in self._cache:
            self._cache[key] = frozenset(word for word, tags in self.grammar.grammar.lexicon.items() if all(tag.startswith(prefix) for tag in tags))
        return self._cache[key]


def main_clause(skeleton: Skeleton) -> tuple[int, int]:
    """(subject NP, main VP): the two daughters of S, itself the first daughter of ROOT."""
    sentence = skeleton.children(0)[0]
    subject, predicate = skeleton.children(sentence)
    return subject, predicate


def noun_phrase_kind(skeleton: Skeleton, node: int) -> str:
    """bare (Det N), PP (Det N Prep Det N), SRC or ORC (Det N [,] RC [,]).

    A relative clause is object-extracted when its subject is not the relative pronoun: the
    pronoun is accusative (German ``Rel_x_Acc``) or directly followed by a determiner (English
    ``Rel Det N Aux V``; English subject relatives put the verb right after the pronoun)."""
    labels = skeleton.child_labels(node)
    if any(label.startswith("Prep") for label in labels):
        return "PP"
    clauses = [child for child in skeleton.children(node) if skeleton.nodes[child].label.startswith("RC")]
    if not clauses:
        return "bare"
    inner = skeleton.child_labels(clauses[0])
    object_relative = inner[0].endswith("_Acc") or (inner[0] == "Rel" and inner[1].startswith("Det"))
    return "ORC" if object_relative else "SRC"


def cap(size: int, share: Fraction) -> int:
    """⌈size · share⌉ (10,000 × 2/3 → 6,667 and × 1/3 → 3,334, as in Mueller's scripts)."""
    return math.ceil(size * share)
