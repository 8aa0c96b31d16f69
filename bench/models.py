"""Forward + backward throughput of every architecture at the paper's size (DuSell & Cotterell, "Bearing Syntactic Fruit", §5).

For each architecture and length n, a batch of 1024 tokens (1024 / n sequences of n random
tokens from the task's vocabulary) runs forward and backward (summed cross-entropy) in
training mode (dropout on). Every architecture of a length is timed once per round, in turn,
and each keeps the median over its rounds after one warm-up round: other jobs on a shared
machine then slow all of them alike. Time is this process's CPU time (torch on one thread by
default), which other jobs inflate less than wall time.

``--task-data N`` also times the task's own training strings (the frame of issue 15's targets,
stated "at the paper's size on question formation"): the training split that ``stacklm data
generate`` draws with seed 1 and N training examples, in the batches of the first epoch of a
training run with seed 1 (``epoch_groups``: ``--tokens`` per batch counted as raw lengths), padded as in
training; one round runs every batch, and tokens count the scored positions (EOS included).

Reported per architecture and n: tokens per CPU second and ``cost_ratio``, its cost per token
over its base's (Tf for the transformers, RNN or LSTM for the stack RNNs). ``Tf`` also gets
``speedup_vs_eager``: its time over that of a plain eager PyTorch transformer of the same size
(``nn.TransformerEncoder``, pre-norm, the same width, heads, feed-forward size, dropout and
tied embeddings), timed in the same rounds. ``--bf16`` times each architecture again under
``torch.autocast`` to bfloat16 (oneDNN) and reports the speedup and the loss's relative error
against float32 on the same batch; the nondeterministic stacks' dynamic program needs
float32 (``docs/design/stack-dp.md#float32-and-the-shifted-products``), so their architectures are left out of it.
``--torch-baseline`` times each architecture again on the PyTorch implementations (backend
``torch``: no compiled kernel, e.g. the NS models' dynamic program in PyTorch instead of the
compiled symbol stack), in the same rounds, as ``torch_tokens_per_cpu_s``, ``torch_cost_ratio``
(against its base on the compiled kernels) and ``kernel_speedup``.

    .venv/bin/python bench/models.py [--task question-formation] [--lengths 16 32 64] [--threads 1]
    .venv/bin/python bench/models.py --json --lengths 32      # one JSON object per architecture
    .venv/bin/python bench/models.py --lengths --task-data 2000  # only the task's own strings
    .venv/bin/python bench/models.py --cfl-language marked-reversal --lengths 40 60 80 --architectures cfl/LSTM cfl/NS

``--cfl-language L`` times the CFL models of the RNS-RNN paper (DuSell & Chiang (2022) App. 8) at
their batch: 10 strings of each length n, L's vocabulary, L's PDA size (|Q|, |Γ|) for the NS
models and m = 20 for Gref and JM; their base is ``cfl/LSTM``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.cfl.languages import LANGUAGES
from stacklm.cfl.splits import BATCH_SIZE as CFL_BATCH_STRINGS
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.experiments.cfl.settings import VECTOR_MODELS
from stacklm.experiments.cfl.training import model_options
from stacklm.kernels.backend import accelerate, resolve
from stacklm.models.base import LanguageModel
from stacklm.models.cfl_names import CFL_PREFIX
from stacklm.models.lexicon import task_features, task_vocabulary
from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, build_model
from stacklm.models.transformer import Transformer
from stacklm.tasks import get_task
from stacklm.training.batching import Batch, epoch_groups, make_batch
from stacklm.training.config import TrainConfig

DEFAULT_ARCHITECTURES = [name for name, a in ARCHITECTURES.items() if a.family == "bearing-syntactic-fruit" and not a.syntax]
DEFAULT_ARCHITECTURES += ["Tf+Syn", "Tf+Nd+Syn"]
BASES = {"transformer": "Tf", "rnn": "RNN", "lstm": "LSTM"}
EAGER = "eager transformer"
CFL_VECTOR_SIZE = 20  # m of Gref and JM, the middle of App. 8's {2, 20, 40}


class EagerTransformer(nn.Module):
    """The plain PyTorch transformer language model of a ``Transformer``'s size: the baseline."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        config = model.config
        width = config.width
        self.vocabulary_size = config.vocabulary_size
        self.embedding = nn.Embedding(config.vocabulary_size + 1, width)
        layer = nn.TransformerEncoderLayer(
            width, config.num_heads, config.feedforward_factor * width, config.dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, len(config.layers), norm=nn.LayerNorm(width), enable_nested_tensor=False)
        self.dropout = nn.Dropout(config.dropout)
        positions = torch.arange(4096, dtype=torch.float64).unsqueeze(1)
        frequencies = torch.exp(torch.arange(0, width, 2, dtype=torch.float64) * (-math.log(10000.0) / width))
        encoding = torch.stack([(positions * frequencies).sin(), (positions * frequencies).cos()], dim=2).flatten(1)
        self.register_buffer("encoding", encoding.float(), persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        bos = tokens.new_full((tokens.size(0), 1), self.vocabulary_size)
        tokens = torch.cat([bos, tokens], dim=1)  # (B, n + 1)
        length = tokens.size(1)
        x = self.dropout(self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim) + self.encoding[:length])
        mask = nn.Transformer.generate_square_subsequent_mask(length)
        x = self.encoder(x, mask=mask, is_causal=True)
        return x @ self.embedding.weight[: self.vocabulary_size].t()  # (B, n + 1, V)


