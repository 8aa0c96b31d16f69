import dataclasses
import io
from pathlib import Path

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.training.config import TrainConfig, cfl_train_config
from stacklm.training.loop import StopRequest, TrainingDiverged, TrainingInterrupted, train
from stacklm.training.batching import make_batch
from stacklm.training.loss import string_log_probabilities
from stacklm.training.progress import Progress
from stacklm.training.run_state import TrainResult
from stacklm.training.strings import StringData, validation_cross_entropy
from tests.training.toy_language_model import ToyLanguageModel, counting_data, toy_config, toy_data


def toy_run(seed: int = 1, checkpoint: Path | None = None, config: TrainConfig | None = None, log: io.StringIO | None = None) -> tuple[ToyLanguageModel, TrainResult]:
    model = ToyLanguageModel(3, dropout=0.1)
    model.initialize(torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    result = train(model, toy_data(seed, config), config or toy_config(), checkpoint_path=checkpoint, progress=Progress(log or io.StringIO(), interval_s=0.0))
    return model, result


def test_training_learns_and_leaves_the_best_parameters_in_the_model() -> None:
    model, result = toy_run()
    validation = counting_data(30, 2)
    batch = make_batch(validation, range(len(validation)), eos_index=2)
    assert validation_cross_entropy(model, [batch]) == pytest.approx(result.best_validation_cross_entropy, rel=1e-5)
    assert result.best_validation_cross_entropy < 0.75 * result.curve[0].validation_cross_entropy
    assert [record.is_best for record in result.curve].count(True) >= 2
    assert result.curve[-1].examples_seen == 3 * 120


def test_same_seed_same_curve_and_parameters_other_seed_differs() -> None:
    first_model, first = toy_run(seed=1)
    second_model, second = toy_run(seed=1)
    _, other = toy_run(seed=2)
    assert first.curve == second.curve
    for name, tensor in first_model.state_dict().items():
        assert torch.equal(tensor, second_model.state_dict()[name])
    assert other.curve != first.curve


def test_a_finished_run_restarted_writes_the_same_result(tmp_path: Path) -> None:
    _, first = toy_run(checkpoint=tmp_path / "ckpt.pt")
    model, again = toy_run(checkpoint=tmp_path / "ckpt.pt")
    assert again.curve == first.curve and again.steps == first.steps


def test_a_resumed_run_logs_the_checkpoints_of_its_earlier_sessions(tmp_path: Path) -> None:
    """A job's log is rewritten when the job restarts: the resume line repeats the curve so far."""
    first, again = io.StringIO(), io.StringIO()
    toy_run(checkpoint=tmp_path / "ckpt.pt", log=first)
    toy_run(checkpoint=tmp_path / "ckpt.pt", log=again)
    live = [line.split(" next learning rate ")[0] for line in first.getvalue().splitlines() if line.startswith("checkpoint ")]
    resumed = again.getvalue().splitlines()
    assert len(live) == 8 and resumed[0].startswith(f"resuming from {tmp_path / 'ckpt.pt'}: epoch ")
    assert resumed[0].endswith(", after 8 checkpoints:")  # the lines below
    assert resumed[1:] == [f"  {line}" for line in live]


def test_a_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    toy_run(checkpoint=tmp_path / "ckpt.pt")
    model = ToyLanguageModel(3)
    with pytest.raises(StacklmError, match="another run"):
        train(model, toy_data(1), toy_config(), checkpoint_path=tmp_path / "ckpt.pt", fingerprint="other", progress=Progress(io.StringIO()))


def test_a_state_of_another_backend_is_refused_unless_asked_for(tmp_path: Path) -> None:
    """The backend is saved with the state: resuming under another one names both and the flag;
    with ``resume_other_backend`` the run resumes (a finished one: the same result)."""
    compiled, pytorch = {"backend": "cpu-compiled", "cpu_vectors": "avx2"}, {"backend": "torch", "cpu_vectors": "avx2"}
    model = ToyLanguageModel(3, dropout=0.1)
    model.initialize(torch.Generator().manual_seed(1))
    options = {"checkpoint_path": tmp_path / "ckpt.pt", "progress": Progress(io.StringIO())}
    first = train(model, toy_data(), toy_config(), backend=compiled, **options)
    with pytest.raises(StacklmError, match=r"trained on the cpu-compiled backend, and this process runs torch.*--backend cpu-compiled.*--resume-other-backend"):
        train(ToyLanguageModel(3, dropout=0.1), toy_data(), toy_config(), backend=pytorch, **options)
    resumed = train(ToyLanguageModel(3, dropout=0.1), toy_data(), toy_config(), backend=pytorch, resume_other_backend=True, **options)
    assert resumed.curve == first.curve


class PoisonedModel(ToyLanguageModel):
    """Its forward returns NaN logits from the 5th training call on."""

    def __init__(self) -> None:
        super().__init__(3)
        self.calls = 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = super().forward(tokens)
        if self.training:
            self.calls += 1
            if self.calls >= 5:
                return logits * torch.nan
        return logits


def test_a_nan_loss_stops_the_run_naming_the_step() -> None:
    with pytest.raises(TrainingDiverged, match=r"loss is nan at step 5 \(epoch 1, batch 5 of"):
        train(PoisonedModel(), toy_data(1), toy_config(), progress=Progress(io.StringIO()))


def test_the_cfl_schedule_runs_through_the_same_loop() -> None:
    strings = [[0] * k + [1] * k for k in (1, 2, 3) for _ in range(20)]
    config = dataclasses.replace(cfl_train_config(0.01), max_epochs=4)
    model = ToyLanguageModel(3)
    model.initialize(torch.Generator().manual_seed(0))
    result = train(model, StringData(strings, strings[::2], config, seed=0, eos_index=2), config, progress=Progress(io.StringIO()))
    assert [record.epoch for record in result.curve] == [1, 2, 3, 4]
    assert [record.examples_seen for record in result.curve] == [60, 120, 180, 240]
    assert result.steps == 4 * 6


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_in_a_log() -> None:
    terminal = Terminal()
    train(ToyLanguageModel(3), toy_data(1), toy_config(), progress=Progress(terminal))
    shown = terminal.getvalue()
    assert "\r" in shown and "epoch 3" in shown and "tokens_per_s=" in shown and "loss=" in shown and "<" in shown  # tqdm's elapsed<ETA
    log = io.StringIO()
    train(ToyLanguageModel(3), toy_data(1), toy_config(), progress=Progress(log, interval_s=3600))
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    periodic = [line for line in lines if line.startswith("epoch ")]
    assert len(periodic) == 3  # only each epoch's last batch within an hour
    assert all(" loss " in line and " tokens/s " in line and " eta " in line for line in periodic)
    assert sum(line.startswith("checkpoint ") for line in lines) == 8


def test_checkpoint_scores_join_every_record_and_change_nothing_else() -> None:
    plain_model, plain = toy_run(seed=3)
    model = ToyLanguageModel(3, dropout=0.1)
    model.initialize(torch.Generator().manual_seed(3))
    torch.manual_seed(3)
    validation = counting_data(30, 2)
    batch = make_batch(validation, range(len(validation)), eos_index=2)
    seen: list[tuple[bool, bool]] = []

    def scores() -> dict[str, float]:
        seen.append((model.training, torch.is_grad_enabled()))
        return {"test_full_accuracy": validation_cross_entropy(model, [batch])}

    data = StringData(counting_data(120, 1), validation, toy_config(), seed=3, eos_index=2)
    result = train(model, data, toy_config(), progress=Progress(io.StringIO(), interval_s=0.0), checkpoint_scores=scores)
    assert seen == [(False, False)] * len(result.curve)
    for record, other in zip(result.curve, plain.curve, strict=True):
        assert record.scores == {"test_full_accuracy": pytest.approx(record.validation_cross_entropy, rel=1e-6)}
        assert dataclasses.replace(record, scores={}) == other
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, plain_model.state_dict()[name])


