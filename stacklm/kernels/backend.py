"""Which implementation a model runs on (its backend), chosen once per command.

- ``torch``: the PyTorch operations of ``stacklm.models`` and ``stacklm.stacks``, on any device;
  dropout masks from ``F.dropout``.
- ``cpu-compiled``: the compiled CPU kernels of this package (built at first use): dropout from a
  counter-based generator (other masks than ``F.dropout``'s for the same seed), attention and whole
  attention layers, the stack RNNs' steps, the dVPDA, the nondeterministic stack over symbols
  of the CFL models (full stack, log semiring), and the stratification and superposition stacks of
  the stack RNNs.
- ``cuda-triton``: the dVPDA as Triton programs on CUDA, whole sequences and the stack RNNs' steps
  (``stacklm.kernels.triton_dvpda``; Triton is optional, imported at the first kernel call); every
  other part stays PyTorch's. On the CPU it runs only under Triton's interpreter (the tests).

Both compute the same functions; their results differ by float rounding, and in training by
their dropout masks. So a run records its backend, with the CPU's vector capability
(``stacklm.kernels.build.vector_capability``: results are bit for bit the same only on the same
capability), and does not resume under another backend unless asked to.

:func:`resolve` answers "which backend?" once for a command (``auto``: ``cpu-compiled`` on the
CPU where the kernels build, else ``torch``, with a warning saying what differs), and
:func:`accelerate` puts that backend's classes in place in a model, once, before it runs.
``cuda-triton`` is asked for by name only: ``auto`` on CUDA stays ``torch``.
"""

from __future__ import annotations

import warnings
from typing import Iterator, Literal, TypeVar

import torch
from torch import nn

from stacklm.errors import StacklmError
from stacklm.kernels import build, triton_dvpda
from stacklm.kernels.attention import CompiledCausalSelfAttention, CompiledTransformer
from stacklm.kernels.dropout import CompiledDropout, CompiledReLUDropout
from stacklm.kernels.dvpda import CompiledVectorNondeterministicInterface, CompiledVectorNondeterministicStack, kernel_applies
from stacklm.kernels.recurrent import CompiledRecurrentLanguageModel
from stacklm.kernels.stratification import CompiledStratificationInterface
from stacklm.kernels.superposition import CompiledSuperpositionInterface
from stacklm.kernels.symbol_stack import CompiledNondeterministicStack
from stacklm.kernels.triton_dvpda import TritonVectorNondeterministicInterface, TritonVectorNondeterministicStack
from stacklm.models.dropout import Dropout, ReLUDropout
from stacklm.models.recurrent import RecurrentLanguageModel
from stacklm.models.stack_interface import StratificationInterface, SuperpositionInterface, VectorNondeterministicInterface
from stacklm.models.transformer import CausalSelfAttention, Transformer
from stacklm.semiring import LOG
from stacklm.stacks.base import Stack
from stacklm.stacks.nondeterministic import NondeterministicStack
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicStack

Backend = Literal["torch", "cpu-compiled", "cuda-triton"]
BACKENDS: tuple[Backend, ...] = ("torch", "cpu-compiled", "cuda-triton")
REQUESTS = ("auto", *BACKENDS)  # what a command's --backend accepts

ModuleT = TypeVar("ModuleT", bound=nn.Module)

# Each PyTorch class and the class that runs it on the kernels.
COMPILED: dict[type, type] = {
    Dropout: CompiledDropout,
    ReLUDropout: CompiledReLUDropout,
    CausalSelfAttention: CompiledCausalSelfAttention,
    Transformer: CompiledTransformer,
    RecurrentLanguageModel: CompiledRecurrentLanguageModel,
    VectorNondeterministicStack: CompiledVectorNondeterministicStack,
    VectorNondeterministicInterface: CompiledVectorNondeterministicInterface,
    NondeterministicStack: CompiledNondeterministicStack,
    StratificationInterface: CompiledStratificationInterface,
    SuperpositionInterface: CompiledSuperpositionInterface,
}
# Each PyTorch class and the class that runs it on the Triton kernel.
TRITON: dict[type, type] = {
    VectorNondeterministicStack: TritonVectorNondeterministicStack,
    VectorNondeterministicInterface: TritonVectorNondeterministicInterface,
}
PYTORCH = {faster: pytorch for classes in (COMPILED, TRITON) for pytorch, faster in classes.items()}


