"""CUDA against CPU for every architecture, and training throughput on the GPU (``bench/gpu.sh`` runs it).

1. Checks, each architecture built once on the CPU and copied to CUDA (float32, TF32 off,
   dropout 0 so both devices compute the same function): the readings of its stacks for the
   same hidden vectors (whole sequences; on the CPU the dVPDA runs the compiled kernel, on
   CUDA the PyTorch DP), its logits, and its parameters after one SGD step on the same batch.
   Each check records the largest difference relative to the largest CPU value.
2. Training throughput per architecture on CUDA (dropout as configured): tokens per second of
   forward + backward + an Adam step on batches of ``--tokens`` tokens at each ``--lengths``,
   the median of ``--steps`` steps after two warm-up steps.
3. K runs per process: K copies of an architecture, each on its own CUDA stream, stepped in
   turn; the total tokens per second for each K of ``--runs``.
4. K runs per step: the same K copies in one step, as ``stacklm train`` trains a group on a GPU
   (``stacklm.training.grouped_step``: stacked parameters, one vmapped forward and backward, each
   run's own dropout masks and Adam step); the total tokens per second for each K of ``--runs``.

Writes one JSON object (``--out``): device, checks, training (records with ``architecture``,
``n``, ``tokens_per_s``, as ``bench/grid.py --gpu`` reads them), runs_per_process and runs_per_step. Stops
measuring, and writes what it has, once ``--budget-s`` seconds have passed.

    python bench/gpu.py --out bench/measurements/gpu.json            # on a machine with CUDA
    python bench/gpu.py --device cpu --dry-run --out /tmp/x.json  # the same code on the CPU, tiny sizes
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.kernels.backend import accelerate, resolve
from stacklm.models.base import LanguageModel
from stacklm.models.lexicon import task_features, task_vocabulary
from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, build_model
from stacklm.models.stack_interface import StackInterface
from stacklm.training.batching import Batch
from stacklm.training.grouped_step import GroupedStep
from stacklm.training.run_dropout import RunRandomness

CFL_VOCABULARY_SIZE = 5
DRY_RUN_ARCHITECTURES = ["Tf", "Tf+Nd", "LSTM+Nd+R", "cfl/NS+S+U"]
THROUGHPUT_RUN_ARCHITECTURES = ["Tf", "Tf+Nd", "LSTM", "LSTM+Nd"]


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() > self.end


def vocabulary_size(name: str, task: str) -> int:
    return CFL_VOCABULARY_SIZE if ARCHITECTURES[name].family == "rns-rnn" else len(task_vocabulary(task))


def build(name: str, task: str, dropout: float) -> LanguageModel:
    features = task_features(task) if ARCHITECTURES[name].syntax else None
    options = ModelOptions(dropout=dropout)
    return build_model(name, vocabulary_size(name, task), token_features=features, options=options, generator=torch.Generator().manual_seed(0))


def batch(vocabulary: int, size: int, length: int, seed: int) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, vocabulary - 1, (size, length), generator=generator)
    return inputs, torch.cat([inputs, torch.full((size, 1), vocabulary - 1)], dim=1)


def relative_difference(cpu: Tensor, other: Tensor) -> float:
    scale = cpu.abs().max().item() or 1.0
    return (other.detach().cpu().double() - cpu.detach().double()).abs().max().item() / scale


def loss_of(model: nn.Module, inputs: Tensor, targets: Tensor, vocabulary: int) -> Tensor:
    return F.cross_entropy(model(inputs).reshape(-1, vocabulary), targets.reshape(-1), reduction="sum")


def check(name: str, task: str, device: torch.device, length: int) -> dict[str, Any]:
    """Largest relative differences between the CPU and ``device``: readings, logits, one SGD step."""
    vocabulary = vocabulary_size(name, task)
    cpu_model = build(name, task, dropout=0.0)
    device_model = copy.deepcopy(cpu_model).to(device)
    accelerate(cpu_model, resolve("auto", torch.device("cpu")))  # as `stacklm train` runs it on the CPU
    inputs, targets = batch(vocabulary, 4, length, seed=1)
    result: dict[str, Any] = {"architecture": name, "n": length}
    readings = []
    for cpu_module, device_module in zip(cpu_model.modules(), device_model.modules()):
        if isinstance(cpu_module, StackInterface):
            width = next(layer for layer in cpu_module.modules() if isinstance(layer, nn.Linear)).in_features
            hidden = torch.randn(4, length, width, generator=torch.Generator().manual_seed(2))
            with torch.no_grad():
                readings.append(relative_difference(cpu_module.readings(hidden), device_module.readings(hidden.to(device))))
    if readings:
        result["readings"] = max(readings)
    with torch.no_grad():
        result["logits"] = relative_difference(cpu_model(inputs), device_model(inputs.to(device)))
    for model, on in ((cpu_model, torch.device("cpu")), (device_model, device)):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_of(model, inputs.to(on), targets.to(on), vocabulary).backward()
        optimizer.step()
    result["training_step"] = max(
        relative_difference(cpu_parameter, device_parameter)
        for cpu_parameter, device_parameter in zip(cpu_model.parameters(), device_model.parameters())
    )
    return result


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def throughput(name: str, task: str, device: torch.device, length: int, tokens: int, steps: int, runs: int = 1) -> float:
    """Tokens per second of ``runs`` copies trained in turn (each on its own stream on CUDA)."""
    vocabulary = vocabulary_size(name, task)
    models = [build(name, task, dropout=ModelOptions().dropout).to(device).train() for _ in range(runs)]
    optimizers = [torch.optim.Adam(model.parameters(), lr=1e-4) for model in models]
    streams = [torch.cuda.Stream(device) if device.type == "cuda" else None for _ in range(runs)]
    size = max(tokens // length, 1)
    inputs, targets = (tensor.to(device) for tensor in batch(vocabulary, size, length, seed=3))
    times = []
    for step in range(steps + 2):
        synchronize(device)
        start = time.perf_counter()
        for model, optimizer, stream in zip(models, optimizers, streams):
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                optimizer.zero_grad()
                loss_of(model, inputs, targets, vocabulary).backward()
                optimizer.step()
        synchronize(device)
        if step >= 2:
            times.append(time.perf_counter() - start)
    return runs * size * length / statistics.median(times)


def grouped_throughput(name: str, task: str, device: torch.device, length: int, tokens: int, steps: int, runs: int) -> float:
    """Tokens per second of ``runs`` copies trained in one step (``GroupedStep``), each with its own Adam."""
    vocabulary = vocabulary_size(name, task)
    models = [build(name, task, dropout=ModelOptions().dropout).to(device).train() for _ in range(runs)]
    optimizers = [torch.optim.Adam(model.parameters(), lr=1e-4) for model in models]
    size = max(tokens // length, 1)
    inputs, targets = (tensor.to(device) for tensor in batch(vocabulary, size, length, seed=3))
    same = Batch(inputs, targets, torch.ones_like(targets, dtype=torch.bool), tuple(range(size)))
    step = GroupedStep(models[0])
    randomness = [RunRandomness.seeded(seed, device) for seed in range(runs)]
    times = []
    for index in range(steps + 2):
        synchronize(device)
        start = time.perf_counter()
        for optimizer in optimizers:
            optimizer.zero_grad()
        step.losses(models, [same] * runs, randomness).sum().backward()
        for optimizer in optimizers:
            optimizer.step()
        synchronize(device)
        if index >= 2:
            times.append(time.perf_counter() - start)
    return runs * size * length / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task", default="question-formation")
    parser.add_argument("--architectures", nargs="+", default=list(ARCHITECTURES))
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--dry-run", action="store_true", help=f"{', '.join(DRY_RUN_ARCHITECTURES)} at n = 8, one step: checks the script")
    arguments = parser.parse_args()
    if arguments.dry_run:
        arguments.architectures, arguments.lengths, arguments.steps, arguments.runs = DRY_RUN_ARCHITECTURES, [8], 1, [1, 2]
    device = torch.device(arguments.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    deadline = Deadline(arguments.budget_s)
    described = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report: dict[str, Any] = {"device": described, "torch": torch.__version__, "checks": [], "training": [], "runs_per_process": [], "runs_per_step": [],
                              "complete": False}

    def write() -> None:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(json.dumps(report, indent=1) + "\n")

    for name in arguments.architectures:
        report["checks"].append(check(name, arguments.task, device, min(arguments.lengths)))
        print(json.dumps(report["checks"][-1]), flush=True)
    write()
    for length in arguments.lengths:
        for name in arguments.architectures:
            if deadline.passed():
                write()
                print(f"stopped at the budget of {arguments.budget_s:g} s", flush=True)
                return
            rate = throughput(name, arguments.task, device, length, arguments.tokens, arguments.steps)
            report["training"].append({"architecture": name, "n": length, "tokens_per_s": rate})
            print(json.dumps(report["training"][-1]), flush=True)
        write()
    for name in [name for name in THROUGHPUT_RUN_ARCHITECTURES if name in arguments.architectures] or arguments.architectures[:1]:
        for runs in arguments.runs:
            if deadline.passed():
                write()
                return
            rate = throughput(name, arguments.task, device, 32 if not arguments.dry_run else 8, arguments.tokens, arguments.steps, runs)
            report["runs_per_process"].append({"architecture": name, "runs": runs, "tokens_per_s": rate})
            print(json.dumps(report["runs_per_process"][-1]), flush=True)
            rate = grouped_throughput(name, arguments.task, device, 32 if not arguments.dry_run else 8, arguments.tokens, arguments.steps, runs)
            report["runs_per_step"].append({"architecture": name, "runs": runs, "tokens_per_s": rate})
            print(json.dumps(report["runs_per_step"][-1]), flush=True)
    report["complete"] = True
    write()


if __name__ == "__main__":
    main()
