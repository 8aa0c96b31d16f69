"""CUDA against CPU for every architecture, and training throughput on the GPU (``bench/gpu.sh`` runs it).

1. Checks, each architecture built once on the CPU and copied to CUDA (float32, TF32 off,
   dropout 0 so both devices compute the same function): the readings of its stacks for the
   same hidden vectors (whole sequences; on the CPU the dVPDA runs the compiled kernel, on
   CUDA the PyTorch DP), its logits, and its parameters after one SGD step on the same batch.
   Each check records the largest difference relative to the largest CPU value. Then the
   graphed step against the eager one on CUDA (``stacklm.training.cuda_graph``): three Adam
   steps each, dropout 0, the same batch padded to its bucket; ``graphed_step`` is the largest
   relative difference of the parameters after them, or the error the capture raised.
2. Training throughput per architecture on CUDA (dropout as configured): tokens per second of
   the training step ``stacklm train`` runs (forward, loss, backward, clipping, fused capturable
   Adam) on batches of ``--tokens`` tokens at each ``--lengths``, the median of ``--steps``
   steps after the warm-up: eager, and replayed from its CUDA graph (``tokens_per_s``, what
   ``stacklm train`` runs on CUDA; ``eager_tokens_per_s`` beside it).
3. The real training loop (``stacklm.training.loop.train``, as ``stacklm train`` calls it) on
   ``--loop-examples`` training strings of the task (a tenth as many for validation), one
   epoch, with and without CUDA graphs: its tokens per second over the whole wall time,
   captures and the checkpoint's validation included.
4. K runs per process: K copies of an architecture, each on its own CUDA stream, stepped in
   turn; the total tokens per second for each K of ``--runs``.
5. K runs per step: the same K copies in one step, as ``stacklm train`` trains a group on a GPU
   (``stacklm.training.grouped_step``: stacked parameters, one vmapped forward and backward, each
   run's own dropout masks and Adam step); the total tokens per second for each K of ``--runs``.

Writes one JSON object (``--out``): device, checks, training (records with ``architecture``,
``n``, ``tokens_per_s``, as ``bench/grid.py --gpu`` reads them), loop, runs_per_process and
runs_per_step. Stops measuring, and writes what it has, once ``--budget-s`` seconds have passed.
Without CUDA (``--device cpu``) the graphed step is the eager step on the padded batch, which a
graph would replay: the dry run checks the script, not the graphs.

    python bench/gpu.py --out bench/measurements/gpu.json            # on a machine with CUDA
    python bench/gpu.py --device cpu --dry-run --out /tmp/x.json  # the same code on the CPU, tiny sizes
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.data.splits import SplitSizes, build_splits
from stacklm.kernels.backend import accelerate, resolve
from stacklm.models.base import LanguageModel
from stacklm.models.lexicon import task_features, task_vocabulary
from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, build_model
from stacklm.models.stack_interface import StackInterface
from stacklm.tasks import get_task
from stacklm.training.batching import Batch, make_batch
from stacklm.training.buckets import pad_to_bucket, padded_loss
from stacklm.training.config import TrainConfig
from stacklm.training.cuda_graph import training_steps
from stacklm.training.grouped_step import GroupedStep
from stacklm.training.loop import train
from stacklm.training.strings import StringData
from stacklm.training.progress import Progress
from stacklm.training.run_dropout import RunRandomness
from stacklm.training.step import training_step

CFL_VOCABULARY_SIZE = 5
DRY_RUN_ARCHITECTURES = ["Tf", "Tf+Nd", "LSTM+Nd+R", "cfl/NS+S+U"]
THROUGHPUT_RUN_ARCHITECTURES = ["Tf", "Tf+Nd", "LSTM", "LSTM+Nd"]
LOOP_ARCHITECTURES = ["Tf", "Tf+Nd", "LSTM+Nd"]
LEARNING_RATE = 1e-4


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
    result["graphed_step"] = graphed_against_eager(name, task, device, length)
    return result


def string_batch(vocabulary: int, size: int, length: int, seed: int) -> Batch:
    """``size`` random strings of ``length`` symbols (EOS excluded), as training batches them."""
    inputs, _ = batch(vocabulary, size, length, seed)
    return make_batch(inputs.tolist(), range(size), vocabulary - 1)


def steps_of(model: nn.Module, device: torch.device, graphed: bool) -> Callable[[Batch], Tensor]:
    """The training step ``stacklm train`` runs on ``device`` (fused Adam, capturable on CUDA; clipping
    at 10), graphed or eager; on the CPU the "graphed" step is the eager step on the padded batch."""
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, fused=True, capturable=device.type == "cuda")
    config = TrainConfig(learning_rate=LEARNING_RATE, tokens_per_batch=1)  # only the clipping norm is read
    if graphed and device.type != "cuda":
        return lambda host: training_step(model, optimizer, lambda: padded_loss(model, pad_to_bucket(host)), config.gradient_clip_norm)
    return training_steps(model, optimizer, config, device, graphs=graphed)


def graphed_against_eager(name: str, task: str, device: torch.device, length: int) -> float | str:
    """The largest relative difference of the parameters after three steps, graphed against eager
    (dropout 0, one batch shape: warm-up, capture, replay); the capture's error if it fails."""
    vocabulary = vocabulary_size(name, task)
    eager_model = build(name, task, dropout=0.0).to(device).train()
    graphed_model = copy.deepcopy(eager_model)
    host = string_batch(vocabulary, 4, length, seed=4)
    eager, graphed = steps_of(eager_model, device, graphed=False), steps_of(graphed_model, device, graphed=True)
    try:
        for _ in range(3):
            eager(host)
            graphed(host)
    except RuntimeError as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return max(relative_difference(expected.detach().cpu(), actual) for expected, actual in zip(eager_model.parameters(), graphed_model.parameters()))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_throughput(name: str, task: str, device: torch.device, length: int, tokens: int, steps: int, graphed: bool) -> float:
    """Tokens per second of the training step (graphed or eager) on batches of ``tokens`` tokens of
    length ``length``: the median of ``steps`` steps after three (a graph's warm-up and capture)."""
    vocabulary = vocabulary_size(name, task)
    model = build(name, task, dropout=ModelOptions().dropout).to(device).train()
    step = steps_of(model, device, graphed)
    size = max(tokens // length, 1)
    host = string_batch(vocabulary, size, length, seed=3)
    times = []
    for index in range(steps + 3):
        synchronize(device)
        start = time.perf_counter()
        step(host)
        synchronize(device)
        if index >= 3:
            times.append(time.perf_counter() - start)
    return size * length / statistics.median(times)


def loop_throughput(name: str, task: str, device: torch.device, examples: int, tokens: int, graphs: bool) -> dict[str, Any]:
    """One epoch of ``stacklm.training.loop.train`` on ``examples`` training strings of ``task``:
    steps, wall time and tokens per second (captures and the validation included)."""
    splits = build_splits(get_task(task), SplitSizes(train=examples, validation=max(examples // 10, 1), test=0, generalization=0), seed=1)
    vocabulary = task_vocabulary(task)
    training = [vocabulary.encode(example.language_model_string()) for example in splits.train]
    validation = [vocabulary.encode(example.language_model_string()) for example in splits.validation]
    model = build(name, task, dropout=ModelOptions().dropout)
    config = TrainConfig(learning_rate=LEARNING_RATE, tokens_per_batch=tokens, max_epochs=1)
    result = train(model, StringData(training, validation, config, seed=1, eos_index=vocabulary.eos_index), config, device=device, progress=Progress(io.StringIO()), cuda_graphs=graphs)
    return {"architecture": name, "cuda_graphs": graphs and device.type == "cuda", "examples": examples, "steps": result.steps,
            "wall_time_s": result.wall_time_s, "tokens_per_s": result.tokens_per_s}


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
    parser.add_argument("--architectures", nargs="+", help="default: all (with --dry-run: " + ", ".join(DRY_RUN_ARCHITECTURES) + ")")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 16], help="the first before the real loop, the others after")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--loop-examples", type=int, default=2000, help="training strings of the real loop's epoch")
    parser.add_argument("--dry-run", action="store_true", help="n = 8, one step, the real loop on 20 strings of one architecture: checks the script")
    arguments = parser.parse_args()
    if arguments.dry_run:
        arguments.architectures = arguments.architectures or DRY_RUN_ARCHITECTURES
        arguments.lengths, arguments.steps, arguments.runs, arguments.loop_examples, arguments.tokens = [8], 1, [1, 2], 20, 64
    arguments.architectures = arguments.architectures or list(ARCHITECTURES)
    device = torch.device(arguments.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    deadline = Deadline(arguments.budget_s)
    described = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report: dict[str, Any] = {"device": described, "torch": torch.__version__, "checks": [], "training": [], "loop": [], "runs_per_process": [],
                              "runs_per_step": [], "complete": False}

    def write() -> None:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(json.dumps(report, indent=1) + "\n")

    def record(section: str, row: dict[str, Any]) -> None:
        report[section].append(row)
        print(json.dumps(row), flush=True)

    def out_of_time() -> bool:
        if deadline.passed():
            write()
            print(f"stopped at the budget of {arguments.budget_s:g} s", flush=True)
            return True
        return False

    for name in arguments.architectures:
        record("checks", check(name, arguments.task, device, min(arguments.lengths)))
    write()
    first_length, *other_lengths = arguments.lengths
    bearing = [name for name in arguments.architectures if ARCHITECTURES[name].family != "rns-rnn"]
    loop_names = [name for name in LOOP_ARCHITECTURES if name in bearing] or bearing[:1]
    loop_names = loop_names[:1] if arguments.dry_run else loop_names
    for length in [first_length]:
        for name in arguments.architectures:
            if out_of_time():
                return
            record("training", sweep_row(name, arguments, device, length))
        write()
    for name in loop_names:
        for graphs in (True, False) if device.type == "cuda" else (False,):
            if out_of_time():
                return
            record("loop", loop_throughput(name, arguments.task, device, arguments.loop_examples, arguments.tokens, graphs))
    write()
    for length in other_lengths:
        for name in arguments.architectures:
            if out_of_time():
                return
            record("training", sweep_row(name, arguments, device, length))
        write()
    for name in [name for name in THROUGHPUT_RUN_ARCHITECTURES if name in arguments.architectures] or arguments.architectures[:1]:
        for runs in arguments.runs:
            if out_of_time():
                return
            rate = throughput(name, arguments.task, device, 32 if not arguments.dry_run else 8, arguments.tokens, arguments.steps, runs)
            record("runs_per_process", {"architecture": name, "runs": runs, "tokens_per_s": rate})
            rate = grouped_throughput(name, arguments.task, device, 32 if not arguments.dry_run else 8, arguments.tokens, arguments.steps, runs)
            record("runs_per_step", {"architecture": name, "runs": runs, "tokens_per_s": rate})
    report["complete"] = True
    write()


def sweep_row(name: str, arguments: argparse.Namespace, device: torch.device, length: int) -> dict[str, Any]:
    """One architecture at one length: the graphed step's tokens/s (``tokens_per_s``) and the eager one's."""
    rates = {graphed: step_throughput(name, arguments.task, device, length, arguments.tokens, arguments.steps, graphed) for graphed in (False, True)}
    return {"architecture": name, "n": length, "tokens_per_s": rates[True], "eager_tokens_per_s": rates[False], "graph_speedup": rates[True] / rates[False]}


if __name__ == "__main__":
    main()
