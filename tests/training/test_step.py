"""The training step (``stacklm/training/step.py``): no host work in any architecture's step, and
the losses read back in one copy."""

from __future__ import annotations

import pytest
import torch

from stacklm.models.ptb import LimitedNondeterministic, PtbLanguageModel, PtbModelConfig
from stacklm.models.registry import ARCHITECTURES
from stacklm.training.batching import make_batch
from stacklm.training.buckets import pad_to_bucket, padded_loss
from stacklm.training.loss import batch_loss
from stacklm.training.step import LossLedger, StepPlace, training_step
from tests.models.conftest import tiny_model
from tests.training.host_work import HostWork

STRINGS = [[1, 2, 3, 4, 5], [2, 3], [4, 4, 1, 2, 3, 5, 1], [3], [5, 1, 2]]
EOS = 6


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_a_training_step_does_no_host_work(name: str) -> None:
    """Forward, loss, backward, clipping and Adam, eager and padded to a bucket (the CUDA graphs'
    step), on the torch backend (the one CUDA runs), after a warm-up step of the same shape:
    no scalar read, no tensor from Python values, no copy between devices, no factory without a device."""
    model = tiny_model(name, dropout=0.1).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    batch = make_batch(STRINGS, range(len(STRINGS)), EOS)
    padded = pad_to_bucket(batch)
    steps = {
        "eager": lambda: training_step(model, optimizer, lambda: batch_loss(model, batch), 10.0),
        "padded": lambda: training_step(model, optimizer, lambda: padded_loss(model, padded), 10.0),
    }
    for kind, step in steps.items():
        step()  # builds the index tables of this shape and Adam's state
        with HostWork() as recorded, torch.device("meta"):
            step()
        assert recorded.found == [], f"{kind} step"


def test_a_ptb_models_step_through_a_window_does_no_host_work() -> None:
    """The windowed nondeterministic stack of DuSell & Chiang (2022) §5.1: its masks are kept too."""
    model = PtbLanguageModel(PtbModelConfig(vocabulary_size=7, hidden_units=5, stack=LimitedNondeterministic(2, 3, renormalizing=True, window=4)))
    model.initialize(torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    inputs = torch.randint(0, 7, (3, 9), generator=torch.Generator().manual_seed(1))

    def step() -> torch.Tensor:
        return training_step(model, optimizer, lambda: model(inputs, model.initial_state(3))[0].logsumexp(-1).mean(), 1.0)

    step()
    with HostWork() as recorded, torch.device("meta"):
        step()
    assert recorded.found == []


def test_the_recorder_sees_each_kind_of_host_work() -> None:
    values = torch.arange(4.0)
    cases = {
        "aten::_local_scalar_dense": lambda: values.sum().item(),
        "aten::lift_fresh": lambda: torch.tensor([1, 2]),
        "aten::nonzero": lambda: values[values > 1],
    }
    for expected, work in cases.items():
        with HostWork() as recorded:
            work()
        assert any(found.startswith(expected) or found == "aten::index: a boolean index" for found in recorded.found), (expected, recorded.found)
    with pytest.raises(RuntimeError, match="meta"), torch.device("meta"):
        values + torch.zeros(4)  # a factory without a device: a CPU tensor beside CUDA ones


def test_the_ledger_reads_the_losses_in_order_once() -> None:
    ledger = LossLedger(limit=2)
    places = [StepPlace(step, 1, step, 3) for step in (1, 2)]
    ledger.add(places[0], torch.tensor(0.5))
    assert not ledger.full and ledger.last is None
    ledger.add(places[1], torch.tensor(float("nan")))
    assert ledger.full
    read = ledger.read()
    assert [place for place, _ in read] == places and read[0][1] == 0.5 and read[1][1] != read[1][1]
    assert ledger.read() == [] and ledger.last != ledger.last
    assert str(places[1]) == "step 2 (epoch 1, batch 2 of 3)"