@dataclass
class Case:
    """One model on one batch: ``step`` runs forward and backward, returns the loss."""

    name: str
    step: Callable[[], float]
    times: list[float]


def training_step(model: nn.Module, batches: list[tuple[Tensor, Tensor]], vocabulary_size: int, bf16: bool) -> Callable[[], float]:
    """Forward and backward of ``model`` on each (inputs, targets) batch in turn; the summed loss."""

    def step() -> float:
        total = 0.0
        for inputs, targets in batches:
            model.zero_grad()
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
            with autocast:
                logits = model(inputs)  # (B, n + 1, V)
            loss = F.cross_entropy(logits.float().reshape(-1, vocabulary_size), targets.reshape(-1), reduction="sum")
            loss.backward()
            total += loss.item()
        return total

    return step


def build(name: str, vocabulary_size: int, arguments: argparse.Namespace, backend: str = "auto") -> LanguageModel:
    features = task_features(arguments.task) if ARCHITECTURES[name].syntax else None
    options = ModelOptions()
    if arguments.cfl_language and name.startswith(CFL_PREFIX):
        options = model_options(arguments.cfl_language, name, CFL_VECTOR_SIZE if name in VECTOR_MODELS else None)
    model = build_model(name, vocabulary_size, token_features=features, options=options, generator=torch.Generator().manual_seed(0))
    return accelerate(model, resolve(backend, torch.device("cpu"))).train()  # "auto": as `stacklm train` runs it on the CPU


def base_of(name: str) -> str:
    """The architecture ``name``'s cost is compared with."""
    return CFL_PREFIX + "LSTM" if name.startswith(CFL_PREFIX) else BASES[ARCHITECTURES[name].base]


def uses_nondeterministic_stack(name: str) -> bool:
    return "Nd" in name.split("+")


def run_rounds(cases: list[Case], repeats: int) -> None:
    """One warm-up round, then ``repeats`` rounds timing every case once, in turn."""
    for round_index in range(repeats + 1):
        for case in cases:
            start = time.process_time()
            case.step()
            if round_index:
                case.times.append(time.process_time() - start)


