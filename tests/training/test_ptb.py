"""PTB training and evaluation: perplexity against one pass per stream, clipping at c·targets by
hand, and the schedule on a scripted validation curve."""

import math

import pytest
import torch
from torch import nn

import stacklm.training.ptb as ptb_training
from stacklm.data.ptb import chunks
from stacklm.errors import StacklmError
from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig
from stacklm.training.ptb import SearchDraw, evaluate, train, train_epoch

EOS = 5


def model_and_stream(seed: int = 0) -> tuple[PtbLanguageModel, torch.Tensor]:
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=6, hidden_units=5, stack=LimitedNondeterministic(2, 2, renormalizing=True, window=3)))
    model.initialize(torch.Generator().manual_seed(seed))
    return model.double(), torch.randint(0, 6, (23,), generator=torch.Generator().manual_seed(seed + 1))


def one_pass_nll(model: PtbLanguageModel, stream: torch.Tensor, batch_size: int) -> tuple[float, int]:
    """Σ −ln p over the split, each of the ⌈N/L⌉ streams run alone from the initial state."""
    length = math.ceil(stream.numel() / batch_size)
    total = 0.0
    for start in range(0, stream.numel(), length):
        targets = stream[start : start + length]
        previous = torch.tensor([EOS]) if start == 0 else stream[start - 1 : start]
        inputs = torch.cat([previous, targets[:-1]]).unsqueeze(0)
        with torch.no_grad():
            logits, _ = model(inputs, model.initial_state(1))
        total += float(nn.functional.cross_entropy(logits[0], targets, reduction="sum"))
    return total, stream.numel()


def test_perplexity_over_chunks_equals_one_pass_per_stream() -> None:
    model, stream = model_and_stream()
    # N = 23, B = 4: L = 6, streams of 6, 6, 6, 5; T = 4: chunks of 4 steps, then 1 and 1 (split).
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    assert [(c.batch_size, c.inputs.size(1)) for c in split] == [(4, 4), (4, 1), (3, 1)]
    total, count = one_pass_nll(model, stream, 4)
    assert evaluate(model, split) == pytest.approx(math.exp(total / count))


def test_an_epoch_at_learning_rate_zero_reports_the_same_nll_and_changes_nothing() -> None:
    model, stream = model_and_stream()
    before = [p.detach().clone() for p in model.parameters()]
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    nll = train_epoch(model, split, torch.optim.SGD(model.parameters(), lr=0.0), clip_per_target=1.0)
    total, count = one_pass_nll(model, stream, 4)
    assert nll == pytest.approx(total / count)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("clipped", [False, True])
def test_the_gradient_norm_is_clipped_at_c_times_the_chunks_targets(clipped: bool) -> None:
    model, stream = model_and_stream()
    chunk = chunks(stream[:12], EOS, batch_size=3, bptt=4)[0]  # 3 × 4 = 12 targets
    logits, _ = model(chunk.inputs, model.initial_state(3))
    gradients = torch.autograd.grad(nn.functional.cross_entropy(logits.flatten(0, 1), chunk.targets.flatten()), list(model.parameters()))
    norm = float(torch.sqrt(sum((g**2).sum() for g in gradients)))
    clip = norm / 2 / 12 if clipped else norm * 2 / 12
    scale = (norm / 2) / (norm + 1e-6) if clipped else 1.0  # clip_grad_norm_ divides by the norm + 1e-6
    before = [p.detach().clone() for p in model.parameters()]
    train_epoch(model, [chunk], torch.optim.SGD(model.parameters(), lr=0.3), clip_per_target=clip)
    for old, new, gradient in zip(before, model.parameters(), gradients):
        torch.testing.assert_close(new.detach(), old - 0.3 * scale * gradient, rtol=1e-5, atol=1e-9)



