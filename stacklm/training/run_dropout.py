"""Each run's dropout masks in a step of several runs (``stacklm.training.grouped``).

Dropout (Srivastava et al., Dropout: A Simple Way to Prevent Neural Networks from Overfitting)
keeps each element with probability 1 − p and scales it by 1/(1 − p). A run trained alone draws
its masks from torch's global generator, seeded by the run's seed, one ``F.dropout`` call after
another in the order of its forward. For the runs of one step to equal the runs trained alone,
run k's masks are drawn outside ``vmap`` as its forward alone would draw them, from its own
generator state (:class:`RunRandomness`), and handed into the vmapped forward, where each
dropout multiplies by the mask it is given (:func:`masked_model`).

What a forward draws is a pure function of the model and the batch's shape (B, n): the calls
with p > 0 in training mode on a non-empty tensor, each of a size, strides, offset and dtype. They are
recorded once per shape by a forward on the ``meta`` device (:class:`DropoutDraws`), which
computes no number. Each draw is ``F.dropout`` of a tensor of ones of that layout, so that the
mask holds the same numbers as the one the run alone multiplies by (1/(1 − p) or 0).

The step pads every run's batch to the largest (B, n) of the step. Run k's mask (its own shape
S_k) goes into the corner of the padded shape S, zeros elsewhere: this needs every dropout input
to hold a run's strings and positions as prefixes of its dimensions, as the models of
``stacklm.models`` do ((B, n + 1, ·), (B·heads, n + 1, n + 1), (n, L − 1, B, d)).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.errors import StacklmError
from stacklm.models.dropout import Dropout, ReLUDropout


@dataclass(frozen=True)
class Draw:
    """One dropout call of a forward: the layout of its input (on CUDA the fused kernel assigns its
    random numbers by the input's alignment and contiguity) and its probability p."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # the input's storage offset, in elements
    dtype: torch.dtype
    p: float


def draws_mask(module: nn.Dropout, x: Tensor) -> bool:
    """Whether ``F.dropout`` draws a mask for ``x`` (else it returns its input)."""
    return module.training and module.p > 0 and x.numel() > 0


@dataclass
class MaskQueue:
    """The masks of one run's forward, in the order its dropout calls take them (inside ``vmap``,
    each a run's slice), or the draws recorded by a forward on ``meta``."""

    masks: list[Tensor] = field(default_factory=list)
    draws: list[Draw] = field(default_factory=list)

    def take(self) -> Tensor:
        if not self.masks:
            raise StacklmError("the grouped forward called dropout more often than the forward it was recorded from")
        return self.masks.pop(0)


class _RecordingDropout(Dropout):
    """Records each draw in its queue; its output has the layout ``F.dropout``'s would have."""

    queue: MaskQueue

    def forward(self, x: Tensor) -> Tensor:
        if not draws_mask(self, x):
            return x
        self.queue.draws.append(Draw(tuple(x.shape), tuple(x.stride()), x.storage_offset(), x.dtype, self.p))
        return x * torch.empty_like(x)


class _RecordingReLUDropout(ReLUDropout, _RecordingDropout):
    pass


class _MaskedDropout(Dropout):
    """Multiplies by the next mask of its queue, as ``F.dropout`` multiplies by the mask it draws."""

    queue: MaskQueue

    def forward(self, x: Tensor) -> Tensor:
        if not draws_mask(self, x):
            return x
        return x * self.queue.take()


class _MaskedReLUDropout(ReLUDropout, _MaskedDropout):
    pass


_RECORDING = {Dropout: _RecordingDropout, ReLUDropout: _RecordingReLUDropout}
_MASKED = {Dropout: _MaskedDropout, ReLUDropout: _MaskedReLUDropout}


def _meta_copy(model: nn.Module, classes: dict[type, type], queue: MaskQueue) -> nn.Module:
    """A copy of ``model`` on ``meta`` (no numbers) whose dropouts are ``classes``' and share ``queue``."""
    meta = copy.deepcopy(model).to("meta")
    for module in meta.modules():
        if isinstance(module, nn.Dropout):
            if type(module) not in classes:
                raise StacklmError(f"{type(module).__name__}: only the PyTorch dropouts of stacklm.models train several runs in one step "
                                   "(the torch backend)")
            module.__class__ = classes[type(module)]
            module.queue = queue  # type: ignore[assignment]
    return meta


def masked_model(model: nn.Module) -> tuple[nn.Module, MaskQueue]:
    """A parameterless (``meta``) copy of ``model`` for ``torch.func.functional_call``, whose
    dropouts take their masks from the queue returned with it."""
    queue = MaskQueue()
    return _meta_copy(model, _MASKED, queue), queue


class DropoutDraws:
    """The draws of ``model``'s training forward for each input shape (B, n), recorded once per shape."""

    def __init__(self, model: nn.Module) -> None:
        self.queue = MaskQueue()
        self.model = _meta_copy(model, _RECORDING, self.queue).train()
        self.known: dict[tuple[int, int], tuple[Draw, ...]] = {}

    def __call__(self, batch_size: int, length: int) -> tuple[Draw, ...]:
        shape = (batch_size, length)
        if shape not in self.known:
            self.queue.draws.clear()
            with torch.no_grad():
                self.model(torch.zeros(shape, dtype=torch.long, device="meta"))
            self.known[shape] = tuple(self.queue.draws)
        return self.known[shape]


def draw_masks(draws: Sequence[Draw], device: torch.device) -> list[Tensor]:
    """The scaled masks of ``draws`` from torch's generator of ``device``, as the run alone draws them:
    ``F.dropout`` of ones laid out as each draw's input."""
    masks = []
    for draw in draws:
        extent = draw.offset + 1 + sum((size - 1) * stride for size, stride in zip(draw.size, draw.stride))
        ones = torch.ones(extent, dtype=draw.dtype, device=device).as_strided(draw.size, draw.stride, draw.offset)
        masks.append(F.dropout(ones, draw.p, training=True))
    return masks


def padded(masks: Sequence[Tensor], draws: Sequence[Draw]) -> list[Tensor]:
    """Each mask in the corner of its padded draw's shape, zeros elsewhere."""
    if len(masks) != len(draws):
        raise StacklmError(f"a run's forward draws {len(masks)} dropout masks, the padded forward {len(draws)}")
    result = []
    for mask, draw in zip(masks, draws):
        if mask.dim() != len(draw.size) or any(size > bound for size, bound in zip(mask.shape, draw.size)):
            raise StacklmError(f"a dropout mask of shape {tuple(mask.shape)} does not fit the padded shape {draw.size}")
        whole = mask.new_zeros(draw.size)
        whole[tuple(slice(0, size) for size in mask.shape)] = mask
        result.append(whole)
    return result


class RunRandomness:
    """A run's state of torch's global generators (the CPU's, and the device's on CUDA), kept
    while other runs draw; :meth:`active` puts it in place for a block and keeps what the block
    leaves."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @classmethod
    def seeded(cls, seed: int, device: torch.device) -> RunRandomness:
        """The state ``torch.manual_seed(seed)`` gives, leaving the global one as it was."""
        with cls(device).active():
            torch.manual_seed(seed)
            return cls(device)

    @contextmanager
    def active(self) -> Iterator[None]:
        outside = RunRandomness(self.device)
        self._install()
        try:
            yield
        finally:
            self.cpu = torch.get_rng_state()
            if self.cuda is not None:
                self.cuda = torch.cuda.get_rng_state(self.device)
            outside._install()

    def _install(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)
