"""What every experiment shares: one seed derivation, one selection rule, the figure formats,
the JSON files the rules write, the torch device of a job and its command-line options, and
the architectures' path slugs."""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Sequence

from stacklm.atomic import write_text_atomically
from stacklm.errors import StacklmError

FIGURE_EXTENSIONS: tuple[str, ...] = ("png", "pdf")  # every figure is written in both


def derived_seed(*parts: str | int | float | None) -> int:
    """A 64-bit seed that depends on every part and on nothing else (not on PYTHONHASHSEED)."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def select_lowest(scores: Sequence[float], candidates: str) -> int:
    """Index of the lowest finite validation score (the first on ties): a search trial by its
    cross-entropy, a CFL run by its Δ. A NaN or ∞ never wins; ``candidates`` names them in
    the error raised when none is finite."""
    finite = [(score, position) for position, score in enumerate(scores) if math.isfinite(score)]
    if not finite:
        raise StacklmError(f"no {candidates} reached a finite validation score")
    return min(finite)[1]


def write_json(path: str | Path, data: Any) -> None:
    """``data`` as sorted, indented JSON at ``path``, written atomically."""
    write_text_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def device(gpus: int) -> str:
    """The torch device of a job given its ``gpu`` resource."""
    return "cuda" if gpus > 0 else "cpu"


def add_resource_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--threads`` of a command that runs a model (``stacklm.training.run_files``'
    ``choose_device`` and ``set_threads`` read them)."""
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when visible, else cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads; default: the cores this job may use")


# Architecture names (tables, config) and slugs (paths), from the model registry. The registry
# imports torch, so it is imported where needed: `stacklm hparams` and `select` start quickly.


def architecture_slug(name: str) -> str:
    from stacklm.models.registry import ARCHITECTURES

    return ARCHITECTURES[name].slug


@functools.cache
def architecture_name(slug: str) -> str:
    """The registry name whose path slug is ``slug`` (asked for every job of the DAG: cached)."""
    from stacklm.models.registry import ARCHITECTURES

    for name, entry in ARCHITECTURES.items():
        if entry.slug == slug:
            return name
    raise StacklmError(f"no architecture has the path slug {slug!r}")
