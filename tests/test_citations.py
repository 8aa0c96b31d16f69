"""The product cites the papers by their authors (the README's first lines give the titles), never
by the file names of the local copies of their texts, and credits each to its authors."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
LOCAL_NAME = re.compile(r"\bseed 00\d\b", re.IGNORECASE)  # shared/seeds/000_*.txt and its siblings
MISCREDIT = re.compile(r"Bearing Syntactic Fruit.*DuSell (&|and) Chiang|DuSell (&|and) Chiang.*Bearing Syntactic Fruit")


def tracked_lines() -> Iterator[tuple[str, int, str]]:
    """(path, line number, line) of every tracked text file (a file with a NUL byte is binary)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (raw.decode() for raw in names)):
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        for number, line in enumerate(data.decode(errors="replace").splitlines(), start=1):
            yield name, number, line


def test_no_tracked_file_names_a_paper_by_its_local_seed_number() -> None:
    found = [f"{name}:{number}: {line.strip()}" for name, number, line in tracked_lines() if LOCAL_NAME.search(line)]
    assert found == []


def test_bearing_syntactic_fruit_is_credited_to_dusell_and_cotterell() -> None:
    found = [f"{name}:{number}: {line.strip()}" for name, number, line in tracked_lines() if MISCREDIT.search(line)]
    assert found == []


def test_the_license_and_the_citation_file_cover_the_code_and_credit_the_papers() -> None:
    import yaml

    import stacklm

    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "MIT" and citation["version"] == stacklm.__version__
    credited = {reference["title"]: [author["family-names"] for author in reference["authors"]] for reference in citation["references"]}
    assert credited["Bearing Syntactic Fruit with Stack-Augmented Neural Networks"] == ["DuSell", "Cotterell"]
    assert credited["Learning Hierarchical Structures with Differentiable Nondeterministic Stacks"] == ["DuSell", "Chiang"]
    assert any(title.startswith("Syntax-Infused Transformer") and authors[0] == "Sundararaman" for title, authors in credited.items())
    notice = (ROOT / "NOTICE.md").read_text()
    assert "tommccoy1/rnn-hierarchical-biases" in notice and "sebschu/multilingual-transformations" in notice and "none stated" in notice
