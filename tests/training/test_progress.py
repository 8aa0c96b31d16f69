"""The progress lines' tokens/s is the current speed, on a clock set by hand."""

from __future__ import annotations

import io

import pytest

from stacklm.training import progress as progress_module
from stacklm.training.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    return clock


def test_tokens_per_s_counts_the_batches_since_the_last_line(clock: Clock) -> None:
    stream = io.StringIO()
    progress = Progress(stream, interval_s=10.0)
    progress.start_epoch(1, done=0, total=100)
    clock.now = 4.0
    progress.update(2.0, 400)  # 4 s after the start: no line yet
    clock.now = 10.0
    progress.update(1.5, 600)  # 1,000 tokens in 10 s
    clock.now = 30.0
    progress.line("checkpoint 1: scored in 15 s")  # scoring ends in its line: not training time
    clock.now = 32.0
    progress.update(1.0, 200)
    clock.now = 40.0
    progress.update(1.0, 1400)  # 1,600 tokens in the 10 s since the checkpoint's line
    lines = stream.getvalue().splitlines()
    assert lines == [
        "epoch 1 batch 2/100 loss 1.5 tokens/s 100 eta 0:08:10",
        "checkpoint 1: scored in 15 s",
        "epoch 1 batch 4/100 loss 1 tokens/s 160 eta 0:16:00",
    ]


def test_a_resumed_epoch_counts_only_this_session(clock: Clock) -> None:
    stream = io.StringIO()
    progress = Progress(stream, interval_s=0.0)
    clock.now = 100.0
    progress.start_epoch(3, done=50, total=52)  # 50 batches done in an earlier session
    clock.now = 102.0
    progress.update(0.5, 300)
    assert stream.getvalue() == "epoch 3 batch 51/52 loss 0.5 tokens/s 150 eta 0:00:02\n"
