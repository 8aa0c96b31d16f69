"""Small models for the tests: tiny widths and one feature table shared by the +Syn variants."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from stacklm.models.embedding import FeatureTable
from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, LanguageModel, build_model

TOY_VOCABULARY_SIZE = 7  # six tokens and EOS


def toy_features(num_tokens: int = TOY_VOCABULARY_SIZE - 1) -> FeatureTable:
    """A synthetic lexicon: tokens alternate between two parts of speech, one is capitalised."""
    rows = [
        {"pos": "NOUN" if index % 2 else "VERB", "case": "1" if index == 0 else "0", "subword": "S" if index % 3 else "E"}
        for index in range(num_tokens)
    ]
    return FeatureTable.from_rows(rows)


def tiny_options(width: int = 8, dropout: float = 0.0) -> ModelOptions:
    """Width 8 (a multiple of the 4 heads) by default, f = 4, small CFL stacks."""
    return ModelOptions(
        dropout=dropout, width=width, syntax_feature_width=4, cfl_hidden_units=width, cfl_stack_vector_size=3
    )


def tiny_model(
    name: str, seed: int = 0, vocabulary_size: int = TOY_VOCABULARY_SIZE, dropout: float = 0.0, width: int = 8
) -> LanguageModel:
    features = toy_features(vocabulary_size - 1) if ARCHITECTURES[name].syntax else None
    return build_model(
        name,
        vocabulary_size,
        token_features=features,
        options=tiny_options(width, dropout),
        generator=torch.Generator().manual_seed(seed),
    )


TinyModelFactory = Callable[..., LanguageModel]


@pytest.fixture(name="tiny_model")
def tiny_model_fixture() -> TinyModelFactory:
    """``tiny_model(name, seed=0, vocabulary_size=7, dropout=0.0, width=8)``."""
    return tiny_model


@pytest.fixture(params=list(ARCHITECTURES), ids=list(ARCHITECTURES))
def architecture_name(request: pytest.FixtureRequest) -> str:
    return request.param
