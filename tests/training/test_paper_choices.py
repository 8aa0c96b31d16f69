"""The training choices of DuSell & Cotterell (2025), App. D, each recomputed by hand.

The loss, the validation cross-entropy, Adam with L²-clipping, the checkpoint interval, the
learning-rate schedule, early stopping, the best checkpoint and the search distribution are
checked against brute-force computations or against the PyTorch objects the authors' code uses
(``docs/design/authors-code.md#training-schedule``). ``docs/audit.md`` maps each row of the audit table here.
"""

from __future__ import annotations

import io
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import stacklm.experiments.transformations.search as search_stage
from stacklm.experiments.transformations.settings import IntegerRange, LogRange, SearchSettings
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model
from stacklm.training import loop, strings
from stacklm.training.batching import epoch_groups, group_by_token_budget, make_batch
from stacklm.training.config import TrainConfig, TrainingSettings
from stacklm.training.loss import batch_loss
from stacklm.training.progress import Progress
from stacklm.training.schedule import ScheduleState, after_checkpoint, should_stop
from stacklm.training.strings import StringData

ROOT = Path(__file__).resolve().parents[2]
V = 7
EOS = V - 1
STRINGS = [[0, 3, 5], [1], [2, 2, 4, 0, 1, 3], [], [5, 4]]


def tiny_lstm(seed: int = 0) -> torch.nn.Module:
    return build_model("LSTM", V, options=ModelOptions(width=8, dropout=0.0), generator=torch.Generator().manual_seed(seed))


def string_log_probability(model: torch.nn.Module, string: list[int]) -> float:
    """log p(w·EOS), the string alone (no padding): Σ_t log softmax(y_t)[w_{t+1}]."""
    logits = model(torch.tensor([string], dtype=torch.long))[0]  # (n + 1, V)
    log_probabilities = torch.log_softmax(logits.double(), -1)
    return sum(float(log_probabilities[t, symbol].detach()) for t, symbol in enumerate(string + [EOS]))


def test_loss_is_the_mean_over_strings_of_the_summed_negative_log_probability() -> None:
    """App. D: "For each string w … we compute −log p_M(w) and take the mean over all w in the batch"."""
    model = tiny_lstm().eval()
    batch = make_batch(STRINGS, range(len(STRINGS)), EOS)
    expected = -sum(string_log_probability(model, s) for s in STRINGS) / len(STRINGS)
    assert batch_loss(model, batch).item() == pytest.approx(expected, rel=1e-5)
    per_token = -sum(string_log_probability(model, s) for s in STRINGS) / sum(len(s) + 1 for s in STRINGS)
    assert abs(per_token - expected) > 0.1  # a per-token mean would fail the check above


def test_validation_cross_entropy_is_micro_averaged_over_length_plus_eos() -> None:
    """App. D: "cross-entropy of whole strings … micro-averaged by the length of w plus eos"."""
    model = tiny_lstm()
    batches = [make_batch(STRINGS, [0, 1, 2], EOS), make_batch(STRINGS, [3, 4], EOS)]
    expected = -sum(string_log_probability(model.eval(), s) for s in STRINGS) / sum(len(s) + 1 for s in STRINGS)
    assert strings.validation_cross_entropy(model, batches) == pytest.approx(expected, rel=1e-6)
    assert not model.training  # scored without dropout


def adam_by_hand(parameters: list[torch.Tensor], gradients: list[list[torch.Tensor]], learning_rate: float, clip: float | None) -> list[torch.Tensor]:
    """PyTorch's Adam (β = 0.9, 0.999; ε = 1e−8; no weight decay) after L² clipping of the global norm."""
    beta1, beta2, epsilon = 0.9, 0.999, 1e-8
    theta = [p.double().clone() for p in parameters]
    m = [torch.zeros_like(p) for p in theta]
    v = [torch.zeros_like(p) for p in theta]
    for step, grads in enumerate(gradients, start=1):
        grads = [g.double() for g in grads]
        if clip is not None:
            norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
            grads = [g * min(1.0, clip / (norm + 1e-6)) for g in grads]
        for index, g in enumerate(grads):
            m[index] = beta1 * m[index] + (1 - beta1) * g
            v[index] = beta2 * v[index] + (1 - beta2) * g**2
            m_hat = m[index] / (1 - beta1**step)
            v_hat = v[index] / (1 - beta2**step)
            theta[index] = theta[index] - learning_rate * m_hat / (v_hat.sqrt() + epsilon)
    return theta


