"""The rows of ``stacklm progress`` from synthetic records: an ended run's state from its curve
and its config, an evaluated run's whole-set values, a training state that is not one, and the
figure's rows and runs (the end-to-end test on real runs is tests/experiments/transformations)."""

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from stacklm.errors import StacklmError
from stacklm.report.curves import run_names
from stacklm.report.progress import CONVERGED, EVALUATED, MAX_EPOCHS, ended_run, figure_curves, plot_progress, table_row, training_run
from stacklm.tracking.records import RunMetadata, curve_table, write_table
from stacklm.training import checkpoint
from stacklm.training.config import TrainConfig
from stacklm.training.run_state import CheckpointRecord
from tests.report.conftest import run_metrics


def write_curve(path: Path, is_best: list[bool], phase: str = "final", index: int = 1, patience: int = 3) -> list[CheckpointRecord]:
    """A run's train.parquet whose checkpoint k has validation cross-entropy 2 - k/10 where it is a new best, else 3."""
    config = TrainConfig(learning_rate=1e-4, tokens_per_batch=900, early_stopping_patience=patience)
    metadata = RunMetadata(
        task="question-formation", architecture="Tf+Nd", phase=phase, trial=index if phase == "search" else None, seed=index if phase == "final" else 2**31 + 5,
        learning_rate=1e-4, tokens_per_batch=900, parameters=200_000, data_version="ab" * 32, code_version="0.1.0", wall_time_s=7200.0,
        tokens_per_s=1.0, config=json.dumps({"train_config": asdict(config)}),
    )  # fmt: skip
    scores = [{"test_full_accuracy": 0.1 * k, "test_partial_accuracy": 0.5, "hierarchical_full_accuracy": 0.01 * k, "hierarchical_partial_accuracy": 0.6,
               "linear_full_accuracy": 0.0, "linear_partial_accuracy": 0.4} for k in range(1, len(is_best) + 1)]  # fmt: skip
    curve = [CheckpointRecord(k, k, 10 * k, 80_000 * k, 1e-4, 3.0, 2 - k / 10 if best else 3.0, best, scores[k - 1]) for k, best in enumerate(is_best, start=1)]
    write_table(curve_table(curve, metadata), path)
    return curve


@pytest.mark.parametrize(("is_best", "state"), [([True, True, False, False, False], CONVERGED), ([True, True, False, False], MAX_EPOCHS), ([True, True], MAX_EPOCHS)])
def test_an_ended_run_converged_when_its_last_checkpoints_brought_no_new_best(tmp_path: Path, is_best: list[bool], state: str) -> None:
    curve = write_curve(tmp_path / "train.parquet", is_best)
    run = ended_run(tmp_path / "train.parquet")
    assert run.state == state and run.name == "Tf+Nd, final seed 1" and run.training_s == 7200.0
    cells = table_row(run)
    assert cells[5:10] == [str(len(curve)), state, "2.0", "1.8000", "checkpoint 2; curve sample"]
    assert cells[10:] == ["0.200 / 0.500", "0.020 / 0.600", "0.000 / 0.400"]


def test_a_search_run_is_named_by_its_trial_and_the_patience_is_the_runs(tmp_path: Path) -> None:
    write_curve(tmp_path / "train.parquet", [True, False], phase="search", index=4, patience=1)
    run = ended_run(tmp_path / "train.parquet")
    assert (run.name, run.state) == ("Tf+Nd, search trial 4", CONVERGED)


def test_an_evaluated_run_shows_its_whole_set_values_and_says_so(tmp_path: Path) -> None:
    write_curve(tmp_path / "train.parquet", [True, True, False])
    values = {("full_accuracy", "test", None): 0.97, ("full_accuracy", "generalization", "hierarchical"): 0.3,
              ("full_accuracy", "generalization", "linear"): 0.02, ("partial_accuracy", "generalization", "hierarchical"): 0.7,
              ("partial_accuracy", "generalization", "linear"): 0.3}  # fmt: skip
    metrics = run_metrics("question-formation", "Tf+Nd", 1, lambda metric, split, rule: values.get((metric, split, rule), 0.5))
    metrics.to_parquet(tmp_path / "metrics.parquet", index=False)
    run = ended_run(tmp_path / "train.parquet", tmp_path / "metrics.parquet")
    assert run.state == EVALUATED
    # the fixture's metrics have no test PA: shown as missing, never taken from another row
    assert table_row(run)[9:] == ["checkpoint 2; whole sets (metrics.parquet)", "0.970 / —", "0.300 / 0.700", "0.020 / 0.300"]


def test_files_that_are_not_a_runs_are_named(tmp_path: Path) -> None:
    pd.DataFrame({"checkpoint": [1]}).to_parquet(tmp_path / "train.parquet")
    with pytest.raises(StacklmError, match=f"{tmp_path / 'train.parquet'}: missing curve column"):
        ended_run(tmp_path / "train.parquet")
    checkpoint.save(tmp_path / "1.0123456789abcdef.pt", {"model": {}})
    with pytest.raises(StacklmError, match=r"1\.0123456789abcdef\.pt: not a training state of this stacklm"):
        training_run(tmp_path / "1.0123456789abcdef.pt", "question-formation", "Tf", "final", 1, None, None)


def test_the_figure_has_a_row_per_architecture_and_phase_and_a_colour_per_trial_or_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.figure

    for name, phase, index in (("search-1", "search", 1), ("search-3", "search", 3), ("final-1", "final", 1)):
        write_curve(tmp_path / f"{name}.parquet", [True, True], phase=phase, index=index)
    runs = [ended_run(tmp_path / f"{name}.parquet") for name in ("search-1", "search-3", "final-1")]
    assert sorted(set(run_names(figure_curves(runs)))) == ["seed 1", "trial 1", "trial 3"]
    labels: list[str] = []
    legend = matplotlib.figure.Figure.legend
    monkeypatch.setattr(matplotlib.figure.Figure, "legend", lambda self, handles, names, **options: labels.extend(names) or legend(self, handles, names, **options))
    plot_progress(runs, [tmp_path / "progress.png"])
    assert labels == ["seed 1 FA", "seed 1 PA", "trial 1 FA", "trial 1 PA", "trial 3 FA", "trial 3 PA"]
    assert (tmp_path / "progress.png").stat().st_size > 0