def runs_on_kernels(module: object) -> bool:
    """Whether the kernels run ``module``'s computation: the dVPDA's only without a window, in LOG with the fast products;
    the symbol stack's only without a window, in LOG."""
    if isinstance(module, NondeterministicStack):
        return module.sizes.window is None and module.engine.semiring is LOG
    if isinstance(module, VectorNondeterministicStack):
        return kernel_applies(module)
    if isinstance(module, VectorNondeterministicInterface):
        return kernel_applies(module.stack)
    return True


def resolve(requested: str, device: torch.device) -> Backend:
    """The backend of a command asked for ``requested`` (``auto`` or a backend) on ``device``.

    ``auto``: ``cpu-compiled`` on the CPU where the kernels build (building them now if needed),
    else ``torch``, with a warning where they do not build. ``cpu-compiled`` raises where the
    device is not the CPU or the kernels do not build. ``cuda-triton`` raises where the device is
    not CUDA or Triton is not installed."""
    if requested not in REQUESTS:
        raise StacklmError(f"unknown backend {requested!r}; backends: {', '.join(REQUESTS)}")
    if requested == "torch":
        return "torch"
    if requested == "cuda-triton":
        if device.type != "cuda":
            raise StacklmError(f"the cuda-triton backend runs on CUDA, not on {device}")
        installed, error = triton_dvpda.available()
        if not installed:
            raise StacklmError(f"the cuda-triton backend is not available: {error}")
        return "cuda-triton"
    if device.type != "cpu":
        if requested == "cpu-compiled":
            raise StacklmError(f"the cpu-compiled backend runs on the CPU, not on {device}")
        return "torch"
    built, error = build.available()
    if built:
        return "cpu-compiled"
    if requested == "cpu-compiled":
        raise StacklmError(f"the cpu-compiled backend is not available: {error}")
    warnings.warn(
        f"running the torch backend, not cpu-compiled: {error}. The PyTorch code runs in place of every compiled kernel"
        " (the dVPDA's and the symbol stack's dynamic programs, the stratification and superposition stacks, attention, the stack RNNs' steps, dropout): the same functions, slower,"
        " and its dropout draws other masks for the same seed, so its runs differ from cpu-compiled ones (each run records its backend)",
        RuntimeWarning,
        stacklevel=2,
    )
    return "torch"


def accelerate(model: ModuleT, backend: Backend) -> ModuleT:
    """``model`` with each of its parts (:func:`parts`) of a class that ``backend`` runs otherwise
    turned into that backend's class, in place: the same parameters, buffers and state dict; returned.

    ``cpu-compiled`` loads the kernels (raising if they do not build) and needs the model on the CPU;
    ``cuda-triton`` needs Triton, and the model may move to CUDA afterwards (its classes run the kernel
    on CUDA tensors, or on the CPU under Triton's interpreter, and the PyTorch DP elsewhere);
    ``torch`` turns the other backends' classes back into the PyTorch ones, as every backend does first."""
    if backend not in BACKENDS:
        raise StacklmError(f"unknown backend {backend!r}; backends: {', '.join(BACKENDS)}")
    if backend == "cpu-compiled":
        build.load()
        devices = {tensor.device.type for tensor in [*model.parameters(), *model.buffers()]}
        if devices - {"cpu"}:
            raise StacklmError(f"the cpu-compiled backend runs on the CPU; this model is on {', '.join(sorted(devices))}")
    if backend == "cuda-triton":
        installed, error = triton_dvpda.available()
        if not installed:
            raise StacklmError(f"the cuda-triton backend is not available: {error}")
    for part in parts(model):
        if type(part) in PYTORCH:
            part.__class__ = PYTORCH[type(part)]
    faster = {"torch": {}, "cpu-compiled": COMPILED, "cuda-triton": TRITON}[backend]
    for part in parts(model):
        if type(part) in faster and runs_on_kernels(part):
            part.__class__ = faster[type(part)]
    return model


def parts(model: nn.Module) -> Iterator[object]:
    """Every module of ``model``, itself included, and the stack of each module that holds one
    (``StackInterface.stack``) where that stack is not a module itself (the symbol stacks)."""
    for module in model.modules():
        yield module
        stack = getattr(module, "stack", None)
        if isinstance(stack, Stack) and not isinstance(stack, nn.Module):
            yield stack


def record(backend: Backend) -> dict[str, str]:
    """What a run records of its backend: its name and, on the CPU, the CPU's vector capability."""
    return {"backend": backend, "cpu_vectors": build.vector_capability()}
