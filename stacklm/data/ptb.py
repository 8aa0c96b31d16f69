"""The Penn Treebank for language modelling, and its truncated-BPTT chunks (DuSell & Chiang (2022)
§5.2, App. 10; ``docs/design/cfl-and-ptb.md#ptb-data-and-batching``).

Data: Mikolov et al. (2011)'s preprocessed PTB, one sentence per line. A split is one token
stream: each line split on whitespace, then ``<eos>``. The vocabulary is the sorted set of the
training file's types other than ``<unk>``, then ``<unk>`` (the fallback for any unseen word),
then ``<eos>``: V = 10,000.

Chunks: the stream of N tokens is cut into contiguous streams of L = ⌈N/B⌉ tokens (the
last one shorter; fewer than B streams when N is tiny), each prefixed with the token before it
(``<eos>`` for the first) as an input only, so that every token is a target exactly once. The
streams are read 35 steps (``bptt``) at a time; the chunk in which the short last stream ends is
split there, and from then on the batch has one row fewer. Row b of every chunk continues row b
of the one before, so the state carried between chunks (detached) is sliced to the chunk's batch.

The released code gives the short last stream one more target, a padding ``<eos>`` (train
929,590 targets instead of 929,589); ``padding_target=True`` reproduces it, the default counts
every token exactly once.

Download (``stacklm ptb download``, the rule ``ptb_download``): as the authors'
``scripts/download-ptb.bash``, Mikolov's ``simple-examples.tgz`` from his web page, of which
``simple-examples/data/ptb.{train,valid,test}.txt`` are extracted. The archive itself is not
pinned (no copy of it could be hashed when this was written: the page is not reachable from the
machine the pins were taken on); each extracted file is, by the sha256 of the reference copies
(``PTB_SHA256``), and is refused before it is written unless it matches.
"""

from __future__ import annotations

import hashlib
import io
import math
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from stacklm.atomic import write_bytes_atomically
from stacklm.data.download import fetch_url
from stacklm.data.vocabulary import EOS, Vocabulary
from stacklm.errors import StacklmError, located