class LoggedRun:
    """An ``after_step`` that logs, at every third step, the model's log-probability of one
    string; ``stop`` at a step requests a stop (SIGTERM) there, ``crash`` raises (a kill)."""

    def __init__(self, model: ToyLanguageModel, stop: StopRequest | None = None, stop_at: int = 0, crash_at: int | None = None) -> None:
        self.model, self.stop, self.stop_at, self.crash_at = model, stop, stop_at, crash_at
        self.modes: list[tuple[bool, bool]] = []

    def __call__(self, step: int, epoch: int) -> list[dict[str, float]]:
        self.modes.append((self.model.training, torch.is_grad_enabled()))
        if step == self.crash_at:
            raise KeyboardInterrupt
        if self.stop is not None and step == self.stop_at:
            self.stop.reason = "SIGTERM"
        if step % 3:
            return []
        batch = make_batch([[0, 0, 1, 1]], [0], eos_index=2)
        return [{"step": step, "epoch": epoch, "log_probability": float(string_log_probabilities(self.model, batch).sum())}]


def logged_run(checkpoint: Path | None = None, stop: StopRequest | None = None, stop_at: int = 0, crash_at: int | None = None) -> tuple[ToyLanguageModel, TrainResult, LoggedRun]:
    model = ToyLanguageModel(3, dropout=0.1)
    model.initialize(torch.Generator().manual_seed(1))
    torch.manual_seed(1)
    log = LoggedRun(model, stop, stop_at, crash_at)
    result = train(model, toy_data(1), toy_config(), checkpoint_path=checkpoint, progress=Progress(io.StringIO(), interval_s=0.0), stop_request=stop, after_step=log)
    return model, result, log


def test_after_step_sees_every_step_and_changes_nothing() -> None:
    plain_model, plain = toy_run(seed=1)  # with dropout: a step of the log that drew random numbers would show
    model, result, log = logged_run()
    assert log.modes == [(False, False)] * (result.steps + 1)  # step 0 (the initial parameters), then every step
    assert [row["step"] for row in result.step_rows] == list(range(0, result.steps + 1, 3))
    assert {row["epoch"] for row in result.step_rows} == {1, 2, 3}
    initial = ToyLanguageModel(3, dropout=0.1)
    initial.initialize(torch.Generator().manual_seed(1))
    initial.eval()
    with torch.no_grad():
        expected = float(string_log_probabilities(initial, make_batch([[0, 0, 1, 1]], [0], eos_index=2)).sum())
    assert result.step_rows[0] == {"step": 0, "epoch": 1, "log_probability": expected}
    assert result.curve == plain.curve and plain.step_rows == ()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, plain_model.state_dict()[name])


def test_the_rows_survive_a_stop_and_a_kill_between_checkpoints(tmp_path: Path) -> None:
    _, whole, _ = logged_run()
    stop = StopRequest()
    with pytest.raises(TrainingInterrupted):
        logged_run(tmp_path / "ckpt.pt", stop, stop_at=10)  # saved at step 10, mid-epoch
    with pytest.raises(KeyboardInterrupt):
        logged_run(tmp_path / "ckpt.pt", crash_at=whole.steps - 4)  # after the last checkpoint: its rows are lost
    _, resumed, log = logged_run(tmp_path / "ckpt.pt")
    assert resumed.step_rows == whole.step_rows and resumed.curve == whole.curve
    assert len(log.modes) < whole.steps - 10  # this session trained only what the others did not keep
