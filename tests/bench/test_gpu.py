"""bench/gpu.py's dry run on the CPU: every section runs and writes its records (no GPU needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_dry_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    command = [sys.executable, str(ROOT / "bench" / "gpu.py"), "--device", "cpu", "--dry-run", "--architectures", "Tf+Nd", "cfl/NS+S+U", "--out", str(out)]
    finished = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, timeout=1200)
    assert finished.returncode == 0, finished.stderr
    report = json.loads(out.read_text())
    assert report["complete"] and report["device"] == "cpu"
    assert [row["architecture"] for row in report["checks"]] == ["Tf+Nd", "cfl/NS+S+U"]
    assert all(row["graphed_step"] == 0.0 for row in report["checks"])  # on the CPU: the eager step on an unpadded batch
    assert [(row["architecture"], row["n"]) for row in report["training"]] == [("Tf+Nd", 8), ("cfl/NS+S+U", 8)]
    assert all(row["tokens_per_s"] > 0 and row["eager_tokens_per_s"] > 0 for row in report["training"])
    assert [(row["architecture"], row["cuda_graphs"]) for row in report["loop"]] == [("Tf+Nd", False)]
    assert report["loop"][0]["steps"] > 0 and report["runs_per_process"] and report["runs_per_step"]
