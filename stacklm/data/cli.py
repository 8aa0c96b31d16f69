"""``stacklm data ...``: the data stage's subcommands (one per workflow rule) and two user tools.

    stacklm data generate   --task T --seed S [--train N ...] --out DIR [--train-file F --validation-file F ...]
    stacklm data transform  --task T --rule hierarchical|linear   < sources   > targets
    stacklm data fetch      --task T --split train|validation|test|generalization [--mirror DIR] --out FILE
    stacklm data repair     --task T --input FILE --out FILE
    stacklm data summarize  --task T --data DIR --out FILE.parquet
    stacklm data report     --out FILE SUMMARY.parquet ...
    stacklm data estimate-weights --task T [--mirror DIR] [--fit-to train|held-out] [--iterations K] [--simulations R] [--out-dir DIR] [--check-against FILE]
    stacklm data compare    --task T A B [--split S] [--seeds S1 S2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from stacklm.parquet_file import read_parquet
from stacklm.atomic import write_bytes_atomically
from stacklm.data.compare import NOISE_SEEDS, compare, format_comparison, noise_sizes, read_dataset
from stacklm.data.dataset import make_splits, write_dataset
from stacklm.data.examples import read_examples, write_examples
from stacklm.data.splits import SPLITS, SplitSizes, build_splits
from stacklm.data.summary import describe, summarize_folder, write_parquet
from stacklm.data.upstream import UPSTREAM_SPLITS, fetch_bytes, read_upstream, repair_example, upstream_file
from stacklm.data.weights import TARGET_SPLITS, TRAIN_FILE_TASKS, estimate_weights, grammar_texts, write_grammar_files
from stacklm.errors import StacklmError, UsageError, located
from stacklm.grammars import CompiledGrammar, grammar_path
from stacklm.tasks import TASK_NAMES, get_task

DEFAULT_ITERATIONS = 6
DEFAULT_SIMULATIONS = 2
MAX_SPLIT_SIZE = 1_000_000  # a split's bound: 10^11 train examples wrote 1.7 GB in 3 minutes and never ended


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data")
    commands = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")

    generate = commands.add_parser("generate", help="write the four splits of one task to a folder")
    _task(generate)
    generate.add_argument("--seed", type=int, required=True)
    defaults = SplitSizes()
    for split in ("train", "validation", "test", "generalization"):
        generate.add_argument(f"--{split}", type=int, default=getattr(defaults, split), help=f"number of {split} examples (default {getattr(defaults, split)})")
    for split in SPLITS:
        generate.add_argument(f"--{split}-file", type=Path, help=f"take the {split} examples from this upstream file (its first --{split} lines)")
    generate.add_argument("--out", type=Path, required=True, help="output folder")
    generate.set_defaults(func=_generate)

    transform = commands.add_parser("transform", help="read sources (sentence and marker) on stdin, write their targets")
    _task(transform)
    transform.add_argument("--rule", choices=("hierarchical", "linear"), default="hierarchical")
    transform.set_defaults(func=_transform)

    fetch = commands.add_parser("fetch", help="an upstream file, by URL or from a mirror folder, checked against its pinned git blob id")
    _task(fetch)
    fetch.add_argument("--split", choices=UPSTREAM_SPLITS, required=True)
    fetch.add_argument("--mirror", type=Path, help="folder laid out as <mirror>/<task>/<upstream file name>")
    fetch.add_argument("--out", type=Path, required=True)
    fetch.set_defaults(func=_fetch)

    repair = commands.add_parser("repair", help="apply the German passivization repair (paper App. A) to a split file")
    _task(repair)
    repair.add_argument("--input", type=Path, required=True)
    repair.add_argument("--out", type=Path, required=True)
    repair.set_defaults(func=_repair)

    summary = commands.add_parser("summarize", help="construction counts and length histogram of a data folder, as Parquet")
    _task(summary)
    summary.add_argument("--data", type=Path, required=True)
    summary.add_argument("--out", type=Path, required=True)
    summary.set_defaults(func=_summarize)

    report = commands.add_parser("report", help="print the summaries of several tasks and write them to a text file")
    report.add_argument("summaries", type=Path, nargs="+")
    report.add_argument("--out", type=Path, required=True)
    report.set_defaults(func=_report)

    weights = commands.add_parser("estimate-weights", help="fit a task's grammar weights to the upstream sentences")
    _task(weights)
    weights.add_argument("--mirror", type=Path, help="read the upstream files from this folder instead of downloading them")
    weights.add_argument("--fit-to", choices=tuple(TARGET_SPLITS), help="train: the parses of upstream's train file (default for "
                         f"{', '.join(TRAIN_FILE_TASKS)}, whose train files have a copy); held-out: of its dev and test files, corrected by"
                         " simulating upstream's procedure (default for the others)")
    weights.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, help=f"rounds of proportional fitting (default {DEFAULT_ITERATIONS})")
    weights.add_argument("--simulations", type=int, default=DEFAULT_SIMULATIONS, help=f"seeds simulated per round (default {DEFAULT_SIMULATIONS})")
    weights.add_argument("--out-dir", type=Path, help="where to write the two grammar files (default: the packaged grammars)")
    weights.add_argument("--check-against", type=Path, help="then draw a train split with the fitted weights and compare it with this train"
                         " file, as `stacklm data compare` does (the validation of docs/data-validation.md)")
    weights.set_defaults(func=_estimate_weights)

    comparison = commands.add_parser("compare", help="two datasets' construction profiles side by side, their total variation and the generator's seed noise")
    _task(comparison)
    comparison.add_argument("datasets", type=Path, nargs=2, metavar="A|B", help="a data folder (<split>.tsv files) or one split file, ours or upstream's")
    comparison.add_argument("--split", choices=SPLITS, help="the split of a single file whose name does not say it")
    comparison.add_argument("--seeds", type=int, nargs=2, default=NOISE_SEEDS, help=f"the generator's two seeds for the noise (default {NOISE_SEEDS[0]} {NOISE_SEEDS[1]})")
    comparison.set_defaults(func=_compare)


def _task(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help=f"one of {', '.join(TASK_NAMES)}")


def _generate(args: argparse.Namespace) -> int:
    task = get_task(args.task)
    if args.seed < 0:
        raise UsageError(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.train < 1:
        raise UsageError(f"--train: expected at least 1 example, got {args.train}")
    for split in SPLITS:
        if getattr(args, split) > MAX_SPLIT_SIZE:
            raise UsageError(f"--{split}: at most {MAX_SPLIT_SIZE:,} examples (ten times the paper's training set), got {getattr(args, split):,}")
    try:
        sizes = SplitSizes(**{split: getattr(args, split) for split in SPLITS})
    except ValueError as error:
        raise UsageError(f"--{error}") from None
    given = {split: path for split in SPLITS if (path := getattr(args, f"{split}_file")) is not None}
    upstream = {split: read_examples(path) for split, path in given.items()}
    splits = make_splits(task, sizes, args.seed, upstream, {split: str(path) for split, path in given.items()})
    for path in write_dataset(task, splits, args.out):
        print(path)
    return 0


def _transform(args: argparse.Namespace) -> int:
    task = get_task(args.task)
    for number, line in enumerate(sys.stdin, start=1):
        source = line.rstrip("\n").split()
        if not source:
            raise located("<stdin>", number, "empty line; expected a sentence followed by its marker")
        try:
            target = task.transform(source, args.rule)
        except StacklmError as error:
            raise located("<stdin>", number, str(error)) from None
        print(" ".join(target))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    data = fetch_bytes(args.task, args.split, args.mirror)
    write_bytes_atomically(args.out, data)
    file = upstream_file(args.task, args.split)
    print(f"{args.out}: {file.origin} (git blob {file.blob} ok)")
    return 0


def _repair(args: argparse.Namespace) -> int:
    examples = read_examples(args.input)
    repaired = [repair_example(example) for example in examples]
    changed = sum(before != after for before, after in zip(examples, repaired))
    write_examples(args.out, repaired)
    print(f"{args.out}: repaired {changed} of {len(examples)} lines")
    return 0


def _summarize(args: argparse.Namespace) -> int:
    frame = summarize_folder(get_task(args.task), args.data)
    write_parquet(frame, args.out)
    print(describe(frame))
    return 0


def _report(args: argparse.Namespace) -> int:
    text = describe(pd.concat([read_parquet(path, "the data summary") for path in args.summaries], ignore_index=True)) + "\n"
    write_bytes_atomically(args.out, text.encode("utf-8"))
    print(text, end="")
    return 0


def _estimate_weights(args: argparse.Namespace) -> int:
    task = get_task(args.task)
    target = args.fit_to or ("train" if args.task in TRAIN_FILE_TASKS else "held-out")
    sentences = [example.source[:-1] for split in TARGET_SPLITS[target] for example in read_upstream(args.task, split, args.mirror)]
    generalization = [example.source[:-1] for example in read_upstream(args.task, "generalization", args.mirror)]
    in_distribution, generalization_grammar = estimate_weights(task, target, sentences, generalization, args.iterations, args.simulations)
    current = grammar_path(task.grammar_name).read_text(encoding="utf-8").splitlines()[0]
    title = current[2:] if current.startswith("# ") else task.name
    origin = upstream_file(args.task, TARGET_SPLITS[target][0])
    texts = grammar_texts(task, in_distribution, generalization_grammar, title, f"{origin.repository}@{origin.commit[:12]}", args.iterations, target)
    for path in write_grammar_files(texts, args.out_dir or Path(str(grammar_path(task.grammar_name))).parent):
        print(path)
    if args.check_against is not None:
        real = read_dataset(args.check_against, "train")
        grammars = (CompiledGrammar(in_distribution), CompiledGrammar(generalization_grammar))
        generated = {"train": build_splits(task, noise_sizes(real), NOISE_SEEDS[0], grammars=grammars).train}
        [comparison] = compare(task, generated, real, NOISE_SEEDS, grammars)
        print(format_comparison(comparison, (f"drawn with the fitted weights, seed {NOISE_SEEDS[0]}", str(args.check_against))))
    return 0


def _compare(args: argparse.Namespace) -> int:
    task = get_task(args.task)
    first, second = (read_dataset(path, args.split) for path in args.datasets)
    seeds = tuple(args.seeds)
    comparisons = compare(task, first, second, seeds)
    print("\n\n".join(format_comparison(comparison, tuple(map(str, args.datasets)), seeds) for comparison in comparisons))
    return 0
