"""Rule weights of each task's two grammar files, estimated from the upstream sentences.

Upstream's sentences do not follow the weights of their grammar files (McCoy's question data
have 87 % transitive main verbs where the file says 50 %), and McCoy's generalization sets
follow other proportions than his dev sets. Each task therefore has two weightings of the
same rules:

- ``<task>.cfg``, for in-distribution draws, fitted to the upstream dev sentences with the
  identity marker: those are unconditioned draws of upstream's sampler (the marker is a fair
  coin drawn after the sentence, and only transform examples are filtered), whereas dev's
  transform examples are selected against ambiguity-breaking ones;
- ``<task>.generalization.cfg``, for generalization draws, fitted to all upstream
  generalization sentences. Rules that never occur there (e.g. a bare subject in question
  formation) get weight 0.

Fit. Let q(r) = c(r) / Σ_{lhs(r') = lhs(r)} c(r') be the maximum-likelihood rule probabilities
from the upstream parses (``stacklm.grammars.estimate``). Start from θ⁰ = q. Our splits do not
sample θ plainly: they de-duplicate sentences (which thins out the short, frequent ones) and
filter ambiguity-breaking examples. So for k = 1 … K, build full-size splits with θᵏ⁻¹, count
the rule probabilities p̂ᵏ⁻¹ in the corresponding generated examples (identity-marked
in-distribution ones; generalization ones), and set θᵏ(r) ∝ θᵏ⁻¹(r) · q(r) / p̂ᵏ⁻¹(r)
(iterative proportional fitting per LHS), until the generated splits reproduce q. Weights are
written as θ(r) · Σ_{lhs(r') = lhs(r)} c(r'): read as counts, they sum per LHS to the observed
number of uses.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from stacklm.atomic import write_text_atomically
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.grammars import CompiledGrammar, format_grammar
from stacklm.grammars.estimate import rule_counts
from stacklm.grammars.grammar import Grammar
from stacklm.tasks import Task
from stacklm.tasks.example import Example

HEADER = (
    "{title}",
    "WEIGHT  LHS -> RHS...   P(rule) = WEIGHT / (sum of the weights of LHS's rules).",
    "Weights: maximum-likelihood rule counts over the parses of {what} (upstream {origin}),",
    "corrected by {iterations} rounds of proportional fitting for de-duplication and filtering",
    "(stacklm/data/weights.py); written by `stacklm data estimate-weights --task {task}`.",
)


def probabilities(counts: Counter) -> dict:
    """q(r) = c(r) / Σ_{lhs(r') = lhs(r)} c(r')."""
    totals: dict[str, float] = defaultdict(float)
    for (lhs, _), count in counts.items():
        totals[lhs] += count
    return {key: count / totals[key[0]] for key, count in counts.items() if totals[key[0]] > 0}


def _fitted(grammar: Grammar, weights: dict, observed: Counter) -> Grammar:
    totals: dict[str, float] = defaultdict(float)
    for (lhs, _), count in observed.items():
        totals[lhs] += count
    return grammar.reweighted({key: round(weight * totals[key[0]], 3) for key, weight in weights.items()})


def _refit(weights: dict, target: dict, simulated: dict) -> dict:
    """θ(r) ← θ(r) · q(r) / p̂(r), renormalised per LHS; rules never simulated keep θ(r)."""
    updated = {key: weight * target.get(key, 0.0) / simulated[key] if simulated.get(key) else weight for key, weight in weights.items()}
    totals: dict[str, float] = defaultdict(float)
    for (lhs, _), weight in updated.items():
        totals[lhs] += weight
    return {key: weight / totals[key[0]] if totals[key[0]] else 0.0 for key, weight in updated.items()}


def estimate_weights(task: Task, validation: Sequence[Example], generalization: Sequence[Example], iterations: int,
                     sizes: SplitSizes = SplitSizes(), seed: int = 0) -> tuple[Grammar, Grammar]:
    """(in-distribution grammar, generalization grammar) fitted as the module docstring says."""
    base = task.grammar
    observed_in = rule_counts(base, (example.source[:-1] for example in validation if example.marker == task.identity_marker))
    observed_generalization = rule_counts(base, (example.source[:-1] for example in generalization))
    target_in, target_generalization = probabilities(observed_in), probabilities(observed_generalization)
    keys = [rule.key for rule in base.grammar.rules]
    theta_in = {key: target_in.get(key, 0.0) for key in keys}
    theta_generalization = {key: target_generalization.get(key, 0.0) for key in keys}
    for _ in range(iterations):
        grammars = (CompiledGrammar(base.grammar.reweighted(theta_in)), CompiledGrammar(base.grammar.reweighted(theta_generalization)))
        splits = build_splits(task, sizes, seed, grammars=grammars)
        generated_in = [example.source[:-1] for name, examples in splits.items() if name != "generalization"
                        for example in examples if example.marker == task.identity_marker]
        theta_in = _refit(theta_in, target_in, probabilities(rule_counts(base, generated_in)))
        theta_generalization = _refit(theta_generalization, target_generalization,
                                      probabilities(rule_counts(base, (example.source[:-1] for example in splits.generalization))))
    return _fitted(base.grammar, theta_in, observed_in), _fitted(base.grammar, theta_generalization, observed_generalization)


def grammar_texts(task: Task, in_distribution: Grammar, generalization: Grammar, title: str, origin: str, iterations: int) -> dict[str, str]:
    """File name → text of the two grammar files."""
    def text(grammar: Grammar, what: str) -> str:
        return format_grammar(grammar, [line.format(title=title, what=what, origin=origin, task=task.name, iterations=iterations) for line in HEADER])

    return {
        f"{task.grammar_name}.cfg": text(in_distribution, f"the {task.identity_marker!r}-marked dev sentences"),
        f"{task.grammar_name}.generalization.cfg": text(generalization, "the generalization sentences"),
    }


def write_grammar_files(texts: dict[str, str], folder: Path) -> Iterable[Path]:
    for name, text in texts.items():
        write_text_atomically(folder / name, text)
        yield folder / name