def random_batch(vocabulary_size: int, length: int, tokens: int) -> tuple[Tensor, Tensor]:
    """``tokens`` // n strings of n random tokens (EOS excluded) and their targets w·EOS."""
    batch_size = max(tokens // length, 1)
    inputs = torch.randint(0, vocabulary_size - 1, (batch_size, length), generator=torch.Generator().manual_seed(1))
    return inputs, torch.cat([inputs, torch.full((batch_size, 1), vocabulary_size - 1)], dim=1)


def task_batches(task: str, examples: int, tokens: int) -> list[Batch]:
    """The training strings of ``task``'s splits with seed 1 and ``examples`` training examples, in training's batches of ``tokens`` raw tokens."""
    splits = build_splits(get_task(task), SplitSizes(train=examples, validation=0, test=0, generalization=0), seed=1)
    vocabulary = task_vocabulary(task)
    strings = [vocabulary.encode(example.language_model_string()) for example in splits.train]
    config = TrainConfig(learning_rate=1.0, tokens_per_batch=tokens)  # the learning rate is not read here
    groups = epoch_groups([len(string) for string in strings], config, seed=1, epoch=0)  # a training run's first epoch
    return [make_batch(strings, group, vocabulary.eos_index) for group in groups]


def measure(names: list[str], vocabulary_size: int, batches: list[tuple[Tensor, Tensor]], tokens: int, n: int | str, arguments: argparse.Namespace) -> list[dict]:
    """The results of every architecture in ``names`` on ``batches`` (``tokens`` in all), labelled ``n``."""
    measured = list(dict.fromkeys([*names, *(base_of(name) for name in names)]))
    models = {name: build(name, vocabulary_size, arguments) for name in measured}
    cases = [Case(name, training_step(models[name], batches, vocabulary_size, False), []) for name in measured]
    if "Tf" in names:
        tf = models["Tf"]
        assert isinstance(tf, Transformer)
        eager = EagerTransformer(tf).train()
        cases.append(Case(EAGER, training_step(eager, batches, vocabulary_size, False), []))
    bf16 = [name for name in names if arguments.bf16 and not uses_nondeterministic_stack(name)]
    cases += [Case(f"{name} bf16", training_step(models[name], batches, vocabulary_size, True), []) for name in bf16]
    baseline = names if arguments.torch_baseline else []
    cases += [Case(f"{name} torch", training_step(build(name, vocabulary_size, arguments, "torch"), batches, vocabulary_size, False), [])
              for name in baseline]
    run_rounds(cases, arguments.repeats)
    seconds = {case.name: statistics.median(case.times) for case in cases}
    results = []
    for name in names:
        base = base_of(name)
        result = {
            "architecture": name,
            "n": n,
            "tokens_per_batch": tokens // len(batches),
            "threads": arguments.threads,
            "tokens_per_cpu_s": tokens / seconds[name],
            "base": base,
            "cost_ratio": seconds[name] / seconds[base],
        }
        if arguments.cfl_language:
            result["language"] = arguments.cfl_language
        if name == "Tf":
            result["eager_tokens_per_cpu_s"] = tokens / seconds[EAGER]
            result["speedup_vs_eager"] = seconds[EAGER] / seconds[name]
        if name in bf16:
            torch.manual_seed(2)
            float32_loss = cases[measured.index(name)].step()
            torch.manual_seed(2)
            bf16_loss = next(case for case in cases if case.name == f"{name} bf16").step()
            result["bf16_speedup"] = seconds[name] / seconds[f"{name} bf16"]
            result["bf16_loss_relative_error"] = abs(bf16_loss - float32_loss) / abs(float32_loss)
        if name in baseline:
            result["torch_tokens_per_cpu_s"] = tokens / seconds[f"{name} torch"]
            result["torch_cost_ratio"] = seconds[f"{name} torch"] / seconds[base]
            result["kernel_speedup"] = seconds[f"{name} torch"] / seconds[name]
        results.append(result)
    return results


def measure_length(names: list[str], vocabulary_size: int, length: int, arguments: argparse.Namespace) -> list[dict]:
    """The results of every architecture in ``names`` on one batch of random strings of length n."""
    tokens = CFL_BATCH_STRINGS * length if arguments.cfl_language else arguments.tokens
    inputs, targets = random_batch(vocabulary_size, length, tokens)
    return measure(names, vocabulary_size, [(inputs, targets)], inputs.numel(), length, arguments)


def measure_task(names: list[str], vocabulary_size: int, arguments: argparse.Namespace) -> list[dict]:
    """The results of every architecture in ``names`` on the task's own training batches."""
    batches = task_batches(arguments.task, arguments.task_data, arguments.tokens)
    scored = sum(batch.num_tokens for batch in batches)
    results = measure(names, vocabulary_size, [(batch.inputs, batch.targets) for batch in batches], scored, "task", arguments)
    return [result | {"strings": arguments.task_data, "batches": len(batches)} for result in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="question-formation")
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 32, 64], help="random strings of these lengths (none: only --task-data)")
    parser.add_argument("--task-data", type=int, default=0, metavar="N", help="also time a training split of N strings of the task (seed 1) in training's batches")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--architectures", nargs="+", default=DEFAULT_ARCHITECTURES)
    parser.add_argument("--json", action="store_true", help="one JSON object per architecture and length")
    parser.add_argument("--cfl-language", choices=list(LANGUAGES), help="the CFL batch: 10 strings per length, this language's vocabulary and PDA size")
    parser.add_argument("--torch-baseline", action="store_true", help="also time each architecture on the PyTorch implementations (no compiled kernel), in the same rounds")
    parser.add_argument("--bf16", action="store_true", help="also time bfloat16 autocast (architectures without the dVPDA)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    vocabulary_size = LANGUAGES[arguments.cfl_language].vocabulary_size if arguments.cfl_language else len(task_vocabulary(arguments.task))
    results: dict[int | str, list[dict]] = {length: measure_length(arguments.architectures, vocabulary_size, length, arguments) for length in arguments.lengths}
    if arguments.task_data:
        results["task"] = measure_task(arguments.architectures, vocabulary_size, arguments)
    if arguments.json:
        for measured in results.values():
            for result in measured:
                print(json.dumps(result), flush=True)
        return
    print(
        f"{'CFL language ' + arguments.cfl_language if arguments.cfl_language else 'task ' + arguments.task} (V = {vocabulary_size}), "
        f"{'10 strings' if arguments.cfl_language else str(arguments.tokens) + ' tokens'} per batch, {arguments.threads} thread(s), "
        f"CPU time, median of {arguments.repeats} rounds; cost = time per token / its base's"
    )
    print("| architecture | " + " | ".join(f"n={n} tokens/s | n={n} cost" for n in results) + " |")
    print("|" + "---|" * (1 + 2 * len(results)))
    for index, name in enumerate(arguments.architectures):
        cells = [f"{measured[index]['tokens_per_cpu_s']:,.0f} | {measured[index]['cost_ratio']:.2f}× {measured[index]['base']}" for measured in results.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for n, measured in results.items():
        for result in measured:
            extras = [f"{key} {value:.3g}" for key, value in result.items() if key.startswith(("speedup", "bf16", "kernel", "torch"))]
            if extras:
                print(f"n={n} {result['architecture']}: " + ", ".join(extras))


if __name__ == "__main__":
    main()
