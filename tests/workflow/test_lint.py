"""``snakemake --lint`` passes: every rule names its conda env, and no parameter hard-codes a
path that its input or output already holds."""

from pathlib import Path

import pytest

from tests.workflow.snakemake_runs import copy_workflow, run_snakemake


@pytest.mark.e2e
def test_snakemake_lint_finds_nothing(tmp_path: Path) -> None:
    directory = copy_workflow(tmp_path / "workflow")
    result = run_snakemake(directory, "--lint", timeout_s=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "Lints for" not in output

