"""The project's error type: a message a user can act on, naming the file, line or key."""

from __future__ import annotations

from pathlib import Path


class StacklmError(Exception):
    """An error caused by the user's input; the CLI prints it without a traceback (exit status 1)."""


class UsageError(StacklmError):
    """Options that argparse accepts one by one but not together; exit status 2, as argparse's own."""


def located(path: str | Path, line: int | None, message: str) -> StacklmError:
    """An error about ``path`` (and 1-based ``line``), formatted as ``path:line: message``."""
    where = f"{path}:{line}" if line is not None else str(path)
    return StacklmError(f"{where}: {message}")