UNK = "<unk>"
Split = Literal["train", "valid", "test"]
# Mikolov et al. (2011) simple-examples data/ptb.*.txt; their md5s are the published ones
# (docs/design/cfl-and-ptb.md#ptb-data-and-batching), and these are the same files' sha256.
PTB_SHA256: dict[Split, str] = {
    "train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}


PTB_SPLITS: tuple[Split, ...] = ("train", "valid", "test")
PTB_ARCHIVE_URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"  # the authors' scripts/download-ptb.bash
PTB_ARCHIVE_FOLDER = "simple-examples/data"  # of the PTB files inside the archive
OFFLINE = "to work offline, set ptb.mirror to a folder holding ptb/ptb.{train,valid,test}.txt"


def ptb_file_name(split: Split) -> str:
    return f"ptb.{split}.txt"


def extract_ptb(archive: bytes, source: str, out: str | Path) -> None:
    """Write ``out/ptb.{train,valid,test}.txt`` from the bytes of ``simple-examples.tgz`` (read
    from ``source``), each refused unless its sha256 is the pinned one; nothing is written unless
    all three are found and match."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            members = {member.name.removeprefix("./"): member for member in tar.getmembers() if member.isfile()}
            files = {}
            for split in PTB_SPLITS:
                name = f"{PTB_ARCHIVE_FOLDER}/{ptb_file_name(split)}"
                if name not in members:
                    raise StacklmError(f"{source}: no {name} in the archive")
                files[split] = tar.extractfile(members[name]).read()  # type: ignore[union-attr]  (a file member)
    except (tarfile.TarError, OSError, EOFError) as error:
        raise StacklmError(f"{source}: not a readable .tgz archive ({error})") from None
    for split, data in files.items():
        if (digest := hashlib.sha256(data).hexdigest()) != PTB_SHA256[split]:
            raise StacklmError(f"{source}: {PTB_ARCHIVE_FOLDER}/{ptb_file_name(split)} has sha256 {digest}, not the pinned {PTB_SHA256[split]}")
    for split, data in files.items():
        write_bytes_atomically(Path(out) / ptb_file_name(split), data)


def download_ptb(out: str | Path, url: str = PTB_ARCHIVE_URL) -> None:
    """Fetch ``simple-examples.tgz`` from ``url`` and extract the PTB files into ``out`` (:func:`extract_ptb`)."""
    extract_ptb(fetch_url(url, OFFLINE), url, out)


def tokens_of_text(text: str) -> list[str]:
    """Each line's words, then ``<eos>``."""
    tokens: list[str] = []
    for line in text.splitlines():
        tokens.extend(line.split())
        tokens.append(EOS)
    return tokens


def read_tokens(path: str | Path, sha256: str | None = None) -> list[str]:
    """The token stream of a PTB file; with ``sha256``, refused unless the file's digest matches."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StacklmError(f"{path}: PTB file not found") from None
    if sha256 is not None and (digest := hashlib.sha256(data).hexdigest()) != sha256:
        raise StacklmError(f"{path}: sha256 {digest} does not match the pinned {sha256}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise located(path, data[: error.start].count(b"\n") + 1, "not UTF-8") from None
    return tokens_of_text(text)


def read_split(directory: str | Path, split: Split) -> list[str]:
    """``directory/ptb.{split}.txt``, checked against its pinned sha256."""
    return read_tokens(Path(directory) / ptb_file_name(split), PTB_SHA256[split])


def first_lines(tokens: list[str], lines: int | None) -> list[str]:
    """The tokens of a split's first ``lines`` lines (through the ``lines``-th ``<eos>``): a slice
    of PTB for a small run; None, or more lines than the split holds, keeps every token."""
    if lines is None:
        return tokens
    if lines < 1:
        raise StacklmError(f"a slice of PTB needs at least 1 line, got {lines}")
    ends = (position for position, token in enumerate(tokens) if token == EOS)
    for count, end in enumerate(ends, start=1):
        if count == lines:
            return tokens[: end + 1]
    return tokens


def build_vocabulary(train_tokens: list[str]) -> Vocabulary:
    """Sorted training types other than ``<unk>`` and ``<eos>``, then ``<unk>``; ``<eos>`` last."""
    types = set(train_tokens) - {UNK, EOS}
    return Vocabulary(tuple(sorted(types)) + (UNK,))


def encode(tokens: list[str], vocabulary: Vocabulary) -> Tensor:
    """(N,) indices, ``<unk>``'s for a token outside the vocabulary."""
    index = {token: position for position, token in enumerate(vocabulary.tokens)}
    index[EOS] = vocabulary.eos_index
    unk = index[UNK]
    return torch.tensor([index.get(token, unk) for token in tokens], dtype=torch.long)


@dataclass(frozen=True)
class Chunk:
    inputs: Tensor  # (B, T) token indices
    targets: Tensor  # (B, T): targets[b, t] follows inputs[b, t]; every entry is scored

    @property
    def batch_size(self) -> int:
        return self.inputs.size(0)

    @property
    def num_targets(self) -> int:
        return self.targets.numel()


def chunks(stream: Tensor, eos_index: int, batch_size: int = 32, bptt: int = 35, padding_target: bool = False) -> list[Chunk]:
    """The truncated-BPTT chunks of one split's (N,) token stream, in order."""
    if stream.dim() != 1 or stream.numel() == 0:
        raise StacklmError(f"a split must be a non-empty token stream, got shape {tuple(stream.shape)}")
    if batch_size < 1 or bptt < 1:
        raise StacklmError(f"batch_size and bptt must be at least 1, got {batch_size} and {bptt}")
    total = stream.numel()
    length = math.ceil(total / batch_size)  # L: targets per stream
    streams = math.ceil(total / length)  # S ≤ B
    last = total - (streams - 1) * length  # targets of the last stream, 1 … L
    rows = torch.full((streams, length + 1), eos_index, dtype=torch.long)  # (S, L + 1): prefix, then the stream
    for row in range(streams):
        part = stream[row * length : (row + 1) * length]
        rows[row, 0] = eos_index if row == 0 else stream[row * length - 1]
        rows[row, 1 : 1 + part.numel()] = part
    scored_in_last = min(last + int(padding_target), length)
    result: list[Chunk] = []
    for offset in range(0, length, bptt):
        steps = min(bptt, length - offset)
        full = max(0, min(scored_in_last - offset, steps))  # leading steps where every row is scored
        if full:
            result.append(Chunk(rows[:, offset : offset + full], rows[:, offset + 1 : offset + 1 + full]))
        if full < steps:
            result.append(Chunk(rows[:-1, offset + full : offset + steps], rows[:-1, offset + 1 + full : offset + 1 + steps]))
    return result
