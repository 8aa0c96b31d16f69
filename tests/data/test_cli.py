"""``stacklm data ...`` end to end: determinism, the upstream source, transform, bad input."""

from __future__ import annotations

import io
import json

import pandas as pd

from stacklm.cli import main
from stacklm.data.examples import read_examples
from stacklm.data.splits import SPLITS

SIZES = ["--train", "300", "--validation", "40", "--test", "60", "--generalization", "50"]


def generate(folder, *extra, seed="11", task="tense-reinflection"):
    return main(["data", "generate", "--task", task, "--seed", seed, *SIZES, "--out", str(folder), *extra])


def test_same_seed_gives_byte_identical_files(tmp_path):
    assert generate(tmp_path / "a") == 0
    assert generate(tmp_path / "b") == 0
    assert generate(tmp_path / "c", seed="12") == 0
    names = [f"{split}.tsv" for split in SPLITS] + ["construction.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "train.tsv").read_bytes() != (tmp_path / "c" / "train.tsv").read_bytes()
    assert [len(read_examples(tmp_path / "a" / f"{split}.tsv")) for split in SPLITS] == [300, 40, 60, 50]
    assert all(example.linear is not None for example in read_examples(tmp_path / "a" / "generalization.tsv"))


def test_upstream_source_fetch_repair_generate_summarize(tmp_path, upstream_dir, capsys):
    task = "german-passivization"
    for split in ("validation", "generalization"):
        raw, repaired = tmp_path / f"{split}.tsv", tmp_path / f"{split}.repaired.tsv"
        assert main(["data", "fetch", "--task", task, "--split", split, "--mirror", str(upstream_dir), "--out", str(raw)]) == 0
        assert main(["data", "repair", "--task", task, "--input", str(raw), "--out", str(repaired)]) == 0
    assert "repaired 816 of 10000 lines" in capsys.readouterr().out
    out = tmp_path / "data"
    assert generate(out, "--validation-file", str(tmp_path / "validation.repaired.tsv"),
                    "--generalization-file", str(tmp_path / "generalization.repaired.tsv"), task=task) == 0
    upstream_validation = read_examples(tmp_path / "validation.repaired.tsv")
    assert read_examples(out / "validation.tsv") == upstream_validation[:40]
    generalization = read_examples(out / "generalization.tsv")
    assert [example.target for example in generalization] == [example.target for example in read_examples(tmp_path / "generalization.repaired.tsv")[:50]]
    counts = json.loads((out / "construction.json").read_text())
    assert counts["upstream validation"] == 40 and counts["upstream generalization"] == 50
    # The summary is a long table; the report prints it.
    assert main(["data", "summarize", "--task", task, "--data", str(out), "--out", str(tmp_path / "summary.parquet")]) == 0
    frame = pd.read_parquet(tmp_path / "summary.parquet")
    assert list(frame.columns) == ["task", "split", "statistic", "key", "value"]
    sizes = frame[frame.statistic == "examples"].set_index("split").value.to_dict()
    assert sizes == {"train": 300, "validation": 40, "test": 60, "generalization": 50}
    lengths = frame[(frame.statistic == "length") & (frame.split == "test")]
    assert lengths.value.sum() == 60
    capsys.readouterr()
    assert main(["data", "report", str(tmp_path / "summary.parquet"), "--out", str(tmp_path / "report.txt")]) == 0
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "report.txt").read_text() and printed.startswith("german-passivization:")


def test_transform_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("my yak does smile . quest\nmy yak does smile . decl\n"))
    assert main(["data", "transform", "--task", "question-formation", "--rule", "linear"]) == 0
    assert capsys.readouterr().out == "does my yak smile ?\nmy yak does smile .\n"
    monkeypatch.setattr("sys.stdin", io.StringIO("my yak does smile . quest\nmy yak smile . quest\n"))
    assert main(["data", "transform", "--task", "question-formation"]) == 1
    assert "stacklm: error: <stdin>:2: question-formation: not a sentence" in capsys.readouterr().err


def test_bad_input_names_file_and_line_and_writes_nothing(tmp_path, capsys, upstream_dir):
    raw = tmp_path / "validation.tsv"
    assert main(["data", "fetch", "--task", "passivization", "--split", "validation", "--mirror", str(upstream_dir), "--out", str(raw)]) == 0
    lines = raw.read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1].replace("\t", " ")
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "data"
    assert generate(out, "--validation-file", str(raw), "--generalization-file", str(raw), task="passivization") == 1
    assert f"{raw}:2: expected 'source<TAB>target'" in capsys.readouterr().err
    assert not out.exists()
    # A target that is not the task's transformation is refused before anything is written.
    lines[1] = lines[2].split("\t")[0] + "\t" + "the yak ."
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert generate(out, "--validation-file", str(raw), "--generalization-file", str(raw), task="passivization") == 1
    assert f"{raw}:2: passivization validation: target 'the yak .' is not the hierarchical target" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    assert main(["data", "generate", "--task", "passivisation", "--seed", "1", "--out", str(out)]) == 1
    assert "unknown task 'passivisation'" in capsys.readouterr().err
