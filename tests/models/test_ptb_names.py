"""PTB model names: each names a configuration of docs/design/cfl-and-ptb.md#ptb-models-and-parameter-counts
with its parameter count, reads back to itself, and a bad name or a config no name stands for is refused."""

import json

import pytest

from stacklm.errors import StacklmError
from stacklm.models.ptb import LimitedNondeterministic, PtbModelConfig, Superposition, ptb_config, ptb_config_fields, ptb_config_from_fields, ptb_model_name

SPEC_COUNTS = {
    "lstm": 5_656_336, "lstm-258": 5_704_576, "lstm-267": 5_922_448, "jm-hidden": 5_684_828, "jm-learned": 5_685_289,
    "ns-1-11": 5_732_621, "ns-2-3": 5_680_996, "ns-4-3": 5_745_760, "rns-1-3": 5_664_805, "rns-2-3": 5_684_068, "rns-4-3": 5_754_976,
}  # fmt: skip


@pytest.mark.parametrize(("name", "count"), SPEC_COUNTS.items())
def test_each_name_is_the_specs_configuration(name: str, count: int) -> None:
    config = ptb_config(name)
    assert config.parameter_count() == count
    assert ptb_model_name(config) == name


def test_names_build_the_stacks_they_say() -> None:
    assert ptb_config("rns-2-3").stack == LimitedNondeterministic(2, 3, renormalizing=True, window=35)
    assert ptb_config("ns-2-3").stack == LimitedNondeterministic(2, 3, renormalizing=False, window=35)
    assert ptb_config("jm-learned") == PtbModelConfig(hidden_units=256, stack=Superposition("learned", 22, max_depth=10))
    assert ptb_config("lstm-256") == ptb_config("lstm") and ptb_model_name(ptb_config("lstm-256")) == "lstm"


@pytest.mark.parametrize("name", ["LSTM", "lstm-0", "ns-2", "rns-0-3", "jm", "jm-hidden-247", "ns-2-3 "])
def test_a_bad_name_is_refused_naming_it(name: str) -> None:
    with pytest.raises(StacklmError, match=f"unknown PTB model '{name}'"):
        ptb_config(name)


@pytest.mark.parametrize(
    "config",
    [PtbModelConfig(vocabulary_size=50), PtbModelConfig(stack=LimitedNondeterministic(2, 3, renormalizing=True, window=10)), PtbModelConfig(stack=Superposition("learned", 30))],
)
def test_a_config_no_name_stands_for_is_refused(config: PtbModelConfig) -> None:
    with pytest.raises(StacklmError, match="no PTB model name stands for"):
        ptb_model_name(config)


@pytest.mark.parametrize("name", ["lstm", "lstm-267", "jm-hidden", "jm-learned", "ns-1-11", "rns-4-3"])
def test_a_config_as_plain_fields_reads_back_as_itself(name: str) -> None:
    config = ptb_config(name)
    fields = ptb_config_fields(config)
    assert json.loads(json.dumps(fields)) == fields and ptb_config_from_fields(fields, "model.pt") == config


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"vocabulary_size": 10, "hidden_units": 4, "stack": {"kind": "tape"}}, "model.pt: key 'stack.kind' must be one of limited_nondeterministic, superposition"),
        ({"vocabulary_size": 10, "hidden_units": 4, "depth": 2, "stack": None}, "model.pt: config key 'depth': unknown key"),
        ({"vocabulary_size": 10, "hidden_units": 4, "stack": {"kind": "superposition", "push": "hidden", "vector_size": 3}}, "model.pt: pushing h_t needs m = H = 4"),
        ({"vocabulary_size": 10, "hidden_units": 4, "stack": {"kind": "limited_nondeterministic", "num_states": 2}}, "model.pt: config key 'stack.num_symbols': required"),
    ],
)
def test_bad_fields_are_refused_naming_the_source(fields: dict, message: str) -> None:
    with pytest.raises(StacklmError, match=message):
        ptb_config_from_fields(fields, "model.pt")
