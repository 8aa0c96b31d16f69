"""A temporary copy of the workflow, and Snakemake run inside it as a user would run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_FILES = ("Snakefile", "config.yaml", "workflow", "profiles", "envs")


def copy_workflow(destination: Path) -> Path:
    """The Snakefile, config, rules, schema, report captions, profiles and conda envs, copied under ``destination``."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns(".snakemake", "__pycache__"))
        else:
            shutil.copy2(source, destination / name)
    return destination


def snakemake_environment() -> dict[str, str]:
    """The current environment with this interpreter's bin/ first on PATH (the rules call `stacklm`)."""
    environment = dict(os.environ)
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    environment["MLFLOW_DISABLE_TELEMETRY"] = "true"
    return environment


def snakemake_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", *arguments]


def run_snakemake(directory: Path, *arguments: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        snakemake_command(*arguments),
        cwd=directory,
        env=snakemake_environment(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