def test_the_schedule_decays_without_a_new_best_stops_after_two_and_restores_the_best(monkeypatch: pytest.MonkeyPatch) -> None:
    curve = iter([10.0, 9.0, 9.5, 8.0, 8.5, 8.7, 7.0])
    epochs = iter(range(1, 10))

    def fake_epoch(model: PtbLanguageModel, chunks: object, optimizer: object, clip_per_target: float, *progress_and_stop: object) -> float:
        with torch.no_grad():
            model.output.bias.fill_(next(epochs))  # marks the parameters with the epoch
        return 0.0

    monkeypatch.setattr(ptb_training, "train_epoch", fake_epoch)
    monkeypatch.setattr(ptb_training, "evaluate", lambda model, chunks: next(curve))
    model, _ = model_and_stream()
    result = train(model, [], [], SearchDraw(learning_rate=3.0, clip_per_target=1e-4))
    # Epoch 3 (9.5) and 5 (8.5) bring no new best: η ÷ 1.5 after each; 5 and 6 in a row: stop.
    assert [r.valid_perplexity for r in result.epochs] == [10.0, 9.0, 9.5, 8.0, 8.5, 8.7]
    assert [r.learning_rate for r in result.epochs] == pytest.approx([3.0, 3.0, 3.0, 2.0, 2.0, 4 / 3])
    assert result.best_epoch == 4 and result.best_valid_perplexity == 8.0
    assert torch.all(model.output.bias == 4)


def test_a_non_finite_loss_stops_the_epoch_naming_the_chunk() -> None:
    model, stream = model_and_stream()
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    with torch.no_grad():
        model.output.bias[2] = float("nan")
    with pytest.raises(StacklmError, match=r"the training loss is nan at chunk 1 of 3; the run diverged"):
        train_epoch(model, split, torch.optim.SGD(model.parameters(), lr=1.0), clip_per_target=1.0)


def test_training_learns_a_periodic_stream() -> None:
    # a b c a b c …: after a few epochs each next token is nearly certain (perplexity → 1; uniform is 4).
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=4, hidden_units=8, stack=LimitedNondeterministic(1, 2, renormalizing=True, window=3)))
    model.initialize(torch.Generator().manual_seed(0))
    split = chunks(torch.arange(300) % 3, 3, batch_size=4, bptt=5)
    before = evaluate(model, split)
    result = train(model, split, split, SearchDraw(learning_rate=10.0, clip_per_target=1.0), max_epochs=8)
    assert before > 3.5 and result.best_valid_perplexity < 1.5
    assert evaluate(model, split) == pytest.approx(result.best_valid_perplexity)  # the best epoch restored


def test_a_diverged_epoch_ends_the_run_and_the_best_epoch_before_it_is_restored(monkeypatch) -> None:
    model, stream = model_and_stream()
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    real_epoch = ptb_training.train_epoch

    def diverging(model, chunks, optimizer, clip_per_target, *rest):
        if optimizer.param_groups[0]["lr"] < 3.0:  # the third epoch, after the schedule divided η
            with torch.no_grad():
                model.output.bias[2] = float("nan")
        return real_epoch(model, chunks, optimizer, clip_per_target, *rest)

    monkeypatch.setattr(ptb_training, "train_epoch", diverging)
    curve = iter([10.0, 11.0])
    monkeypatch.setattr(ptb_training, "evaluate", lambda model, chunks: next(curve))
    result = train(model, split, split, SearchDraw(learning_rate=3.0, clip_per_target=1.0), max_epochs=10)
    assert [(r.epoch, r.valid_perplexity, r.is_best) for r in result.epochs] == [(1, 10.0, True), (2, 11.0, False), (3, math.inf, False)]
    assert math.isnan(result.epochs[2].train_nll) and result.diverged and result.best_epoch == 1
    assert not torch.isnan(model.output.bias).any()  # epoch 1's parameters, not the NaN ones


def test_a_run_diverged_in_its_first_epoch_keeps_the_initial_parameters(monkeypatch) -> None:
    model, stream = model_and_stream()
    with torch.no_grad():
        model.output.bias[2] = float("nan")  # the first chunk's loss is NaN
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    result = train(model, chunks(stream, EOS, batch_size=4, bptt=4), [], SearchDraw(learning_rate=3.0, clip_per_target=1.0))
    assert result.best_epoch == 0 and result.best_valid_perplexity == math.inf and len(result.epochs) == 1
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, initial[name], rtol=0, atol=0, equal_nan=True)


