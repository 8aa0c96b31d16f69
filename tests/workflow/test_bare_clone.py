"""A clone with nothing beside it (no ``../shared``): the small preset's DAG downloads the PTB and
SyntaxGym files into ``resources/``, a mirror given by config replaces the downloads (its files are
the PTB jobs' inputs), and no default path of the settings points outside the checkout."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from stacklm.workflow.settings import ResolvedSettings, plain
from tests.workflow.snakemake_runs import ROOT, run_snakemake


def strings(value: Any, key: str = "") -> list[tuple[str, str]]:
    """Every string of a nested config, with its dotted key."""
    if isinstance(value, dict):
        return [item for name, inner in value.items() for item in strings(inner, f"{key}.{name}" if key else str(name))]
    if isinstance(value, list):
        return [item for position, inner in enumerate(value) for item in strings(inner, f"{key}[{position}]")]
    return [(key, value)] if isinstance(value, str) else []


def leaves_the_checkout(text: str) -> bool:
    path = text.split(":///", 1)[-1]  # a URI's path (sqlite:///results/…)
    return path.startswith(("/", "~")) or ".." in Path(path).parts


def test_no_default_path_leaves_the_checkout() -> None:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    outside = [(key, value) for key, value in strings(config) + strings(plain(ResolvedSettings())) if leaves_the_checkout(value)]
    assert outside == []
    assert leaves_the_checkout("../shared/upstream") and leaves_the_checkout("sqlite:////abs/m.db") and not leaves_the_checkout("sqlite:///results/m.db")


def jobs(output: str) -> set[str]:
    return set(re.findall(r"^(?:local)?rule (\w+):", output, flags=re.MULTILINE))


@pytest.mark.e2e
def test_a_bare_clones_small_dag_downloads_the_ptb_data(workflow_copy: Callable[[dict[str, Any]], Path]) -> None:
    directory = workflow_copy({"preset": "small"})
    assert not (directory.parent / "shared").exists()
    result = run_snakemake(directory, "-n", "-p", "--configfile", "test.yaml")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert {"ptb_download", "ptb_suites", "ptb_train_group1", "ptb_evaluate_group1"} <= jobs(result.stdout)
    assert "stacklm ptb download --out resources/ptb" in result.stdout
    assert "stacklm ptb suites --suites number_src reflexive_src_fem center_embed --out resources/sg-test-suites" in result.stdout
    assert "--data resources/ptb" in result.stdout and "--syntaxgym resources/sg-test-suites" in result.stdout


@pytest.mark.e2e
def test_with_a_mirror_given_by_config_the_ptb_jobs_read_it_and_nothing_is_downloaded(
    workflow_copy: Callable[[dict[str, Any]], Path], upstream_dir: Path, tmp_path: Path
) -> None:
    mirror = tmp_path / "offline copies"
    mirror.mkdir()
    for folder in ("ptb", "sg-test-suites"):
        (mirror / folder).symlink_to(upstream_dir / folder)
    directory = workflow_copy({"preset": "small", "ptb": {"mirror": str(mirror)}})
    result = run_snakemake(directory, "-n", "-p", "--configfile", "test.yaml")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert not {"ptb_download", "ptb_suites"} & jobs(result.stdout) and "ptb_train_group1" in jobs(result.stdout)
    assert f"input: {mirror}/ptb/ptb.train.txt" in result.stdout
    assert f"--data '{mirror}/ptb'" in result.stdout and f"--syntaxgym '{mirror}/sg-test-suites'" in result.stdout

    (mirror / "sg-test-suites").unlink()  # a mirror without the suites: the run stops before any job, naming the key
    result = run_snakemake(directory, "-n", "--configfile", "test.yaml")
    assert result.returncode != 0
    assert re.search(r"config key 'ptb.mirror': .*sg-test-suites/circuits.json not found .*ptb.mirror: null to download them", result.stderr + result.stdout)


@pytest.mark.e2e
def test_a_bare_clones_ptb_run_with_a_mirror_given_by_config_passes(workflow_copy: Callable[[dict[str, Any]], Path], upstream_dir: Path, tmp_path: Path) -> None:
    """The small preset's PTB part (one model, one restart: a minute) trained, scored and reported from the mirror's files."""
    import pandas as pd

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for folder in ("ptb", "sg-test-suites"):
        (mirror / folder).symlink_to(upstream_dir / folder)
    directory = workflow_copy({"preset": "small", "ptb": {"mirror": str(mirror), "models": ["lstm"], "figure_models": ["lstm"], "restarts": 1}})
    result = run_snakemake(directory, "--cores", "2", "--configfile", "test.yaml", "--", "results/ptb/metrics.parquet")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    metrics = pd.read_parquet(directory / "results/ptb/metrics.parquet")
    assert set(metrics["split"]) == {"validation", "test", "syntaxgym"} and set(metrics["architecture"]) == {"lstm"}
    assert not (directory / "resources").exists()  # nothing downloaded
