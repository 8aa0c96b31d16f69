"""PTB's truncated BPTT through the shared loop (``stacklm.training.chunks``, App. 10 of DuSell &
Chiang (2022)): perplexity against one pass per stream, a chunk's loss with the state carried,
clipping at c·targets by hand, the schedule on a scripted validation curve, divergence, a PTB
model's file, and equality with the loop PTB had of its own before (its outputs recorded)."""

import hashlib
import io
import math

import pytest
import torch
from torch import nn

from stacklm.data.ptb import chunks
from stacklm.errors import StacklmError
from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig, Superposition
from stacklm.training.checkpoint import save
from stacklm.training.chunks import ChunkData, perplexity
from stacklm.training.config import ptb_train_config
from stacklm.training.loop import train
from stacklm.training.progress import Progress
from stacklm.training.run_files import SavedModel, load_model, rebuild_ptb_model, save_model

EOS = 5


def model_and_stream(seed: int = 0) -> tuple[PtbLanguageModel, torch.Tensor]:
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=6, hidden_units=5, stack=LimitedNondeterministic(2, 2, renormalizing=True, window=3)))
    model.initialize(torch.Generator().manual_seed(seed))
    return model.double(), torch.randint(0, 6, (23,), generator=torch.Generator().manual_seed(seed + 1))


def quiet() -> Progress:
    return Progress(stream=io.StringIO())


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
    assert perplexity(model, split) == pytest.approx(math.exp(total / count))
    assert ChunkData(split, split).validation_cross_entropy(model) == pytest.approx(total / count)


def test_an_epochs_chunk_losses_carry_the_state_and_weighted_by_targets_give_one_pass_per_stream() -> None:
    model, stream = model_and_stream()
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    data = ChunkData(split, split)
    batches = data.start_epoch(model, 0, 0, None)
    with torch.no_grad():
        losses = [float(data.loss(model, chunk)) for chunk in batches]
    total, count = one_pass_nll(model, stream, 4)
    assert [chunk.num_targets for chunk in batches] == [16, 4, 3]
    assert sum(loss * chunk.num_targets for loss, chunk in zip(losses, batches)) / 23 == pytest.approx(total / count)
    assert data.start_epoch(model, 1, 0, None) is split and data.carried() is None  # each epoch starts from the initial state


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
    train(model, ChunkData([chunk], [chunk]), ptb_train_config(0.3, clip, max_epochs=1), progress=quiet())  # plain SGD, one step
    for old, new, gradient in zip(before, model.parameters(), gradients):
        torch.testing.assert_close(new.detach(), old - 0.3 * scale * gradient, rtol=1e-5, atol=1e-9)


class ScriptedValidation(ChunkData):
    """Validation perplexities from a script; each checkpoint marks the output bias with its number."""

    def __init__(self, split, perplexities: list[float]) -> None:
        super().__init__(split, split)
        self.script, self.scored = iter(perplexities), 0

    def validation_cross_entropy(self, model: nn.Module) -> float:
        self.scored += 1
        with torch.no_grad():
            model.output.bias.fill_(self.scored)
        return math.log(next(self.script))


def test_the_schedule_decays_without_a_new_best_stops_after_two_and_restores_the_best() -> None:
    model, stream = model_and_stream()
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    result = train(model, ScriptedValidation(split, [10.0, 9.0, 9.5, 8.0, 8.5, 8.7, 7.0]), ptb_train_config(3.0, 1e-4, max_epochs=100), progress=quiet())
    # Epoch 3 (9.5) and 5 (8.5) bring no new best: η ÷ 1.5 after each; 5 and 6 in a row: stop.
    assert [math.exp(r.validation_cross_entropy) for r in result.curve] == pytest.approx([10.0, 9.0, 9.5, 8.0, 8.5, 8.7])
    assert [r.learning_rate_used for r in result.curve] == pytest.approx([3.0, 3.0, 3.0, 2.0, 2.0, 4 / 3])
    assert [r.is_best for r in result.curve] == [True, True, False, True, False, False] and result.stopped_early
    assert torch.all(model.output.bias == 4)  # epoch 4's parameters


class PoisonAt(Progress):
    """After chunk ``chunk`` of epoch ``epoch``, a NaN output bias: the next chunk's loss is NaN."""

    def __init__(self, model: PtbLanguageModel, epoch: int, chunk: int) -> None:
        super().__init__(stream=io.StringIO())
        self.model, self.at = model, (epoch, chunk)

    def update(self, loss: float, tokens: int) -> None:
        super().update(loss, tokens)
        if (self.epoch, self.done) == self.at:
            with torch.no_grad():
                self.model.output.bias[2] = float("nan")