def gradients_at(model: torch.nn.Module, parameters: list[torch.Tensor], strings: list[list[int]]) -> list[torch.Tensor]:
    with torch.no_grad():
        for target, value in zip(model.parameters(), parameters):
            target.copy_(value)
    model.zero_grad()
    batch_loss(model, make_batch(strings, range(len(strings)), EOS)).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def test_adam_steps_with_global_l2_clipping_equal_the_hand_computation() -> None:
    """App. D: "We optimize all models with Adam. We use L² gradient clipping" (the code: PyTorch
    Adam with its default β, ε; torch's clip_grad_norm_)."""
    training = [[0, 3, 5], [2, 2, 4, 0, 1]]
    config = TrainConfig(learning_rate=0.01, tokens_per_batch=5, max_epochs=1, examples_per_checkpoint=None)
    order = epoch_groups([len(s) for s in training], config, seed=4, epoch=0)
    assert sorted(map(len, order)) == [1, 1]  # one string per batch: two Adam steps
    batches = [[training[i] for i in group] for group in order]
    start = [p.detach().clone() for p in tiny_lstm().parameters()]
    scratch = tiny_lstm()
    first = gradients_at(scratch, start, batches[0])
    norm = lambda grads: math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))  # noqa: E731
    clip = norm(first) / 4  # clipping active at both steps, with different coefficients
    after_one = adam_by_hand(start, [first], 0.01, clip)
    second = gradients_at(scratch, [p.float() for p in after_one], batches[1])
    assert norm(second) > clip
    expected = adam_by_hand(start, [first, second], 0.01, clip)

    model = tiny_lstm()
    config = TrainConfig(learning_rate=0.01, tokens_per_batch=5, max_epochs=1, examples_per_checkpoint=None, gradient_clip_norm=clip)
    loop.train(model, StringData(training, [[1, 2]], config, seed=4, eos_index=EOS), config, progress=Progress(io.StringIO(), interval_s=0.0))
    for parameter, value in zip(model.parameters(), expected):
        torch.testing.assert_close(parameter.detach().double(), value, rtol=0, atol=2e-6)
    unclipped = adam_by_hand(start, [first, gradients_at(scratch, [p.float() for p in adam_by_hand(start, [first], 0.01, None)], batches[1])], 0.01, None)
    assert max(float((a - b).abs().max()) for a, b in zip(unclipped, expected)) > 1e-4  # clipping is visible
    sgd = [p.double() - 0.01 * g.double() for p, g in zip(start, first)]
    assert max(float((a - b).abs().max()) for a, b in zip(sgd, adam_by_hand(start, [first], 0.01, clip))) > 1e-3


def test_checkpoints_every_n_examples_with_the_surplus_carried_over() -> None:
    """App. D: checkpoints "every 80k training examples"; the code counts examples since the last
    checkpoint and carries the surplus over, across epochs."""
    generator = random.Random(0)
    training = [[generator.randrange(6) for _ in range(generator.randint(1, 8))] for _ in range(40)]
    config = TrainConfig(learning_rate=1e-3, tokens_per_batch=20, max_epochs=3, examples_per_checkpoint=7, early_stopping_patience=1000)
    expected: list[int] = []
    seen = since = 0
    for epoch in range(3):
        for group in epoch_groups([len(s) for s in training], config, seed=2, epoch=epoch):
            seen += len(group)
            since += len(group)
            if since >= 7:
                since -= 7
                expected.append(seen)
    if expected[-1] != seen:
        expected.append(seen)  # the last epoch's remaining batches get a final checkpoint
    result = loop.train(tiny_lstm(), StringData(training, [[1, 2]], config, seed=2, eos_index=EOS), config, progress=Progress(io.StringIO(), interval_s=0.0))
    assert [record.examples_seen for record in result.curve] == expected
    assert len(expected) > 3 * 40 // 7 - 1


