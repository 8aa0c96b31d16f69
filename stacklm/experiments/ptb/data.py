"""The data of the PTB experiment (DuSell & Chiang (2022) §5.2, App. 10–11): the PTB splits and
the SyntaxGym suites, downloaded and checked against their pinned sha256 (``stacklm ptb download``
and ``stacklm ptb suites``), and a split as the runs read it: its first lines (or all), encoded
with the vocabulary of the whole training file (V = 10,000, also on a slice) and cut into the
truncated-BPTT chunks of App. 10 (B = 32 streams, 35 steps).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from stacklm.data.ptb import PTB_SHA256, Chunk, Split, chunks, download_ptb, encode, first_lines, read_split
from stacklm.data.vocabulary import Vocabulary
from stacklm.errors import StacklmError

BATCH_SIZE = 32  # App. 10


BPTT = 35  # App. 10: truncated BPTT of 35 steps


def data_version(lines: int | None) -> str:
    """What the runs read: the pinned files (refused on reading unless their sha256 is the pinned one) and the slice."""
    return hashlib.sha256(json.dumps({"files": PTB_SHA256, "lines": lines}, sort_keys=True).encode()).hexdigest()


def split_tokens(data: Path, split: Split, lines: int | None) -> list[str]:
    return first_lines(read_split(data, split), lines)


def split_chunks(tokens: list[str], vocabulary: Vocabulary, source: str) -> list[Chunk]:
    if not tokens:
        raise StacklmError(f"{source}: the split has no token")
    return chunks(encode(tokens, vocabulary), vocabulary.eos_index, BATCH_SIZE, BPTT)


def download_command(args: argparse.Namespace) -> int:
    download_ptb(args.out)
    print(f"PTB: {args.out}/ptb.{{train,valid,test}}.txt, each checked against its pinned sha256")
    return 0


def suites_command(args: argparse.Namespace) -> int:
    from stacklm.evaluation.syntaxgym.sources import SUITE_SHA256, download_suites

    suites = tuple(args.suites) if args.suites else tuple(SUITE_SHA256)
    download_suites(args.out, suites)
    print(f"SyntaxGym: {args.out}: circuits.json and {len(suites)} suites, each checked against its pinned sha256")
    return 0
