"""The closed-form counts equal the built models' counts, and the chosen width is the nearest feasible one."""

from __future__ import annotations

import pytest
import sympy

from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, build_model
from stacklm.models.sizing import WIDTH, is_feasible
from stacklm.models.embedding import FeatureTable
from stacklm.models.lexicon import task_features, task_vocabulary
from stacklm.tasks import TASK_NAMES

BUDGET = 200_000


@pytest.mark.parametrize("task_name", TASK_NAMES)
def test_closed_form_equals_built_count_and_width_is_nearest(task_name: str) -> None:
    vocabulary_size = len(task_vocabulary(task_name))
    features = task_features(task_name)
    options = ModelOptions()
    for name, architecture in ARCHITECTURES.items():
        feature_values = features.value_count if architecture.syntax else 0
        sizing = architecture.sizing(vocabulary_size, options, BUDGET, feature_values)
        model = build_model(name, vocabulary_size, token_features=features, options=options)
        built = sum(parameter.numel() for parameter in model.parameters())
        assert built == sizing.parameters, name
        if architecture.family == "rns-rnn":
            assert sizing.width == options.cfl_hidden_units
            continue
        shape = architecture.shape(options)
        count = sympy.lambdify(WIDTH, sizing.count)
        feasible = [width for width in range(1, 3 * sizing.width) if is_feasible(shape, width, options)]
        best = min(feasible, key=lambda width: (abs(count(width) - BUDGET), width))
        assert sizing.width == best, name


# rau's `model-size` results for the question-formation vocabulary (68 tokens), docs/design/authors-code.md#model-sizing.
REFERENCE_COUNTS = {
    ("Tf", 68): 193_596,
    ("Tf+Sup", 72): 202_896,
    ("Tf+Nd", 68): 191_085,
    ("LSTM", 90): 201_960,
    ("LSTM+Sup", 85): 202_098,
    ("LSTM+Nd", 82): 199_131,
}


@pytest.mark.parametrize("name, width", list(REFERENCE_COUNTS))
def test_closed_form_matches_reference_counts(name: str, width: int) -> None:
    count = ARCHITECTURES[name].sizing(69, ModelOptions()).count
    assert int(count.subs(WIDTH, width)) == REFERENCE_COUNTS[name, width]


def test_question_formation_vocabulary_is_the_reference_one() -> None:
    assert len(task_vocabulary("question-formation")) == 69  # 68 tokens and EOS, as in the reference


def test_syntax_counts_use_the_feature_values() -> None:
    features = FeatureTable.from_rows([{"pos": "N", "case": "none", "subword": "whole"}, {"pos": "V", "case": "none", "subword": "whole"}])
    assert features.value_count == 3 + 2 + 2  # BOUNDARY and the values seen, per kind
    options = ModelOptions(width=24)
    model = build_model("Tf+Syn", 3, token_features=features, options=options)
    plain = build_model("Tf", 3, options=options)
    difference = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in plain.parameters())
    assert difference == 20 * features.value_count - 4 * 20  # f·Φ added, (V + 1)·f token columns removed


@pytest.mark.parametrize("vocabulary_size", [3, 4, 5, 8])  # the five CFL tasks' vocabularies, EOS included
def test_cfl_counts_equal_built_counts(vocabulary_size: int) -> None:
    for num_states, vector_size in ((2, 2), (3, 20), (3, 40)):
        options = ModelOptions(cfl_num_states=num_states, cfl_stack_vector_size=vector_size)
        for name, architecture in ARCHITECTURES.items():
            if architecture.family != "rns-rnn":
                continue
            model = build_model(name, vocabulary_size, options=options)
            sizing = architecture.sizing(vocabulary_size, options)
            assert (sizing.width, sum(p.numel() for p in model.parameters())) == (20, sizing.parameters), name
