"""Training-state and model files: tensors and plain values, written atomically, loaded without
running code.

A file holds ``{"format": FORMAT, "content": payload}``, where the payload is built of tensors,
``dict``, ``list``, ``tuple``, ``str``, numbers, booleans and ``None`` only. It is read with
``torch.load(weights_only=True)``, whose unpickler refuses every other global, so a crafted file
(``results/runs`` is shared between people) cannot call ``os.system`` or any other function: it
fails, naming the file, like a truncated, empty or garbage one, and like a file of an older
stacklm, which pickled Python objects.

Paths and locks. The resumable state of a run lives beside the path the workflow names
(``results/checkpoints/T/A/final/1.pt``), keyed by the run's fingerprint (what determines its
parameters: config, seed, data): ``1.<16 hex digits>.pt``. A changed config therefore starts a
state of its own instead of meeting the old one, and a finished run deletes the states of
other fingerprints there. While a process trains a run it holds an exclusive ``flock`` on
``1.<fingerprint>.lock``; a second writer of the same state (a job orphaned by a ``kill -9``
of Snakemake, still running when the rerun starts) is refused, naming the holder. The kernel
releases the lock when its holder dies, however it dies.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

import torch

from stacklm.atomic import write_atomically
from stacklm.errors import StacklmError, located

FORMAT = "stacklm-tensors-1"
ADVICE = "delete it, and the job that wrote it writes it again"


def save(path: str | Path, payload: dict[str, Any]) -> None:
    """``payload`` at ``path``, written atomically: a write that fails (a full disk) is a
    ``StacklmError`` naming the file and the cause, and leaves the file there before as it was."""

    def write(file: IO[bytes]) -> None:
        recorded = _RecordedFailure(file)
        try:
            torch.save({"format": FORMAT, "content": payload}, recorded)
        except RuntimeError:
            if recorded.error is None:
                raise
            raise recorded.error from None  # write_atomically names the file and the cause

    write_atomically(path, write)


class _RecordedFailure:
    """A binary file that keeps the error of a failed write: torch's writer turns it into a
    RuntimeError that no longer says why ("unexpected pos 768 vs 662" on a full disk)."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.file.flush()


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


def load_parameters(model: torch.nn.Module, parameters: Any, path: str | Path) -> None:
    """``model.load_state_dict(parameters)``, the parameters read from ``path``; parameters that do
    not fit the model (a tensor missing, extra, cut or transposed) are a one-line ``StacklmError``
    naming the file and the first misfit."""
    try:
        model.load_state_dict(parameters)
    except (RuntimeError, TypeError, AttributeError) as error:
        details = [line.strip() for line in str(error).splitlines() if line.strip()]
        misfit = details[1] if len(details) > 1 else details[0] if details else type(error).__name__
        raise located(path, None, f"its parameters do not fit the model it describes ({misfit[:300]}); {ADVICE}") from None


def _reason(error: Exception) -> str:
    """The first line of ``error``: torch's weights-only refusal names the global it refused."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "Weights only load failed" in str(error):
        refused = next((line.strip() for line in str(error).splitlines() if "Unsupported global" in line), "")
        return f"it would have to run code to load{': ' + refused if refused else ''}"
    return first


def fingerprint(source: dict[str, Any]) -> str:
    """The sha256 of ``source`` (what determines a run's parameters) as sorted-key JSON."""
    return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()


def keyed_path(base: str | Path, fingerprint: str) -> Path:
    """The state of the run ``fingerprint`` among those sharing ``base``: ``STEM.<fingerprint[:16]>.SUFFIX``."""
    base = Path(base)
    return base.with_name(f"{base.stem}.{fingerprint[:16]}{base.suffix}")


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold the lock of the state ``path`` while the block runs; refuse if another process holds it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise located(path, None, f"cannot create the training state's folder or lock: {error.strerror or error}") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 200, 0).decode(errors="replace").strip() or "another process"
            raise located(path, None, f"{holder} is training this run and writing this checkpoint (a job left running by a killed "
                                      "Snakemake, or a second pipeline in this folder); wait for it to end or stop it, then rerun") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"process {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def remove_others(base: str | Path, keep: Path) -> None:
    """Delete the states beside ``keep`` of other fingerprints (runs of an earlier config) that no
    process holds, and ``base`` itself, unkeyed, as an older stacklm wrote it."""
    base = Path(base)
    pattern = re.compile(re.escape(base.stem) + r"\.[0-9a-f]{16}" + re.escape(base.suffix))
    others = [path for path in base.parent.iterdir() if pattern.fullmatch(path.name) and path != keep] if base.parent.is_dir() else []
    for other in others:
        try:
            with exclusive(other):
                other.unlink(missing_ok=True)
                other.with_suffix(".lock").unlink(missing_ok=True)
        except StacklmError:
            continue  # a live process is training that run
    base.unlink(missing_ok=True)