def reference_schedule(metrics: list[float], learning_rate: float) -> list[tuple[float, bool]]:
    """The authors' loop: torch's ReduceLROnPlateau(min, factor 0.5, patience 1, threshold 0),
    stepped at every checkpoint, and a stop at the 3rd consecutive checkpoint without a new best."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=learning_rate)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=1, threshold=0.0)
    best, without, out = math.inf, 0, []
    for metric in metrics:
        if metric < best:
            best, without = metric, 0
        else:
            without += 1
        scheduler.step(metric)
        out.append((optimizer.param_groups[0]["lr"], without >= 3))
    return out


def test_learning_rate_schedule_and_early_stopping_equal_the_authors_torch_objects() -> None:
    """App. D: "multiply the learning rate by 0.5 whenever the validation cross-entropy does not
    improve after 2 checkpoints. We stop early when [it] does not improve after 3 checkpoints"."""
    config = TrainConfig(learning_rate=1e-3, tokens_per_batch=100)
    generator = random.Random(7)
    for _ in range(300):
        metrics = [float(generator.choice([1, 2, 3, 4, 5])) - 0.1 * k for k in range(12)] if generator.random() < 0.5 else \
            [float(generator.randint(1, 6)) for _ in range(12)]
        expected = reference_schedule(metrics, 1e-3)
        state = ScheduleState.initial(config)
        for metric, (rate, stop) in zip(metrics, expected):
            state = after_checkpoint(state, metric, config)
            assert state.learning_rate == pytest.approx(rate, rel=1e-12), metrics
            assert should_stop(state, config) == stop, metrics
            if stop:
                break


def test_the_best_checkpoints_parameters_are_left_in_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """App. D: "we always use the parameters corresponding to the checkpoint that resulted in the
    lowest validation cross-entropy"; here checkpoint 2 of 5 (then a halving, then the stop)."""
    scripted = iter([3.0, 1.0, 2.0, 2.5, 4.0, 0.5])
    snapshots: list[dict[str, torch.Tensor]] = []

    def fake_validation(model: torch.nn.Module, batches: Any) -> float:
        snapshots.append({name: tensor.detach().clone() for name, tensor in model.state_dict().items()})
        return next(scripted)

    monkeypatch.setattr(strings, "validation_cross_entropy", fake_validation)
    model = tiny_lstm()
    training = [[1, 2, 3]] * 12
    config = TrainConfig(learning_rate=1e-2, tokens_per_batch=3, max_epochs=10, examples_per_checkpoint=2)
    result = loop.train(model, StringData(training, [[1]], config, seed=0, eos_index=EOS), config, progress=Progress(io.StringIO(), interval_s=0.0))
    assert len(result.curve) == 5 and result.stopped_early
    assert [r.learning_rate_used for r in result.curve] == [1e-2, 1e-2, 1e-2, 1e-2, 5e-3]
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, snapshots[1][name], rtol=0, atol=0)
    assert any(not torch.equal(tensor, snapshots[4][name]) for name, tensor in model.state_dict().items())


