"""Tense reinflection: a past-tense sentence to the present (McCoy et al. 2020).

Hierarchical, agree-main: every inflected word (auxiliary for ``tense-reinflection-do``, verb
for ``tense-reinflection``) takes the present form of the number of its own preterminal
(``Aux_S``/``V_*_sg`` singular, ``Aux_P``/``V_*_pl`` plural), i.e. of its own subject.
Linear, agree-recent: each inflected word takes the number of the most recent noun before it.

Ambiguity-breaking: transform marker and the two rules give different outputs; no further
filter or cap. Partial accuracy (``docs/design/transformations-data.md#partial-accuracy``): the
output has the reference's sequence of word classes, and the same word at the main position — the second inflected word if the
reference's third token is a relative pronoun, else the first.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Sequence

from stacklm.grammars import Parse
from stacklm.tasks.base import Task
from stacklm.tasks.question import _construction

SINGULAR_SUFFIXES = ("_S", "_sg")
PLURAL_SUFFIXES = ("_P", "_pl")
# Word classes of the partial-accuracy check (DuSell's pos_tense.tsv): preterminal prefix → class.
WORD_CLASSES = {"Det": "D", "N": "N", "V": "V", "Aux": "A", "Prep": "P", "Rel": "R", "Period": "T", "QuestionMark": "T", "Marker": "G"}


def _number(tag: str) -> str:
    if tag.endswith(SINGULAR_SUFFIXES):
        return "singular"
    if tag.endswith(PLURAL_SUFFIXES):
        return "plural"
    raise ValueError(f"preterminal {tag!r} carries no number")


@dataclass(frozen=True, eq=False)
class TenseReinflection(Task):
    inflected_prefix: str = "Aux"  # preterminals of the words that change tense
    noun_prefix: str = "N_"
    present: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # past form → (present singular, present plural)
    main_class: str = "A"  # word class at the partial-accuracy check's main position

    partial_accuracy_kind: ClassVar = "pos_main_word"

    def hierarchical(self, parse: Parse) -> tuple[str, ...]:
        return tuple(
            self.present[word][_number(tag) == "plural"] if tag.startswith(self.inflected_prefix) else word
            for tag, word in zip(parse.preterminals, parse.tokens))

    def linear(self, sentence: Sequence[str]) -> tuple[str, ...]:
        lexicon = self.grammar.grammar.lexicon
        nouns = self._words_tagged(self.noun_prefix)
        output, recent = [], None
        for word in sentence:
            if word in nouns:
                recent = _number(lexicon[word][0])
            if word in self.present and recent is not None:
                output.append(self.present[word][recent == "plural"])
            else:
                output.append(word)
        return tuple(output)

    def is_ambiguity_breaking(self, parse: Parse) -> bool:
        return self.hierarchical(parse) != self.linear(parse.tokens)

    def construction(self, parse: Parse) -> str:
        return self._skeleton_facts(parse.skeleton, _construction)

    def word_class(self, token: str) -> str:
        return "|".join(sorted({WORD_CLASSES[tag.split("_")[0]] for tag in self.parts_of_speech(token)}))

    @functools.cached_property
    def token_set(self) -> frozenset[str]:
        """The vocabulary as a set, built once: :meth:`partial_match` checks every sampled output
        against it (building it per call was 2 of the 145 profiled seconds of a small training job)."""
        return frozenset(self.vocabulary())

    def partial_match(self, output: Sequence[str], reference: Sequence[str]) -> bool:
        """classes(o) = classes(r) and o_m = r_m, m = the main position of r."""
        if len(output) != len(reference) or not set(output) <= self.token_set:
            return False
        classes = [self.word_class(token) for token in reference]
        if [self.word_class(token) for token in output] != classes:
            return False
        positions = [index for index, word_class in enumerate(classes) if word_class == self.main_class]
        which = 1 if len(classes) > 2 and classes[2] == "R" else 0
        if len(positions) <= which:
            return False
        return output[positions[which]] == reference[positions[which]]

    def partial_decided_by(self, reference: Sequence[str]) -> int:
        """|r| + 1: an output of more than |r| tokens fails the length check, whatever follows."""
        return len(reference) + 1
