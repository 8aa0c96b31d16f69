"""The build of the compiled kernels (``stacklm/stacks/kernels/compiled.py``): what decides a rebuild."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from torch.utils import cpp_extension

from stacklm.stacks.kernels import compiled


def test_a_header_whose_content_changes_changes_the_build_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    header = tmp_path / "lanes.h"
    shutil.copy(compiled.HEADERS[0], header)
    monkeypatch.setattr(compiled, "HEADERS", [header])
    before = compiled.compile_flags()
    header.write_text(header.read_text().replace("LANE_COUNT = 8", "LANE_COUNT = 4"))
    changed = compiled.compile_flags()
    assert changed != before
    assert [flag for flag in changed if flag not in before] == [f"-DSTACKLM_HEADERS_DIGEST={compiled.headers_digest()}"]
    shutil.copy(Path(compiled.__file__).with_name("lanes.h"), header)
    assert compiled.compile_flags() == before


def test_load_builds_with_the_header_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(cpp_extension, "load", lambda **arguments: calls.append(arguments))
    monkeypatch.setattr(compiled, "_loaded", False)
    monkeypatch.setattr(compiled, "_error", None)
    compiled.load()
    assert [call["extra_cflags"] for call in calls] == [compiled.compile_flags()]
    assert f"-DSTACKLM_HEADERS_DIGEST={compiled.headers_digest()}" in calls[0]["extra_cflags"]


def test_every_header_the_sources_include_is_hashed() -> None:
    included = {name for source in compiled.SOURCES for name in re.findall(r'^#include "([^"]+)"', source.read_text(), re.MULTILINE)}
    assert included == {header.name for header in compiled.HEADERS}
    assert all(header.is_file() and header.parent == compiled.SOURCE.parent for header in compiled.HEADERS)
