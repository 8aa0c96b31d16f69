"""Benchmark: all four splits of all seven tasks at the paper's sizes (100k/1k/10k/10k).

Each task is built, validated and written exactly as ``stacklm data generate`` does, one task
per worker process (``--workers``, default 2). Prints seconds, examples per second, and the
load average before and after (the machine may be shared). Target: under 60 s on 2 cores.

    .venv/bin/python bench/data.py [--workers 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from stacklm.data.dataset import make_splits, write_dataset
from stacklm.data.splits import SplitSizes
from stacklm.tasks import TASK_NAMES, get_task

TARGET_SECONDS = 60.0


def build(name: str, folder: str) -> tuple[str, int, float, float]:
    """(task, examples, wall seconds, CPU seconds) of one task's generate + validate + write."""
    start, start_cpu = time.perf_counter(), time.process_time()
    task = get_task(name)
    splits = make_splits(task, SplitSizes(), seed=1)
    write_dataset(task, splits, Path(folder) / name)
    return name, sum(len(examples) for _, examples in splits.items()), time.perf_counter() - start, time.process_time() - start_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="keep the files here (default: a temporary folder)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as temporary:
        folder = str(args.out or temporary)
        start = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            results = list(pool.map(build, TASK_NAMES, [folder] * len(TASK_NAMES)))
        seconds = time.perf_counter() - start
    for name, examples, task_seconds, cpu_seconds in results:
        print(f"{name:<28} {examples:>7} examples  {task_seconds:6.1f} s wall  {cpu_seconds:6.1f} s CPU  {examples / cpu_seconds:8.0f} examples per CPU second")
    total = sum(result[1] for result in results)
    cpu = sum(result[3] for result in results)
    print(f"all seven tasks: {total} examples in {seconds:.1f} s wall on {args.workers} workers = {total / seconds:.0f} examples/s "
          f"({'under' if seconds < TARGET_SECONDS else 'OVER'} the {TARGET_SECONDS:.0f} s target)")
    print(f"CPU time {cpu:.1f} s = {total / cpu:.0f} examples per CPU second; on {args.workers} idle cores about {cpu / args.workers:.1f} s")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; cores {os.cpu_count()}")


if __name__ == "__main__":
    main()
