"""How long the whole DAG takes at the ``small`` preset (issue 15: at most 8 minutes on 2 cores).

Each preset runs from nothing in a fresh folder holding only a copy of ``config.yaml`` (the
Snakefile, rules and profiles are the repository's), through ``profiles/cpu``, as the
README's pipeline command does. The folder lies beside a link ``shared`` to the checkout's
``../shared``, and ``ptb.mirror`` names ``../shared/upstream`` (as ``make pipeline
PTB_MIRROR=../shared/upstream`` does), so that the PTB jobs read the reference copies instead
of downloading them. The baseline in the same run is the ``ci`` preset (one task,
two architectures): the ratio shows what the full grid of tasks, architectures and CFL runs
costs over it. Per rule, the sum of the jobs' wall times (from Snakemake's log) says where
the time goes.

    python bench/pipeline.py                 # ci, then small
    python bench/pipeline.py --preset small  # small only, no baseline
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = {"small": 8 * 60.0, "ci": 3 * 60.0}
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
STARTED = re.compile(r"^(?:local)?rule (\w+):$")
JOB = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")


def rule_times(log: str) -> dict[str, list[float]]:
    """Each rule's job wall times in seconds, from a Snakemake log (whole-second stamps)."""
    times: dict[str, list[float]] = collections.defaultdict(list)
    started: dict[str, tuple[str, datetime.datetime]] = {}
    now = rule = None
    for line in log.splitlines():
        if stamp := STAMP.match(line):
            now = datetime.datetime.strptime(stamp.group(1), "%a %b %d %H:%M:%S %Y")
        elif start := STARTED.match(line):
            rule = start.group(1)
        elif (job := JOB.match(line)) and rule is not None and now is not None:
            started[job.group(1)] = (rule, now)
            rule = None
        elif (end := FINISHED.match(line)) and end.group(1) in started and now is not None:
            name, began = started.pop(end.group(1))
            times[name].append((now - began).total_seconds())
    return times


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (Snakemake and its jobs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_preset(preset: str) -> tuple[float, float, dict[str, list[float]]]:
    """(wall seconds, CPU seconds, per-rule job times) of the whole DAG of ``preset`` in a fresh folder."""
    with tempfile.TemporaryDirectory(prefix=f"stacklm-bench-{preset}-") as parent:
        (Path(parent) / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
        folder = Path(parent) / "run"
        folder.mkdir()
        shutil.copy2(ROOT / "config.yaml", folder)
        environment = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--profile", str(ROOT / "profiles" / "cpu"),
                   "--config", f"preset={preset}", "ptb={mirror: ../shared/upstream}"]
        start, start_cpu_s = time.perf_counter(), children_cpu_s()
        result = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True)
        elapsed_s, cpu_s = time.perf_counter() - start, children_cpu_s() - start_cpu_s
        if result.returncode != 0:
            raise SystemExit(f"the {preset} preset failed:\n{(result.stdout + result.stderr)[-3000:]}")
        logs = sorted((folder / ".snakemake" / "log").glob("*.snakemake.log"))
        return elapsed_s, cpu_s, rule_times(logs[-1].read_text())


def report(preset: str, elapsed_s: float, cpu_s: float, times: dict[str, list[float]]) -> None:
    jobs = sum(len(values) for values in times.values())
    verdict = "met" if elapsed_s <= TARGET_S[preset] else "NOT met"
    print(f"{preset} preset: {jobs} jobs in {elapsed_s / 60:.1f} min (target {TARGET_S[preset] / 60:.0f} min: {verdict});"
          f" {cpu_s / 60:.1f} CPU-minutes (Snakemake and its jobs, user + system)")
    width = max(map(len, times), default=0)
    for rule, values in sorted(times.items(), key=lambda item: -sum(item[1])):
        print(f"  {rule:{width}s} {len(values):4d} jobs  {sum(values):7.0f} s in all  {sum(values) / len(values):5.1f} s each  {max(values):5.0f} s at most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("small",), default=None, help="run only this preset, without the ci baseline")
    arguments = parser.parse_args()
    if arguments.preset is None:
        baseline_s, baseline_cpu_s, baseline = run_preset("ci")
        report("ci", baseline_s, baseline_cpu_s, baseline)
    elapsed_s, cpu_s, times = run_preset("small")
    report("small", elapsed_s, cpu_s, times)
    if arguments.preset is None:
        print(f"small / ci: {elapsed_s / baseline_s:.1f}x")


if __name__ == "__main__":
    main()
