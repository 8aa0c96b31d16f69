"""The arithmetic of bench/grid.py's CFL and PTB projections, on hand-made rates and sizes."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

from stacklm.experiments.cfl.settings import CflSettings
from stacklm.experiments.ptb.settings import PtbSettings

GRID_PATH = Path(__file__).resolve().parents[2] / "bench" / "grid.py"


def load_grid():
    spec = importlib.util.spec_from_file_location("bench_grid", GRID_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


grid = load_grid()
RATE = 1000.0  # tokens per second at every length


def constant(rate: float) -> object:
    return grid.Throughput((40, 80), (rate, rate))


def test_seconds_counts_strings_of_each_length() -> None:
    assert constant(RATE).seconds((40, 60), 10) == pytest.approx((400 + 600) / RATE)


def test_interpolation_is_log_log() -> None:
    rate = grid.Throughput((40, 160), (4000.0, 1000.0))  # rate ∝ n⁻¹
    assert rate.at(80) == pytest.approx(2000.0)


def test_cfl_hours() -> None:
    settings = CflSettings(languages=("marked-reversal",), train_batches=2, validation_batches=1, test_strings_per_length=3)
    lengths = grid.CflLengths(training=(40, 60), test=(40, 100))
    share = 0.5
    batch = (10 * 40 + 10 * 60) / 2 / RATE  # expected seconds of one batch: its length uniform over (40, 60)
    epoch = (2 + share * 1) * batch
    test = share * 3 * (40 + 100) / RATE
    hours = grid.cfl_hours(settings, lengths, constant(RATE), runs=5, epochs=4, forward_share=share)
    assert hours == pytest.approx((5 * 4 * epoch + test) / 3600)


def test_project_cfl_counts_the_grid_and_caps_the_epochs() -> None:
    settings = CflSettings(languages=("marked-reversal",), models=("cfl/LSTM", "cfl/JM"), learning_rates=(0.01, 0.001), vector_sizes=(2, 20, 40), restarts=5, max_epochs=30)
    lengths = {"marked-reversal": grid.CflLengths(training=(41,), test=(41,))}
    rates = {"marked-reversal": {"cfl/LSTM": constant(RATE), "cfl/JM": constant(RATE / 2)}}
    arguments = argparse.Namespace(cfl_epochs=60, forward_share=1 / 3)
    rows = grid.project_cfl(settings, lengths, rates, {}, arguments)
    assert [row["runs"] for row in rows] == [2 * 5, 2 * 3 * 5]
    for row, rate in zip(rows, (RATE, RATE / 2)):
        expected = grid.cfl_hours(settings, lengths["marked-reversal"], constant(rate), row["runs"], 30, 1 / 3)
        assert row["cpu_core_hours"] == pytest.approx(expected)  # 60 assumed epochs, capped at 30
        assert row["cpu_core_hours_cap"] == pytest.approx(expected)
        assert "gpu_hours" not in row


def test_cfl_throughputs_by_language() -> None:
    records = [
        {"architecture": "cfl/NS", "n": 40, "tokens_per_cpu_s": 100.0, "language": "dyck-2"},
        {"architecture": "cfl/NS", "n": 40, "tokens_per_cpu_s": 50.0, "language": "hardest-cfl"},
    ]
    found = grid.cfl_throughputs(records)
    assert found["dyck-2"]["cfl/NS"].at(40) == 100.0
    assert found["hardest-cfl"]["cfl/NS"].at(40) == 50.0


def test_ptb_hours() -> None:
    settings = PtbSettings(models=("lstm",), figure_models=("lstm",), restarts=10, max_epochs=100)
    targets = grid.PtbTargets(train=1000, valid=100, test=200)
    rates = {"model": "lstm", "train_tokens_per_s": 10.0, "eval_tokens_per_s": 50.0, "sg_s": 7.0}
    expected = 10 * (20 * (1000 / 10 + 100 / 50) + 200 / 50 + 7) / 3600
    assert grid.ptb_hours(settings, targets, rates, epochs=20) == pytest.approx(expected)
    rows = grid.project_ptb(settings, targets, grid.model_rates([rates, {"models": 1}]), {}, argparse.Namespace(ptb_epochs=20))
    assert rows[0]["cpu_core_hours"] == pytest.approx(expected)
    assert rows[0]["cpu_core_hours_cap"] == pytest.approx(grid.ptb_hours(settings, targets, rates, epochs=100))


def test_ptb_targets_of_the_files() -> None:
    mirror = GRID_PATH.parents[2] / "shared" / "upstream"
    if not (mirror / "ptb" / "ptb.train.txt").is_file():
        pytest.skip(f"no PTB files under {mirror}")
    settings = PtbSettings(mirror=str(mirror))
    assert grid.ptb_targets(settings) == grid.PtbTargets(train=929_589, valid=73_760, test=82_430)  # words + <eos> of each split
