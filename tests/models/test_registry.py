"""The registry's names, slugs and errors; configs from dicts; the reference-behaviour options."""

from __future__ import annotations

import dataclasses
from typing import Callable

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.models.base import LanguageModel
from stacklm.models.cfl_names import CFL_MODELS, CFL_PREFIX
from stacklm.models.embedding import FeatureTable
from stacklm.models.options import ModelOptions, ReferenceBehaviour
from stacklm.models.recurrent import RecurrentConfig, RecurrentLanguageModel
from stacklm.models.registry import ARCHITECTURES, build_model, get_architecture
from stacklm.models.stack_interface import (
    NondeterministicSpec,
    SuperpositionSpec,
    VectorNondeterministicInterface,
    VectorNondeterministicSpec,
)
from stacklm.models.transformer import StackAttention, Transformer, TransformerConfig
from stacklm.settings_file import build

PAPER_NAMES = (
    "Tf", "Tf+Sup", "Tf+Sup+Sup", "Tf+Nd", "Tf+Nd+Nd", "RNN", "RNN+Sup", "RNN+Sup+R", "RNN+Nd", "RNN+Nd+R",
    "LSTM", "LSTM+Sup", "LSTM+Sup+R", "LSTM+Nd", "LSTM+Nd+R",
)  # fmt: skip
CFL_LABELS = ("LSTM", "Gref", "JM", "NS", "NS+S", "NS+U", "NS+S+U")


def test_paper_names_and_syntax_variants_are_registered() -> None:
    for name in PAPER_NAMES:
        assert name in ARCHITECTURES and name + "+Syn" in ARCHITECTURES
        assert ARCHITECTURES[name + "+Syn"].syntax and not ARCHITECTURES[name].syntax
    for label in CFL_LABELS:
        architecture = ARCHITECTURES[CFL_PREFIX + label]
        assert architecture.label == label and architecture.family == "rns-rnn"


def test_registry_order_is_the_papers() -> None:
    assert list(ARCHITECTURES)[: len(PAPER_NAMES)] == list(PAPER_NAMES)
    assert [a.label for a in ARCHITECTURES.values() if a.family == "rns-rnn"] == list(CFL_LABELS)


def test_nondeterministic_variants_and_sizes() -> None:
    options = ModelOptions(cfl_num_states=3, cfl_num_symbols=3)
    variants = {}
    for label in ("NS", "NS+S", "NS+U", "NS+S+U"):
        config = ARCHITECTURES[CFL_PREFIX + label].config(5, 20, options)
        assert isinstance(config, RecurrentConfig) and isinstance(config.stack, NondeterministicSpec)
        assert (config.num_layers, config.cell, config.variant, config.dropout) == (1, "lstm", "rns-rnn", 0.0)
        variants[label] = (config.stack.normalized, config.stack.states_in_reading, config.stack.num_states)
    assert variants == {"NS": (True, False, 3), "NS+S": (True, True, 3), "NS+U": (False, False, 3), "NS+S+U": (False, True, 3)}
    nd = ARCHITECTURES["LSTM+Nd+R"].config(10, 16, ModelOptions())
    assert isinstance(nd, RecurrentConfig) and nd.stack == VectorNondeterministicSpec(num_states=3, num_symbols=3, vector_size=5)


def test_slugs_are_unique_and_path_safe() -> None:
    slugs = [architecture.slug for architecture in ARCHITECTURES.values()]
    assert len(set(slugs)) == len(slugs)
    assert all(slug == slug.lower() and "/" not in slug and " " not in slug for slug in slugs)


def test_unknown_name_and_missing_features_are_errors() -> None:
    with pytest.raises(StacklmError, match=r"unknown architecture 'Tf\+Foo'"):
        get_architecture("Tf+Foo")
    with pytest.raises(StacklmError, match="needs token features"):
        build_model("Tf+Syn", 10, options=ModelOptions(width=24))


def test_stack_layers_sit_where_the_paper_puts_them() -> None:
    options = ModelOptions()
    one = ARCHITECTURES["Tf+Sup"].config(10, 16, options)
    two = ARCHITECTURES["Tf+Sup+Sup"].config(10, 16, options)
    assert isinstance(one, TransformerConfig) and isinstance(two, TransformerConfig)
    assert [spec is not None for spec in one.layers] == [False, False, True, False, False]
    assert [spec is not None for spec in two.layers] == [False, True, False, True, False]
    assert one.layers[2] == SuperpositionSpec(vector_size=50)
    lstm = ARCHITECTURES["LSTM+Sup+R"].config(10, 16, options)
    assert isinstance(lstm, RecurrentConfig) and lstm.num_layers == 3 and lstm.reading_to_output


def test_config_from_dict_round_trip_and_unknown_keys() -> None:
    config = build(
        TransformerConfig, {"vocabulary_size": 5, "width": 8, "layers": [None, {"kind": "superposition", "vector_size": 3}], "reference": {"pushed_vector": "raw"}}
    )
    assert config.layers == (None, SuperpositionSpec(vector_size=3)) and config.reference.pushed_vector == "raw"
    with pytest.raises(StacklmError, match="'reference.pushed_vektor'"):
        build(TransformerConfig, {"vocabulary_size": 5, "width": 8, "layers": [None], "reference": {"pushed_vektor": "raw"}})
    with pytest.raises(StacklmError, match=r"layers\[0\]\.kind': expected one of"):
        build(TransformerConfig, {"vocabulary_size": 5, "width": 8, "layers": [{"kind": "queue"}]})
    with pytest.raises(StacklmError, match="'hidden_unit'"):
        build(RecurrentConfig, {"vocabulary_size": 5, "hidden_unit": 8})
    with pytest.raises(StacklmError, match="'hidden_units': required"):
        build(RecurrentConfig, {"vocabulary_size": 5})
    with pytest.raises(StacklmError, match="expected int"):
        build(ModelOptions, {"width": True})
    assert build(ModelOptions, {"dropout": 0, "reference": {"initialization": "reference"}}) == ModelOptions(
        dropout=0.0, reference=ReferenceBehaviour(initialization="reference")
    )


