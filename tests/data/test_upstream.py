"""Upstream files: pinned checksums, the mirror folder, and the German passivization repair."""

from __future__ import annotations

import hashlib

import pytest

from stacklm.data.examples import format_example, parse_line
from stacklm.data.upstream import UPSTREAM, fetch_bytes, repair_example
from stacklm.errors import StacklmError
from stacklm.tasks.example import Example

# datasets.md §7: sha256 of the corrected dev and gen files.
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


def test_every_task_pins_both_files_and_the_mirror_is_checked(upstream_dir, tmp_path):
    for task, files in UPSTREAM.items():
        assert set(files) == {"validation", "generalization"}
        for split in files:
            assert len(fetch_bytes(task, split, upstream_dir)) > 0
    (tmp_path / "passivization").mkdir()
    (tmp_path / "passivization" / "passiv_en_nps.dev").write_text("changed\n")
    with pytest.raises(StacklmError, match="passiv_en_nps.dev: sha256 .* does not match the pinned e2024b0c"):
        fetch_bytes("passivization", "validation", tmp_path)
    with pytest.raises(StacklmError, match="passiv_en_nps.gen: upstream mirror file not found"):
        fetch_bytes("passivization", "generalization", tmp_path)
