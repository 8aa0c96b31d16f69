"""``stacklm models``: every architecture with its width and parameter count for a task's vocabulary."""

from __future__ import annotations

import argparse

from stacklm.models.lexicon import task_features, task_vocabulary
from stacklm.models.options import PARAMETER_BUDGET, ModelOptions
from stacklm.models.registry import ARCHITECTURES


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models",
        description="Width sized to the budget (DuSell & Cotterell (2025) §5) and parameter count of every architecture. "
        "With --task: the Bearing Syntactic Fruit architectures, +Syn included, for that task's vocabulary "
        "(tokens and EOS). With --vocabulary-size: every architecture without a lexicon, the CFL ones included.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help="a task name, e.g. question-formation")
    source.add_argument("--vocabulary-size", type=int, help="output symbols, EOS included")
    parser.add_argument("--budget", type=int, default=PARAMETER_BUDGET, help="parameter budget (default %(default)s)")
    parser.set_defaults(func=run_models)


def size_table(vocabulary_size: int, budget: int, task: str | None) -> list[tuple[str, int, int]]:
    """(name, width, parameters) of each architecture listed for this vocabulary."""
    options = ModelOptions()
    feature_values = task_features(task).value_count if task is not None else 0
    rows = []
    for name, architecture in ARCHITECTURES.items():
        if (task is not None and architecture.family != "bearing-syntactic-fruit") or (task is None and architecture.syntax):
            continue
        sizing = architecture.sizing(vocabulary_size, options, budget, feature_values if architecture.syntax else 0)
        rows.append((name, sizing.width, sizing.parameters))
    return rows


def run_models(args: argparse.Namespace) -> int:
    vocabulary_size = len(task_vocabulary(args.task)) if args.task is not None else args.vocabulary_size
    print(f"vocabulary: {vocabulary_size} symbols (EOS included); budget: {args.budget}")
    print(f"{'architecture':<20} {'width':>6} {'parameters':>11}")
    for name, width, parameters in size_table(vocabulary_size, args.budget, args.task):
        print(f"{name:<20} {width:>6} {parameters:>11}")
    return 0
