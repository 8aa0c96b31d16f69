"""What the full settings cost: CPU core-hours (and GPU-hours) per task and architecture.

A projection from measured throughputs, not a run. For each task of ``config.yaml`` (its full
settings, or ``--preset``) and each architecture:

- tokens of one training epoch = training examples × mean (|w| + 1), w = source · target (the
  positions a language model predicts, EOS included), from the task's data: the written
  ``results/data/<task>/train.tsv`` when there is one, else 2,000 examples drawn as
  ``stacklm data generate`` does;
- each search trial trains ``search.max_epochs`` epochs, each final seed ``final.max_epochs``;
  where the config says "to convergence" (null), ``--epochs-to-convergence`` (an assumption:
  early stopping ends the run, and no run has been made at full scale here);
- every checkpoint (``training.examples_per_checkpoint``) scores the validation split, and each
  final seed is evaluated on test and generalization with ``evaluation.samples_per_input``
  samples per example; both are forward passes, counted as ``--forward-share`` of a training
  token's cost (forward only, no backward), a sample's tokens as many as its example's;
- seconds = tokens ÷ throughput, the throughput of that architecture at the task's mean length,
  interpolated in log–log between the lengths measured by ``bench/models.py`` (read from
  ``--throughputs``, its ``--json`` output, or measured now at n = 16, 32, 64).

CPU core-hours assume one core per run (the throughputs are per CPU second on one thread).
``--gpu`` (``bench/gpu.sh``'s JSON, when a GPU has run it) adds GPU-hours from its training
throughputs. The CFL experiments of the RNS-RNN paper are not counted (their models are tiny).

    .venv/bin/python bench/grid.py [--throughputs models.jsonl] [--gpu bench/measurements/gpu.json] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stacklm.data.examples import read_examples
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.tasks import get_task
from stacklm.workflow.settings import ResolvedSettings, resolve

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_EXAMPLES = 2000


@dataclass(frozen=True)
class Throughput:
    """Tokens per second of one architecture at the measured lengths."""

    lengths: tuple[int, ...]
    tokens_per_s: tuple[float, ...]

    def at(self, length: float) -> float:
        """Log–log interpolation between the measured lengths; the end segments extrapolate."""
        if len(self.lengths) == 1:
            return self.tokens_per_s[0]
        xs = [math.log(value) for value in self.lengths]
        ys = [math.log(value) for value in self.tokens_per_s]
        x = math.log(length)
        index = min(max(sum(1 for value in xs if value <= x) - 1, 0), len(xs) - 2)
        slope = (ys[index + 1] - ys[index]) / (xs[index + 1] - xs[index])
        return math.exp(ys[index] + slope * (x - xs[index]))


def throughputs(records: list[dict[str, Any]], key: str) -> dict[str, Throughput]:
    """Per architecture, ``key`` (tokens per second) by length, from JSON records with ``architecture`` and ``n``
    (records of one task's own strings, ``n = "task"`` from ``bench/models.py --task-data``, have no length: left out)."""
    by_architecture: dict[str, dict[int, float]] = {}
    for record in records:
        if key in record and isinstance(record["n"], int):
            by_architecture.setdefault(record["architecture"], {})[int(record["n"])] = float(record[key])
    return {
        name: Throughput(tuple(sorted(values)), tuple(values[length] for length in sorted(values)))
        for name, values in by_architecture.items()
    }


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    stripped = text.strip()
    if stripped.startswith("["):
        return json.loads(stripped)
    if stripped.startswith("{") and "\n{" not in stripped:
        loaded = json.loads(stripped)
        return loaded.get("training", [loaded]) if isinstance(loaded, dict) else loaded
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def measure_now(architectures: list[str]) -> list[dict[str, Any]]:
    """``bench/models.py --json`` at n = 16, 32, 64 for ``architectures`` (minutes)."""
    command = [sys.executable, str(ROOT / "bench" / "models.py"), "--json", "--lengths", "16", "32", "64", "--architectures", *architectures]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def mean_scored_length(task: str) -> float:
    """Mean |w| + 1 over training examples, w = source · target."""
    written = ROOT / "results" / "data" / task / "train.tsv"
    if written.exists():
        examples = read_examples(written)
    else:
        splits = build_splits(get_task(task), SplitSizes(train=SAMPLE_EXAMPLES, validation=0, test=0, generalization=0), seed=1)
        examples = splits.train
    return sum(len(example.language_model_string()) + 1 for example in examples) / len(examples)


def project(settings: ResolvedSettings, cpu: dict[str, Throughput], gpu: dict[str, Throughput], arguments: argparse.Namespace) -> list[dict[str, Any]]:
    sizes = settings.data.sizes
    search_epochs = settings.search.max_epochs or arguments.epochs_to_convergence
    final_epochs = settings.final.max_epochs or arguments.epochs_to_convergence
    trials = settings.search.trials if settings.search.trials > 1 else 0  # one trial: drawn, not trained
    seeds = len(settings.final.seeds)
    checkpoints_per_epoch = sizes.train / settings.training.examples_per_checkpoint
    samples = settings.evaluation.samples_per_input
    rows = []
    for task in settings.tasks:
        length = mean_scored_length(task)
        epoch_tokens = sizes.train * length
        validation_tokens = checkpoints_per_epoch * sizes.validation * length
        training_tokens = (trials * search_epochs + seeds * final_epochs) * epoch_tokens
        forward_tokens = (trials * search_epochs + seeds * final_epochs) * validation_tokens
        forward_tokens += seeds * (sizes.test + sizes.generalization) * length * (1 + samples)
        equivalent_tokens = training_tokens + arguments.forward_share * forward_tokens
        for architecture in settings.architectures:
            if architecture not in cpu:
                raise SystemExit(f"no throughput for {architecture}: measure it with bench/models.py --json")
            row = {
                "task": task,
                "architecture": architecture,
                "mean_scored_length": length,
                "training_tokens": training_tokens,
                "cpu_tokens_per_s": cpu[architecture].at(length),
                "cpu_core_hours": equivalent_tokens / cpu[architecture].at(length) / 3600,
            }
            if architecture in gpu:
                row["gpu_tokens_per_s"] = gpu[architecture].at(length)
                row["gpu_hours"] = equivalent_tokens / gpu[architecture].at(length) / 3600
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--preset", help="a preset of the config (default: the full settings)")
    parser.add_argument("--throughputs", type=Path, help="bench/models.py --json output (default: measure now)")
    parser.add_argument("--gpu", type=Path, default=ROOT / "bench" / "measurements" / "gpu.json", help="bench/gpu.sh's JSON, if present")
    parser.add_argument("--epochs-to-convergence", type=float, default=20.0, help="epochs of a run the config trains to convergence (assumed)")
    parser.add_argument("--forward-share", type=float, default=1 / 3, help="cost of a forward-only token over a training token")
    parser.add_argument("--json", action="store_true", help="one JSON object per task and architecture, then the totals")
    arguments = parser.parse_args()
    config = yaml.safe_load(arguments.config.read_text())
    config["preset"] = arguments.preset
    settings = resolve(config)
    records = read_json_lines(arguments.throughputs) if arguments.throughputs else measure_now(settings.architectures)
    cpu = throughputs(records, "tokens_per_cpu_s")
    gpu = throughputs(read_json_lines(arguments.gpu), "tokens_per_s") if arguments.gpu.exists() else {}
    rows = project(settings, cpu, gpu, arguments)
    totals = {
        "cpu_core_hours": sum(row["cpu_core_hours"] for row in rows),
        "gpu_hours": sum(row["gpu_hours"] for row in rows) if gpu and all("gpu_hours" in row for row in rows) else None,
        "epochs_to_convergence": arguments.epochs_to_convergence,
        "tasks_x_architectures": len(rows),
    }
    if arguments.json:
        for row in rows:
            print(json.dumps(row))
        print(json.dumps({"total": totals}))
        return
    print(f"full settings{' (preset ' + arguments.preset + ')' if arguments.preset else ''}; runs to convergence: {arguments.epochs_to_convergence:g} epochs (assumed)")
    by_architecture: dict[str, float] = {}
    by_task: dict[str, float] = {}
    for row in rows:
        by_architecture[row["architecture"]] = by_architecture.get(row["architecture"], 0.0) + row["cpu_core_hours"]
        by_task[row["task"]] = by_task.get(row["task"], 0.0) + row["cpu_core_hours"]
    print("| architecture | CPU core-hours (all tasks) |")
    print("|---|---:|")
    for name, hours in by_architecture.items():
        print(f"| {name} | {hours:,.0f} |")
    print("| task | CPU core-hours (all architectures) |")
    print("|---|---:|")
    for name, hours in by_task.items():
        print(f"| {name} | {hours:,.0f} |")
    gpu_text = f", {totals['gpu_hours']:,.0f} GPU-hours" if totals["gpu_hours"] is not None else ", no GPU measurement (bench/gpu.sh)"
    print(f"total: {totals['cpu_core_hours']:,.0f} CPU core-hours{gpu_text}")


if __name__ == "__main__":
    main()