def test_the_saved_model_loads_without_code_and_rebuilds_the_trained_model(tmp_path) -> None:
    from stacklm.training.checkpoint import save
    from stacklm.training.ptb import SavedPtbModel, load_ptb_model, save_ptb_model

    model, stream = model_and_stream()
    saved = SavedPtbModel(model.config, ("a", "b", "c", "d", "<unk>"), model.state_dict(), {"task": "ptb"}, 1e-4, 12.5)
    save_ptb_model(tmp_path / "model.pt", saved)
    loaded = load_ptb_model(tmp_path / "model.pt")
    assert (loaded.config, loaded.vocabulary, loaded.metadata, loaded.clip_per_target, loaded.best_valid_perplexity) == (
        model.config, saved.vocabulary, {"task": "ptb"}, 1e-4, 12.5,
    )
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    assert evaluate(loaded.model().double(), split) == evaluate(model, split)
    save(tmp_path / "other.pt", {"kind": "task"})
    with pytest.raises(StacklmError, match="other.pt: not a PTB model file"):
        load_ptb_model(tmp_path / "other.pt")
    short = SavedPtbModel(model.config, ("a", "b"), model.state_dict(), {}, 1e-4, 12.5)
    save_ptb_model(tmp_path / "short.pt", short)
    with pytest.raises(StacklmError, match=r"short.pt: 2 tokens and <eos> for a model of V = 6"):
        load_ptb_model(tmp_path / "short.pt")
    with pytest.raises(StacklmError, match="missing.pt: model file not found"):
        load_ptb_model(tmp_path / "missing.pt")


def test_a_saved_model_whose_parameters_do_not_fit_names_the_file_in_one_line(tmp_path) -> None:
    from stacklm.training.ptb import SavedPtbModel, load_ptb_model, save_ptb_model

    model, _ = model_and_stream()
    parameters = model.state_dict()
    name = next(name for name, tensor in parameters.items() if tensor.dim() == 2 and tensor.size(0) != tensor.size(1))
    parameters[name] = parameters[name].t().contiguous()
    save_ptb_model(tmp_path / "model.pt", SavedPtbModel(model.config, ("a", "b", "c", "d", "<unk>"), parameters, {}, 1e-4, 12.5))
    with pytest.raises(StacklmError) as refused:
        load_ptb_model(tmp_path / "model.pt")
    assert str(refused.value).startswith(f"{tmp_path / 'model.pt'}: its parameters do not fit the model it describes (size mismatch for {name}")
    assert "\n" not in str(refused.value)


def test_a_diverged_run_resumed_from_its_state_stays_stopped(monkeypatch, tmp_path) -> None:
    model, stream = model_and_stream()
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    real_epoch = ptb_training.train_epoch

    def diverging(model, chunks, optimizer, clip_per_target, *rest):
        if len(calls) == 1:  # the second epoch
            with torch.no_grad():
                model.output.bias[2] = float("nan")
        calls.append(1)
        return real_epoch(model, chunks, optimizer, clip_per_target, *rest)

    calls: list[int] = []
    monkeypatch.setattr(ptb_training, "train_epoch", diverging)
    draw = SearchDraw(learning_rate=3.0, clip_per_target=1.0)
    first = train(model, split, split, draw, max_epochs=10, checkpoint_path=tmp_path / "state.pt", fingerprint="f")
    assert first.diverged and [r.epoch for r in first.epochs] == [1, 2] and first.best_epoch == 1
    again, _ = model_and_stream()
    second = train(again, split, split, draw, max_epochs=10, checkpoint_path=tmp_path / "state.pt", fingerprint="f")
    assert len(calls) == 2  # no epoch trained on resuming
    assert (second.best_epoch, second.diverged, second.epochs[0]) == (first.best_epoch, first.diverged, first.epochs[0])
    assert (second.epochs[1].valid_perplexity, math.isnan(second.epochs[1].train_nll)) == (math.inf, True)  # NaN != NaN: compared apart
    assert second.wall_time_s == first.wall_time_s and second.targets_trained == first.targets_trained == sum(c.num_targets for c in split)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name  # epoch 1's parameters, restored from the state
