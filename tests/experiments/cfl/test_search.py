"""stacklm.experiments.cfl.search, .settings and .data: the grid, the seeds, a run's data, selection."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from stacklm.cfl.datasets import sample_strings
from stacklm.cfl.splits import SPLIT_LENGTHS
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.experiments.cfl.search import CflRun, best_delta, grid, parse_setting, run_seeds, select_run
from stacklm.experiments.cfl.settings import CflSettings
from stacklm.cfl.languages import LANGUAGES
from stacklm.experiments.cfl.data import first_strings_per_length, sample_run_data
from stacklm.cfl.sampling import LengthSampler
from stacklm.cli import main
from stacklm.errors import StacklmError
from stacklm.settings_file import build

RUN = CflRun("marked-reversal", "cfl/JM", 0.005, 20, 3)


def test_default_settings_are_the_paper_grid() -> None:
    settings = CflSettings()
    sizes = {model: len(grid(settings, "dyck-2", model)) for model in settings.models}
    # App. 8: 4 learning rates x 5 restarts, and x 3 vector sizes for Gref and JM
    assert sizes == {"cfl/LSTM": 20, "cfl/Gref": 60, "cfl/JM": 60, "cfl/NS": 20, "cfl/NS+S": 20, "cfl/NS+U": 20, "cfl/NS+S+U": 20}
    assert len(settings.languages) == 5 and settings.max_epochs == 200


def test_settings_reject_unknown_keys_and_values_naming_the_key() -> None:
    with pytest.raises(StacklmError, match="config key 'cfl.restart': unknown key"):
        build(CflSettings, {"restart": 2}, "cfl")
    with pytest.raises(StacklmError, match=r"cfl.models\[1\].*'cfl/Tf'"):
        build(CflSettings, {"models": ["cfl/LSTM", "cfl/Tf"]}, "cfl")
    with pytest.raises(StacklmError, match=r"cfl.languages\[0\]"):
        build(CflSettings, {"languages": ["dyck-3"]}, "cfl")
    with pytest.raises(StacklmError, match=r"cfl.learning_rates\[0\]"):
        build(CflSettings, {"learning_rates": [0]}, "cfl")
    with pytest.raises(StacklmError, match="cfl.vector_sizes"):
        build(CflSettings, {"models": ["cfl/Gref"], "vector_sizes": []}, "cfl")
    with pytest.raises(StacklmError, match="cfl.test_strings_per_length"):
        build(CflSettings, {"test_strings_per_length": 101}, "cfl")
    assert build(CflSettings, {"languages": []}, "cfl").languages == ()


def test_settings_round_trip_through_the_run_folder_name() -> None:
    for run in grid(CflSettings(), "hardest-cfl", "cfl/Gref") + grid(CflSettings(), "hardest-cfl", "cfl/NS"):
        assert parse_setting(run.setting) == (run.learning_rate, run.vector_size, run.restart)
    assert RUN.setting == "lr0.005-m20-r3"
    assert parse_setting("lr0.0005-r1") == (0.0005, None, 1)
    for bad in ("lr0.1", "m2-r1", "lrx-r1", "lr0.1-m2-r1-x"):
        with pytest.raises(StacklmError, match="not a CFL run setting"):
            parse_setting(bad)


def test_seeds_depend_on_every_part_of_the_grid_point() -> None:
    seeds = run_seeds(RUN)
    assert seeds == run_seeds(CflRun("marked-reversal", "cfl/JM", 0.005, 20, 3))
    assert len({seeds.data, seeds.parameters, seeds.shuffle}) == 3
    variants = [
        CflRun("dyck-2", "cfl/JM", 0.005, 20, 3),
        CflRun("marked-reversal", "cfl/Gref", 0.005, 20, 3),
        CflRun("marked-reversal", "cfl/JM", 0.01, 20, 3),
        CflRun("marked-reversal", "cfl/JM", 0.005, 40, 3),
        CflRun("marked-reversal", "cfl/JM", 0.005, 20, 4),
    ]
    others = [run_seeds(run) for run in variants]
    assert all(other.data != seeds.data and other.parameters != seeds.parameters and other.shuffle != seeds.shuffle for other in others)
    assert all(0 <= value < 2**63 for value in (seeds.data, seeds.parameters, seeds.shuffle))


def test_seeds_do_not_depend_on_the_interpreter_hash_seed() -> None:
    code = "from stacklm.experiments.cfl.search import CflRun, run_seeds; print(run_seeds(CflRun('marked-reversal', 'cfl/JM', 0.005, 20, 3)))"
    outputs = {
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": value}, capture_output=True, text=True, check=True).stdout
        for value in ("1", "2")
    }
    assert outputs == {f"{run_seeds(RUN)}\n"}


def test_run_data_at_the_papers_sizes_are_the_datasets_splits() -> None:
    language = LANGUAGES["marked-reversal"]
    training, validation = sample_run_data(language, 7, 1_000, 100)
    sampler = LengthSampler.build(language.grammar, SPLIT_LENGTHS["train"][1])
    assert training == sample_strings(sampler, "train", 7)
    assert validation.strings == sample_strings(sampler, "validation", 7)


def test_run_data_batches_share_a_length_and_validation_carries_the_true_log_probabilities() -> None:
    language = LANGUAGES["marked-reversal"]
    training, validation = sample_run_data(language, 11, 3, 2)
    longer, _ = sample_run_data(language, 11, 5, 1)
    assert len(training) == 30 and len(validation.strings) == 20
    assert longer == training + validation.strings  # one generator: validation follows training
    for start in range(0, 30, 10):
        assert len({len(string) for string in training[start : start + 10]}) == 1
    valid_lengths = 20  # odd 41..79
    for string, true_logprob in zip(validation.strings, validation.true_logprob):
        half = (len(string) - 1) // 2  # uniform given the length: ln p(w | ℓ) = −k ln 2
        assert true_logprob == pytest.approx(-half * math.log(2) - math.log(valid_lengths), abs=1e-9)


def test_test_subset_keeps_the_first_strings_of_each_length_in_order() -> None:
    from stacklm.cfl.datasets import CflDataset

    dataset = CflDataset([[0], [1], [2, 2], [0], [3, 3], [2, 1]], [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6])
    subset = first_strings_per_length(dataset, 2)
    assert subset.strings == [[0], [1], [2, 2], [3, 3]]
    assert subset.true_logprob == [-1.0, -2.0, -3.0, -5.0]
    assert subset.length_bin_logprob == [-0.1, -0.2, -0.3, -0.5]


def curve(cross_entropies: list[float], deltas: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"epoch": range(1, len(deltas) + 1), "validation_cross_entropy": cross_entropies, DELTA: deltas})


def test_selection_takes_the_lowest_delta_at_each_runs_best_epoch() -> None:
    runs = [
        curve([1.0, 0.9], [0.5, 0.4]),  # best epoch 2: Δ 0.4 — the answer
        curve([0.8, 0.85], [0.45, 0.3]),  # best epoch 1: Δ 0.45 (its lowest Δ, 0.3, is not at its best epoch)
        curve([0.6], [0.41]),  # the lowest cross-entropy, on an easier validation set
        curve([float("nan")], [float("nan")]),  # diverged
    ]
    assert [best_delta(run) for run in runs[:3]] == [0.4, 0.45, 0.41]
    assert select_run(runs) == 0
    assert select_run([runs[1], runs[0], curve([0.9], [0.4])]) == 1  # the first on ties
    with pytest.raises(StacklmError, match="no CFL run reached a finite validation score"):
        select_run([runs[3]])
    with pytest.raises(StacklmError, match="no checkpoint"):
        best_delta(curve([], []))


def test_stacklm_cfl_select_writes_the_selected_curve_without_importing_torch(tmp_path) -> None:
    paths = []
    for index, run in enumerate([curve([1.0, 0.9], [0.5, 0.4]), curve([0.8, 0.85], [0.45, 0.3]), curve([0.6], [0.41])]):
        paths.append(tmp_path / f"run{index}.parquet")
        run.to_parquet(paths[-1], index=False)
    out = tmp_path / "selected" / "best.parquet"
    code = (
        "import sys; from stacklm.cli import main; "
        f"code = main(['cfl', 'select', '--curves', {', '.join(repr(str(path)) for path in paths)}, '--out', {str(out)!r}]); "
        "print(code, 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "0 False"
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(paths[0]))


def test_stacklm_cfl_select_makes_one_selection_per_curves_option(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for index, run in enumerate([curve([1.0, 0.9], [0.5, 0.4]), curve([0.8, 0.85], [0.45, 0.3]), curve([0.6], [0.41])]):
        paths.append(tmp_path / f"run{index}.parquet")
        run.to_parquet(paths[-1], index=False)
    outs = [tmp_path / "first.parquet", tmp_path / "second.parquet"]
    arguments = ["cfl", "select", "--curves", str(paths[1]), str(paths[2]), "--curves", str(paths[0]), str(paths[1])]
    assert main([*arguments, "--out", *map(str, outs)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(outs[0]), pd.read_parquet(paths[2]))  # Δ 0.41 against 0.45
    pd.testing.assert_frame_equal(pd.read_parquet(outs[1]), pd.read_parquet(paths[0]))  # Δ 0.4 against 0.45
    assert main([*arguments, "--out", str(outs[0])]) == 2
    assert "--out: 1 given for 2 --curves" in capsys.readouterr().err
