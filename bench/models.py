"""Forward + backward throughput of every architecture at the paper's size (seed 000 §5).

For each architecture and length n, a batch of 1024 tokens (1024 / n sequences of n random
tokens from the task's vocabulary) runs forward and backward (summed cross-entropy); the time
is the median over repeats after one warm-up, measured as this process's CPU time (torch on
one thread by default), so that other jobs on a shared machine inflate it less than wall
time would. The table gives tokens per CPU second and the slowdown relative to Tf at the same
n (Tf tokens/s ÷ its tokens/s).

    .venv/bin/python bench/models.py [--task question-formation] [--lengths 16 32 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from stacklm.models.lexicon import task_features, task_vocabulary
from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, build_model

DEFAULT_ARCHITECTURES = [name for name, a in ARCHITECTURES.items() if a.family == "bearing-syntactic-fruit" and not a.syntax]
DEFAULT_ARCHITECTURES += ["Tf+Syn", "Tf+Nd+Syn"]


def seconds_per_batch(name: str, vocabulary_size: int, length: int, tokens: int, repeats: int, task: str) -> float:
    features = task_features(task) if ARCHITECTURES[name].syntax else None
    model = build_model(name, vocabulary_size, token_features=features, options=ModelOptions(), generator=torch.Generator().manual_seed(0))
    model.train()
    batch_size = max(tokens // length, 1)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randint(0, vocabulary_size - 1, (batch_size, length), generator=generator)
    targets = torch.cat([inputs, torch.full((batch_size, 1), vocabulary_size - 1)], dim=1)
    times = []
    for repeat in range(repeats + 1):
        model.zero_grad()
        start = time.process_time()
        logits = model(inputs)  # (B, n + 1, V)
        F.cross_entropy(logits.reshape(-1, vocabulary_size), targets.reshape(-1), reduction="sum").backward()
        if repeat:
            times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="question-formation")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--architectures", nargs="+", default=DEFAULT_ARCHITECTURES)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    vocabulary_size = len(task_vocabulary(args.task))
    print(f"task {args.task} (V = {vocabulary_size}), {args.tokens} tokens per batch, {args.threads} thread(s), CPU time, median of {args.repeats}")
    header = "| architecture | " + " | ".join(f"n={n} tokens/s | n={n} × Tf" for n in args.lengths) + " |"
    print(header)
    print("|" + "---|" * (1 + 2 * len(args.lengths)))
    baseline = {n: args.tokens / seconds_per_batch("Tf", vocabulary_size, n, args.tokens, args.repeats, args.task) for n in args.lengths}
    for name in args.architectures:
        cells = []
        for n in args.lengths:
            rate = baseline[n] if name == "Tf" else args.tokens / seconds_per_batch(name, vocabulary_size, n, args.tokens, args.repeats, args.task)
            cells.append(f"{rate:,.0f} | {baseline[n] / rate:.1f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
