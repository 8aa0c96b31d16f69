"""Question formation (English ``do``, English ``have``, German ``können``/``haben``).

Hierarchical, move-main: the main auxiliary is the first daughter of the main VP (the sister
of the subject under S). Output = main auxiliary · the sentence without it · ``?`` in place of
the final ``.``. Linear, move-first: the same with the first auxiliary of the sentence.

Ambiguity-breaking: transform marker and a relative clause on the subject. Generalization
filter: exactly two auxiliaries, of the same number, that differ in polarity (English) or in
kind, modal vs perfect (German); caps ⌈2n/3⌉ subject relatives, ⌈n/3⌉ object relatives.

Those two groups are the generalization set's constructions (``generalization_construction``),
by which its metrics are also reported: the subject's relative clause is a subject relative
(SRC, "the walrus that does move doesn't giggle .": the relativizer, then the clause's
auxiliary) or an object relative (ORC, "her quail who your newt does applaud doesn't sleep .":
the relativizer, then the clause's subject).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Literal, Sequence

from stacklm.errors import StacklmError
from stacklm.grammars import Parse, Skeleton
from stacklm.tasks.base import Task, cap, main_clause, noun_phrase_kind

AUXILIARY = "Aux"  # prefix of the auxiliaries' preterminals: Aux_S, Aux_P, Aux_S_can, ...
AMBIGUOUS_RELATIVE = "SRC or ORC"  # a generalization sentence whose words allow both relative clauses


@dataclass(frozen=True, eq=False)
class QuestionFormation(Task):
    contrast: Literal["polarity", "auxiliary"] = "polarity"

    partial_accuracy_kind: ClassVar = "first_word"
    generalization_constructions: ClassVar = {
        "SRC": "a subject relative clause on the subject (the relativizer, then the clause's auxiliary or verb)",
        "ORC": "an object relative clause on the subject (the relativizer, then the clause's subject)",
        AMBIGUOUS_RELATIVE: "a relative clause the words leave open (a German relativizer, nominative or accusative alike)",
    }

    def hierarchical(self, parse: Parse) -> tuple[str, ...]:
        return _front(parse.tokens, self._skeleton_facts(parse.skeleton, _main_auxiliary))

    def linear(self, sentence: Sequence[str]) -> tuple[str, ...]:
        auxiliaries = self._words_tagged(AUXILIARY)
        for index, token in enumerate(sentence):
            if token in auxiliaries:
                return _front(tuple(sentence), index)
        raise StacklmError(f"{self.name}: no auxiliary in {' '.join(sentence)!r}")

    def is_ambiguity_breaking(self, parse: Parse) -> bool:
        return self._skeleton_facts(parse.skeleton, _subject_kind) in ("SRC", "ORC")

    def generalization_group(self, parse: Parse) -> str | None:
        auxiliaries = [(tag, word) for tag, word in zip(parse.preterminals, parse.tokens) if tag.startswith(AUXILIARY)]
        if len(auxiliaries) != 2:
            return None
        (first_tag, first_word), (second_tag, second_word) = auxiliaries
        if first_tag.split("_")[1] != second_tag.split("_")[1]:  # Aux_S... vs Aux_P...: number
            return None
        if self.contrast == "polarity":
            differ = first_word.endswith("n't") != second_word.endswith("n't")
        else:
            differ = first_tag.split("_")[2] != second_tag.split("_")[2]  # can vs have
        return self._skeleton_facts(parse.skeleton, _subject_kind) if differ else None

    def generalization_caps(self, size: int) -> dict[str, int]:
        return {"SRC": cap(size, Fraction(2, 3)), "ORC": cap(size, Fraction(1, 3))}

    def construction(self, parse: Parse) -> str:
        return self._skeleton_facts(parse.skeleton, _construction)

    def generalization_construction(self, source: Sequence[str]) -> str:
        """SRC or ORC, the subject's relative clause in every parse of the sentence: the cap group
        it was drawn in. Where the words leave it open, ``AMBIGUOUS_RELATIVE`` (the German
        relativizer ``die`` is nominative or accusative alike: "meine Ziesel , die ihre Ziesel bedauert
        haben , können …" parses both ways; an English sentence has one parse)."""
        if not source or source[-1] != self.transform_marker:
            raise StacklmError(f"{self.name}: {' '.join(source)!r} is not a generalization example: it does not end with the marker {self.transform_marker!r}")
        sentence = tuple(source[:-1])
        parses = self.grammar.parse(sentence)
        if not parses:
            raise StacklmError(f"{self.name}: not a sentence of the task's grammar: {' '.join(sentence)!r}")
        kinds = {self._skeleton_facts(parse.skeleton, _subject_kind) for parse in parses}
        if not kinds <= {"SRC", "ORC"}:
            raise StacklmError(f"{self.name}: {' '.join(sentence)!r} is neither construction of the generalization set:"
                               f" its subject has no relative clause (a {' or '.join(sorted(kinds))} subject)")
        return kinds.pop() if len(kinds) == 1 else AMBIGUOUS_RELATIVE


def _front(sentence: tuple[str, ...], index: int) -> tuple[str, ...]:
    """w_i · w_1 … w_{i−1} w_{i+1} … w_{n−1} · ?   (w_n is the final '.')."""
    return (sentence[index],) + sentence[:index] + sentence[index + 1 : -1] + ("?",)


def _main_auxiliary(skeleton: Skeleton) -> int:
    _, predicate = main_clause(skeleton)
    return skeleton.nodes[skeleton.children(predicate)[0]].start


def _subject_kind(skeleton: Skeleton) -> str:
    return noun_phrase_kind(skeleton, main_clause(skeleton)[0])


def _construction(skeleton: Skeleton) -> str:
    subject, predicate = main_clause(skeleton)
    objects = [child for child in skeleton.children(predicate) if skeleton.nodes[child].label.startswith("NP")]
    object_kind = noun_phrase_kind(skeleton, objects[0]) if objects else "none"
    return f"subject={noun_phrase_kind(skeleton, subject)} object={object_kind}"
