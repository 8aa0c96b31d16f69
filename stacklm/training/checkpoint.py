"""Training-state files: a payload of tensors, RNG states and configs, written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from stacklm.atomic import write_atomically


def save(path: str | Path, payload: dict[str, Any]) -> None:
    write_atomically(path, lambda file: torch.save(payload, file))


def load(path: str | Path) -> dict[str, Any]:
    """A payload written by ``save`` (our own files only: they hold RNG states and configs)."""
    return torch.load(path, map_location="cpu", weights_only=False)
