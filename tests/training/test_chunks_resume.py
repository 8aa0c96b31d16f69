"""A PTB run through the shared loop, resumed: stopped within an epoch (the carried LSTM and stack
state saved) or at an epoch's end, it equals an uninterrupted run bitwise (curve and parameters,
CPU), for every kind of PTB model; the state loads through ``stacklm.training.checkpoint`` and
belongs to one fingerprint and one model."""

import io
from pathlib import Path

import pytest
import torch

from stacklm.data.ptb import chunks
from stacklm.errors import StacklmError
from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig, Superposition
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.chunks import ChunkData
from stacklm.training.config import ptb_train_config
from stacklm.training.loop import StopRequest, TrainingInterrupted, train
from stacklm.training.progress import Progress
from stacklm.training.resumable import resumable_training
from stacklm.training.run_state import TrainResult

SPLIT = chunks(torch.tensor([0, 1, 2, 1, 0, 3, 2] * 12)[:83], 3, batch_size=4, bptt=5)  # L = 21: 4 chunks of 4 x 5, then 3 x 1
VALID = chunks(torch.tensor([0, 1, 2, 1, 0, 3, 2] * 4), 3, batch_size=2, bptt=5)
RNS = LimitedNondeterministic(2, 2, renormalizing=True, window=3)


def config(epochs: int):
    return ptb_train_config(4.0, 0.05, max_epochs=epochs)


def data() -> ChunkData:
    return ChunkData(SPLIT, VALID)


def fresh_model(stack: LimitedNondeterministic | Superposition | None = RNS, hidden: int = 6) -> PtbLanguageModel:
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=4, hidden_units=hidden, stack=stack))
    model.initialize(torch.Generator().manual_seed(7))
    return model.double()


class StopAt(Progress):
    """Progress that requests a stop after chunk ``chunk`` of epoch ``epoch``."""

    def __init__(self, stop: StopRequest, epoch: int, chunk: int) -> None:
        super().__init__(stream=io.StringIO())
        self.stop, self.at = stop, (epoch, chunk)

    def update(self, loss: float, tokens: int) -> None:
        super().update(loss, tokens)
        if (self.epoch, self.done) == self.at:
            self.stop.reason = "SIGTERM"


def quiet() -> Progress:
    return Progress(stream=io.StringIO())


def assert_same_run(first: tuple[TrainResult, PtbLanguageModel], second: tuple[TrainResult, PtbLanguageModel]) -> None:
    assert first[0].curve == second[0].curve  # every epoch's η, NLL, validation cross-entropy and best flag, exactly
    for (name, a), (_, b) in zip(first[1].state_dict().items(), second[1].state_dict().items()):
        assert torch.equal(a, b), name


def test_a_run_stopped_mid_epoch_and_resumed_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    plain = fresh_model()
    uninterrupted = train(plain, data(), config(6), progress=quiet())
    # The stop below falls in epoch 5, whose gain (under ReduceLROnPlateau's 0.01 %) divides η for
    # epoch 6 only if the schedule's best from epoch 4 is restored: its state matters.
    assert len(uninterrupted.curve) == 6 and uninterrupted.curve[4].is_best
    assert uninterrupted.curve[5].learning_rate_used < uninterrupted.curve[4].learning_rate_used

    path = tmp_path / "run.pt"
    stop = StopRequest()
    with pytest.raises(TrainingInterrupted, match=rf"SIGTERM at step 22 \(epoch 5, batch 2 of 5\); the training state is saved in {path}: the same command continues"):
        train(fresh_model(), data(), config(6), checkpoint_path=path, fingerprint="f", progress=StopAt(stop, 5, 2), stop_request=stop)
    saved = checkpoint_file.load(path)  # weights_only, through the one loader
    assert [record["epoch"] for record in saved["curve"]] == [1, 2, 3, 4]
    assert [record["validation_cross_entropy"] for record in saved["curve"]] == [r.validation_cross_entropy for r in uninterrupted.curve[:4]]
    assert saved["counters"]["batch_index"] == 2 and saved["counters"]["tokens_since_checkpoint"] == 2 * 4 * 5
    assert [tensor.size(0) for tensor in saved["carried"]] == [4] * len(saved["carried"])  # the 4 streams' state after chunk 2

    resumed_model = fresh_model()  # a new process: parameters as initialised, then the state loaded
    torch.manual_seed(123)  # another RNG state than the run's: the saved one is restored
    resumed = train(resumed_model, data(), config(6), checkpoint_path=path, fingerprint="f", progress=quiet())
    assert_same_run((uninterrupted, plain), (resumed, resumed_model))
    assert torch.equal(torch.get_rng_state(), saved["rng_cpu"])  # no draws in training: the state saved is the state left


@pytest.mark.parametrize(
    ("stack", "hidden"),
    [(None, 6), (LimitedNondeterministic(1, 3, renormalizing=False, window=3), 6), (Superposition("learned", 3, max_depth=2), 6), (Superposition("hidden", 6, max_depth=10), 6)],
    ids=["lstm", "ns", "jm-learned", "jm-hidden"],
)
@pytest.mark.parametrize(("epoch", "chunk"), [(1, 1), (2, 4), (2, 5)])
def test_every_model_resumes_bitwise_from_any_chunk(tmp_path: Path, stack, hidden: int, epoch: int, chunk: int) -> None:
    plain = fresh_model(stack, hidden)
    uninterrupted = train(plain, data(), config(3), progress=quiet())
    path, stop = tmp_path / "run.pt", StopRequest()
    with pytest.raises(TrainingInterrupted, match=rf"\(epoch {epoch}, batch {chunk} of 5\); the training state is saved"):
        train(fresh_model(stack, hidden), data(), config(3), checkpoint_path=path, fingerprint="f", progress=StopAt(stop, epoch, chunk), stop_request=stop)
    resumed_model = fresh_model(stack, hidden)
    resumed = train(resumed_model, data(), config(3), checkpoint_path=path, fingerprint="f", progress=quiet())
    assert_same_run((uninterrupted, plain), (resumed, resumed_model))


