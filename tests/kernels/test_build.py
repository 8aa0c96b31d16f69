"""The build of the compiled kernels (``stacklm/kernels/build.py``): what decides a rebuild."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from torch.utils import cpp_extension

from stacklm.kernels import build

ROOT = Path(__file__).resolve().parents[2]


def test_a_header_whose_content_changes_changes_the_build_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    header = tmp_path / "lanes.h"
    shutil.copy(build.HEADERS[0], header)
    monkeypatch.setattr(build, "HEADERS", [header])
    before = build.compile_flags()
    header.write_text(header.read_text().replace("LANE_COUNT = 8", "LANE_COUNT = 4"))
    changed = build.compile_flags()
    assert changed != before
    assert [flag for flag in changed if flag not in before] == [f"-DSTACKLM_HEADERS_DIGEST={build.headers_digest()}"]
    shutil.copy(Path(build.__file__).with_name("lanes.h"), header)
    assert build.compile_flags() == before


def test_load_builds_with_the_header_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(cpp_extension, "load", lambda **arguments: calls.append(arguments))
    monkeypatch.setattr(build, "_loaded", False)
    monkeypatch.setattr(build, "_error", None)
    build.load()
    assert [call["extra_cflags"] for call in calls] == [build.compile_flags()]
    assert f"-DSTACKLM_HEADERS_DIGEST={build.headers_digest()}" in calls[0]["extra_cflags"]


def test_every_header_the_sources_include_is_hashed() -> None:
    included = {name for source in build.SOURCES for name in re.findall(r'^#include "([^"]+)"', source.read_text(), re.MULTILINE)}
    assert included == {header.name for header in build.HEADERS}
    assert all(header.is_file() and header.parent == build.SOURCE.parent for header in build.HEADERS)


def test_the_build_states_cxx20_after_torchs_own_standard() -> None:
    flags = build.compile_flags()
    assert flags[0] == "-std=c++20" and sum(flag.startswith("-std=") for flag in flags) == 1


BROKEN_SOURCE = """#include <cstdint>
std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }  // <bit> is not included
int also_broken() { return undeclared; }
"""


def test_a_failed_build_names_the_compilers_first_error_and_keeps_the_output(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A real compiler on a broken source: the error names its first error line and the log of the
    whole output, and the compiler's command line ends with our standard, after torch's."""
    source = tmp_path / "broken.cpp"
    source.write_text(BROKEN_SOURCE)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    monkeypatch.setattr(build, "SOURCES", [source])
    monkeypatch.setattr(build, "_loaded", False)
    monkeypatch.setattr(build, "_error", None)
    built, error = build.available()
    assert not built
    log = build.build_directory() / "build-error.log"
    assert re.fullmatch(
        rf"the compiled kernels \(broken\.cpp\) failed to build: {re.escape(str(source))}:2:\d+: error: .*bit_cast.* \(the compiler's whole output: {re.escape(str(log))}\)",
        error,
    ), error
    assert "undeclared" in log.read_text() and "undeclared" not in error
    flags = next(line for line in (build.build_directory() / "build.ninja").read_text().splitlines() if line.startswith("cflags = "))
    assert [flag for flag in flags.split() if flag.startswith("-std=")][-1] == "-std=c++20"
    assert build.available() == (False, error)  # the failure is kept: no second build


def test_first_error_takes_the_first_error_line() -> None:
    output = "Error building extension 'x': [1/2] c++ -c a.cpp\nIn file included from a.cpp:1:\na.h:3:1: warning: w\na.cpp:5:2: error: first\na.cpp:9:2: error: second\n"
    assert build.first_error(output) == "a.cpp:5:2: error: first"
    assert build.first_error("ninja: build stopped\n\n") == "ninja: build stopped"
    assert build.first_error("") == "(no output)"


BUILD_S = 900  # the longest a real build may take on a loaded machine here (49 s on two cores)


def start_build(tmp_path: Path, code: str = "build.load()") -> subprocess.Popen[str]:
    """A process building the kernels from nothing into ``tmp_path`` ($TORCH_EXTENSIONS_DIR), in a
    process group of its own (as a job's processes are), once its build is under way: it has said
    so and holds torch's own lock file."""
    environment = os.environ | {"PYTHONPATH": str(ROOT), "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-c", f"from stacklm.kernels import build\n{code}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, start_new_session=True,
    )  # fmt: skip
    assert process.stderr is not None
    assert process.stderr.readline() == "building the compiled kernels (first use, about a minute)…\n"
    deadline = time.monotonic() + 60
    while not (folder_of(tmp_path) / "lock").exists():
        assert time.monotonic() < deadline, "the build took no lock of torch's within a minute"
        time.sleep(0.05)
    return process


def folder_of(extensions: Path) -> Path:
    """The build folder of this checkout under ``extensions`` ($TORCH_EXTENSIONS_DIR)."""
    return extensions / build.build_directory().name


@pytest.mark.e2e
def test_a_killed_build_is_taken_over_by_the_next(tmp_path: Path) -> None:
    """Killed during its first build (SIGKILL from a scheduler), a process leaves torch's lock file
    behind; the next load takes the folder over and builds, where it used to wait forever."""
    killed = start_build(tmp_path)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate()
    assert (folder_of(tmp_path) / "lock").exists()
    environment = os.environ | {"PYTHONPATH": str(ROOT), "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    try:
        after = subprocess.run(
            [sys.executable, "-c", "from stacklm.kernels import build\nbuild.load()\nprint('loaded')"],
            capture_output=True, text=True, env=environment, timeout=BUILD_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the load after a killed build did not end within {BUILD_S} s")
    assert after.returncode == 0, after.stderr
    assert after.stdout == "loaded\n"
    assert f"taking over {folder_of(tmp_path)} for the compiled kernels' build: its lock was left by process {killed.pid} on " in after.stderr
    assert "building the compiled kernels (first use, about a minute)…" in after.stderr
    assert not (folder_of(tmp_path) / "lock").exists()


@pytest.mark.e2e
def test_sigterm_during_the_build_ends_the_process_without_falling_back(tmp_path: Path) -> None:
    """SIGTERM to a job's processes during the build stops the compiler; the command ends instead of
    training on with the PyTorch fallback (whose dropout draws other masks), even where a training
    run's handler only sets a stop flag."""
    code = "import signal\nsignal.signal(signal.SIGTERM, lambda number, frame: None)\nprint(build.available())"
    building = start_build(tmp_path, code)
    os.killpg(building.pid, signal.SIGTERM)
    try:
        output, error = building.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(building.pid, signal.SIGKILL)
        pytest.fail("a SIGTERM left the build running")
    assert building.returncode != 0 and output == "", output
    assert f"BuildInterrupted: SIGTERM while waiting for or running the compiled kernels' build in {folder_of(tmp_path)}" in error
