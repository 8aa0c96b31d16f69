"""A CFL stack RNN on a one-step stack kernel against itself on the PyTorch stack (the tests of
``stratification`` and ``superposition``)."""

from __future__ import annotations

import pytest
import torch

from stacklm.kernels.backend import accelerate
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model


def assert_kernel_equals_pytorch(architecture: str, run: type, interface: type, vector_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``architecture``'s loss and gradients on the torch backend, then with ``accelerate`` putting
    ``interface`` in place (its stack ``run``), float64; the kernel runs the n − 1 updates, on the
    cpu-compiled backend only."""
    steps: list[int] = []
    monkeypatch.setattr(run, "next", lambda self, parts, next=run.next: steps.append(1) or next(self, parts))
    options = ModelOptions(cfl_stack_vector_size=vector_size)
    model = build_model(architecture, 4, options=options, generator=torch.Generator().manual_seed(0)).double()
    tokens = torch.randint(0, 3, (9, 13), generator=torch.Generator().manual_seed(1))
    results = []
    for backend in ("torch", "cpu-compiled"):
        accelerate(model, backend)
        assert isinstance(model.interface, interface) == (backend == "cpu-compiled")
        model.zero_grad()
        loss = model(tokens).logsumexp(dim=-1).sum()
        loss.backward()
        results.append((loss.detach(), [parameter.grad.clone() for parameter in model.parameters()]))
    (loss, gradients), (compiled_loss, compiled_gradients) = results
    assert len(steps) == 12
    torch.testing.assert_close(compiled_loss, loss)
    for gradient, compiled_gradient in zip(gradients, compiled_gradients, strict=True):
        torch.testing.assert_close(compiled_gradient, gradient)
