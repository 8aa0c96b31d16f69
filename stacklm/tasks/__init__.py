"""The seven syntactic-transformation tasks of Bearing Syntactic Fruit
(``docs/design/transformations-data.md``).

``get_task(name)`` returns the task: its grammar (``stacklm/grammars/data/<name>.cfg``, the
language of the source sentences), markers, transformations, split filters and partial-accuracy
check. The tables below are the words that only targets contain and the inflection facts the
transformations need.
"""

from __future__ import annotations

from functools import cache

from stacklm.errors import StacklmError
from stacklm.tasks.base import Task
from stacklm.tasks.passivization import Passivization, paradigms
from stacklm.tasks.question import QuestionFormation
from stacklm.tasks.tense import TenseReinflection

TASK_NAMES: tuple[str, ...] = (
    "question-formation",
    "tense-reinflection-do",
    "tense-reinflection",
    "german-question-formation",
    "passivization",
    "question-formation-have",
    "german-passivization",
)

QUESTION_MARK = {"?": "QuestionMark"}

# tense-reinflection: past → (3rd person singular present, plural present); `read` is both.
PRESENT_VERBS = {
    "giggled": ("giggles", "giggle"), "smiled": ("smiles", "smile"), "slept": ("sleeps", "sleep"),
    "swam": ("swims", "swim"), "waited": ("waits", "wait"), "moved": ("moves", "move"),
    "changed": ("changes", "change"), "read": ("reads", "read"), "ate": ("eats", "eat"),
    "entertained": ("entertains", "entertain"), "amused": ("amuses", "amuse"),
    "high_fived": ("high_fives", "high_five"), "applauded": ("applauds", "applaud"),
    "confused": ("confuses", "confuse"), "admired": ("admires", "admire"),
    "accepted": ("accepts", "accept"), "remembered": ("remembers", "remember"),
    "comforted": ("comforts", "comfort"),
}
INTRANSITIVE_PAST = ("giggled", "smiled", "slept", "swam", "waited", "moved", "changed", "read", "ate")

# German determiners and nouns: singular Nom Acc Dat, plural Nom Acc Dat.
GERMAN_DETERMINERS = (
    "der den dem die die den", "ein einen einem einige einige einigen", "mein meinen meinem meine meine meinen",
    "dein deinen deinem deine deine deinen", "unser unseren unserem unsere unsere unseren", "ihr ihren ihrem ihre ihre ihren",
)
GERMAN_PASSIVE_NOUNS = (
    "Molch Molch Molch Molche Molche Molchen", "Löwe Löwen Löwen Löwen Löwen Löwen", "Pfau Pfau Pfau Pfaue Pfaue Pfauen",
    "Kater Kater Kater Kater Kater Katern", "Rabe Raben Raben Raben Raben Raben",
    "Salamander Salamander Salamander Salamander Salamander Salamandern",
    "Dinosaurier Dinosaurier Dinosaurier Dinosaurier Dinosaurier Dinosauriern",
    "Papagei Papagei Papagei Papageie Papageie Papageien", "Geier Geier Geier Geier Geier Geiern",
    "Wellensittich Wellensittich Wellensittich Wellensittiche Wellensittiche Wellensittichen",
    "Esel Esel Esel Esel Esel Eseln", "Hund Hund Hund Hunde Hunde Hunden", "Ziesel Ziesel Ziesel Ziesel Ziesel Zieseln",
)
GERMAN_PARTICIPLES = {
    **dict(zip("unterhielt amüsierte nervte erfreute verwirrte bewunderte akzeptierte bedauerte tröstete".split(),
               "unterhalten amüsiert genervt erfreut verwirrt bewundert akzeptiert bedauert getröstet".split())),
    **dict(zip("unterhielten amüsierten nervten erfreuten verwirrten bewunderten akzeptierten bedauerten trösteten".split(),
               "unterhalten amüsiert genervt erfreut verwirrt bewundert akzeptiert bedauert getröstet".split())),
}


def _build(name: str) -> Task:
    if name == "question-formation":
        return QuestionFormation(name, name, "quest", "decl", QUESTION_MARK)
    if name == "question-formation-have":
        return QuestionFormation(name, name, "quest", "decl", QUESTION_MARK)
    if name == "german-question-formation":
        return QuestionFormation(name, name, "quest", "decl", QUESTION_MARK, contrast="auxiliary")
    if name == "tense-reinflection-do":
        present = {"did": ("does", "do"), "didn't": ("doesn't", "don't")}
        targets = {"does": "Aux_S", "doesn't": "Aux_S", "do": "Aux_P", "don't": "Aux_P"}
        return TenseReinflection(name, name, "PRESENT", "PAST", targets, inflected_prefix="Aux", present=present, main_class="A")
    if name == "tense-reinflection":
        targets = {}
        for past, (singular, plural) in PRESENT_VERBS.items():
            kind = "intrans" if past in INTRANSITIVE_PAST else "trans"
            targets[singular] = f"V_{kind}_sg"
            targets.setdefault(plural, f"V_{kind}_pl")
        return TenseReinflection(name, name, "PRESENT", "PAST", targets, inflected_prefix="V_", present=PRESENT_VERBS, main_class="V")
    if name == "passivization":
        return Passivization(name, name, "passiv", "decl", {"was": "Aux_S", "were": "Aux_P"})
    if name == "german-passivization":
        targets = {"wurde": "Aux_S", "wurden": "Aux_P", "von": "Prep"} | {participle: "V_part" for participle in GERMAN_PARTICIPLES.values()}
        return Passivization(name, name, "passiv", "decl", targets, be=("wurde", "wurden"), by="von", german=True, participles=GERMAN_PARTICIPLES,
                             determiners=paradigms(GERMAN_DETERMINERS), nouns=paradigms(GERMAN_PASSIVE_NOUNS))
    raise StacklmError(f"unknown task {name!r}; known tasks: {', '.join(TASK_NAMES)}")


@cache
def get_task(name: str) -> Task:
    """The task called ``name`` (one of ``TASK_NAMES``)."""
    return _build(name)


__all__ = ["TASK_NAMES", "Task", "get_task"]
