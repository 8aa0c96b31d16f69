"""What the models need from a Bearing Syntactic Fruit task: its vocabulary size and feature table."""

from __future__ import annotations

from stacklm.data.vocabulary import Vocabulary
from stacklm.models.embedding import FeatureTable
from stacklm.tasks import get_task


def task_vocabulary(task_name: str) -> Vocabulary:
    """The task's tokens in index order (sorted, as ``Vocabulary.from_tokens`` orders them); EOS follows."""
    return Vocabulary.from_tokens(get_task(task_name).vocabulary())


def task_features(task_name: str) -> FeatureTable:
    """Part of speech, case and subword position of every token of the task's vocabulary, EOS last."""
    return FeatureTable.from_lexicon(get_task(task_name), task_vocabulary(task_name).tokens)