def test_a_non_finite_loss_ends_the_run_recorded_and_the_best_epoch_before_it_is_restored() -> None:
    model, stream = model_and_stream()
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    progress = PoisonAt(model, 3, 1)
    result = train(model, ChunkData(split, split), ptb_train_config(1.0, 1.0, max_epochs=10), progress=progress)
    assert [r.epoch for r in result.curve] == [1, 2, 3] and result.diverged and not result.stopped_early
    assert math.isnan(result.curve[2].train_loss) and result.curve[2].validation_cross_entropy == math.inf and not result.curve[2].is_best
    two_epochs, _ = model_and_stream()
    before = train(two_epochs, ChunkData(split, split), ptb_train_config(1.0, 1.0, max_epochs=2), progress=quiet())
    assert result.curve[:2] == before.curve
    for (name, a), (_, b) in zip(model.state_dict().items(), two_epochs.state_dict().items()):
        assert torch.equal(a, b), name  # the best of epochs 1 and 2, not the NaN parameters
    assert "loss is nan at step 8 (epoch 3, batch 2 of 3); the last checkpoint is" not in progress.stream.getvalue()  # no file: none named
    assert "loss is nan at step 8 (epoch 3, batch 2 of 3): the run diverged; stopping, the best parameters restored" in progress.stream.getvalue()


def test_a_run_diverged_in_its_first_epoch_keeps_the_initial_parameters() -> None:
    model, stream = model_and_stream()
    with torch.no_grad():
        model.output.bias[2] = float("nan")  # the first chunk's loss is NaN
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    result = train(model, ChunkData(split, split), ptb_train_config(3.0, 1.0, max_epochs=100), progress=quiet())
    assert result.diverged and len(result.curve) == 1 and result.best_validation_cross_entropy == math.inf
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, initial[name], rtol=0, atol=0, equal_nan=True)


def test_training_learns_a_periodic_stream() -> None:
    # a b c a b c …: after a few epochs each next token is nearly certain (perplexity → 1; uniform is 4).
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=4, hidden_units=8, stack=LimitedNondeterministic(1, 2, renormalizing=True, window=3)))
    model.initialize(torch.Generator().manual_seed(0))
    split = chunks(torch.arange(300) % 3, 3, batch_size=4, bptt=5)
    before = perplexity(model, split)
    result = train(model, ChunkData(split, split), ptb_train_config(10.0, 1.0, max_epochs=8), progress=quiet())
    assert before > 3.5 and math.exp(result.best_validation_cross_entropy) < 1.5
    assert perplexity(model, split) == pytest.approx(math.exp(result.best_validation_cross_entropy))  # the best epoch restored


def test_a_diverged_run_resumed_from_its_state_stays_stopped(tmp_path) -> None:
    model, stream = model_and_stream()
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    config = ptb_train_config(1.0, 1.0, max_epochs=10)
    first = train(model, ChunkData(split, split), config, checkpoint_path=tmp_path / "state.pt", fingerprint="f", progress=PoisonAt(model, 2, 1))
    assert first.diverged and [r.epoch for r in first.curve] == [1, 2]
    again, _ = model_and_stream()
    lines = io.StringIO()
    second = train(again, ChunkData(split, split), config, checkpoint_path=tmp_path / "state.pt", fingerprint="f", progress=Progress(stream=lines))
    assert "batch 1 of 3" not in lines.getvalue() and second.diverged and second.steps == first.steps  # no chunk trained on resuming
    assert repr(second.curve) == repr(first.curve)  # the records, exactly (repr: NaN != NaN)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name  # the best epoch's parameters, restored from the state


def ptb_saved(model: PtbLanguageModel, vocabulary: tuple[str, ...], parameters: dict[str, torch.Tensor]) -> SavedModel:
    return SavedModel("ptb", "rns-2-2", vocabulary, model.config, parameters, {"task": "ptb"}, {"draw": {"clip_per_target": 1e-4}}, validation_cross_entropy=2.5)


def test_a_ptb_models_file_loads_without_code_and_rebuilds_the_trained_model(tmp_path) -> None:
    model, stream = model_and_stream()
    save_model(tmp_path / "model.pt", ptb_saved(model, ("a", "b", "c", "d", "<unk>"), model.state_dict()))
    loaded = load_model(tmp_path / "model.pt")
    assert (loaded.model_config, loaded.vocabulary, loaded.metadata, loaded.settings, loaded.validation_cross_entropy) == (
        model.config, ("a", "b", "c", "d", "<unk>"), {"task": "ptb"}, {"draw": {"clip_per_target": 1e-4}}, 2.5,
    )
    split = chunks(stream, EOS, batch_size=4, bptt=4)
    assert perplexity(rebuild_ptb_model(loaded).double(), split) == perplexity(model, split)
    jm = PtbLanguageModel(PtbModelConfig(vocabulary_size=6, hidden_units=5, stack=Superposition("learned", 3, max_depth=2)))
    save_model(tmp_path / "jm.pt", ptb_saved(jm, ("a", "b", "c", "d", "<unk>"), jm.state_dict()))
    assert load_model(tmp_path / "jm.pt").model_config == jm.config  # each kind of stack comes back as itself
    save(tmp_path / "other.pt", {"kind": "task"})
    with pytest.raises(StacklmError, match="other.pt: not a model file of this stacklm"):
        load_model(tmp_path / "other.pt")
    save_model(tmp_path / "short.pt", ptb_saved(model, ("a", "b"), model.state_dict()))
    with pytest.raises(StacklmError, match=r"short.pt: 2 tokens and <eos> for a model of V = 6"):
        rebuild_ptb_model(load_model(tmp_path / "short.pt"))
    with pytest.raises(StacklmError, match="missing.pt: model file not found"):
        load_model(tmp_path / "missing.pt")


