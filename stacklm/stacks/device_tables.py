"""Index tables that a step of a dynamic program reads, built once per value and device.

A tensor built from Python values (``torch.tensor(list)``) is a copy from the host: on CUDA it
waits for the device and cannot be recorded in a CUDA graph, and a training step does no host work
(``stacklm.training.step``). The tables of the stacks' dynamic programs (which slots of a column
the pop reads, which rows a window hides) depend only on a step's position and the sizes, never on
the data, so each is built at its first use, kept on its device, and read again by every later step
of the same shape: a warm-up step builds them all before a graph is captured.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


@functools.lru_cache(maxsize=4096)
def device_index(values: tuple[int, ...], device: torch.device) -> Tensor:
    """``values`` as an int64 tensor (len(values),) on ``device``; the same tensor at every call, never
    written to (a normal tensor even when first asked for under ``torch.inference_mode``, so that
    training may save it for the backward)."""
    with torch.inference_mode(False):
        return torch.tensor(values, dtype=torch.long, device=device)
