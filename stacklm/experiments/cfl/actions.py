"""Figure 2 of DuSell & Chiang (2022): how NS+S and NS+S+U learn their stack actions on marked reversal.

Before training (update 0) and every ``cfl.action_log_every`` updates (the paper: 100, 10 rows
per epoch of 1,000 batches), the model reads one fixed string w = v # v^R and, at each update t = 1 … n − 1
(from h_t, after reading w_t), the probability of each action type is logged
(:func:`stacklm.models.stack_actions.string_action_types`: a softmax over the log-summed
weights of all push, all replace and all pop transitions). The correct type is push before
``#`` (w_t ∈ v: push it), replace at ``#`` (keep the top, the last symbol of v, for w_{t+1}) and
pop after (expose the symbol that w_{t+1} repeats).

The string is the same for every run and both models: one length drawn uniformly from the
training lengths [40, 80], then one string of that length from the PCFG, with a seed derived
from the language alone. Which runs and learning rates the paper plotted is not stated
(``docs/design/cfl-and-ptb.md#cfl-selection-and-figures``); the figure shows each model's selected run.

A logging run writes ``actions.parquet`` beside its ``train.parquet``: one row per
(update, position), with the columns of ``ACTIONS_SCHEMA``.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import pyarrow as pa

from stacklm.cfl.languages import LANGUAGES
from stacklm.cfl.sampling import LengthSampler
from stacklm.cfl.splits import SPLIT_LENGTHS
from stacklm.errors import StacklmError
from stacklm.experiments.cfl.search import CflRun
from stacklm.experiments.cfl.settings import ACTION_LANGUAGE
from stacklm.experiments.common import derived_seed
from stacklm.models.base import LanguageModel
from stacklm.models.stack_actions import string_action_types
from stacklm.stacks.nondeterministic import ACTION_TYPES

MARKER = "#"

ACTIONS_SCHEMA = pa.schema(
    [
        ("task", pa.string()),  # the language
        ("architecture", pa.string()),  # cfl/NS+S, cfl/NS+S+U
        ("setting", pa.string()),  # the run's folder, lr0.001-r3
        ("update", pa.int64()),  # optimizer steps so far
        ("epoch", pa.int64()),  # 1-based epoch of that step
        ("position", pa.int64()),  # t, 1 … n − 1: the update made after reading w_t
        ("symbol", pa.string()),  # w_t
        ("correct_action", pa.string()),  # push, replace or pop
        ("correct_probability", pa.float64()),
        ("push_probability", pa.float64()),
        ("replace_probability", pa.float64()),
        ("pop_probability", pa.float64()),
    ]
)


def logged_string(language: str) -> list[int]:
    """The fixed string of ``language`` that every logging run reads (seeded by the language alone)."""
    low, high = SPLIT_LENGTHS["train"]
    sampler = LengthSampler.build(LANGUAGES[language].grammar, high)
    generator = random.Random(derived_seed("cfl", "stack-actions", language) >> 1)
    return sampler.sample(generator.choice(sampler.valid_lengths(low, high)), generator)


def correct_actions(symbols: Sequence[str]) -> list[str]:
    """The correct action type after reading each symbol of v # v^R: push, replace at ``#``, pop."""
    if list(symbols).count(MARKER) != 1:
        raise StacklmError(f"a marked-reversal string has exactly one {MARKER!r}, not {''.join(symbols)!r}")
    middle = list(symbols).index(MARKER)
    return ["push" if t < middle else "replace" if t == middle else "pop" for t in range(len(symbols))]


class ActionLog:
    """The ``after_step`` of a logging run: every ``every`` updates, the action types of ``model``
    on ``tokens`` as rows of ``ACTIONS_SCHEMA`` (without the run's columns)."""

    def __init__(self, model: LanguageModel, tokens: Sequence[int], names: Sequence[str], every: int) -> None:
        if every < 1:
            raise StacklmError(f"config key 'cfl.action_log_every': must be at least 1, got {every!r}")
        self.model, self.tokens, self.every = model, list(tokens), every
        self.symbols = [names[token] for token in tokens]
        self.correct = correct_actions(self.symbols)

    def __call__(self, step: int, epoch: int) -> list[dict[str, Any]]:
        if step % self.every:
            return []
        probabilities = string_action_types(self.model, self.tokens).double().cpu().tolist()  # (n − 1, 3)
        rows = []
        for t, row in enumerate(probabilities, start=1):
            by_type = dict(zip(ACTION_TYPES, row, strict=True))
            correct = self.correct[t - 1]
            rows.append(
                {"update": step, "epoch": epoch, "position": t, "symbol": self.symbols[t - 1], "correct_action": correct,
                 "correct_probability": by_type[correct]}
                | {f"{name}_probability": value for name, value in by_type.items()}
            )
        return rows


def actions_table(rows: Sequence[dict[str, Any]], run: CflRun) -> pa.Table:
    """A run's ``actions.parquet``: its logged rows with the run's columns."""
    run_columns = {"task": run.language, "architecture": run.model, "setting": run.setting}
    return pa.Table.from_pylist([run_columns | row for row in rows], schema=ACTIONS_SCHEMA)


def check_logged_run(run: CflRun) -> None:
    """The correct actions are those of marked reversal, and only the NS stacks have push, replace and pop weights."""
    if run.language != ACTION_LANGUAGE or not run.model.startswith("cfl/NS"):
        raise StacklmError(
            f"--actions logs the stack actions of an NS model (cfl/NS … cfl/NS+S+U) on {ACTION_LANGUAGE}, not of {run.model} on {run.language}"
        )
