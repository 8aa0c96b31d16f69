"""The lock of a build folder (``stacklm/build_lock.py``): a wait that says so and ends, a dead
holder's lock taken over, SIGTERM ending the wait."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from stacklm.build_lock import LOCK_NAME, BuildLockTimeout, build_lock

ROOT = Path(__file__).resolve().parents[1]


def python(code: str) -> subprocess.Popen[str]:
    """A Python process of this checkout running ``code``, its stdout and stderr piped."""
    environment = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding the build lock of ``tmp_path / "build"`` (killed at the end)."""
    process = python(
        "import sys, time\nfrom pathlib import Path\nfrom stacklm.build_lock import build_lock\n"
        f"with build_lock(Path({str(tmp_path / 'build')!r}), 'a test build', 1):\n"
        "    print('held', flush=True)\n    time.sleep(600)\n"
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    yield process
    process.kill()
    process.communicate()


def test_a_wait_says_so_and_ends_naming_what_to_delete(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    stream = io.StringIO()
    started = time.monotonic()
    with pytest.raises(BuildLockTimeout) as refused:
        with build_lock(tmp_path / "build", "a test build", wait_s=1, stream=stream):
            pytest.fail("the lock is held by another process")
    assert time.monotonic() - started < 10
    said = stream.getvalue()
    assert f"waiting for a test build in {tmp_path / 'build'}, held by process {holder.pid} on " in said
    assert f"delete {tmp_path / 'build' / LOCK_NAME}" in str(refused.value) and f"process {holder.pid}" in str(refused.value)


def test_the_lock_of_a_dead_holder_is_taken_over(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait()
    stream = io.StringIO()
    with build_lock(tmp_path / "build", "a test build", wait_s=0, stream=stream):
        assert f"process {os.getpid()} on " in (tmp_path / "build" / LOCK_NAME).read_text()
    assert f"its lock was left by process {holder.pid} on " in stream.getvalue() and "waiting" not in stream.getvalue()
    assert (tmp_path / "build" / LOCK_NAME).read_text() == ""  # released in order
    with build_lock(tmp_path / "build", "a test build", wait_s=0, stream=stream):
        pass
    assert "taking over" not in stream.getvalue().split("\n", 1)[1]


def test_sigterm_ends_a_wait_that_a_stop_request_would_not(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    """A training run's SIGTERM handler only sets a flag; the wait ends the process all the same."""
    waiter = python(
        "import signal\nfrom pathlib import Path\nfrom stacklm.build_lock import build_lock\n"
        "stop = []\nsignal.signal(signal.SIGTERM, lambda number, frame: stop.append(number))\n"
        f"with build_lock(Path({str(tmp_path / 'build')!r}), 'a test build', 600):\n    pass\n"
    )
    assert waiter.stderr is not None and waiter.stderr.readline().startswith("waiting for a test build")
    waiter.send_signal(signal.SIGTERM)
    try:
        _, error = waiter.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        waiter.kill()
        pytest.fail("a SIGTERM left the process waiting")
    assert waiter.returncode != 0
    assert f"BuildInterrupted: SIGTERM while waiting for or running a test build in {tmp_path / 'build'}" in error
