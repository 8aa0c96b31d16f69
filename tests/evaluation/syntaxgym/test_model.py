"""A PTB model as the SG score's language model: each sentence from the initial state, <eos> first."""

import math

import pytest
import torch

from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.model import PtbScorer
from stacklm.evaluation.syntaxgym.score import region_values
from stacklm.evaluation.syntaxgym.suite import Condition, Region
from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig

VOCABULARY = Vocabulary(("a", "b", "<unk>"))  # <eos> = 3
INDEX = {"a": 0, "b": 1, "<unk>": 2, "<eos>": 3}


def scorer() -> PtbScorer:
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=4, hidden_units=6, stack=LimitedNondeterministic(2, 2, renormalizing=True, window=3)))
    model.initialize(torch.Generator().manual_seed(0))
    return PtbScorer(model.double(), VOCABULARY)


def step_by_step(scorer: PtbScorer, tokens: list[str]) -> list[float]:
    """ln p(token_k | <eos>, token_<k), feeding one token per call and carrying the state."""
    model = scorer.model
    state = model.initial_state(1)
    values = []
    for previous, token in zip(["<eos>"] + tokens[:-1], tokens):
        logits, state = model(torch.tensor([[INDEX[previous]]]), state)
        values.append(float(logits[0, 0].detach().log_softmax(-1)[INDEX[token]]))
    return values


def test_log_probabilities_are_the_models_next_token_distribution() -> None:
    model = scorer()
    expected = step_by_step(model, ["a", "<unk>", "b"])
    assert model(("<eos>", "a", "<unk>"), ("a", "<unk>", "b")) == pytest.approx(expected)
    assert model.words == {"a", "b", "<unk>", "<eos>"}


def test_every_sentence_starts_from_the_initial_state() -> None:
    model = scorer()
    first = model(("<eos>", "b"), ("b", "a"))
    model(("<eos>", "a", "a"), ("a", "a", "b"))
    assert model(("<eos>", "b"), ("b", "a")) == first


def test_region_values_in_bits_from_a_model() -> None:
    # "A zzz b": a, <unk>, b; region 1 = s(a), region 2 = s(<unk>) + s(b), s = −ln p / ln 2.
    model = scorer()
    nats = step_by_step(model, ["a", "<unk>", "b"])
    values = region_values(Condition("c", (Region(1, "A"), Region(2, "zzz b"))), model.words, model)
    assert values == pytest.approx({1: -nats[0] / math.log(2), 2: -(nats[1] + nats[2]) / math.log(2)})


def test_a_token_outside_the_vocabulary_is_an_error() -> None:
    with pytest.raises(StacklmError, match="token 'zzz' is not in the model's vocabulary"):
        scorer()(("<eos>",), ("zzz",))
