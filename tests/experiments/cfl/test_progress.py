"""``stacklm cfl progress`` on a tiny real pipeline folder of marked reversal: an LSTM run that
ended, a Gref run killed after its first epoch (its state left behind), a state of another config
and a grid run with no file yet; each row checked against values read from the files themselves
and the true cross-entropy from marked reversal's closed form."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from stacklm import cli
from stacklm.cfl.languages import LANGUAGES
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.experiments.cfl import dag
from stacklm.experiments.cfl.data import sample_run_data
from stacklm.experiments.cfl.progress import find_runs, run_in_training, table_row
from stacklm.experiments.cfl.search import CflRun, run_seeds
from stacklm.experiments.cfl.settings import CflSettings
from stacklm.experiments.cfl.training import run_inputs
from stacklm.experiments.common import architecture_slug
from stacklm.report.progress import CONVERGED, MAX_EPOCHS, UNFINISHED
from stacklm.settings_file import read_settings
from stacklm.training import checkpoint
from tests.training.killed import killed_after_save

LANGUAGE = "marked-reversal"
CFL = {"languages": [LANGUAGE], "models": ["cfl/LSTM", "cfl/Gref"], "learning_rates": [0.01], "vector_sizes": [2], "restarts": 2,
       "train_batches": 3, "validation_batches": 2, "max_epochs": 3}  # fmt: skip
ENDED = CflRun(LANGUAGE, "cfl/LSTM", 0.01, None, 1)
KILLED = CflRun(LANGUAGE, "cfl/Gref", 0.01, 2, 1)
STALE = CflRun(LANGUAGE, "cfl/LSTM", 0.01, None, 2)  # only a state of another config


def path(run_dir: Path, pattern: str, run: CflRun) -> Path:
    return run_dir / pattern.format(language=run.language, model=architecture_slug(run.model), setting=run.setting)


def train(run_dir: Path, run: CflRun) -> int:
    """``stacklm cfl train`` as the rule ``cfl_train`` calls it."""
    return cli.main(["cfl", "train", "--language", run.language, "--architecture", run.model, "--setting", run.setting,
                     "--settings", str(run_dir / "results/settings/cfl_train.json"), "--checkpoint", str(path(run_dir, dag.CFL_CHECKPOINT, run)),
                     "--out", str(path(run_dir, dag.CFL_RUN_DIR, run)), "--device", "cpu", "--threads", "1", "--backend", "torch"])  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pipeline")
    (folder / "results/settings").mkdir(parents=True)
    (folder / "results/settings/cfl_train.json").write_text(json.dumps({"cfl": CFL, "training": {"progress_interval_s": 30}}))
    assert train(folder, ENDED) == 0
    with killed_after_save(1):
        train(folder, KILLED)
    stale = path(folder, dag.CFL_CHECKPOINT, STALE).with_name(f"{STALE.setting}.0123456789abcdef.pt")
    shutil.copyfile(state_of(folder, KILLED), stale)
    return folder


def state_of(run_dir: Path, run: CflRun) -> Path:
    [state] = path(run_dir, dag.CFL_CHECKPOINT, run).parent.glob(f"{run.setting}.*.pt")
    return state


def true_cross_entropy(run: CflRun) -> float:
    """H(S_val, p_true) of the run's validation set: ln p_true(w) = −k ln 2 − ln 20 for |w| = 2k + 1 (20 valid lengths in 40..80)."""
    _, validation = sample_run_data(LANGUAGES[LANGUAGE], run_seeds(run).data, CFL["train_batches"], CFL["validation_batches"])
    symbols = sum(len(string) + 1 for string in validation.strings)
    return sum((len(string) - 1) // 2 * math.log(2) + math.log(20) for string in validation.strings) / symbols


def best_cells(epochs: list[int], deltas: list[float]) -> list[str]:
    """The cells from best validation Δ on: Δ rises and falls with the cross-entropy, so its lowest is at the best epoch."""
    best = min(range(len(deltas)), key=deltas.__getitem__)
    return [f"{deltas[best]:.3f}", str(epochs[best]), "yes" if deltas[best] <= 0.05 else "no"]


def test_every_run_with_a_file_is_shown_as_its_files_hold_it(run_dir: Path) -> None:
    runs, grid, warnings = find_runs(run_dir)
    assert len(grid) == 4 and [row.run for row in runs] == [ENDED, KILLED]
    stale = state_of(run_dir, STALE)
    assert warnings == [f"{stale}: the state of another config than {run_dir / 'results/settings/cfl_train.json'}'s (training would not resume it); not read"]
    ended, killed = runs

    curve = pd.read_parquet(path(run_dir, dag.CFL_RUN_CURVE, ENDED))
    stopped_early = checkpoint.load(state_of(run_dir, ENDED))["counters"]["stopped_early"]  # a finished run keeps its state
    assert table_row(ended) == [LANGUAGE, "LSTM", "0.01", "—", "1", str(len(curve)), CONVERGED if stopped_early else MAX_EPOCHS,
                                f"{curve['wall_time_s'].iloc[0] / 3600:.2f}", *best_cells(curve["epoch"].tolist(), curve[DELTA].tolist())]  # fmt: skip

    payload = checkpoint.load(state_of(run_dir, KILLED))
    records = payload["curve"]
    assert len(records) == 1 and payload["counters"]["epoch"] == 1 and not path(run_dir, dag.CFL_RUN_CURVE, KILLED).exists()
    deltas = [record["validation_cross_entropy"] - true_cross_entropy(KILLED) for record in records]
    assert killed.progress.curve[DELTA].tolist() == pytest.approx(deltas, abs=1e-12)
    assert table_row(killed) == [LANGUAGE, "Gref", "0.01", "2", "1", str(payload["counters"]["epoch"]), UNFINISHED,
                                 f"{payload['counters']['wall_time_s'] / 3600:.2f}", *best_cells([record["epoch"] for record in records], deltas)]  # fmt: skip


def test_the_ended_runs_delta_is_the_one_a_state_gives(run_dir: Path) -> None:
    """The ended run's state still holds its whole curve: read as a run in training, its Δ is train.parquet's."""
    cfl = read_settings(run_dir / "results/settings/cfl_train.json").section("cfl", CflSettings)
    from_state = run_in_training(ENDED, state_of(run_dir, ENDED), run_inputs(ENDED, cfl))
    curve = pd.read_parquet(path(run_dir, dag.CFL_RUN_CURVE, ENDED))
    assert from_state.progress.curve[DELTA].tolist() == pytest.approx(curve[DELTA].tolist(), abs=1e-12)


def test_the_table_and_the_page_write_nothing_in_the_run(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted((item, item.stat().st_mtime_ns) for item in run_dir.rglob("*"))
    assert cli.main(["cfl", "progress", str(run_dir)]) == 0
    output = capsys.readouterr()
    lines = output.out.splitlines()
    ended = CONVERGED if checkpoint.load(state_of(run_dir, ENDED))["counters"]["stopped_early"] else MAX_EPOCHS
    assert lines[0].startswith(f"2 of 4 runs of the settings' grid started (1 {ended}, 1 unfinished), as of the newest file read (")
    assert lines[2].startswith("| language | model | learning rate | m | restart |") and len(lines) == 3 + 1 + 2
    assert f"stacklm: warning: {state_of(run_dir, STALE)}: the state of another config" in output.err

    page = tmp_path / "docs/progress.md"
    assert cli.main(["cfl", "progress", "--markdown", str(page), str(run_dir)]) == 0
    assert capsys.readouterr().out == f"2 of 4 runs -> {page}\n"
    text = page.read_text()
    assert text.startswith(f"# CFL training progress of `{run_dir / 'results/cfl'}`\n") and "| marked-reversal | Gref | 0.01 | 2 | 1 | 1 | unfinished |" in text
    assert f"Not read:\n\n- {state_of(run_dir, STALE)}: the state of another config" in text
    assert sorted((item, item.stat().st_mtime_ns) for item in run_dir.rglob("*")) == before


def test_a_folder_without_cfl_results_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "results").mkdir()
    assert cli.main(["cfl", "progress", str(tmp_path)]) == 1
    assert f"stacklm: error: {tmp_path / 'results/cfl'}: no such folder" in capsys.readouterr().err
