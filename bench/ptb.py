"""Benchmark of the PTB models: training tokens/s of the memory-limited RNS-RNN against the LSTM
on PTB chunks, and how a chunk's cost grows with its length (issue 12; DuSell & Chiang (2022) §5).

One training step on a chunk of B = 32 streams × T steps: forward from the carried state (the
state after one chunk, detached, so the window is full), mean NLL, backward, SGD step. For each
model and T it prints the median seconds of ``--repeats`` steps after one warm-up, tokens/s
(B·T / seconds), the ratio to the LSTM measured in the same process, and per model the
exponent of a least-squares fit of log seconds against log T (≈ 1 when the cost per token does
not grow with T, as the window D = 35 makes it for the RNS-RNN), and the seconds of one training
epoch of PTB at T = 35 (⌈929,589 / (32·35)⌉ = 831 chunks) from that rate.

    python bench/ptb.py                                  # LSTM and RNS (2, 3), T = 35, 70, 140
    python bench/ptb.py --models lstm rns:2:3 ns:1:3 jm-learned --lengths 35 70
    python bench/ptb.py --device cuda --json             # one JSON object per measurement

Chunks come from the PTB validation split when ``--data`` (default ``../shared/upstream/ptb``)
holds it, else from uniformly drawn token indices (the cost does not depend on the tokens).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from stacklm.data.ptb import build_vocabulary, chunks, encode, read_split
from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig, Superposition

BATCH = 32
TRAIN_TOKENS = 929_589  # cfl-and-ptb.md §3.1
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "upstream" / "ptb"


def config_of(name: str) -> PtbModelConfig:
    """``lstm``, ``jm-hidden`` (H = 247), ``jm-learned`` (m = 22), ``ns:Q:S``, ``rns:Q:S`` (D = 35)."""
    if name == "lstm":
        return PtbModelConfig()
    if name == "jm-hidden":
        return PtbModelConfig(hidden_units=247, stack=Superposition("hidden", 247))
    if name == "jm-learned":
        return PtbModelConfig(stack=Superposition("learned", 22))
    kind, states, symbols = name.split(":")
    if kind not in ("ns", "rns"):
        raise SystemExit(f"unknown model {name!r}")
    return PtbModelConfig(stack=LimitedNondeterministic(int(states), int(symbols), renormalizing=kind == "rns"))


def token_batches(data: Path, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor, str]:
    """Two consecutive (B, T + 1) windows: a warm-up chunk and the measured one (inputs and targets)."""
    if (data / "ptb.valid.txt").is_file() and (data / "ptb.train.txt").is_file():
        vocabulary = build_vocabulary(read_split(data, "train"))
        stream = encode(read_split(data, "valid"), vocabulary)
        first, second = chunks(stream, vocabulary.eos_index, BATCH, length)[:2]
        return torch.cat([first.inputs, first.targets[:, -1:]], 1), torch.cat([second.inputs, second.targets[:, -1:]], 1), "ptb-valid"
    tokens = torch.randint(0, 10_000, (BATCH, 2 * length + 1), generator=generator)
    return tokens[:, : length + 1], tokens[:, length:], "random"


def step_seconds(model: PtbLanguageModel, warm: Tensor, measured: Tensor, repeats: int, device: torch.device) -> float:
    """Median seconds of forward + backward + SGD step on ``measured`` from the state after ``warm``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    loss_function = nn.CrossEntropyLoss()
    with torch.no_grad():
        _, state = model(warm[:, :-1], model.initial_state(BATCH))
    times = []
    for attempt in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        logits, _ = model(measured[:, :-1], state.detach())  # (B, T, V)
        loss = loss_function(logits.flatten(0, 1), measured[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if attempt:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def fitted_exponent(lengths: list[int], seconds: list[float]) -> float:
    xs, ys = [math.log(n) for n in lengths], [math.log(s) for s in seconds]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["lstm", "rns:2:3"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[35, 70, 140])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    names = ["lstm"] + [name for name in args.models if name != "lstm"]
    batches = {length: token_batches(args.data, length, generator) for length in args.lengths}
    seconds: dict[str, list[float]] = {}
    for name in names:
        model = PtbLanguageModel(config_of(name)).to(device)
        model.initialize(torch.Generator().manual_seed(0))
        seconds[name] = []
        for length in args.lengths:
            warm, measured, source = batches[length]
            elapsed = step_seconds(model, warm.to(device), measured.to(device), args.repeats, device)
            seconds[name].append(elapsed)
            row = {
                "model": name,
                "T": length,
                "seconds": elapsed,
                "tokens_per_s": BATCH * length / elapsed,
                "time_ratio_to_lstm": elapsed / seconds["lstm"][len(seconds[name]) - 1],
                "data": source,
                "device": str(device),
                "threads": torch.get_num_threads(),
            }
            if args.json:
                print(json.dumps(row))
            else:
                print(f"{name:>12} T={length:<4} {elapsed:8.3f} s  {row['tokens_per_s']:9.0f} tokens/s  {row['time_ratio_to_lstm']:6.2f}x the LSTM's time")
    for name in names:
        exponent = fitted_exponent(args.lengths, seconds[name]) if len(args.lengths) > 1 else float("nan")
        per_token = seconds[name][0] / (BATCH * args.lengths[0])
        epoch = math.ceil(TRAIN_TOKENS / (BATCH * 35)) * BATCH * 35 * per_token
        summary = {"model": name, "fitted_exponent": exponent, "train_epoch_s_at_first_T": epoch}
        if args.json:
            print(json.dumps(summary))
        else:
            slope = f"time ∝ T^{exponent:.2f}; " if len(args.lengths) > 1 else ""
            print(f"{name:>12} {slope}one PTB training epoch ≈ {epoch / 60:.1f} min at T={args.lengths[0]}'s rate")


if __name__ == "__main__":
    main()
