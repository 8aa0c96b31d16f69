"""The TSV files of the syntactic-transformation tasks' examples (``stacklm.tasks.example``).

One example per line, UTF-8, tokens separated by single spaces:

- ``source<TAB>target`` in train, validation and test: the source is the sentence followed by
  its marker token (``quest``/``decl``, ``PRESENT``/``PAST``, ``passiv``/``decl``), the target
  is the hierarchical-rule output;
- ``source<TAB>target<TAB>linear`` in the generalization split, which carries both targets:
  the hierarchical-rule output and the linear-rule output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from stacklm.atomic import write_atomically
from stacklm.errors import located
from stacklm.tasks.example import Example


def parse_line(line: str, path: str | Path, number: int) -> Example:
    """One TSV line (without its newline) as an Example; errors name ``path:number``."""
    fields = line.split("\t")
    if len(fields) not in (2, 3):
        raise located(path, number, f"expected 'source<TAB>target' or 'source<TAB>target<TAB>linear', found {len(fields)} field(s)")
    tokens = []
    for name, field in zip(("source", "target", "linear"), fields):
        if not field or field != field.strip(" ") or "  " in field:
            raise located(path, number, f"{name} field is empty or not single-space separated: {field!r}")
        tokens.append(tuple(field.split(" ")))
    return Example(*tokens)


def read_examples(path: str | Path) -> list[Example]:
    """Every line of a TSV file as an Example; a line that is not UTF-8, ends with CR (a CRLF
    file) or lacks its final newline (a file cut short) is an error naming ``path:line``."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise located(path, None, f"cannot read: {error.strerror}") from None
    lines = data.split(b"\n")
    if lines[-1]:
        raise located(path, len(lines), "the last line has no newline: the file is cut short (or not written by stacklm)")
    return [_example(raw, path, number) for number, raw in enumerate(lines[:-1], start=1)]


def _example(raw: bytes, path: str | Path, number: int) -> Example:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise located(path, number, f"not UTF-8: byte {raw[error.start]:#04x} at column {error.start + 1}") from None
    if line.endswith("\r"):
        raise located(path, number, "ends with CR: lines end with LF only (convert the file from CRLF)")
    return parse_line(line, path, number)


def format_example(example: Example) -> str:
    fields = [example.source, example.target] + ([example.linear] if example.linear is not None else [])
    return "\t".join(" ".join(field) for field in fields)


def write_examples(path: str | Path, examples: Iterable[Example]) -> None:
    """Write atomically (``stacklm.atomic``): a failure leaves nothing at ``path``."""
    write_atomically(path, lambda file: file.writelines((format_example(example) + "\n").encode("utf-8") for example in examples))
