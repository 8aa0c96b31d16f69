"""An exclusive lock on a build folder: a wait that says so and ends, a dead holder's lock taken over.

A process that builds into a shared folder (the compiled kernels, built at first use by
whichever command needs them first) holds an exclusive ``flock`` on ``<folder>/stacklm.lock``
while it builds, and writes who it is into that file. The kernel releases the lock when its
holder dies, however it dies (Ctrl-C, SIGKILL from a scheduler), so a killed build never blocks
the next one; the holder's line stays in the file, and the next holder says it took the folder
over from it. A process that finds the lock held says on ``stream`` that it waits, naming the
folder and the holder, and waits at most ``wait_s`` seconds: then it fails, naming the file to
delete if the holder is not building (a process that hangs, or one on another machine sharing
the folder).

While a process waits or builds, SIGTERM ends the wait or the build with
:class:`BuildInterrupted`, after running the handler installed before (a training run's stop
request, which only sets a flag): a scheduler's polite cancel ends the process instead of
leaving it waiting, or building on after its compiler was stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Iterator, TextIO

from stacklm.errors import StacklmError

LOCK_NAME = "stacklm.lock"
POLL_S = 0.2  # how often a waiting process tries the lock again


class BuildInterrupted(StacklmError):
    """SIGTERM arrived while the process waited for a build or built."""


class BuildLockTimeout(StacklmError):
    """The build folder stayed locked by another process for longer than the wait allows."""


@contextlib.contextmanager
def build_lock(folder: Path, what: str, wait_s: float, stream: TextIO | None = None) -> Iterator[None]:
    """Hold the build lock of ``folder`` (created if missing) while the block runs.

    ``what`` names the build in messages ("the compiled kernels' build"). Lines go to ``stream``
    (default stderr): one when the lock is held by another process, naming ``folder`` and the
    holder, and one when the lock is taken over from a holder that died holding it. Raises
    :class:`BuildLockTimeout` after ``wait_s`` seconds of waiting, and :class:`BuildInterrupted`
    on SIGTERM while waiting or inside the block.
    """
    stream = stream if stream is not None else sys.stderr
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_NAME
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with _interrupted_by_sigterm(what, folder):
            _acquire(descriptor, lock, what, wait_s, stream)
            previous = _holder(descriptor)
            if previous:
                print(f"taking over {folder} for {what}: its lock was left by {previous}, which has ended", file=stream, flush=True)
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S %Z')}".encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(descriptor, 0)  # released in order: the next holder takes nothing over
    finally:
        os.close(descriptor)  # releases the lock


def _acquire(descriptor: int, lock: Path, what: str, wait_s: float, stream: TextIO) -> None:
    """Take the lock on ``descriptor``, saying once on ``stream`` that it waits, for at most ``wait_s`` s."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _holder(descriptor) or "another process"
        if not said:
            print(f"waiting for {what} in {lock.parent}, held by {holder} (at most {wait_s:g} s)…", file=stream, flush=True)
            said = True
        if time.monotonic() >= deadline:
            raise BuildLockTimeout(
                f"{lock}: waited {wait_s:g} s for {what}, held by {holder}; if that process is not building "
                f"(it hangs, or it ran on another machine and died), end it or delete {lock}, then run again"
            )
        time.sleep(POLL_S)


def _holder(descriptor: int) -> str:
    """The line the lock's holder wrote (empty when it released the lock in order)."""
    return os.pread(descriptor, 300, 0).decode(errors="replace").strip()


@contextlib.contextmanager
def _interrupted_by_sigterm(what: str, folder: Path) -> Iterator[None]:
    """SIGTERM raises :class:`BuildInterrupted` inside the block, after the handler installed before
    it runs. The block ends with it even where code it calls turns the exception into another
    (``cpp_extension`` reports any failure of ``ninja --version`` as "Ninja is required") or
    swallows it. Only the main thread receives signals in Python; elsewhere, and where SIGTERM is
    ignored, nothing changes."""
    before = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or before in (signal.SIG_IGN, None):  # None: set outside Python
        yield
        return
    received: list[str] = []

    def interrupted() -> BuildInterrupted:
        return BuildInterrupted(f"{received[0]} while waiting for or running {what} in {folder}: stopped")

    def interrupt(number: int, frame: FrameType | None) -> None:
        if callable(before):
            before(number, frame)
        received.append(signal.Signals(number).name)
        raise interrupted()

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    except BuildInterrupted:
        raise
    except BaseException as error:
        if received:
            raise interrupted() from error
        raise
    else:
        if received:
            raise interrupted()
    finally:
        signal.signal(signal.SIGTERM, before)
