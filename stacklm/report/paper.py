"""The numbers of *Bearing Syntactic Fruit with Stack-Augmented Neural Networks* (DuSell &
Cotterell, 2025), Tables 1–7.

``paper_results.csv`` is our transcription of the paper's text: one row per (table, task,
architecture, column) with the mean over 5 runs and the standard deviation as printed
(two decimals). Prior-work rows (GRU, ON-LSTM, T5, …) are not transcribed: the tables
compare architectures we train.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import pandas as pd

# How the report cites the paper (never by the file name it has in this project's sources).
PAPER_CITATION = "DuSell & Cotterell (2025)"

# Table number of each task in the paper, and its caption there.
PAPER_TABLES: dict[str, tuple[int, str]] = {
    "question-formation": (1, "Results on question formation."),
    "german-question-formation": (2, "Results on German question formation."),
    "tense-reinflection-do": (3, "Results on the tense reinflection task with auxiliary do."),
    "passivization": (4, "Results on the passivization task."),
    "question-formation-have": (5, "Results on the modified question formation task with auxiliary have."),
    "tense-reinflection": (6, "Results on the original tense reinflection task without auxiliary do."),
    "german-passivization": (7, "Results on the German passivization task, with the generalization set's bugs fixed."),
}


@dataclass(frozen=True)
class PaperCell:
    mean: float
    std: float


def paper_results() -> pd.DataFrame:
    """The transcribed table cells: columns table, task, architecture, column, mean, std."""
    with resources.files("stacklm.report").joinpath("paper_results.csv").open() as stream:
        return pd.read_csv(stream, dtype={"task": str, "architecture": str, "column": str})


def paper_cells(task: str) -> dict[tuple[str, str], PaperCell]:
    """``(architecture, column key) → PaperCell`` of the paper's table for ``task``."""
    results = paper_results()
    rows = results[results["task"] == task]
    return {
        (row.architecture, row.column): PaperCell(mean=float(row.mean), std=float(row.std))
        for row in rows.itertuples(index=False)
    }
