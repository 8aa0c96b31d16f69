"""Files written atomically: a temporary file beside the target, fsync, then rename over it.

A reader, or a run restarted after SIGKILL, therefore sees either the previous complete file
or the new complete file, never a partial one; a failure while writing leaves no trace. Every
file stacklm writes goes through ``write_atomically``.

The temporary file is created with mode 0666 less the umask, as ``open`` creates files: on a
shared folder, results are as readable as the user's other files (``tempfile.mkstemp`` would
make every one 0600). A write that fails (a full disk, no permission) raises a
``StacklmError`` naming the target file.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import IO, Callable

from stacklm.errors import located


def write_atomically(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write`` on a temporary binary file beside ``path``, then move it to ``path``."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise located(path, None, f"cannot create its folder: {error.strerror or error}") from None
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    except OSError as error:
        raise located(path, None, f"cannot write: {error.strerror or error}") from None
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise located(path, None, f"cannot write: {error.strerror or error}") from None
        raise


def write_bytes_atomically(path: str | Path, data: bytes) -> None:
    write_atomically(path, lambda file: file.write(data))


def write_text_atomically(path: str | Path, text: str) -> None:
    """``text`` as UTF-8 with the newlines it holds (LF), written atomically."""
    write_bytes_atomically(path, text.encode("utf-8"))
