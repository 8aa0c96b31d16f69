"""stacklm.report.figures: Figure 3 shows the models that master the test set."""

from __future__ import annotations

from pathlib import Path

from stacklm.report.aggregate import COLUMNS, Cell
from stacklm.report.figures import figure3_caption, plot_figure3, qualifying_architectures

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


def test_error_bars_are_drawn_and_promised_only_with_two_seeds_or_more(tmp_path: Path) -> None:
    """With one seed every standard deviation is NaN: the SVG has no error-bar lines, and the
    caption promises none."""
    names = ["Tf", "RNN"]
    several = cells({"Tf": 0.99, "RNN": 0.95})
    single = {key: Cell(cell.mean, NAN, 1) for key, cell in several.items()}
    for label, table in (("several", several), ("single", single)):
        plot_figure3([("question-formation", table)], names, 0.9, [tmp_path / f"{label}.svg"])
    assert (tmp_path / "several.svg").read_text().count('id="LineCollection_') == 2  # one per architecture's bars
    assert 'id="LineCollection_' not in (tmp_path / "single.svg").read_text()
    assert "error bars: one standard deviation" in figure3_caption(0.9, 3)
    caption = figure3_caption(0.9, 1)
    assert "standard deviation" not in caption and "no error bars" in caption and "90%" in caption


def test_figure3s_caption_says_every_model_is_shown_when_there_is_no_threshold() -> None:
    """The small preset plots every model (threshold 0): not "reaches 0%"."""
    caption = figure3_caption(0.0, 1)
    assert "0%" not in caption and "of every model (no threshold on test accuracy)" in caption
    assert "whose mean test full accuracy is at least 90%" in figure3_caption(0.9, 5)
