"""paper_results.csv: our transcription of DuSell & Cotterell (2025), Tables 1-7, checked against the paper text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stacklm.report.aggregate import COLUMNS
from stacklm.report.paper import PAPER_TABLES, paper_cells, paper_results

ARCHITECTURES = [
    "Tf", "Tf+Sup", "Tf+Sup+Sup", "Tf+Nd", "Tf+Nd+Nd", "RNN", "RNN+Sup", "RNN+Sup+R", "RNN+Nd", "RNN+Nd+R",
    "LSTM", "LSTM+Sup", "LSTM+Sup+R", "LSTM+Nd", "LSTM+Nd+R",
]  # fmt: skip
SEED_000 = Path(__file__).resolve().parents[3] / "shared" / "seeds"


@pytest.mark.parametrize(
    ("task", "architecture", "column", "mean", "std"),
    [  # read off the paper by hand
        ("question-formation", "Tf+Nd", "full_hierarchical", 0.318, 0.19),
        ("question-formation", "Tf+Nd+Nd", "partial_hierarchical", 0.862, 0.17),
        ("german-question-formation", "LSTM+Nd+R", "full_log_ratio", 23.347, 4.98),
        ("tense-reinflection-do", "Tf+Nd", "partial_hierarchical", 0.476, 0.15),
        ("passivization", "LSTM+Sup+R", "full_log_ratio", 17.250, 21.00),
        ("question-formation-have", "RNN", "full_test", 0.147, 0.08),
        ("tense-reinflection", "RNN+Sup+R", "partial_hierarchical", 0.331, 0.40),
        ("german-passivization", "Tf", "partial_log_ratio", 2.849, 0.00),
    ],
)
def test_cells_read_by_hand(task: str, architecture: str, column: str, mean: float, std: float) -> None:
    cell = paper_cells(task)[(architecture, column)]
    assert (cell.mean, cell.std) == (mean, std)


def test_every_table_has_every_architecture_and_column() -> None:
    results = paper_results()
    assert len(results) == 7 * 15 * 7
    for task, (number, _) in PAPER_TABLES.items():
        cells = paper_cells(task)
        assert set(results[results["task"] == task]["table"]) == {number}
        assert set(cells) == {(name, column.key) for name in ARCHITECTURES for column in COLUMNS}


def test_every_cell_matches_the_paper_text() -> None:
    sources = sorted(SEED_000.glob("000_*.txt"))
    if not sources:
        pytest.skip(f"the paper text is not available: no 000_*.txt under {SEED_000}")
    # The text of each table starts at its header row; the rows are tab-separated.
    tables = sources[0].read_text().split("\tFull Accuracy")[1:]
    assert len(tables) == 7
    checked = 0
    for task, (number, _) in PAPER_TABLES.items():
        cells = paper_cells(task)
        for line in tables[number - 1].splitlines():
            name, *fields = line.split("\t")
            if name not in ARCHITECTURES:
                continue
            numbers = [float(re.sub(r"[$±]", "", field)) for field in fields if field]
            expected = [value for column in COLUMNS for value in (cells[(name, column.key)].mean, cells[(name, column.key)].std)]
            assert numbers == expected, f"Table {number}, {name}"
            checked += 1
    assert checked == 7 * 15
