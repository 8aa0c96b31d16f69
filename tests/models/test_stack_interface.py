"""Every stack interface's actions from one product with its layers joined equal those of its separate layers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from stacklm.models.stack_interface import (
    NondeterministicSpec,
    StackSpec,
    StratificationSpec,
    SuperpositionSpec,
    VectorNondeterministicSpec,
    build_interface,
)

SPECS = [SuperpositionSpec(vector_size=4), StratificationSpec(vector_size=4), NondeterministicSpec(), VectorNondeterministicSpec()]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.kind)
def test_joined_layers_give_the_actions_of_the_separate_layers(spec: StackSpec, bias: bool) -> None:
    interface = build_interface(spec, 6, bias=bias).double()
    interface.initialize(torch.Generator().manual_seed(0))
    hidden = torch.randn(2, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    weight, joined_bias = interface.input_weight()
    assert weight.size(0) == sum(layer.out_features for layer in interface.input_layers())
    assert (joined_bias is None) == (interface.input_layers()[0].bias is None)
    joined = interface.actions_from_logits(F.linear(hidden, weight, joined_bias))
    separate = interface.actions(hidden)
    for field in dataclasses.fields(separate):
        torch.testing.assert_close(getattr(joined, field.name), getattr(separate, field.name), rtol=1e-13, atol=1e-14)
