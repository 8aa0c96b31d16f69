"""stacklm.report.figures: Figure 3 shows the models that master the test set."""

from __future__ import annotations

from pathlib import Path

from stacklm.report.aggregate import COLUMNS, Cell
from stacklm.report.figures import plot_figure3, qualifying_architectures

NAN = float("nan")


def cells(test_accuracy: dict[str, float]) -> dict[tuple[str, str], Cell]:
    table = {(name, column.key): Cell(0.4, 0.1, 3) for name in test_accuracy for column in COLUMNS}
    for name, accuracy in test_accuracy.items():
        table[(name, "full_test")] = Cell(accuracy, 0.01, 3)
    return table


def test_only_models_at_or_above_the_threshold_qualify() -> None:
    table = cells({"Tf": 0.95, "RNN": 0.5, "Tf+Nd": 0.9, "LSTM": NAN})
    assert qualifying_architectures(table, ["Tf", "RNN", "Tf+Nd", "LSTM"], 0.9) == ["Tf", "Tf+Nd"]


def test_figure3_is_written_as_png_and_reproducible_pdf(tmp_path: Path) -> None:
    panels = [("question-formation", cells({"Tf": 0.99, "RNN": 0.2})), ("passivization", cells({"Tf": 0.3, "RNN": 0.2}))]
    paths = [tmp_path / "figure3.png", tmp_path / "figure3.pdf"]
    plot_figure3(panels, ["Tf", "RNN"], 0.9, paths)
    assert paths[0].read_bytes().startswith(b"\x89PNG") and paths[1].read_bytes().startswith(b"%PDF")
    first = paths[1].read_bytes()
    plot_figure3(panels, ["Tf", "RNN"], 0.9, paths)
    assert paths[1].read_bytes() == first
