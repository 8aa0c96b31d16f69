"""Rule weights of each task's two grammar files, estimated from the upstream sentences.

Upstream's sentences do not follow the weights of their grammar files (McCoy's question data
have 87 % transitive main verbs where the file says 50 %), and McCoy's generalization sets
follow other proportions than his training sets. Each task therefore has two weightings of the
same rules:

- ``<task>.cfg``, for the in-distribution stream, fitted to one of two *targets*:
  ``train``, the sentences of upstream's train file, where a copy exists; else ``held-out``,
  the sentences of upstream's dev and test files. Dev and test are not draws of the training
  distribution: they exclude every training source, so under McCoy's procedure they hold few
  of the short sentences that train used up (``stacklm.data.splits``). The fit corrects for
  that by simulating the procedure: it matches the *simulated* dev and test to upstream's;
- ``<task>.generalization.cfg``, for the generalization stream, fitted to all upstream
  generalization sentences. Rules that never occur there (e.g. a bare subject in question
  formation) get weight 0.

Fit. Let q(r) = c(r) / Σ_{lhs(r') = lhs(r)} c(r') be the maximum-likelihood rule probabilities
over the target's parses, all markers (``stacklm.grammars.estimate``). Start from θ⁰ = q. Our
splits do not sample θ plainly: they de-duplicate (which thins out the short, frequent
sentences), filter ambiguity-breaking examples and, for held-out targets, come after train in
the stream. So for k = 1 … K, build full-size splits with θᵏ⁻¹ under ``simulations`` seeds,
count the rule probabilities p̂ᵏ⁻¹ in the generated splits that correspond to the target (train;
validation and test; generalization), and set θᵏ(r) ∝ θᵏ⁻¹(r) · q(r) / p̂ᵏ⁻¹(r) (iterative
proportional fitting per LHS), until the generated splits reproduce q. Weights are written as
θ(r) · Σ_{lhs(r') = lhs(r)} c(r'): read as counts, they sum per LHS to the observed number of
uses.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Literal, Mapping, Sequence

from stacklm.atomic import write_text_atomically
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.grammars import CompiledGrammar, format_grammar
from stacklm.grammars.estimate import rule_counts
from stacklm.grammars.grammar import Grammar
from stacklm.tasks import Task

HEADER = (
    "{title}",
    "WEIGHT  LHS -> RHS...   P(rule) = WEIGHT / (sum of the weights of LHS's rules).",
    "Weights: maximum-likelihood rule counts over the parses of {what} (upstream {origin}),",
    "corrected by {iterations} rounds of proportional fitting for upstream's procedure",
    "(stacklm/data/weights.py); written by `stacklm data estimate-weights --task {task} --fit-to {target}`.",
)
Target = Literal["train", "held-out"]
TARGET_SPLITS: Mapping[str, tuple[str, ...]] = {"train": ("train",), "held-out": ("validation", "test")}  # upstream splits = simulated splits
# The tasks whose upstream train file has a copy (SOURCES.md, "Train and test splits").
TRAIN_FILE_TASKS = ("question-formation", "passivization", "german-question-formation", "german-passivization")


def probabilities(counts: Counter) -> dict:
    """q(r) = c(r) / Σ_{lhs(r') = lhs(r)} c(r')."""
    totals = _lhs_totals(counts)
    return {key: count / totals[key[0]] for key, count in counts.items() if totals[key[0]] > 0}


def _lhs_totals(values: Mapping) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for (lhs, _), value in values.items():
        totals[lhs] += value
    return totals


def _initial(grammar: Grammar, target: dict) -> dict:
    """θ⁰ = q; the rules of an LHS the target never uses (unreachable at θ) share it evenly."""
    used = _lhs_totals(target)
    return {rule.key: target.get(rule.key, 0.0) if used.get(rule.lhs) else 1.0 / len(grammar.rules_of[rule.lhs]) for rule in grammar.rules}


def _fitted(grammar: Grammar, weights: dict, observed: Counter) -> Grammar:
    """Weights θ(r) · Σ_{lhs(r') = lhs(r)} c(r'); an LHS never observed keeps weight 1 per rule."""
    totals = _lhs_totals(observed)
    return grammar.reweighted({key: round(weight * totals[key[0]], 3) if totals.get(key[0]) else 1.0 for key, weight in weights.items()})


def _refit(weights: dict, target: dict, simulated: dict) -> dict:
    """θ(r) ← θ(r) · q(r) / p̂(r), renormalised per LHS; rules never simulated keep θ(r), and so
    does an LHS whose update would be all 0 (the target never uses it)."""
    updated = {key: weight * target.get(key, 0.0) / simulated[key] if simulated.get(key) else weight for key, weight in weights.items()}
    totals = _lhs_totals(updated)
    return {key: weight / totals[key[0]] if totals[key[0]] else weights[key] for key, weight in updated.items()}


def estimate_weights(task: Task, target: Target, sentences: Sequence[Sequence[str]], generalization: Sequence[Sequence[str]],
                     iterations: int, simulations: int = 2, sizes: SplitSizes = SplitSizes()) -> tuple[Grammar, Grammar]:
    """(in-distribution grammar, generalization grammar) fitted as the module docstring says:
    ``sentences`` are the target's (upstream train, or dev + test), ``generalization`` upstream's
    generalization sentences; each round simulates the splits with seeds 0 … simulations − 1."""
    base = task.grammar
    observed_in, observed_generalization = rule_counts(base, sentences), rule_counts(base, generalization)
    target_in, target_generalization = probabilities(observed_in), probabilities(observed_generalization)
    theta_in, theta_generalization = _initial(base.grammar, target_in), _initial(base.grammar, target_generalization)
    for _ in range(iterations):
        grammars = (CompiledGrammar(base.grammar.reweighted(theta_in)), CompiledGrammar(base.grammar.reweighted(theta_generalization)))
        simulated = [build_splits(task, sizes, seed, grammars=grammars) for seed in range(simulations)]
        generated_in = [example.source[:-1] for splits in simulated for split in TARGET_SPLITS[target] for example in getattr(splits, split)]
        generated_generalization = [example.source[:-1] for splits in simulated for example in splits.generalization]
        theta_in = _refit(theta_in, target_in, probabilities(rule_counts(base, generated_in)))
        theta_generalization = _refit(theta_generalization, target_generalization, probabilities(rule_counts(base, generated_generalization)))
    return _fitted(base.grammar, theta_in, observed_in), _fitted(base.grammar, theta_generalization, observed_generalization)


def grammar_texts(task: Task, in_distribution: Grammar, generalization: Grammar, title: str, origin: str, iterations: int,
                  target: Target) -> dict[str, str]:
    """File name → text of the two grammar files."""
    def text(grammar: Grammar, what: str) -> str:
        return format_grammar(grammar, [line.format(title=title, what=what, origin=origin, task=task.name, iterations=iterations, target=target)
                                        for line in HEADER])

    what = "the train sentences" if target == "train" else "the dev and test sentences"
    return {
        f"{task.grammar_name}.cfg": text(in_distribution, what),
        f"{task.grammar_name}.generalization.cfg": text(generalization, "the generalization sentences"),
    }


def write_grammar_files(texts: dict[str, str], folder: Path) -> Iterable[Path]:
    for name, text in texts.items():
        write_text_atomically(folder / name, text)
        yield folder / name
