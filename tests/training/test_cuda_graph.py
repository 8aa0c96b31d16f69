"""Training steps replayed from CUDA graphs (``stacklm/training/cuda_graph.py``): only on CUDA, and
equal to the eager steps there (skipped without CUDA; ``bench/gpu.sh`` runs the same comparison)."""

from __future__ import annotations

import copy

import pytest
import torch

from stacklm.training.batching import make_batch
from stacklm.training.config import TrainConfig
from stacklm.training.cuda_graph import GraphedSteps, training_steps
from tests.models.conftest import tiny_model

CONFIG = TrainConfig(learning_rate=0.01, tokens_per_batch=40, max_epochs=1)
BATCHES = [[[1, 2, 3], [2, 3, 4, 5]], [[1, 2, 3, 4, 5, 1, 2], [3]], [[4, 5], [1, 1, 2]], [[5, 4, 3, 2, 1], [2]], [[1], [2], [3]]]


def test_the_cpu_runs_the_eager_step_and_no_graph() -> None:
    model = tiny_model("Tf+Nd")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)
    step = training_steps(model, optimizer, CONFIG, torch.device("cpu"))
    assert not isinstance(step, GraphedSteps)
    loss = step(make_batch(BATCHES[0], range(2), 6))
    assert loss.shape == () and loss.device.type == "cpu" and not loss.requires_grad
    with pytest.raises(ValueError, match="CUDA graphs run on CUDA, not on cpu"):
        GraphedSteps(model, optimizer, 1.0, torch.device("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("name", ["Tf", "Tf+Nd", "LSTM+Nd+R", "cfl/NS+S+U"])
def test_graphed_steps_equal_eager_steps(name: str) -> None:
    """Every batch shape three times over (eager warm-up, capture, replays) and a learning rate
    change (graphs captured again), with dropout 0: the parameters stay those of the eager steps."""
    device = torch.device("cuda")
    models = [tiny_model(name).to(device).train() for _ in range(2)]
    models[1].load_state_dict(copy.deepcopy(models[0].state_dict()))
    optimizers = [torch.optim.Adam(model.parameters(), lr=0.01, fused=True, capturable=True) for model in models]
    eager = training_steps(models[0], optimizers[0], CONFIG, device, graphs=False)
    graphed = training_steps(models[1], optimizers[1], CONFIG, device)
    assert isinstance(graphed, GraphedSteps)
    for round_index in range(3):
        if round_index == 2:
            for optimizer in optimizers:
                optimizer.param_groups[0]["lr"] = 0.005
        for strings in BATCHES:
            batch = make_batch(strings, range(len(strings)), 6)
            torch.testing.assert_close(graphed(batch), eager(batch), rtol=1e-4, atol=1e-5)
    for expected, actual in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
