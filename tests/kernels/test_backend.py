"""The backend of a command: chosen once (``resolve``), put in place once (``accelerate``), recorded;
a training step on ``cpu-compiled`` bit for bit that of the code before the kernels left the models."""

from __future__ import annotations

import hashlib

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.kernels import backend, build
from stacklm.kernels.backend import accelerate, resolve
from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, build_model
from tests.models.conftest import tiny_model

pytestmark = pytest.mark.skipif(not build.available()[0], reason="the compiled kernels do not build here")

# sha256 of the loss and every parameter's gradient of one training step (``step_digest``), as the
# models computed them with the compiled kernels inside them (d071051), on torch 2.13.0 and a CPU
# with AVX-512 (the kernels' sums and SIMD exp/log round by instruction set). The stack RNNs' since
# their step left ATen for loops of its own (``recurrent.cpp``, issue 31: its products' sums and its
# σ and tanh round their own way; equal to the model's forward within rounding, tests/kernels/test_recurrent.py).
STEP_DIGESTS = {
    "Tf+Nd": "6766b101206692633e1b656baf028a63",
    "RNN+Nd": "908da421106bf2c0b3ccd4a298949bc2",
    "LSTM+Nd+R": "f9473bb5fd1d960292defeaf6ae74067",
}


def step_digest(model: torch.nn.Module) -> str:
    """One training step, dropout on: the digest of its loss and gradients."""
    tokens = torch.randint(0, 11, (9, 13), generator=torch.Generator().manual_seed(2))
    torch.manual_seed(3)
    logits = model.train()(tokens)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 12), tokens.reshape(-1))
    loss.backward()
    digest = hashlib.sha256()
    for tensor in [loss.detach(), *(parameter.grad for parameter in model.parameters())]:
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()[:32]


@pytest.mark.skipif(
    build.vector_capability() != "avx512vl" or torch.__version__.split("+")[0] != "2.13.0",
    reason="the recorded digests are those of torch 2.13.0 on a CPU with AVX-512",
)
@pytest.mark.parametrize("name", sorted(STEP_DIGESTS))
def test_a_training_step_on_cpu_compiled_is_bit_for_bit_that_of_before(name: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_model(name, 12, options=ModelOptions(width=24), generator=torch.Generator().manual_seed(1))
        assert step_digest(accelerate(model, "cpu-compiled")) == STEP_DIGESTS[name]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_accelerate_changes_classes_only_and_back(name: str) -> None:
    model = tiny_model(name)
    pytorch_classes = [type(module) for module in model.modules()]
    state = {key: value.clone() for key, value in model.state_dict().items()}
    accelerate(model, "cpu-compiled")
    compiled_classes = [type(module) for module in model.modules()]
    assert all(issubclass(compiled, pytorch) for compiled, pytorch in zip(compiled_classes, pytorch_classes, strict=True))
    assert all(compiled in backend.PYTORCH for compiled, pytorch in zip(compiled_classes, pytorch_classes) if compiled is not pytorch)
    assert model.state_dict().keys() == state.keys() and all(torch.equal(model.state_dict()[key], value) for key, value in state.items())
    assert [type(module) for module in accelerate(model, "torch").modules()] == pytorch_classes


def test_auto_is_cpu_compiled_on_the_cpu_and_torch_elsewhere() -> None:
    assert resolve("auto", torch.device("cpu")) == "cpu-compiled"
    assert resolve("auto", torch.device("cuda")) == "torch"
    assert resolve("torch", torch.device("cpu")) == "torch"
    with pytest.raises(StacklmError, match="runs on the CPU, not on cuda"):
        resolve("cpu-compiled", torch.device("cuda"))
    with pytest.raises(StacklmError, match="unknown backend 'fast'"):
        resolve("fast", torch.device("cpu"))


def test_without_the_kernels_auto_warns_that_dropout_draws_other_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "available", lambda: (False, "no compiler"))
    with pytest.warns(RuntimeWarning, match=r"running the torch backend, not cpu-compiled: no compiler. The PyTorch code runs in place of every compiled kernel .*its dropout draws other masks"):
        assert resolve("auto", torch.device("cpu")) == "torch"
    with pytest.raises(StacklmError, match="cpu-compiled backend is not available: no compiler"):
        resolve("cpu-compiled", torch.device("cpu"))


def test_accelerate_refuses_a_model_off_the_cpu() -> None:
    model = build_model("Tf", 12, options=ModelOptions(width=16), generator=torch.Generator().manual_seed(0)).to("meta")
    with pytest.raises(StacklmError, match="runs on the CPU; this model is on meta"):
        accelerate(model, "cpu-compiled")


def test_a_run_records_its_backend_and_the_cpus_vector_capability() -> None:
    assert backend.record("cpu-compiled") == {"backend": "cpu-compiled", "cpu_vectors": build.vector_capability()}
