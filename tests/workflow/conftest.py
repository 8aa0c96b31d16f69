"""Fixtures of the workflow tests: a temporary copy of the workflow with a test config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from tests.workflow.snakemake_runs import copy_workflow


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    """A copy of the workflow in ``tmp_path/workflow`` with ``overrides`` in ``test.yaml``."""

    def make(overrides: dict[str, Any]) -> Path:
        directory = copy_workflow(tmp_path / "workflow")
        (directory / "test.yaml").write_text(yaml.safe_dump(overrides))
        return directory

    return make
