import json
from pathlib import Path

import pandas as pd
import pytest

from stacklm.cli import main
from stacklm.tracking.records import RunMetadata, curve_table, write_table
from stacklm.training.run_state import CheckpointRecord


def write_run(path: Path, architecture: str, seed: int, task: str = "question-formation") -> list[dict[str, float]]:
    metadata = RunMetadata(
        task=task, architecture=architecture, phase="final", trial=None, seed=seed, learning_rate=1e-4, tokens_per_batch=900,
        parameters=200_000, data_version="ab" * 32, code_version="0.1.0", wall_time_s=1.0, tokens_per_s=1.0, config=json.dumps({}),
    )
    scores = [
        {name: round(0.1 * checkpoint + 0.01 * seed, 6) for name in ("test_full_accuracy", "hierarchical_partial_accuracy")}
        | {"test_partial_accuracy": 0.5, "hierarchical_full_accuracy": 0.0, "linear_full_accuracy": 0.25, "linear_partial_accuracy": 0.75}
        for checkpoint in (1, 2, 3)
    ]
    curve = [CheckpointRecord(index, 1, 10 * index, 80_000 * index, 1e-4, 3.0, 2.0 - index / 10, index < 3, scores[index - 1]) for index in (1, 2, 3)]
    write_table(curve_table(curve, metadata), path)
    return scores


def test_curves_concatenate_the_runs_scores_and_draw_a_reproducible_figure(tmp_path: Path) -> None:
    runs = {(architecture, seed): tmp_path / f"{architecture}-{seed}.parquet" for architecture in ("Tf", "Tf+Nd") for seed in (1, 2)}
    expected = {key: write_run(path, *key) for key, path in runs.items()}
    figures = [tmp_path / "curves.png", tmp_path / "curves.pdf"]
    assert main(["curves", "--out", str(tmp_path / "curves.parquet"), "--figures", *map(str, figures), "--", *map(str, runs.values())]) == 0
    curves = pd.read_parquet(tmp_path / "curves.parquet")
    assert len(curves) == 4 * 3
    assert list(dict.fromkeys(curves["architecture"])) == ["Tf", "Tf+Nd"]
    for (architecture, seed), scores in expected.items():
        run = curves[(curves["architecture"] == architecture) & (curves["seed"] == seed)].sort_values("checkpoint")
        assert run["examples_seen"].tolist() == [80_000, 160_000, 240_000]
        for name in scores[0]:
            assert run[name].tolist() == [score[name] for score in scores]
    first = figures[1].read_bytes()
    assert figures[0].stat().st_size > 0 and first.startswith(b"%PDF")
    assert main(["curves", "--out", str(tmp_path / "again.parquet"), "--figures", str(figures[1]), "--", *map(str, runs.values())]) == 0
    assert figures[1].read_bytes() == first


def test_curves_name_the_file_without_generalization_scores_and_refuse_two_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.parquet"
    write_run(good, "Tf", 1)
    stripped = tmp_path / "old.parquet"
    pd.read_parquet(good).drop(columns=["linear_full_accuracy"]).to_parquet(stripped)
    other = tmp_path / "other.parquet"
    write_run(other, "Tf", 2, task="passivization")
    figure = str(tmp_path / "f.png")
    assert main(["curves", "--out", str(tmp_path / "c.parquet"), "--figures", figure, "--", str(good), str(stripped)]) == 1
    assert f"{stripped}: missing curve column(s) linear_full_accuracy" in capsys.readouterr().err
    assert main(["curves", "--out", str(tmp_path / "c.parquet"), "--figures", figure, "--", str(good), str(other)]) == 1
    assert "several tasks" in capsys.readouterr().err
    assert not (tmp_path / "c.parquet").exists()


def test_the_legend_names_every_seed_when_the_first_architecture_lacks_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.figure

    from stacklm.report.curves import plot_curves, read_curves

    runs = [tmp_path / "tf-1.parquet", tmp_path / "nd-1.parquet", tmp_path / "nd-3.parquet"]
    for path, (architecture, seed) in zip(runs, [("Tf", 1), ("Tf+Nd", 1), ("Tf+Nd", 3)]):
        write_run(path, architecture, seed)
    labels: list[str] = []
    legend = matplotlib.figure.Figure.legend
    monkeypatch.setattr(matplotlib.figure.Figure, "legend", lambda self, handles, names, **options: labels.extend(names) or legend(self, handles, names, **options))
    plot_curves(read_curves(runs), [tmp_path / "curves.png"])
    assert labels == ["seed 1 FA", "seed 1 PA", "seed 3 FA", "seed 3 PA"]


def drawn_figure(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures ``plot_curves`` saves, kept open for inspection (the caller closes them)."""
    import matplotlib.pyplot as plt

    import stacklm.report.curves as curves_module

    drawn: list = []
    monkeypatch.setattr(curves_module, "save_figure", lambda figure, paths, **options: drawn.append(figure))
    monkeypatch.setattr(plt, "close", lambda figure: None)
    return drawn


@pytest.mark.parametrize("architectures", [1, 17])
def test_the_title_is_drawn_above_the_first_row_not_over_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, architectures: int) -> None:
    import matplotlib.pyplot as plt

    from stacklm.report.curves import plot_curves, read_curves

    names = ["Tf", "Tf+Nd", "LSTM", "RNN", "Tf+Sup", "LSTM+Nd", "RNN+Nd", "Tf+Sup+Sup", "Tf+Nd+Nd", "RNN+Sup", "RNN+Sup+R", "RNN+Nd+R",
             "LSTM+Sup", "LSTM+Sup+R", "LSTM+Nd+R", "Tf+Syn", "LSTM+Syn"][:architectures]
    paths = [tmp_path / f"{index}.parquet" for index in range(architectures)]
    for path, name in zip(paths, names):
        write_run(path, name, 1)
    drawn = drawn_figure(monkeypatch)
    plot_curves(read_curves(paths), [tmp_path / "curves.png"])
    (figure,) = drawn
    renderer = figure.canvas.get_renderer()
    title = figure._suptitle.get_window_extent(renderer)
    first_row = [axis for axis in figure.axes if axis.get_subplotspec().rowspan.start == 0]
    assert all(title.y0 >= axis.title.get_window_extent(renderer).y1 for axis in first_row)
    plt.close(figure)


def test_a_run_of_one_checkpoint_is_drawn_with_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-epoch run has one checkpoint: a line of one point draws nothing, so it has markers."""
    import matplotlib.pyplot as plt

    from stacklm.report.curves import plot_curves, read_curves

    write_run(tmp_path / "run.parquet", "Tf", 1)
    curves = read_curves([tmp_path / "run.parquet"])
    drawn = drawn_figure(monkeypatch)
    plot_curves(curves[curves["checkpoint"] == 1], [tmp_path / "curves.png"])
    lines = [line for axis in drawn[0].axes for line in axis.get_lines() if line.get_label().endswith(("FA", "PA"))]
    assert lines and all(line.get_marker() == "o" for line in lines)
    plt.close(drawn[0])
