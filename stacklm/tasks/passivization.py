"""Passivization, English and German (Mueller et al. 2022; paper §5 and App. A).

Hierarchical, move-object (English): object NP · was|were (object head singular|plural) ·
verb · by · subject NP · ``.``. German: object NP with its head in the nominative ·
wurde|wurden · von · subject NP with its head in the dative · participle · ``.`` (PPs unchanged).

Linear, move-second (a reconstruction, ``docs/design/transformations-data.md#move-second``):
the new subject is the span from the second determiner up to the verb or the final ``.``, whichever comes first; was|were
(wurde|wurden) agrees with the noun after that determiner; then verb · by · the first ``Det N``
(German: ``von`` · the first ``Det N`` in the dative · participle); ``.``. In German the span's
``Det N`` is put in the nominative, reading it as the first of accusative singular, dative
singular, accusative plural, dative plural that the pair allows.

Ambiguity-breaking: transform marker and a PP on the subject; no further filter or cap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Sequence

from stacklm.errors import StacklmError
from stacklm.grammars import Parse, Skeleton
from stacklm.tasks.base import Task, main_clause, noun_phrase_kind

PERIOD = "."


@dataclass(frozen=True)
class Paradigm:
    """Forms of one determiner or noun: (number, case) → form; number S|P, case Nom|Acc|Dat."""

    forms: Mapping[tuple[str, str], str]

    def to(self, number: str, case: str) -> str:
        return self.forms[(number, case)]


def paradigms(table: Sequence[str]) -> dict[tuple[str, str, str], Paradigm]:
    """Index rows 'sgNom sgAcc sgDat plNom plAcc plDat' by (number, case, form)."""
    keys = [(number, case) for number in "SP" for case in ("Nom", "Acc", "Dat")]
    index = {}
    for row in table:
        paradigm = Paradigm(dict(zip(keys, row.split())))
        for (number, case), form in paradigm.forms.items():
            index[(number, case, form)] = paradigm
    return index


@dataclass(frozen=True, eq=False)
class Passivization(Task):
    be: tuple[str, str] = ("was", "were")  # singular, plural
    by: str = "by"
    german: bool = False
    participles: Mapping[str, str] = field(default_factory=dict)  # German preterite → participle
    determiners: Mapping[tuple[str, str, str], Paradigm] = field(default_factory=dict)
    nouns: Mapping[tuple[str, str, str], Paradigm] = field(default_factory=dict)

    partial_accuracy_kind: ClassVar = "second_word"

    def hierarchical(self, parse: Parse) -> tuple[str, ...]:
        subject, verb, obj, object_number = self._skeleton_facts(parse.skeleton, _clause)
        subject_words = list(parse.span(subject))
        object_words = list(parse.span(obj))
        verb_word = parse.tokens[verb]
        be = self.be[object_number == "P"]
        if not self.german:
            return (*object_words, be, verb_word, self.by, *subject_words, PERIOD)
        subject_tags = parse.skeleton.preterminals[parse.skeleton.nodes[subject].start :]
        object_tags = parse.skeleton.preterminals[parse.skeleton.nodes[obj].start :]
        object_words[:2] = self._decline(object_words[:2], object_tags[:2], "Nom")
        subject_words[:2] = self._decline(subject_words[:2], subject_tags[:2], "Dat")
        return (*object_words, be, self.by, *subject_words, self.participles[verb_word], PERIOD)

    def _decline(self, pair: Sequence[str], tags: Sequence[str], case: str) -> list[str]:
        """Det N (tags Det_x_c N_x_c) into ``case``, same number x."""
        _, number, source_case = tags[1].split("_")
        return [self.determiners[(number, source_case, pair[0])].to(number, case), self.nouns[(number, source_case, pair[1])].to(number, case)]

    def linear(self, sentence: Sequence[str]) -> tuple[str, ...]:
        determiners, verbs = self._words_tagged("Det"), self._words_tagged("V")
        positions = [index for index, word in enumerate(sentence) if word in determiners]
        verb = next((index for index, word in enumerate(sentence) if word in verbs), None)
        if len(positions) < 2 or verb is None:
            raise StacklmError(f"{self.name}: move-second needs two determiners and a verb: {' '.join(sentence)!r}")
        second = positions[1]
        end = next((index for index in range(second + 1, len(sentence)) if index == verb or sentence[index] == PERIOD), len(sentence))
        new_subject = list(sentence[second:end])
        first = list(sentence[:2])
        if not self.german:
            number = self._english_number(new_subject[1])
            return (*new_subject, self.be[number == "P"], sentence[verb], self.by, *first, PERIOD)
        number, case = self._reading(new_subject[:2], ("S", "Acc"), ("S", "Dat"), ("P", "Acc"), ("P", "Dat"))
        new_subject[:2] = self._decline(new_subject[:2], (f"Det_{number}_{case}", f"N_{number}_{case}"), "Nom")
        first_number, first_case = self._reading(first, ("S", "Nom"), ("P", "Nom"))
        first = self._decline(first, (f"Det_{first_number}_{first_case}", f"N_{first_number}_{first_case}"), "Dat")
        return (*new_subject, self.be[number == "P"], self.by, *first, self.participles[sentence[verb]], PERIOD)

    def _english_number(self, noun: str) -> str:
        tags = self.grammar.grammar.lexicon.get(noun, ())
        if "N_S" in tags:
            return "S"
        if "N_P" in tags:
            return "P"
        raise StacklmError(f"{self.name}: {noun!r} is not a noun")

    def _reading(self, pair: Sequence[str], *readings: tuple[str, str]) -> tuple[str, str]:
        """The first (number, case) under which ``pair`` is a determiner and a noun."""
        for number, case in readings:
            if (number, case, pair[0]) in self.determiners and (number, case, pair[1]) in self.nouns:
                return number, case
        raise StacklmError(f"{self.name}: {' '.join(pair)!r} is not a determiner and noun in {readings}")

    def is_ambiguity_breaking(self, parse: Parse) -> bool:
        return self._skeleton_facts(parse.skeleton, _subject_kind) == "PP"

    def construction(self, parse: Parse) -> str:
        return self._skeleton_facts(parse.skeleton, _construction)


def _clause(skeleton: Skeleton) -> tuple[int, int, int, str]:
    """(subject NP node, verb position, object NP node, number S|P of the object's head)."""
    subject, predicate = main_clause(skeleton)
    verb, obj = skeleton.children(predicate)
    head = skeleton.nodes[skeleton.children(obj)[1]].label  # N_S, N_P, N_S_Acc, N_P_Acc
    return subject, skeleton.nodes[verb].start, obj, head.split("_")[1]


def _subject_kind(skeleton: Skeleton) -> str:
    return noun_phrase_kind(skeleton, main_clause(skeleton)[0])


def _construction(skeleton: Skeleton) -> str:
    subject, predicate = main_clause(skeleton)
    _, obj = skeleton.children(predicate)
    return f"subject={noun_phrase_kind(skeleton, subject)} object={noun_phrase_kind(skeleton, obj)}"
