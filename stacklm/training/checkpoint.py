"""Files written atomically: a temporary file beside the target, fsync, then rename over it.

A reader (or a run restarted after SIGKILL) therefore sees either the previous complete file
or the new complete file, never a partial one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, IO

import torch


def write_atomically(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write`` on a temporary binary file beside ``path``, then move it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def save(path: str | Path, payload: dict[str, Any]) -> None:
    write_atomically(path, lambda file: torch.save(payload, file))


def load(path: str | Path) -> dict[str, Any]:
    """A payload written by ``save`` (our own files only: they hold RNG states and configs)."""
    return torch.load(path, map_location="cpu", weights_only=False)
