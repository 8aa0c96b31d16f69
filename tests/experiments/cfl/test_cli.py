import argparse

import pytest
import torch

from stacklm import cli
from stacklm.experiments.cfl.commands import register
from stacklm.cfl.datasets import read_split, true_cross_entropy
from stacklm.errors import StacklmError


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="stacklm")
    register(root.add_subparsers(dest="command", required=True))
    return root


@pytest.mark.e2e
def test_generate_writes_the_reference_test_set_and_returns_zero(tmp_path):
    out = tmp_path / "data" / "marked-reversal" / "test.tsv"
    args = parser().parse_args(["cfl", "generate", "--language", "marked-reversal", "--split", "test", "--seed", "0", "--out", str(out)])
    assert (args.language, args.split, args.seed) == ("marked-reversal", "test", 0)
    assert args.func(args) == 0
    dataset = read_split(out)
    assert len(dataset.strings) == 3_000
    assert true_cross_entropy(dataset) == pytest.approx(0.3847151, abs=1e-7)


def test_cfl_generate_is_registered_with_the_stacklm_command():
    """The module is listed for ``stacklm`` (not building the whole parser: that imports every other command's module)."""
    assert "stacklm.experiments.cfl.commands" in cli.COMMAND_MODULES
    args = parser().parse_args(["cfl", "generate", "--language", "dyck-2", "--split", "train", "--seed", "3", "--out", "x.tsv"])
    assert callable(args.func)


def test_generate_sets_the_torch_threads_and_refuses_fewer_than_one(tmp_path):
    before = torch.get_num_threads()
    try:
        args = parser().parse_args(["cfl", "generate", "--language", "marked-reversal", "--split", "test", "--seed", "0", "--out", str(tmp_path / "x.tsv"), "--threads", "0"])
        with pytest.raises(StacklmError, match="--threads must be at least 1"):
            args.func(args)
        assert parser().parse_args(["cfl", "generate", "--language", "dyck-2", "--split", "test", "--seed", "0", "--out", "x.tsv"]).threads == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "argv",
    [
        ["cfl", "generate", "--language", "palindromes", "--split", "test", "--seed", "0", "--out", "x.tsv"],
        ["cfl", "generate", "--language", "dyck-2", "--split", "dev", "--seed", "0", "--out", "x.tsv"],
        ["cfl", "generate", "--language", "dyck-2", "--split", "test", "--out", "x.tsv"],
    ],
)
def test_bad_arguments_are_refused_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exit:
        parser().parse_args(argv)
    assert exit.value.code == 2
    assert "error:" in capsys.readouterr().err
