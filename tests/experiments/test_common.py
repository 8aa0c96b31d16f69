"""stacklm.experiments.common: the selection rule, the architectures' path slugs, a job's device,
the loop of several runs in one process."""

from __future__ import annotations

import os
import signal
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pytest

import stacklm.experiments.common as shared
from stacklm.errors import StacklmError, UsageError
from stacklm.workflow.settings import ResolvedSettings


def test_select_trial_takes_the_lowest_finite_score_first_on_ties() -> None:
    assert shared.select_lowest([2.0, 1.5, 1.5, 3.0], "search trial") == 1
    assert shared.select_lowest([float("nan"), float("inf"), 4.0], "search trial") == 2
    with pytest.raises(StacklmError, match="no search trial"):
        shared.select_lowest([float("nan")], "search trial")


def test_slugs_round_trip(settings: ResolvedSettings) -> None:
    slugs = [shared.architecture_slug(name) for name in settings.architectures]
    assert len(set(slugs)) == len(slugs) and all("/" not in slug for slug in slugs)
    assert tuple(shared.architecture_name(slug) for slug in slugs) == settings.architectures


def test_device_from_the_gpu_resource() -> None:
    assert shared.device(0) == "cpu"
    assert shared.device(1) == "cuda"


def test_a_per_run_option_is_one_per_run_or_one_for_all() -> None:
    assert shared.per_run("--out", ["a", "b"], 2, "--seed") == ["a", "b"]
    assert shared.per_run("--log", None, 2, "--seed", [None, None]) == [None, None]
    assert shared.per_run("--hparams", ["h"], 3, "--seed", allow_one=True) == ["h", "h", "h"]
    with pytest.raises(UsageError, match=r"^--out: 1 given for 2 --run: one per run, in the same order$"):
        shared.per_run("--out", ["a"], 2, "--run")
    with pytest.raises(UsageError, match=r"^--hparams: 3 given for 2 --seed: one per seed, in the same order \(or one for all\)$"):
        shared.per_run("--hparams", ["x", "y", "z"], 2, "--seed", allow_one=True)


@dataclass(frozen=True)
class Planned:
    label: str
    out: Path
    log: Path | None


class Interrupted(StacklmError):
    pass


def test_several_runs_each_write_their_own_log_and_a_failed_one_stops_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [Planned(name, tmp_path / f"{name}.out", tmp_path / "logs" / f"{name}.log") for name in ("a", "b", "c")]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("an earlier attempt\n")
    done: list[str] = []

    def work(run: Planned, stream: TextIO | None) -> None:
        assert stream is not None
        stream.write(f"training {run.label}\n")
        done.append(run.label)
        if run.label == "b":
            raise StacklmError("loss is nan")

    with pytest.raises(StacklmError, match=r"^1 of 3 runs failed; the others are written. b: loss is nan$"):
        shared.run_each(runs, work)
    assert done == ["a", "b", "c"]
    assert [(tmp_path / "logs" / f"{name}.log").read_text() for name in "abc"] == ["training a\n", "training b\nerror: loss is nan\n", "training c\n"]
    announced = capsys.readouterr().err.splitlines()
    assert announced == [f"run {number} of 3: {name} -> {tmp_path / name}.out (log: {tmp_path / 'logs' / name}.log)"
                         for number, name in enumerate("abc", start=1)]


def test_each_runs_python_warnings_go_to_its_own_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [Planned(name, tmp_path / name, tmp_path / f"{name}.log") for name in "ab"]

    def work(run: Planned, stream: TextIO | None) -> None:
        warnings.warn(f"{run.label} is odd", UserWarning)  # the same line for both runs: each log still gets it

    shared.run_each(runs, work)
    for name in "ab":
        assert f"UserWarning: {name} is odd" in (tmp_path / f"{name}.log").read_text()
    assert "is odd" not in capsys.readouterr().err
    with pytest.warns(UserWarning, match="after the runs"):  # the job's own handling comes back
        warnings.warn("after the runs", UserWarning)


def test_a_lone_run_and_a_fatal_error_raise_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def fail(run: Planned, stream: TextIO | None) -> None:
        assert stream is None  # no log: stderr
        raise (Interrupted if run.label == "a" else StacklmError)(f"{run.label} failed")

    with pytest.raises(StacklmError, match="^b failed$"):
        shared.run_each([Planned("b", tmp_path / "b", None)], fail)
    with pytest.raises(Interrupted, match="^a failed$"):
        shared.run_each([Planned("b", tmp_path / "b", None), Planned("a", tmp_path / "a", None), Planned("c", tmp_path / "c", None)],
                        fail, fatal=(Interrupted,))
    assert "error: b failed" in capsys.readouterr().err


def test_before_may_stop_the_runs_before_the_next_starts(tmp_path: Path) -> None:
    started: list[str] = []

    def before(number: int, run: Planned) -> None:
        if number == 2:
            raise Interrupted(f"stopped before run {number} ({run.label})")

    with pytest.raises(Interrupted, match=r"stopped before run 2 \(b\)"):
        shared.run_each([Planned(name, tmp_path / name, None) for name in "ab"], lambda run, stream: started.append(run.label), before=before)
    assert started == ["a"]


def test_a_sigterm_during_a_training_run_starts_no_other(tmp_path: Path) -> None:
    from stacklm.training.loop import StopRequest, TrainingInterrupted

    started: list[str] = []

    def train(run: Planned, stop_request: StopRequest, stream: TextIO | None) -> None:
        started.append(run.label)
        os.kill(os.getpid(), signal.SIGTERM)  # the run's own loop would save its state and raise; this one ends
        assert stop_request.reason == "SIGTERM"

    handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(TrainingInterrupted, match=r"^SIGTERM before run 2 of 3 \(b\) started$"):
            shared.train_each([Planned(name, tmp_path / name, None) for name in "abc"], train)
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert started == ["a"]
