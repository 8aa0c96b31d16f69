"""Training-state and model files: tensors and plain values, written atomically, loaded without
running code.

A file holds ``{"format": FORMAT, "content": payload}``, where the payload is built of tensors,
``dict``, ``list``, ``tuple``, ``str``, numbers, booleans and ``None`` only. It is read with
``torch.load(weights_only=True)``, whose unpickler refuses every other global, so a crafted file
(``results/runs`` is shared between people) cannot call ``os.system`` or any other function: it
fails, naming the file, like a truncated, empty or garbage one, and like a file of an older
stacklm, which pickled Python objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from stacklm.atomic import write_atomically
from stacklm.errors import located

FORMAT = "stacklm-tensors-1"
ADVICE = "delete it, and the job that wrote it writes it again"


def save(path: str | Path, payload: dict[str, Any]) -> None:
    write_atomically(path, lambda file: torch.save({"format": FORMAT, "content": payload}, file))


def load(path: str | Path) -> dict[str, Any]:
    """The payload ``save`` wrote at ``path``; a ``StacklmError`` naming the file for any other."""
    try:
        stored = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        raise located(path, None, f"cannot read: {error.strerror or error}") from None
    except Exception as error:  # torch and pickle raise a dozen types for a file they cannot parse
        raise located(path, None, f"not a stacklm file that loads safely ({_reason(error)}); {ADVICE}") from None
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        raise located(path, None, f"not in the format {FORMAT} (written by an older stacklm, or not by stacklm); {ADVICE}")
    return stored["content"]


def _reason(error: Exception) -> str:
    """The first line of ``error``: torch's weights-only refusal names the global it refused."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "Weights only load failed" in str(error):
        refused = next((line.strip() for line in str(error).splitlines() if "Unsupported global" in line), "")
        return f"it would have to run code to load{': ' + refused if refused else ''}"
    return first
