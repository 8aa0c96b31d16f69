"""``stacklm models`` lists every architecture with its width and parameter count."""

from __future__ import annotations

import argparse

import pytest

from stacklm.models import cli
from stacklm.models.registry import ARCHITECTURES


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["models", *argv])
    return args.func(args)


def test_lists_every_bearing_architecture_for_a_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--task", "question-formation"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "vocabulary: 69 symbols (EOS included); budget: 200000"
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    expected = [name for name, a in ARCHITECTURES.items() if a.family == "bearing-syntactic-fruit"]
    assert list(rows) == expected
    assert rows["Tf"] == ["68", "193596"] and rows["LSTM"] == ["90", "201960"]


def test_lists_cfl_architectures_for_a_vocabulary_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--vocabulary-size", "4", "--budget", "50000"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["cfl/LSTM"] == ["20", str(4 * 20 * (4 + 20 + 2) + 21 * 4)]
    assert not any(name.endswith("+Syn") for name in rows)
