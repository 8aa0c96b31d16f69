"""The long runs' scripts under docs/: docs/snapshot.sh packs a run directory's state by run
(transformation and CFL runs alike), and docs/put-table.py writes a table between a page's markers."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _touch(root: Path, *paths: str) -> None:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(path)


def _members(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return sorted(member.name for member in tar.getmembers() if member.isfile())


def test_snapshot_keeps_each_ended_runs_model_each_unfinished_runs_state_and_the_rest_apart_from_the_data(tmp_path: Path) -> None:
    run, state = tmp_path / "run", tmp_path / "state"
    _touch(
        run,
        "results/data/question-formation/train.tsv",
        "results/runs/question-formation/tf/search/1/train.parquet",  # ended
        "results/runs/question-formation/tf/search/1/model.pt",
        "results/checkpoints/question-formation/tf/search/1.0123456789abcdef.pt",
        "results/checkpoints/question-formation/tf+nd/search/2.fedcba9876543210.pt",  # training
        "results/cfl/data/marked-reversal/test.tsv",
        "results/cfl/runs/marked-reversal/cfl-ns/lr0.01-r1/train.parquet",  # ended
        "results/cfl/runs/marked-reversal/cfl-ns/lr0.01-r1/model.pt",
        "results/cfl/checkpoints/marked-reversal/cfl-ns/lr0.01-r1.0123456789abcdef.pt",
        "results/cfl/checkpoints/marked-reversal/cfl-jm/lr0.005-m20-r1.0123456789abcdef.pt",  # training
        "results/mlflow/mlflow.db",
        "results/tracking/marked-reversal.json",
        "logs/train.log",
        ".snakemake/metadata/cmVzdWx0cw==",
    )
    subprocess.run(["bash", DOCS / "snapshot.sh", run, state], check=True)
    assert sorted(path.name for path in (state / "models").iterdir()) == [
        "cfl.marked-reversal.cfl-ns.lr0.01-r1.tar.gz", "question-formation.tf.search.1.tar.gz"]
    assert _members(state / "models" / "cfl.marked-reversal.cfl-ns.lr0.01-r1.tar.gz") == ["results/cfl/runs/marked-reversal/cfl-ns/lr0.01-r1/model.pt"]
    assert sorted(path.name for path in (state / "training").iterdir()) == [
        "cfl.marked-reversal.cfl-jm.lr0.005-m20-r1.tar.gz", "question-formation.tf+nd.search.2.tar.gz"]
    assert _members(state / "live.tar.gz") == [
        ".snakemake/metadata/cmVzdWx0cw==",
        "logs/train.log",
        "results/cfl/data/marked-reversal/test.tsv",
        "results/cfl/runs/marked-reversal/cfl-ns/lr0.01-r1/train.parquet",
        "results/runs/question-formation/tf/search/1/train.parquet",
    ]
    assert (state / "data-times.tsv").read_text().splitlines()[0].startswith("results/data/question-formation/train.tsv\t")
    before = {path.name: path.read_bytes() for path in state.rglob("*.tar.gz")}
    subprocess.run(["bash", DOCS / "snapshot.sh", run, state], check=True)
    assert {path.name: path.read_bytes() for path in state.rglob("*.tar.gz")} == before  # byte-reproducible


def test_put_table_replaces_what_lies_between_the_markers_and_refuses_a_page_without_them(tmp_path: Path) -> None:
    table, page, other = tmp_path / "table.md", tmp_path / "page.md", tmp_path / "other.md"
    table.write_text("| a |\n|---|\n| 1 |\n")
    page.write_text("intro\n<!-- run table -->\nold\nrows\n<!-- end of run table -->\nafter\n")
    other.write_text("no markers\n")

    def put(*arguments: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, DOCS / "put-table.py", table, "run", *arguments], capture_output=True, text=True)

    assert put(page).returncode == 0
    assert page.read_text() == "intro\n<!-- run table -->\n| a |\n|---|\n| 1 |\n<!-- end of run table -->\nafter\n"
    assert put(other, "--if-present").returncode == 0 and other.read_text() == "no markers\n"
    refused = put(other)
    assert refused.returncode != 0 and f"{other}: no '<!-- run table -->' line" in refused.stderr
    assert other.read_text() == "no markers\n"


@pytest.mark.parametrize("script", ["snapshot.sh", "restore.sh", "publish.sh", "long-run.sh", "table1-paper-data/run.sh", "cfl-two-languages/run.sh"])
def test_the_shell_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", DOCS / script], check=True)
