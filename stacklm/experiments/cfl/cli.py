"""``stacklm cfl generate``: sample and score one split of a CFL task and write it as TSV; the
experiment's ``train``, ``select``, ``evaluate`` and ``figures`` are in :mod:`stacklm.experiments.cfl.commands`."""

from __future__ import annotations

import argparse

import torch

from stacklm.experiments.cfl import commands as experiment_commands
from stacklm.cfl.datasets import SPLIT_LENGTHS, generate_split, write_split
from stacklm.cfl.languages import LANGUAGES
from stacklm.errors import StacklmError


def register(subparsers: argparse._SubParsersAction) -> None:
    cfl = subparsers.add_parser("cfl")
    commands = cfl.add_subparsers(dest="cfl_command", required=True, metavar="COMMAND")
    generate = commands.add_parser(
        "generate",
        help="sample one split and score each string's true log-probability",
        description="Sample one split (spec §1.4) and write tokens, ln p_true(w) and ln p_G(w | |w|) as TSV.",
    )
    generate.add_argument("--language", required=True, choices=sorted(LANGUAGES))
    generate.add_argument("--split", required=True, choices=list(SPLIT_LENGTHS))
    generate.add_argument("--seed", required=True, type=int, help="seed of the generator (the paper's test sets use 0)")
    generate.add_argument("--out", required=True, help="the TSV file to write")
    generate.add_argument(
        "--strings-per-length",
        type=int,
        default=None,
        help="test split only: keep the first K strings of each length (the same as in the whole split); default: all 100",
    )
    generate.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: the inside algorithm runs many small tensor operations, "
        "and extra threads mostly wait on each other)",
    )
    generate.set_defaults(func=run_generate)
    experiment_commands.register(commands)


def run_generate(args: argparse.Namespace) -> int:
    if args.threads < 1:
        raise StacklmError(f"--threads must be at least 1, not {args.threads}")
    torch.set_num_threads(args.threads)
    write_split(generate_split(LANGUAGES[args.language], args.split, args.seed, args.strings_per_length), args.out)
    return 0
