"""Upstream dev and gen examples of every task, read once (sha256-checked)."""

from __future__ import annotations

import pytest

from stacklm.data.examples import parse_line
from stacklm.data.upstream import fetch_bytes


@pytest.fixture(scope="session")
def upstream_examples(upstream_dir):
    """(task, split) → examples of the reference copy, split ∈ {validation, generalization}."""
    cache = {}

    def load(task: str, split: str):
        if (task, split) not in cache:
            text = fetch_bytes(task, split, upstream_dir).decode("utf-8")
            cache[(task, split)] = [parse_line(line, f"{task}/{split}", number) for number, line in enumerate(text.splitlines(), start=1)]
        return cache[(task, split)]

    return load
