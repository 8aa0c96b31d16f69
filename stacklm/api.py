"""What a researcher uses without the workflow (re-exported by ``import stacklm``): a task, its
splits, a model built by its paper name, and a trained run loaded back.

    import stacklm
    task = stacklm.get_task("question-formation")
    splits = stacklm.generate_splits(task, seed=1, sizes=stacklm.SplitSizes(train=1000, test=100))
    model = stacklm.build_model("Tf+Nd", task)
    run = stacklm.load_run("results/runs/question-formation/tf+nd/final/1")

Everything here composes the package's own pieces (``stacklm.tasks``, ``stacklm.data``,
``stacklm.models.registry``, the run's files), as ``stacklm train`` and ``stacklm evaluate`` do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from stacklm.parquet_file import read_parquet
from stacklm.data.splits import SplitSizes, Splits, build_splits
from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import located
from stacklm.models.base import LanguageModel
from stacklm.models.options import PARAMETER_BUDGET, ModelOptions
from stacklm.models.registry import build_model as build_for_vocabulary
from stacklm.tasks import Task, get_task
from stacklm.training.run_files import load_model, rebuild_model, token_features

if TYPE_CHECKING:
    import pandas as pd

MODEL_FILE = "model.pt"
CURVE_FILE = "train.parquet"
METRICS_FILE = "metrics.parquet"


def generate_splits(task: Task | str, seed: int, sizes: SplitSizes = SplitSizes()) -> Splits:
    """The four splits of ``task`` (train, validation, test, generalization), drawn from its
    grammars as ``stacklm data generate`` draws them: the same seed and sizes, the same examples."""
    return build_splits(_task(task), sizes, seed)


def build_model(
    architecture: str,
    task: Task | str,
    *,
    parameter_budget: int = PARAMETER_BUDGET,
    options: ModelOptions | None = None,
    seed: int = 1,
) -> LanguageModel:
    """The architecture named as in the paper's tables (``Tf+Nd``, ``LSTM+Sup+R``, ``Tf+Syn`` …)
    for ``task``'s vocabulary, sized to ``parameter_budget`` and initialised from ``seed``, as
    ``stacklm train`` builds it."""
    task = _task(task)
    vocabulary = Vocabulary(task.vocabulary())
    return build_for_vocabulary(
        architecture,
        len(vocabulary),
        parameter_budget=parameter_budget,
        token_features=token_features(architecture, task, vocabulary.tokens),
        options=options,
        generator=torch.Generator().manual_seed(seed),
    )


@dataclass(frozen=True)
class TrainedRun:
    """A run folder of ``stacklm train`` (and, for a final run, ``stacklm evaluate``)."""

    folder: Path
    task: str
    architecture: str
    model: LanguageModel  # the best checkpoint's parameters, in eval mode, on the CPU
    vocabulary: Vocabulary
    settings: dict[str, Any]  # the run's resolved settings
    curve: pd.DataFrame  # train.parquet: one row per checkpoint
    metrics: pd.DataFrame | None  # metrics.parquet, None before evaluation


def load_run(folder: str | Path) -> TrainedRun:
    """The trained model and records of a task run's folder; a missing or foreign file is a
    ``StacklmError`` naming it."""

    folder = Path(folder)
    saved = load_model(folder / MODEL_FILE)
    if not (folder / CURVE_FILE).is_file():
        raise located(folder / CURVE_FILE, None, "the run's learning curve is missing (has `stacklm train` finished for this run?)")
    metrics = folder / METRICS_FILE
    return TrainedRun(
        folder=folder,
        task=saved.task,
        architecture=saved.architecture,
        model=rebuild_model(saved, get_task(saved.task)),
        vocabulary=Vocabulary(saved.vocabulary),
        settings=saved.settings,
        curve=read_parquet(folder / CURVE_FILE, "the run's curve"),
        metrics=read_parquet(metrics, "the run's metrics") if metrics.is_file() else None,
    )


def _task(task: Task | str) -> Task:
    return get_task(task) if isinstance(task, str) else task