def test_token_budget_groups_are_greedy_and_count_raw_lengths() -> None:
    """The authors' code (docs/design/authors-code.md#token-budget-and-batching): batch size ×
    longest raw length ≤ B, grown greedily over the strings sorted by length (the paper's App. D
    counts BOS, EOS and padding too)."""
    generator = random.Random(3)
    lengths = [generator.randint(1, 40) for _ in range(400)]
    groups = group_by_token_budget(lengths, range(400), 512)
    flat = [index for group in groups for index in group]
    assert sorted(flat) == list(range(400)) and [lengths[i] for i in flat] == sorted(lengths)
    for group, following in zip(groups, groups[1:]):
        longest = max(lengths[i] for i in group)
        assert len(group) * longest <= 512
        assert (len(group) + 1) * max(longest, lengths[following[0]]) > 512  # the next string did not fit


def test_schedule_defaults_are_the_papers() -> None:
    """80k-example checkpoints, clipping at 10, × 0.5 after 2, stop after 3, 200k parameters, B
    counting raw lengths, dropout 0.1 — in the dataclass defaults and in the shipped config.yaml."""
    config = TrainConfig(learning_rate=1e-3, tokens_per_batch=1000)
    assert (config.examples_per_checkpoint, config.gradient_clip_norm, config.learning_rate_decay_factor,
            config.learning_rate_patience, config.early_stopping_patience, config.improvement_threshold,
            config.validation_metric, config.token_budget) == (80_000, 10.0, 0.5, 2, 3, 0.0, "cross_entropy", "raw")
    settings = TrainingSettings()
    assert (settings.examples_per_checkpoint, settings.gradient_clip_norm, settings.parameter_budget, settings.max_epochs) == (80_000, 10.0, 200_000, 1000)
    shipped = yaml.safe_load((ROOT / "config.yaml").read_text())
    training = shipped["training"]
    assert (training["examples_per_checkpoint"], training["gradient_clip_norm"], training["learning_rate_decay_factor"],
            training["learning_rate_patience"], training["early_stopping_patience"], training["parameter_budget"],
            training["token_budget"]) == (80_000, 10.0, 0.5, 2, 3, 200_000, "raw")
    assert shipped["model"]["dropout"] == 0.1
    assert shipped["model"]["reference"] == {"pushed_vector": "raw", "initialization": "reference"}
    assert shipped["search"]["tokens_per_batch"] == {"low": 512, "high": 2048}
    assert shipped["search"]["learning_rate"] == {"low": 1e-5, "high": 1e-3}
    # Search trials at most 5 epochs (DuSell & Cotterell (2025) §5, the authors' later search script); finals to convergence.
    assert shipped["search"]["max_epochs"] == 5 and shipped["final"]["max_epochs"] is None


def test_search_draws_are_uniform_integers_and_log_uniform_rates() -> None:
    """App. D: "B from a uniform distribution over [512, 2048] … the initial learning rate from a
    log-uniform distribution over [10⁻⁵, 10⁻³]" — Kolmogorov–Smirnov distance of 4,000 draws."""
    search = SearchSettings(salt=0, tokens_per_batch=IntegerRange(512, 2048), learning_rate=LogRange(1e-5, 1e-3), max_epochs=None)
    draws = [search_stage.draw_hyperparameters(search, "question-formation", "Tf+Nd", trial) for trial in range(1, 4001)]
    logs = sorted((math.log10(d.learning_rate) + 5) / 2 for d in draws)  # ~ U[0, 1]
    batches = sorted((d.tokens_per_batch - 511.5) / 1537 for d in draws)  # ~ U[0, 1] (discrete)
    for values in (logs, batches):
        distance = max(max(abs((i + 1) / len(values) - x), abs(i / len(values) - x)) for i, x in enumerate(values))
        assert distance < 1.63 / math.sqrt(len(values))  # KS critical value at 1 %
        assert 0 <= values[0] and values[-1] <= 1
    assert all(isinstance(d.tokens_per_batch, int) for d in draws)
    linear = sorted((d.learning_rate - 1e-5) / (1e-3 - 1e-5) for d in draws)
    assert max(abs((i + 0.5) / len(linear) - x) for i, x in enumerate(linear)) > 0.3  # not uniform in the rate itself
