"""Upstream files: pinned checksums, the mirror folder, and the German passivization repair."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from stacklm.data.examples import format_example, parse_line
from stacklm.data.upstream import (UPSTREAM, UPSTREAM_LINES, UPSTREAM_SPLITS, UpstreamFile, fetch_bytes, git_blob_id, mirror_path,
                                  read_upstream, repair_example)
from stacklm.errors import StacklmError
from stacklm.tasks.example import Example

# docs/design/transformations-data.md#german-passivization-repair: sha256 of the repaired dev and gen files.
REPAIRED_SHA256 = {
    "validation": "1a0dc70359c9f2430d5430dae7d5803e87509b14bb0d01150b24ab65fb8b5e06",
    "generalization": "5a54cefe768338638811465cf8df6b9b15560eee694aeccffddc7983409c6eeb",
}


@pytest.mark.parametrize(("split", "changed"), [("validation", 29), ("generalization", 816)])
def test_repair_changes_exactly_the_buggy_lines(split, changed, upstream_dir):
    text = fetch_bytes("german-passivization", split, upstream_dir).decode("utf-8")
    examples = [parse_line(line, split, number) for number, line in enumerate(text.splitlines(), start=1)]
    repaired = [repair_example(example) for example in examples]
    assert sum(before != after for before, after in zip(examples, repaired)) == changed
    output = "".join(format_example(example) + "\n" for example in repaired).encode("utf-8")
    assert hashlib.sha256(output).hexdigest() == REPAIRED_SHA256[split]


def test_repair_rule():
    buggy = Example(tuple("ihr Esel unterhielt den Löwen . passiv".split()), tuple("der Löwen wurde von ihrem Esel unterhalten .".split()))
    assert repair_example(buggy).target == tuple("der Löwe wurde von ihrem Esel unterhalten .".split())
    identity = Example(tuple("der Löwe unterhielt den Raben . decl".split()), tuple("der Löwe unterhielt den Raben .".split()))
    assert repair_example(identity) == identity
    plural = Example(tuple("ihr Esel unterhielt die Löwen . passiv".split()), tuple("die Löwen wurden von ihrem Esel unterhalten .".split()))
    assert repair_example(plural) == plural


def test_every_task_pins_all_four_splits_and_each_reference_copy_matches(upstream_dir):
    """Every file of ../shared/upstream is its pinned blob (and sha256); the three train files
    no copy exists of are pinned by blob id only."""
    unavailable = set()
    for task, files in UPSTREAM.items():
        assert set(files) == set(UPSTREAM_SPLITS)
        for split, file in files.items():
            if not mirror_path(task, split, upstream_dir).is_file():
                unavailable.add((task, split))
                continue
            data = fetch_bytes(task, split, upstream_dir)
            assert data.count(b"\n") == UPSTREAM_LINES[split]
    assert unavailable == {("tense-reinflection", "train"), ("tense-reinflection-do", "train"), ("question-formation-have", "train")}
    assert all(UPSTREAM[task][split].sha256 is None for task, split in unavailable)


def test_git_blob_id_is_what_git_hash_object_prints(tmp_path):
    """Against git itself, on bytes no upstream file holds."""
    path = tmp_path / "file.tsv"
    for data in (b"", b"a b . quest\ta b ?\n", "der Löwe .\r\n".encode("utf-8") * 1000):
        path.write_bytes(data)
        expected = subprocess.run(["git", "hash-object", str(path)], check=True, capture_output=True, text=True).stdout.strip()
        assert git_blob_id(data) == expected


def synthetic_pin(data: bytes, sha256: str | None) -> UpstreamFile:
    return UpstreamFile("someone/somewhere", "0" * 40, "data/question.train", git_blob_id(data), sha256)


def test_a_tampered_truncated_or_crlf_copy_is_refused_naming_the_file_and_both_hashes(tmp_path):
    good = b"my yak does smile . decl\tmy yak does smile .\nyour newt doesn't read . quest\tdoesn't your newt read ?\n"
    pin = synthetic_pin(good, hashlib.sha256(good).hexdigest())
    pin.check(good, "question.train")
    for bad in (good.replace(b"yak", b"newt"), good[:-10], good.replace(b"\n", b"\r\n")):
        with pytest.raises(StacklmError, match=rf"copy/question.train: git blob id {git_blob_id(bad)} does not match the pinned {pin.blob}"):
            pin.check(bad, "copy/question.train")
    wrong_sha = synthetic_pin(good, "f" * 64)
    with pytest.raises(StacklmError, match=rf"question.train: sha256 {hashlib.sha256(good).hexdigest()} does not match the pinned f{{64}}"):
        wrong_sha.check(good, "question.train")


def test_the_mirror_is_checked(tmp_path):
    (tmp_path / "passivization").mkdir()
    (tmp_path / "passivization" / "passiv_en_nps.dev").write_text("changed\n")
    with pytest.raises(StacklmError, match="passiv_en_nps.dev: git blob id .* does not match the pinned 333f5de1be03"):
        fetch_bytes("passivization", "validation", tmp_path)
    with pytest.raises(StacklmError, match="passiv_en_nps.train: upstream mirror file not found .*git blob 78eb857c738f"):
        fetch_bytes("passivization", "train", tmp_path)


def test_the_paper_corrected_every_german_passivization_split(upstream_dir):
    """App. A's repair applies to train and test too: upstream's test carries the bug in 290 lines."""
    for split, buggy in (("test", 290),):
        examples = read_upstream("german-passivization", split, upstream_dir)
        assert sum(repair_example(example) != example for example in examples) == buggy
