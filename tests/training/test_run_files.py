"""Bad data given to ``stacklm train``: one error naming ``file:line``, a non-zero exit, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacklm.cli import main
from stacklm.data.examples import format_example, write_examples
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.tasks import get_task

LINE = 3  # the line of train.tsv each case breaks


@pytest.fixture(scope="module")
def splits():
    return build_splits(get_task("question-formation"), SplitSizes(train=20, validation=5, test=5, generalization=5), seed=0)


def corrupt(train: Path, how: str, splits) -> None:
    """Break line ``LINE`` of ``train`` (or the whole file) in the way ``how`` names."""
    lines = train.read_bytes().split(b"\n")[:-1]
    example = splits.train[LINE - 1]
    if how == "unknown token":
        lines[LINE - 1] = lines[LINE - 1].replace(example.source[0].encode(), b"zzzz", 1)
    elif how == "CRLF":
        lines[LINE - 1] += b"\r"
    elif how == "not UTF-8":
        lines[LINE - 1] = b"\xff" + lines[LINE - 1]
    elif how == "wrong target":
        other = next(other for other in splits.train if other.marker == example.marker and other.target != example.target)
        lines[LINE - 1] = format_example(type(example)(example.source, other.target)).encode()
    if how == "cut mid-word":
        train.write_bytes(b"\n".join(lines[: LINE - 1]) + b"\n" + lines[LINE - 1][:-2])
    elif how == "empty":
        train.write_bytes(b"")
    else:
        train.write_bytes(b"\n".join(lines) + b"\n")


CASES = {
    "unknown token": f":{LINE}: question-formation train: not a sentence of the task's grammar: 'zzzz ",
    "CRLF": f":{LINE}: ends with CR: lines end with LF only",
    "cut mid-word": f":{LINE}: the last line has no newline: the file is cut short",
    "not UTF-8": f":{LINE}: not UTF-8: byte 0xff at column 1",
    "wrong target": f":{LINE}: question-formation train: target ",
    "empty": ": no examples: the file is empty",
}


@pytest.mark.parametrize("how", CASES)
def test_bad_training_data_names_file_and_line_and_nothing_is_written(how: str, splits, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    for name, examples in splits.items():
        write_examples(data / f"{name}.tsv", examples)
    train = data / "train.tsv"
    corrupt(train, how, splits)
    status = main(["train", "--task", "question-formation", "--architecture", "LSTM", "--data-dir", str(data), "--out", str(tmp_path / "run"),
                   "--learning-rate", "0.01", "--tokens-per-batch", "64", "--max-epochs", "1", "--checkpoint", str(tmp_path / "checkpoints" / "1.pt"),
                   "--device", "cpu", "--threads", "1"])
    assert status != 0
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"stacklm: error: {train}{CASES[how]}"), error
    assert "\n" not in error
    assert not (tmp_path / "run").exists() and not (tmp_path / "checkpoints").exists()