def test_a_finished_run_resumed_trains_no_more_and_holds_the_best_epoch(tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    first_model, first_lines = fresh_model(), io.StringIO()
    first = train(first_model, data(), config(4), checkpoint_path=path, fingerprint="f", progress=Progress(stream=first_lines))
    stamp = path.stat().st_mtime_ns
    again_model, lines = fresh_model(), io.StringIO()
    again = train(again_model, data(), config(4), checkpoint_path=path, fingerprint="f", progress=Progress(stream=lines))
    assert_same_run((first, first_model), (again, again_model))
    assert path.stat().st_mtime_ns == stamp and "epoch 5 batch" not in lines.getvalue()
    resumed = [line for line in lines.getvalue().splitlines() if line.strip()]
    assert resumed[0] == f"resuming from {path}: epoch 5, batch 1, step 20, after 4 checkpoints:"
    earlier = [line.split(" next learning rate")[0] for line in first_lines.getvalue().splitlines() if line.startswith("checkpoint ")]
    assert len(earlier) == len(first.curve) and resumed[1:] == [f"  {line}" for line in earlier]


def test_each_epoch_end_is_saved_and_matches_the_curve(tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    model = fresh_model()
    result = train(model, data(), config(3), checkpoint_path=path, fingerprint="f", progress=quiet())
    saved = checkpoint_file.load(path)
    assert [record["train_loss"] for record in saved["curve"]] == [record.train_loss for record in result.curve]
    assert saved["carried"] is None  # an epoch's end carries nothing
    best = fresh_model()
    best.load_state_dict(saved["best_parameters"])
    assert all(torch.equal(a, b) for a, b in zip(best.parameters(), model.parameters()))  # the best restored in the model


def test_a_state_of_another_fingerprint_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    train(fresh_model(), data(), config(1), checkpoint_path=path, fingerprint="f", progress=quiet())
    with pytest.raises(StacklmError, match=rf"{path}: this checkpoint belongs to another run"):
        train(fresh_model(), data(), config(2), checkpoint_path=path, fingerprint="g", progress=quiet())


def test_a_state_of_another_model_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.pt"
    train(fresh_model(), data(), config(1), checkpoint_path=path, fingerprint="f", progress=quiet())
    other = PtbLanguageModel(PtbModelConfig(vocabulary_size=4, hidden_units=5)).double()
    with pytest.raises(StacklmError, match=rf"{path}: its parameters do not fit the model it describes \(") as refused:
        train(other, data(), config(2), checkpoint_path=path, fingerprint="f", progress=quiet())
    assert "\n" not in str(refused.value)


def test_resumable_training_keys_the_state_by_fingerprint_and_removes_other_runs_states(tmp_path: Path) -> None:
    base = tmp_path / "ptb" / "lstm" / "1.pt"
    source = {"model": "lstm", "draw": [4.0, 0.05], "data": "x"}
    older = checkpoint_file.keyed_path(base, checkpoint_file.fingerprint(source | {"data": "y"}))
    older.parent.mkdir(parents=True)
    older.write_bytes(b"a state of the run on other data")
    resumable_training(fresh_model(), data(), config(2), fingerprint_source=source, checkpoint=base, device=torch.device("cpu"),
                       progress_interval_s=1e9, progress_stream=io.StringIO())
    kept = checkpoint_file.keyed_path(base, checkpoint_file.fingerprint(source))
    assert checkpoint_file.load(kept)["fingerprint"] == checkpoint_file.fingerprint(source)
    assert not older.exists() and sorted(p.name for p in base.parent.iterdir() if p.suffix == ".pt") == [kept.name]


def test_a_carried_state_that_does_not_fit_the_model_is_refused_naming_the_file(tmp_path: Path) -> None:
    path, stop = tmp_path / "run.pt", StopRequest()
    with pytest.raises(TrainingInterrupted):
        train(fresh_model(), data(), config(2), checkpoint_path=path, fingerprint="f", progress=StopAt(stop, 1, 3), stop_request=stop)
    wider = fresh_model(LimitedNondeterministic(2, 2, renormalizing=True, window=4))  # the same parameters, a wider window
    with pytest.raises(StacklmError, match=rf"{path}: not the training state of this run's model \(the saved carried state does not fit this model \(ValueError: .* do not fit a state of"):
        train(wider, data(), config(2), checkpoint_path=path, fingerprint="f", progress=quiet())


def test_a_run_killed_after_an_epochs_save_resumes_from_that_epoch(tmp_path: Path) -> None:
    # A kill (no stop request) leaves the last epoch end's file: here the one of epoch 3, as a run
    # bounded at 3 epochs writes it; the resumed run repeats nothing and equals an uninterrupted one.
    plain = fresh_model()
    uninterrupted = train(plain, data(), config(6), progress=quiet())
    path = tmp_path / "run.pt"
    train(fresh_model(), data(), config(3), checkpoint_path=path, fingerprint="f", progress=quiet())
    assert checkpoint_file.load(path)["counters"]["batch_index"] == 0
    resumed_model = fresh_model()
    resumed = train(resumed_model, data(), config(6), checkpoint_path=path, fingerprint="f", progress=quiet())
    assert_same_run((uninterrupted, plain), (resumed, resumed_model))