def _feedforward_bound(model: Transformer, layer: int) -> float:
    return model.blocks[layer].feedforward.expand.weight.abs().max().item()


def test_initialization_option_changes_standard_feedforward_layers_only() -> None:
    paper = build_model(
        "Tf+Sup", 10, options=ModelOptions(width=64, reference=ReferenceBehaviour(initialization="paper")), generator=torch.Generator().manual_seed(0)
    )
    reference = build_model("Tf+Sup", 10, options=ModelOptions(width=64), generator=torch.Generator().manual_seed(0))  # the default
    assert isinstance(paper, Transformer) and isinstance(reference, Transformer)
    xavier_bound = 2**0.5 * (6 / (64 + 128)) ** 0.5  # ReLU gain, fan 64 + 128: ≈ 0.25
    assert 0.2 < _feedforward_bound(paper, 0) <= xavier_bound
    assert _feedforward_bound(reference, 0) <= 0.1
    assert 0.2 < _feedforward_bound(reference, 2) <= xavier_bound  # the stack layer's FFN stays Xavier


def test_the_defaults_follow_the_authors_code() -> None:
    # DuSell & Cotterell (2025)'s numbers come from their code (docs/design/authors-code.md)
    assert ReferenceBehaviour() == ReferenceBehaviour(pushed_vector="raw", initialization="reference")
    assert ModelOptions().reference == ReferenceBehaviour(pushed_vector="raw", initialization="reference")


def test_pushed_vector_option() -> None:
    hidden = torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) * 3
    for reference, bounded in ((ReferenceBehaviour(pushed_vector="sigmoid"), True), (ReferenceBehaviour(pushed_vector="raw"), False)):
        model = build_model("Tf+Sup", 10, options=ModelOptions(width=16, reference=reference))
        assert isinstance(model, Transformer)
        sublayer = model.blocks[2].sublayer
        assert isinstance(sublayer, StackAttention)
        pushed = sublayer.interface.actions(hidden).pushed
        assert bool(((pushed >= 0) & (pushed <= 1)).all()) is bounded


def test_initialize_sets_every_parameter_from_the_generator(architecture_name: str, tiny_model: Callable[..., LanguageModel]) -> None:
    model = tiny_model(architecture_name)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    model.initialize(torch.Generator().manual_seed(3))
    again = tiny_model(architecture_name)
    again.initialize(torch.Generator().manual_seed(3))
    for (name, parameter), other in zip(model.named_parameters(), again.parameters()):
        assert not parameter.isnan().any(), name
        torch.testing.assert_close(parameter, other, rtol=0, atol=0)


def test_nondeterministic_rnn_initialization_follows_the_option() -> None:
    def action_bound(reference: ReferenceBehaviour) -> float:
        model = build_model("LSTM+Nd", 10, options=ModelOptions(width=64, reference=reference), generator=torch.Generator().manual_seed(0))
        assert isinstance(model, RecurrentLanguageModel) and isinstance(model.interface, VectorNondeterministicInterface)
        return model.interface.action_layer.weight.abs().max().item()

    paper, reference = action_bound(ReferenceBehaviour(initialization="paper")), action_bound(ReferenceBehaviour())  # the default: the authors' code
    assert reference <= 0.1 < paper <= (6 / (64 + 189)) ** 0.5


def test_configs_and_feature_tables_round_trip_through_dicts(architecture_name: str) -> None:
    architecture = ARCHITECTURES[architecture_name]
    config = architecture.config(12, 24, ModelOptions(reference=ReferenceBehaviour(pushed_vector="raw")))
    assert isinstance(config, architecture.config_class)
    assert build(architecture.config_class, dataclasses.asdict(config)) == config
    table = FeatureTable.from_rows([{"pos": "N", "case": "none", "subword": "whole"}])
    assert build(FeatureTable, dataclasses.asdict(table)) == table


def test_the_stack_name_is_the_stack_an_architecture_is_built_with() -> None:
    """Every Bearing architecture's stack name is the stack token of its table name (Tf+Nd+Nd: Nd,
    LSTM+Sup+R+Syn: Sup, RNN: none), and a CFL model's is its stack label."""
    for name, architecture in ARCHITECTURES.items():
        if architecture.family == "rns-rnn":
            assert architecture.stack_name == (None if name == "cfl/LSTM" else name.removeprefix("cfl/"))
            continue
        tokens = set(name.split("+")) & {"Nd", "Sup"}
        assert architecture.stack_name == (tokens.pop() if tokens else None), name


def test_the_cfl_names_the_dag_reads_without_torch_are_the_registrys() -> None:
    assert CFL_MODELS == tuple(name for name, architecture in ARCHITECTURES.items() if architecture.family == "rns-rnn")
