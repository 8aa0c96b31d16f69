"""How long ``snakemake -n`` of the full config takes to list every job (issue 6: under 30 s).

The baseline in the same run is the dry run of the ``ci`` preset (24 jobs): the ratio shows
how the DAG's construction grows with the full grid.

    python bench/dag.py
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 30.0


def dry_run(*config: str) -> tuple[int, float]:
    """(jobs listed, seconds) of one ``snakemake -n`` in the repository."""
    command = [sys.executable, "-m", "snakemake", "-n", "--workflow-profile", "none", "--cores", "1", *config]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    elapsed_s = time.perf_counter() - start
    total = re.search(r"^total\s+(\d+)$", result.stdout + result.stderr, flags=re.MULTILINE)
    if total is None:
        raise SystemExit("snakemake -n printed no job count:\n" + result.stdout[-2000:])
    return int(total.group(1)), elapsed_s


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    ci_jobs, ci_s = dry_run("--config", "preset=ci")
    full_jobs, full_s = dry_run()
    print(f"ci preset:   {ci_jobs:5d} jobs in {ci_s:5.1f} s")
    print(f"full config: {full_jobs:5d} jobs in {full_s:5.1f} s ({full_s / ci_s:.1f}x the ci dry run; target < {TARGET_S:.0f} s: {'met' if full_s < TARGET_S else 'NOT met'})")


if __name__ == "__main__":
    main()
