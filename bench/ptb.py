"""Benchmark of the PTB models: training tokens/s of the memory-limited RNS-RNN against the LSTM
on PTB chunks, how a chunk's cost grows with its length, and what the PTB grid of the settings
costs (issue 12; DuSell & Chiang (2022) §5, App. 10).

One training step on a chunk of B = 32 streams × T steps: forward from the carried state (the
state after one chunk, detached, so the window is full), mean NLL, backward, SGD step. For each
model and T it prints the median seconds of ``--repeats`` steps after one warm-up, tokens/s
(B·T / seconds), the ratio to the LSTM measured in the same process, and per model the
exponent of a least-squares fit of log seconds against log T (≈ 1 when the cost per token does
not grow with T, as the window D = 35 makes it for the RNS-RNN), and the seconds of one training
epoch of PTB at T = 35 (⌈929,589 / (32·35)⌉ = 831 chunks) from that rate.

    python bench/ptb.py                                  # LSTM and RNS (2, 3), T = 35, 70, 140
    python bench/ptb.py --models lstm rns-2-3 ns-1-3 jm-learned --lengths 35 70
    python bench/ptb.py --device cuda --json             # one JSON object per measurement
    python bench/ptb.py --project [--preset small] [--epochs 20]   # the grid's CPU core-hours

Model names are those of ``stacklm.models.ptb`` (``lstm``, ``jm-hidden``, ``ns-Q-S``, ``rns-Q-S``).

``--project`` measures, for every model of the settings' ``ptb`` section (config.yaml, its full
settings or ``--preset``), one training step and one evaluation pass (forward only, no gradient)
on a chunk of 32 × 35 and the SG scorer's cost per token (one sentence at batch 1, from the
initial state), and projects one restart: E epochs × (the training split's targets at the
training rate + the validation split's at the evaluation rate), then the test split and the
SG suites' tokens. The split sizes are counted from the PTB files (the settings' slice, if any),
the SG tokens from the suite files; E (``--epochs``) is an assumption, since early stopping ends
a run when validation perplexity stops improving, within the cap of ``ptb.max_epochs`` (also
projected). Core-hours assume one core per job, as the workflow runs them.

Chunks come from the PTB validation split when ``--data`` (default ``../shared/upstream/ptb``)
holds it, else from uniformly drawn token indices (the cost does not depend on the tokens).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from stacklm.data.ptb import build_vocabulary, chunks, encode, first_lines, read_split
from stacklm.models.ptb import PtbLanguageModel, ptb_config

BATCH = 32
TRAIN_TOKENS = 929_589  # docs/design/cfl-and-ptb.md#ptb-data-and-batching
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "upstream" / "ptb"


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


def forward_seconds(model: PtbLanguageModel, warm: Tensor, measured: Tensor, repeats: int, device: torch.device) -> float:
    """Median seconds of one evaluation pass over ``measured`` (forward and NLL, no gradient) from the state after ``warm``."""
    times = []
    with torch.no_grad():
        _, state = model(warm[:, :-1], model.initial_state(BATCH))
        for attempt in range(repeats + 1):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            logits, _ = model(measured[:, :-1], state)
            nn.functional.cross_entropy(logits.flatten(0, 1), measured[:, 1:].flatten(), reduction="sum").item()
            if attempt:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def scorer_seconds_per_token(model: PtbLanguageModel, measured: Tensor, repeats: int, sentence_tokens: int = 12) -> float:
    """Median seconds per token of the SG scorer: one sentence at batch 1 from the initial state, log-softmax read at its targets."""
    inputs = measured[:1, :sentence_tokens]
    targets = measured[:1, 1 : sentence_tokens + 1]
    times = []
    with torch.no_grad():
        for attempt in range(repeats + 1):
            start = time.perf_counter()
            logits, _ = model(inputs, model.initial_state(1))
            logits.log_softmax(dim=-1)[0].gather(1, targets[0].unsqueeze(1)).tolist()
            if attempt:
                times.append(time.perf_counter() - start)
    return statistics.median(times) / sentence_tokens


@dataclass(frozen=True)
class Workload:
    """Targets of each PTB split (every token is one) and tokens of the SG suites' sentences."""

    train: int
    valid: int
    test: int
    sg_tokens: int


