"""Upstream dev and gen examples of every task, read once per session (sha256-checked)."""

from __future__ import annotations

from functools import cache

import pytest

from stacklm.data.upstream import read_upstream


@pytest.fixture(scope="session")
def upstream_examples(upstream_dir):
    """``load(task, split)`` → the examples of the reference copy, split ∈ {train, validation, test, generalization}."""
    return cache(lambda task, split: read_upstream(task, split, upstream_dir))
