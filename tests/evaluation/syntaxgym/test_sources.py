"""The pinned suite files: the reference copies pass, a changed file is refused, and a run over a
subset of the suites gives its SG score and circuits."""

import math
from pathlib import Path

import pytest

from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.sources import SUITE_SHA256, read_pinned_circuits, read_pinned_suite, score_all


def test_the_reference_copies_match_their_pins(upstream_dir: Path) -> None:
    directory = upstream_dir / "sg-test-suites"
    circuits = read_pinned_circuits(directory)
    assert sorted(s for c in circuits for s in c.suites) == sorted(SUITE_SHA256)
    assert sum(len(read_pinned_suite(directory, name).items) for name in SUITE_SHA256) == 841


def test_a_file_that_differs_from_its_pin_is_refused(tmp_path: Path) -> None:
    (tmp_path / "circuits.json").write_text('{"circuits": []}')
    with pytest.raises(StacklmError, match=r"circuits\.json: sha256 [0-9a-f]{64} does not match the pinned"):
        read_pinned_circuits(tmp_path)
    with pytest.raises(StacklmError, match=r"syntaxgym-format/cleft\.json: file not found"):
        read_pinned_suite(tmp_path, "cleft")


def test_a_run_over_one_suite_scores_it_and_its_circuit(upstream_dir: Path) -> None:
    # One bit per token: number_orc's predictions hold only where "disguised" empties region 7
    # (see test_score): 2 of 38.
    words = frozenset(word for line in (upstream_dir / "ptb" / "ptb.train.txt").open() for word in line.split())
    result = score_all(upstream_dir / "sg-test-suites", words, lambda inputs, targets: [-math.log(2)] * len(targets), ("number_orc",))
    assert [s.suite for s in result.suites] == ["number_orc"]
    assert result.scores.overall == pytest.approx(2 / 38)
    assert result.scores.circuits == (("Agreement", pytest.approx(2 / 38)),)
    with pytest.raises(StacklmError, match=r"suites in no circuit: \['nn-nv-rpl'\]"):
        score_all(upstream_dir / "sg-test-suites", words, lambda inputs, targets: [0.0] * len(targets), ("nn-nv-rpl",))


def test_each_suite_is_reported_once_scored_in_the_circuits_order(upstream_dir: Path) -> None:
    words = frozenset(word for line in (upstream_dir / "ptb" / "ptb.valid.txt").open() for word in line.split())
    heard: list[str] = []
    result = score_all(
        upstream_dir / "sg-test-suites", words, lambda inputs, targets: [-math.log(2)] * len(targets), ("center_embed", "number_orc"), on_suite=lambda suite: heard.append(suite.suite)
    )
    assert heard == [suite.suite for suite in result.suites] == ["number_orc", "center_embed"]  # Agreement comes first in circuits.json


def authors_repository(root: Path, upstream_dir: Path) -> Path:
    """A folder laid out as the authors' repository's ``data/``: ``circuits.json``, ``syntaxgym/<suite>.json``."""
    (root / "syntaxgym").mkdir(parents=True)
    (root / "circuits.json").symlink_to(upstream_dir / "sg-test-suites" / "circuits.json")
    for name in SUITE_SHA256:
        (root / "syntaxgym" / f"{name}.json").symlink_to(upstream_dir / "sg-test-suites" / "syntaxgym-format" / f"{name}.json")
    return root


def test_the_download_writes_the_circuits_and_the_suites_asked_for_as_the_reference_copies_lay_them_out(tmp_path: Path, upstream_dir: Path) -> None:
    from stacklm.evaluation.syntaxgym.sources import download_suites

    repository = authors_repository(tmp_path / "data", upstream_dir)
    download_suites(tmp_path / "out", ("number_src", "cleft"), url=repository.as_uri())
    assert sorted(str(path.relative_to(tmp_path / "out")) for path in (tmp_path / "out").rglob("*.json")) == [
        "circuits.json", "syntaxgym-format/cleft.json", "syntaxgym-format/number_src.json",
    ]
    assert len(read_pinned_suite(tmp_path / "out", "cleft").items) > 0 and read_pinned_circuits(tmp_path / "out")


def test_a_downloaded_file_that_differs_from_its_pin_writes_nothing(tmp_path: Path, upstream_dir: Path) -> None:
    from stacklm.evaluation.syntaxgym.sources import download_suites

    repository = authors_repository(tmp_path / "data", upstream_dir)
    (repository / "syntaxgym" / "cleft.json").unlink()
    (repository / "syntaxgym" / "cleft.json").write_text("{}")
    with pytest.raises(StacklmError, match=r"syntaxgym/cleft.json: sha256 [0-9a-f]{64} does not match the pinned"):
        download_suites(tmp_path / "out", ("number_src", "cleft"), url=repository.as_uri())
    assert not (tmp_path / "out").exists()
    with pytest.raises(StacklmError, match="no pinned suite 'nn-nv-rpl'"):
        download_suites(tmp_path / "out", ("nn-nv-rpl",), url=repository.as_uri())
    with pytest.raises(StacklmError, match=r"absent/circuits.json: download failed .*set ptb.mirror"):
        download_suites(tmp_path / "out", ("cleft",), url=(tmp_path / "absent").as_uri())