def workload(mirror: Path, lines: int | None, suites: tuple[str, ...] | None) -> Workload:
    from stacklm.evaluation.syntaxgym.alignment import sentence, tokenize
    from stacklm.evaluation.syntaxgym.sources import SUITE_SHA256, read_pinned_suite

    data = mirror / "ptb"
    train = read_split(data, "train")
    words = frozenset(build_vocabulary(train).tokens) | {"<eos>"}
    sg_tokens = sum(
        len(tokenize(sentence(condition), words))
        for name in (suites or tuple(SUITE_SHA256))
        for item in read_pinned_suite(mirror / "sg-test-suites", name).items
        for condition in item.conditions
    )
    sizes = [len(first_lines(tokens, lines)) for tokens in (train, read_split(data, "valid"), read_split(data, "test"))]
    return Workload(*sizes, sg_tokens=sg_tokens)


def project(args: argparse.Namespace) -> None:
    """The core-hours of the settings' PTB grid (see the module's ``--project``)."""
    import yaml

    from stacklm.workflow.settings import resolve

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["preset"] = args.preset
    ptb = resolve(config).ptb
    mirror = Path(ptb.data_root) if Path(ptb.data_root).is_absolute() else ROOT / ptb.data_root
    if not all((ROOT / path).is_file() for path in ptb.ptb_files()):
        raise SystemExit(f"bench/ptb.py: the PTB files are not in {mirror}: set ptb.mirror, or let `snakemake ... ptb_download` fetch them")
    work = workload(mirror, ptb.lines, ptb.suites)
    device = torch.device(args.device)
    warm, measured, source = token_batches(mirror / "ptb", 35, torch.Generator().manual_seed(0))
    warm, measured = warm.to(device), measured.to(device)
    epochs = {"assumed": args.epochs, "cap": ptb.max_epochs}
    totals = dict.fromkeys(epochs, 0.0)
    print(
        f"PTB grid of {'preset ' + args.preset if args.preset else 'the full settings'}: {len(ptb.models)} models x {ptb.restarts} restarts;"
        f" targets per epoch {work.train:,} (train), {work.valid:,} (valid), test {work.test:,}, SG {work.sg_tokens:,} tokens; chunks from {source}"
    )
    for name in ptb.models:
        model = PtbLanguageModel(ptb_config(name)).to(device)
        model.initialize(torch.Generator().manual_seed(0))
        chunk = BATCH * 35
        train_rate = chunk / step_seconds(model, warm, measured, args.repeats, device)
        eval_rate = chunk / forward_seconds(model, warm, measured, args.repeats, device)
        sg_s = work.sg_tokens * scorer_seconds_per_token(model, measured, args.repeats)
        once_s = work.test / eval_rate + sg_s  # scored once, after training
        epoch_s = work.train / train_rate + work.valid / eval_rate
        row = {
            "model": name, "train_tokens_per_s": train_rate, "eval_tokens_per_s": eval_rate, "sg_s": sg_s, "epoch_s": epoch_s,
            **{f"restart_h_{kind}": (count * epoch_s + once_s) / 3600 for kind, count in epochs.items()},
        }
        for kind, count in epochs.items():
            totals[kind] += ptb.restarts * (count * epoch_s + once_s) / 3600
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"{name:>10}: train {train_rate:6.0f} tokens/s, evaluation {eval_rate:6.0f} tokens/s, epoch {epoch_s / 60:5.1f} min, SG {sg_s / 60:4.1f} min;"
                f" one restart {row['restart_h_assumed']:5.1f} h at {args.epochs} epochs ({row['restart_h_cap']:6.1f} h at the cap of {ptb.max_epochs})"
            )
    summary = {"models": len(ptb.models), "restarts": ptb.restarts, "epochs_assumed": args.epochs, "epochs_cap": ptb.max_epochs,
               "core_hours_assumed": totals["assumed"], "core_hours_cap": totals["cap"], "threads": torch.get_num_threads(), "device": str(device)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"grid: {totals['assumed']:,.0f} CPU core-hours at {args.epochs} epochs per restart ({totals['cap']:,.0f} at the cap of {ptb.max_epochs});"
            f" {len(ptb.models) * ptb.restarts} training jobs, one core each"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["lstm", "rns-2-3"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[35, 70, 140])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--project", action="store_true", help="the core-hours of the settings' PTB grid instead")
    parser.add_argument("--preset", default=None, help="with --project: a preset of config.yaml (default: the full settings)")
    parser.add_argument("--epochs", type=int, default=20, help="with --project: epochs per restart assumed (early stopping ends a run)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.project:
        project(args)
        return
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    names = ["lstm"] + [name for name in args.models if name != "lstm"]
    batches = {length: token_batches(args.data, length, generator) for length in args.lengths}
    seconds: dict[str, list[float]] = {}
    for name in names:
        model = PtbLanguageModel(ptb_config(name)).to(device)
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