def test_a_ptb_model_file_whose_parameters_do_not_fit_names_the_file_in_one_line(tmp_path) -> None:
    model, _ = model_and_stream()
    parameters = model.state_dict()
    name = next(name for name, tensor in parameters.items() if tensor.dim() == 2 and tensor.size(0) != tensor.size(1))
    parameters[name] = parameters[name].t().contiguous()
    save_model(tmp_path / "model.pt", ptb_saved(model, ("a", "b", "c", "d", "<unk>"), parameters))
    with pytest.raises(StacklmError) as refused:
        rebuild_ptb_model(load_model(tmp_path / "model.pt"))
    assert str(refused.value).startswith(f"{tmp_path / 'model.pt'}: its parameters do not fit the model it describes (size mismatch for {name}")
    assert "\n" not in str(refused.value)


# What PTB's own loop (stacklm.training.ptb, removed in issue 32) gave on these runs, recorded before
# it was removed: per epoch (epoch, η used, training NLL per target, validation perplexity, best),
# floats as float.hex, and the sha256 of the parameters it left. The shared loop gives the same bits.
SPLIT = chunks(torch.tensor([0, 1, 2, 1, 0, 3, 2] * 12)[:83], 3, batch_size=4, bptt=5)
VALID = chunks(torch.tensor([0, 1, 2, 1, 0, 3, 2] * 4), 3, batch_size=2, bptt=5)
STACKS = {
    "rns": LimitedNondeterministic(2, 2, renormalizing=True, window=3), "lstm": None,
    "ns": LimitedNondeterministic(1, 3, renormalizing=False, window=3), "jm-learned": Superposition("learned", 3, max_depth=2),
}
OLD_LOOP = {
    "rns": (
        [
            (1, "0x1.0000000000000p+2", "0x1.8394c9c90bbcdp+0", "0x1.06124004e0a5ap+2", True),
            (2, "0x1.0000000000000p+2", "0x1.82a2da3430656p+0", "0x1.060e156c928ffp+2", True),
            (3, "0x1.5555555555555p+1", "0x1.7276e64b969e8p+0", "0x1.f5fdd0ba287b7p+1", True),
            (4, "0x1.5555555555555p+1", "0x1.6ea7e0d98c7b0p+0", "0x1.f5d29693d2616p+1", True),
            (5, "0x1.5555555555555p+1", "0x1.6e953a16bf34cp+0", "0x1.f5cfb9354e0aap+1", True),
            (6, "0x1.c71c71c71c71cp+0", "0x1.673ef5ef2f0cdp+0", "0x1.f131ccd0162f5p+1", True),
            (7, "0x1.c71c71c71c71cp+0", "0x1.66131aea6fdccp+0", "0x1.f0e98e30b5e1ap+1", True),
            (8, "0x1.c71c71c71c71cp+0", "0x1.65fb6085c89c7p+0", "0x1.f0e076a9a66e7p+1", True),
        ],
        "51aea7b61bf524ee2dd130c9bc1eb2775f1408dd6ba44ab0d695a4f1f244125b",
    ),
    "lstm": (
        [
            (1, "0x1.0000000000000p+2", "0x1.837460c92eea2p+0", "0x1.060b3ab6a6afep+2", True),
            (2, "0x1.0000000000000p+2", "0x1.82a2d07639b13p+0", "0x1.060c9ebfac925p+2", False),
            (3, "0x1.5555555555555p+1", "0x1.72765a50ba4a7p+0", "0x1.f5fe07b8f773fp+1", True),
            (4, "0x1.5555555555555p+1", "0x1.6ea7b62199065p+0", "0x1.f5d26fd8d24dap+1", True),
            (5, "0x1.5555555555555p+1", "0x1.6e94ff84576dbp+0", "0x1.f5cf4ae64e043p+1", True),
            (6, "0x1.c71c71c71c71cp+0", "0x1.673ec7ac06c42p+0", "0x1.f132416af0f97p+1", True),
            (7, "0x1.c71c71c71c71cp+0", "0x1.66130c6dcc6fap+0", "0x1.f0e9e4755e491p+1", True),
            (8, "0x1.c71c71c71c71cp+0", "0x1.65fb413b373bep+0", "0x1.f0e0b119e95f0p+1", True),
        ],
        "307adafc52b802a28ff0983e425ffcc81df2e633ccfc3fa82e5fc2e356dc1f73",
    ),
    "ns": (
        [
            (1, "0x1.0000000000000p+2", "0x1.838141156d264p+0", "0x1.060f0d16420b5p+2", True),
            (2, "0x1.0000000000000p+2", "0x1.82a4999e4931ap+0", "0x1.060ed15a56c76p+2", True),
            (3, "0x1.5555555555555p+1", "0x1.72773466ea316p+0", "0x1.f5fd2d4e895dap+1", True),
            (4, "0x1.5555555555555p+1", "0x1.6ea7e17637f93p+0", "0x1.f5d16eef477ffp+1", True),
            (5, "0x1.5555555555555p+1", "0x1.6e951ae9e410cp+0", "0x1.f5ce24b9c9024p+1", True),
            (6, "0x1.c71c71c71c71cp+0", "0x1.673e889991a4fp+0", "0x1.f1307dfa8488ep+1", True),
            (7, "0x1.c71c71c71c71cp+0", "0x1.6612a53dabaf3p+0", "0x1.f0e7f931194bcp+1", True),
            (8, "0x1.c71c71c71c71cp+0", "0x1.65fad1d91b1fep+0", "0x1.f0de980cfb458p+1", True),
        ],
        "b51e6c0764ff57e6333bf6c12f825263f4ebec27a9e5c6e978e968dee3a3aa1d",
    ),
    "jm-learned": (
        [
            (1, "0x1.0000000000000p+2", "0x1.837e99267b02ap+0", "0x1.060ddcb5687e5p+2", True),
            (2, "0x1.0000000000000p+2", "0x1.82a42ac696a51p+0", "0x1.060de0320312ap+2", False),
            (3, "0x1.5555555555555p+1", "0x1.727673f93234ap+0", "0x1.f5fc006a306a2p+1", True),
            (4, "0x1.5555555555555p+1", "0x1.6ea745e26d541p+0", "0x1.f5d0301ae4b8fp+1", True),
            (5, "0x1.5555555555555p+1", "0x1.6e9479098500fp+0", "0x1.f5ccbc70ccdffp+1", True),
            (6, "0x1.c71c71c71c71cp+0", "0x1.673de945cee9dp+0", "0x1.f12f0b43115a2p+1", True),
            (7, "0x1.c71c71c71c71cp+0", "0x1.6611ff5964e94p+0", "0x1.f0e66a3ede4f7p+1", True),
            (8, "0x1.c71c71c71c71cp+0", "0x1.65fa22f77cf50p+0", "0x1.f0dce05ae29f2p+1", True),
        ],
        "cc966a4481198a3ca3de5dc66945f14fe37e78ee88e0a025bd32c70cc939b9f0",
    ),
    "rns-diverging": (
        [
            (1, "0x1.0000000000000p+2", "0x1.8394c9c90bbcdp+0", "0x1.06124004e0a5ap+2", True),
            (2, "0x1.0000000000000p+2", "0x1.82a2da3430656p+0", "0x1.060e156c928ffp+2", True),
            (3, "0x1.5555555555555p+1", "nan", "inf", False),
        ],
        "051ad844dede5d263e48c9dfcbf0ca499d8aceb59d83cf48f14afe1aef496634",
    ),
}


@pytest.mark.parametrize("run", list(OLD_LOOP))
def test_the_shared_loop_gives_the_bits_of_ptbs_own_loop_before_it(run: str) -> None:
    """η 4, c 0.05, 8 epochs: two η decays (gains under 0.01 %) and, for the LSTM and JM, an epoch
    that is no new best; ``-diverging``: a NaN loss in epoch 3 (the output bias poisoned after its
    third chunk), recorded with an infinite perplexity, epoch 2's parameters restored."""
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=4, hidden_units=6, stack=STACKS[run.removesuffix("-diverging")]))
    model.initialize(torch.Generator().manual_seed(7))
    model = model.double()
    progress = PoisonAt(model, 3, 3) if run.endswith("-diverging") else quiet()
    result = train(model, ChunkData(SPLIT, VALID), ptb_train_config(4.0, 0.05, max_epochs=8), progress=progress)
    epochs, parameters_sha256 = OLD_LOOP[run]
    got = [(r.epoch, r.learning_rate_used.hex(), r.train_loss.hex(), math.exp(r.validation_cross_entropy).hex(), r.is_best) for r in result.curve]
    assert got == epochs
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    assert digest.hexdigest() == parameters_sha256
