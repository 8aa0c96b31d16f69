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


@pytest.mark.parametrize("pushed_vector", ["sigmoid", "raw"])
def test_dvpda_readings_from_one_product_equal_those_of_the_actions(pushed_vector: str) -> None:
    """On the compiled kernel the dVPDA interface's whole-sequence readings come from one product
    with the stacked weights, read in place (log σ in the kernel): readings and the gradients of
    h, every weight and w₀ equal those of its actions (separate layers, split, log σ) on the
    PyTorch DP, on a batch of nine (a group of eight lanes and one)."""
    interface = build_interface(VectorNondeterministicSpec(), 6, bias=False, pushed_vector=pushed_vector).double()
    interface.initialize(torch.Generator().manual_seed(2))
    hidden = 2.0 * torch.randn(9, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert interface.stack.uses_compiled_kernel(hidden)

    def results(kernel: str) -> list[torch.Tensor]:
        interface.stack.kernel = kernel
        interface.zero_grad()
        leaf = hidden.clone().requires_grad_()
        readings = interface.readings(leaf)
        (readings * torch.linspace(-1, 1, readings.numel(), dtype=torch.float64).view_as(readings)).sum().backward()
        return [readings, leaf.grad, *(parameter.grad for parameter in interface.parameters())]

    for got, expected in zip(results("compiled"), results("torch"), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * max(1.0, expected.abs().max().item()))
