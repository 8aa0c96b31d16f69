"""Files written atomically: a temporary file beside the target, fsync, then rename over it.

A reader, or a run restarted after SIGKILL, therefore sees either the previous complete file
or the new complete file, never a partial one; a failure while writing leaves no trace.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Callable


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


def write_bytes_atomically(path: str | Path, data: bytes) -> None:
    write_atomically(path, lambda file: file.write(data))


def write_text_atomically(path: str | Path, text: str) -> None:
    """``text`` as UTF-8 with the newlines it holds (LF), written atomically."""
    write_bytes_atomically(path, text.encode("utf-8"))
