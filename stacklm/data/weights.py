"""Rule weights of each task's two grammar files, estimated from the upstream sentences.

Upstream's sentences do not follow the weights of their grammar files (McCoy's question data
have 87 % transitive main verbs where the file says 50 %), and McCoy's generalization sets
follow other proportions than his dev sets. Each task therefore has two weightings of the
same rules, both maximum-likelihood estimates (``stacklm.grammars.estimate``):

- ``<task>.cfg``, for in-distribution draws: counts over the parses of the upstream dev
  sentences with the identity marker. Those are unconditioned draws of upstream's sampler
  (the marker is a fair coin drawn after the sentence, and only transform examples are
  filtered), whereas dev's transform examples are selected against ambiguity-breaking ones.
- ``<task>.generalization.cfg``, for generalization draws: counts over the parses of all
  upstream generalization sentences. Rules that never occur there (e.g. a bare subject in
  question formation) get weight 0, so the generalization draws stay in the region the
  generalization filter accepts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stacklm.data.examples import Example
from stacklm.grammars import format_grammar
from stacklm.grammars.estimate import estimated
from stacklm.grammars.grammar import Grammar
from stacklm.tasks import Task

HEADER = (
    "{title}",
    "WEIGHT  LHS -> RHS...   P(rule) = WEIGHT / (sum of the weights of LHS's rules).",
    "Weights are maximum-likelihood rule counts over the parses of {what}",
    "(upstream {origin}); written by `stacklm data estimate-weights --task {task}`.",
)


def estimate_weights(task: Task, validation: Sequence[Example], generalization: Sequence[Example]) -> tuple[Grammar, Grammar]:
    """(in-distribution grammar, generalization grammar) estimated as the module docstring says."""
    unconditioned = [example.source[:-1] for example in validation if example.marker == task.identity_marker]
    return estimated(task.grammar, unconditioned), estimated(task.grammar, [example.source[:-1] for example in generalization])


def grammar_texts(task: Task, in_distribution: Grammar, generalization: Grammar, title: str, origin: str) -> dict[str, str]:
    """File name → text of the two grammar files."""
    def text(grammar: Grammar, what: str) -> str:
        return format_grammar(grammar, [line.format(title=title, what=what, origin=origin, task=task.name) for line in HEADER])

    return {
        f"{task.grammar_name}.cfg": text(in_distribution, f"the {task.identity_marker!r}-marked sentences of the dev file"),
        f"{task.grammar_name}.generalization.cfg": text(generalization, "the sentences of the generalization file"),
    }


def write_grammar_files(texts: dict[str, str], folder: Path) -> None:
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
