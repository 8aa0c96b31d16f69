"""Atomic writes: the umask decides the mode, as for ``open``; a failed write names its file and
leaves nothing behind."""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stacklm.atomic import write_text_atomically
from stacklm.errors import StacklmError


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_a_file_gets_the_mode_open_gives_under_the_umask(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        write_text_atomically(tmp_path / "atomic.txt", "text\n")
        (tmp_path / "plain.txt").write_text("text\n")
    finally:
        os.umask(previous)
    assert mode(tmp_path / "atomic.txt") == mode(tmp_path / "plain.txt") == 0o666 & ~umask
    assert sorted(path.name for path in tmp_path.iterdir()) == ["atomic.txt", "plain.txt"]


def stacklm(arguments: list[str], cwd: Path, file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """``stacklm ARGUMENTS`` in a child with umask 022 and, optionally, a file size limit (a
    write past it fails with EFBIG, as one on a full disk fails with ENOSPC)."""

    def limits() -> None:
        os.umask(0o022)
        if file_size_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run([sys.executable, "-m", "stacklm.cli", *arguments], cwd=cwd, preexec_fn=limits,
                          capture_output=True, text=True, timeout=300)


GENERATE = ["data", "generate", "--task", "question-formation", "--seed", "1", "--train", "300", "--validation", "20",
            "--test", "20", "--generalization", "20", "--out", "data"]


def test_every_file_of_the_data_stage_is_readable_by_the_group_and_others_under_umask_022(tmp_path: Path) -> None:
    result = stacklm(GENERATE, tmp_path)
    assert result.returncode == 0, result.stderr
    written = sorted((tmp_path / "data").iterdir())
    assert {path.name for path in written} == {"train.tsv", "validation.tsv", "test.tsv", "generalization.tsv", "construction.json"}
    assert {path.name: mode(path) for path in written} == {path.name: 0o644 for path in written}


def test_a_write_that_fails_for_lack_of_space_is_one_line_naming_the_file(tmp_path: Path) -> None:
    result = stacklm(GENERATE, tmp_path, file_size_limit=4096)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [f"stacklm: error: data/train.tsv: cannot write: {os.strerror(27)}"]  # EFBIG
    assert not any(path.name.endswith(".tmp") for path in (tmp_path / "data").iterdir())


def test_a_folder_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StacklmError, match=f"^{tmp_path / 'file' / 'out.txt'}: cannot create its folder: File exists$"):
        write_text_atomically(tmp_path / "file" / "out.txt", "text")
