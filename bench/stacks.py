"""Benchmark of the nondeterministic stacks against a small transformer (issue 3).

Times forward + backward of the dVPDA (|Q| = 3, |Γ| = 3, m = 5, batch 32) for n ∈ {16, 32,
64, 128}, full (with the compiled kernel, "dvpda", on CUDA the Triton kernel of the cuda-triton
backend, and with the PyTorch DP, "dvpda-torch") and with a window D = 16, and in the same process a 5-layer pre-norm causal
transformer of width 68 (4 heads, feed-forward 136) on the same batch; prints seconds,
tokens/s, the memory kept for backward, the ratio to the transformer and the exponent of a
least-squares fit of log time against log n.

    python bench/stacks.py               # a table
    python bench/stacks.py --json        # one JSON object per configuration
    python bench/stacks.py --threads 1   # on a machine shared with other jobs (see below)
    python bench/stacks.py --stacks dvpda dvpda-window16   # a subset ("dvpda-torch" is slow at n = 128)
    python bench/stacks.py --device cuda --stacks dvpda dvpda-torch   # the Triton kernel against the PyTorch DP

With --json, each stack's configurations are followed by one object {stack, fitted_exponent,
lengths}. "peak_mb" is, on CPU, the memory that autograd keeps for backward at the end of the forward
pass (distinct storages of every saved tensor, so tensors saved by several steps count once);
on CUDA it is ``torch.cuda.max_memory_allocated`` of the whole step. Timings are the median
of ``--repeats`` runs after one warm-up. Other processes on the machine make them noisy; the
ratio is measured in the same process, moments apart; "cpu_ratio" is the ratio of the process's
CPU times, which with ``--threads 1`` the other jobs' load leaves out (a descheduled thread
accrues none; their cache and memory traffic still count). With more threads than free cores
(other jobs running), every small operation waits for a descheduled thread and both timings
grow many-fold, the stack's (hundreds of small operations per step) most.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from stacklm.kernels import build
from stacklm.kernels.backend import accelerate
from stacklm.stacks.nondeterministic import num_action_logits
from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions, VectorNondeterministicStack


@dataclass(frozen=True)
class Measurement:
    seconds: float  # wall clock
    cpu_seconds: float  # this process's CPU time: with one thread, what other jobs' load does not add
    peak_mb: float


def transformer(width: int = 68, layers: int = 5, heads: int = 4, feedforward: int = 136) -> nn.Module:
    """A minimal pre-norm causal transformer encoder (the baseline; not the project's model)."""
    layer = nn.TransformerEncoderLayer(width, heads, feedforward, dropout=0.0, batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(width), enable_nested_tensor=False)


class SavedTensorMeter:
    """Distinct storages that autograd saves for backward while active."""

    def __init__(self) -> None:
        self.storages: dict[int, int] = {}

    def pack(self, tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    @property
    def megabytes(self) -> float:
        return sum(self.storages.values()) / 2**20


def measure(run_forward: Callable[[], Tensor], device: torch.device, repeats: int) -> Measurement:
    """Median seconds (wall and CPU) of forward + backward, and the memory kept for backward."""
    times, cpu_times = [], []
    peak_mb = 0.0
    for attempt in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        meter = SavedTensorMeter()
        start, cpu_start = time.perf_counter(), time.process_time()
        with torch.autograd.graph.saved_tensors_hooks(meter.pack, lambda tensor: tensor):
            loss = run_forward()
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
        else:
            peak_mb = meter.megabytes
        if attempt > 0:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    return Measurement(statistics.median(times), statistics.median(cpu_times), peak_mb)


def stack_forward(
    stack: VectorNondeterministicStack, batch: int, steps: int, device: torch.device, generator: torch.Generator
) -> Callable[[], Tensor]:
    states, symbols, vector_size = stack.sizes.num_states, stack.sizes.num_symbols, stack.sizes.vector_size
    logits = (
        torch.randn(batch, steps, num_action_logits(states, symbols), generator=generator).to(device).requires_grad_()
    )
    pushed = torch.randn(batch, steps, vector_size, generator=generator).to(device).requires_grad_()
    weights = torch.randn(batch, steps, stack.reading_size, generator=generator).to(device)

    def run() -> Tensor:
        actions = VectorNondeterministicActions.from_logits(logits, nn.functional.logsigmoid(pushed), states, symbols)
        return (stack.readings(actions) * weights).sum()

    return run


def transformer_forward(
    model: nn.Module, batch: int, steps: int, device: torch.device, generator: torch.Generator
) -> Callable[[], Tensor]:
    inputs = torch.randn(batch, steps, 68, generator=generator).to(device).requires_grad_()
    mask = nn.Transformer.generate_square_subsequent_mask(steps, device=device)

    def run() -> Tensor:
        return model(inputs, mask=mask, is_causal=True).square().sum()

    return run


def fitted_exponent(lengths: list[int], seconds: list[float]) -> float:
    """Slope of the least-squares line through (log n, log seconds)."""
    xs = [math.log(length) for length in lengths]
    ys = [math.log(value) for value in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per configuration")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--window", type=int, default=16, help="D of the memory-limited configuration")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--stacks",
        nargs="+",
        choices=["dvpda", "dvpda-torch", "window"],
        default=["dvpda", "dvpda-torch", "window"],
        help="full stack with the compiled kernel (CPU) or the Triton kernel (CUDA), full stack with the PyTorch DP,"
        " --window with the PyTorch DP",
    )
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    device = torch.device(arguments.device)
    generator = torch.Generator().manual_seed(0)
    model = transformer().to(device)
    results = []
    if "dvpda" in arguments.stacks and device.type == "cpu":
        start = time.perf_counter()
        build.load()  # built once per source (the first time, a compilation)
        seconds = time.perf_counter() - start
        print(json.dumps({"kernel_load_seconds": seconds}) if arguments.json else f"kernel loaded in {seconds:.1f} s")
    for choice in arguments.stacks:
        window = arguments.window if choice == "window" else None
        backend = "torch"
        if choice == "dvpda":
            backend = "cpu-compiled" if device.type == "cpu" else "cuda-triton"
        name = choice if window is None else f"dvpda-window{window}"
        stack = accelerate(VectorNondeterministicStack(3, 3, 5, window=window).to(device), backend)
        for steps in arguments.lengths:
            stacked = measure(
                stack_forward(stack, arguments.batch, steps, device, generator), device, arguments.repeats
            )
            baseline = measure(
                transformer_forward(model, arguments.batch, steps, device, generator), device, arguments.repeats
            )
            result = {
                "stack": name,
                "n": steps,
                "batch": arguments.batch,
                "seconds": stacked.seconds,
                "tokens_per_second": arguments.batch * steps / stacked.seconds,
                "peak_mb": stacked.peak_mb,
                "transformer_seconds": baseline.seconds,
                "transformer_peak_mb": baseline.peak_mb,
                "ratio": stacked.seconds / baseline.seconds,
                "cpu_ratio": stacked.cpu_seconds / baseline.cpu_seconds,
                "threads": arguments.threads,
                "device": str(device),
            }
            results.append(result)
            if arguments.json:
                print(json.dumps(result), flush=True)
            else:
                print(
                    f"{name:>16} n={steps:<4} {stacked.seconds:8.3f} s {result['tokens_per_second']:9.0f} tok/s "
                    f"{stacked.peak_mb:8.1f} MB | transformer {baseline.seconds:7.3f} s | ratio {result['ratio']:6.2f} (CPU time {result['cpu_ratio']:5.2f})",
                    flush=True,
                )
        lengths = [result["n"] for result in results if result["stack"] == name]
        seconds = [result["seconds"] for result in results if result["stack"] == name]
        if len(lengths) > 1:
            exponent = fitted_exponent(lengths, seconds)
            if arguments.json:
                print(json.dumps({"stack": name, "fitted_exponent": exponent, "lengths": lengths}), flush=True)
            else:
                print(f"{name:>16} time ∝ n^{exponent:.2f}", flush=True)


if __name__ == "__main__":
    main()
