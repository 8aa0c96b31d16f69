"""Shared test fixtures: the reference data beside the checkout, config.yaml and its resolved
full settings, one thread per worker, and Triton's interpreter."""

from __future__ import annotations

import os

# Triton's CPU interpreter for every test process (tests/kernels/test_triton_dvpda.py): Triton reads
# TRITON_INTERPRET when it defines each program, some of its own as it is imported, and torch's
# optimizers import it (through dynamo) in whichever test first steps Adam; so it is set here,
# before anything imports torch.
os.environ["TRITON_INTERPRET"] = "1"

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import stacklm.workflow.settings as resolution

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# pytest -n 2 runs two workers on two cores; intra-op threads would oversubscribe them.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def upstream_dir() -> Path:
    """``../shared/upstream`` (reference copies of the upstream datasets), or a skip."""
    path = SHARED / "upstream"
    if not path.is_dir():
        pytest.skip(f"reference data not available: {path} is absent (it lies beside the checkout in development and CI)")
    return path


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture
def settings(config: dict[str, Any]) -> resolution.ResolvedSettings:
    return resolution.resolve(copy.deepcopy(config))
