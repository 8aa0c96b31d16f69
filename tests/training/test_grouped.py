"""K runs trained together equal the K runs trained alone: curves, parameters, early stopping,
state files, a stop and a resume."""

import dataclasses
import io
import random
from pathlib import Path

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.models.options import ModelOptions
from stacklm.models.registry import build_model
from stacklm.training import checkpoint
from stacklm.training.batching import make_batch
from stacklm.training.config import TrainConfig
from stacklm.training.grouped import GroupedRun, train_group
from stacklm.training.loop import StopRequest, TrainingInterrupted, train
from stacklm.training.progress import Progress
from stacklm.training.resumable import resumable_group
from stacklm.training.run_dropout import RunRandomness
from stacklm.training.run_state import TrainResult
from stacklm.training.strings import StringData

CPU = torch.device("cpu")
SEEDS = (1, 2, 3)


def strings(count: int, seed: int) -> list[list[int]]:
    generator = random.Random(seed)
    return [[generator.randrange(5) for _ in range(generator.randint(1, 6))] for _ in range(count)]


TRAINING, VALIDATION = strings(24, 0), strings(8, 1)
# Three runs of one architecture with other learning rates, budgets, epochs and patience: the
# third stops after its first epoch and leaves the group, the others go on.
CONFIGS = (
    TrainConfig(learning_rate=0.01, tokens_per_batch=16, max_epochs=2, examples_per_checkpoint=10),
    TrainConfig(learning_rate=0.03, tokens_per_batch=24, max_epochs=2, examples_per_checkpoint=10, early_stopping_patience=1),
    TrainConfig(learning_rate=0.005, tokens_per_batch=16, max_epochs=1, examples_per_checkpoint=None),
)


def tiny(name: str, seed: int) -> torch.nn.Module:
    return build_model(name, 6, options=ModelOptions(width=8, dropout=0.2), generator=torch.Generator().manual_seed(seed))


def alone(name: str, seed: int, config: TrainConfig, checkpoint: Path | None = None, device: torch.device = CPU) -> tuple[torch.nn.Module, TrainResult]:
    model = tiny(name, seed)
    torch.manual_seed(seed)
    result = train(model, StringData(TRAINING, VALIDATION, config, seed=seed, eos_index=5), config, checkpoint_path=checkpoint, device=device,
                   progress=Progress(io.StringIO()))
    return model, result


def grouped_runs(name: str, checkpoints: list[Path] | None = None, device: torch.device = CPU) -> list[GroupedRun]:
    return [
        GroupedRun(tiny(name, seed), TRAINING, VALIDATION, config, seed, 5, RunRandomness.seeded(seed, device),
                   checkpoint_path=None if checkpoints is None else checkpoints[index], progress=Progress(io.StringIO()))
        for index, (seed, config) in enumerate(zip(SEEDS, CONFIGS))
    ]


def assert_same_run(grouped: tuple[torch.nn.Module, TrainResult], lone: tuple[torch.nn.Module, TrainResult]) -> None:
    (model, result), (lone_model, lone_result) = grouped, lone
    assert (result.steps, result.epochs, result.stopped_early) == (lone_result.steps, lone_result.epochs, lone_result.stopped_early)
    assert len(result.curve) == len(lone_result.curve)
    for record, lone_record in zip(result.curve, lone_result.curve):
        exact = {"train_loss": 0.0, "validation_cross_entropy": 0.0}
        assert dataclasses.replace(record, **exact) == dataclasses.replace(lone_record, **exact)
        assert record.train_loss == pytest.approx(lone_record.train_loss, rel=1e-5)
        assert record.validation_cross_entropy == pytest.approx(lone_record.validation_cross_entropy, rel=1e-5)
    # An attention's key bias adds one constant to a query's scores, which the softmax ignores: its
    # gradient is 0 but for rounding, which Adam scales to steps of the learning rate, so it drifts
    # (by ~1e-3 here) in the run alone as much as in the group. The logits show it changes nothing.
    for (name, parameter), lone_parameter in zip(model.state_dict().items(), lone_model.state_dict().values()):
        if not name.endswith("key.bias"):
            torch.testing.assert_close(parameter, lone_parameter, rtol=1e-4, atol=1e-5, msg=name)
    inputs = make_batch(VALIDATION, range(len(VALIDATION)), 5).inputs.to(next(model.parameters()).device)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(inputs), lone_model.eval()(inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["Tf", "Tf+Nd", "Tf+Sup", "LSTM"])
def test_runs_trained_together_equal_the_runs_trained_alone(name: str) -> None:
    runs = grouped_runs(name)
    results = train_group(runs)
    for run, result, seed, config in zip(runs, results, SEEDS, CONFIGS):
        assert isinstance(result, TrainResult)
        assert_same_run((run.model, result), alone(name, seed, config))
    steps = [result.steps for result in results if isinstance(result, TrainResult)]
    assert len(set(steps)) == 3  # each left the group at its own step


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the runs alone replay CUDA graphs of bucketed batches there")
@pytest.mark.parametrize("name", ["Tf", "Tf+Nd", "LSTM"])
def test_on_cuda_runs_trained_together_equal_the_runs_trained_alone(name: str) -> None:
    cuda = torch.device("cuda")
    runs = grouped_runs(name, device=cuda)
    results = train_group(runs, cuda)
    for run, result, seed, config in zip(runs, results, SEEDS, CONFIGS):
        assert isinstance(result, TrainResult)
        assert_same_run((run.model, result), alone(name, seed, config, device=cuda))


def test_a_stopped_group_resumes_to_the_runs_alone_and_its_states_resume_alone(tmp_path: Path) -> None:
    """A stop request saves every run's state (generator included); the group resumes from them,
    and so does a run alone: the states have one format."""
    checkpoints = [tmp_path / f"{seed}.pt" for seed in SEEDS]
    stop = StopRequest()
    runs = grouped_runs("Tf", checkpoints)
    runs[0].after_step = lambda step, epoch: (setattr(stop, "reason", "SIGTERM") if step == 4 else None) or []
    with pytest.raises(TrainingInterrupted, match="SIGTERM at step 4"):
        train_group(runs, stop_request=stop)
    assert all(path.exists() for path in checkpoints)
    resumed = grouped_runs("Tf", checkpoints)
    first = alone("Tf", SEEDS[0], CONFIGS[0], checkpoints[0])
    results = train_group(resumed[1:])
    assert_same_run(first, alone("Tf", SEEDS[0], CONFIGS[0]))
    for run, result, seed, config in zip(resumed[1:], results, SEEDS[1:], CONFIGS[1:]):
        assert isinstance(result, TrainResult)
        assert_same_run((run.model, result), alone("Tf", seed, config))


def test_a_run_whose_state_another_process_holds_stays_out_of_the_group(tmp_path: Path) -> None:
    """``resumable_group``: each run's state under its fingerprint, locked; a held one is that run's error, the others train."""
    runs = grouped_runs("LSTM", [tmp_path / f"{seed}.pt" for seed in SEEDS])
    sources = [{"seed": seed} for seed in SEEDS]
    held = checkpoint.keyed_path(tmp_path / "2.pt", checkpoint.fingerprint(sources[1]))
    with checkpoint.exclusive(held):
        outcomes = resumable_group(runs, sources, device=CPU)
    assert isinstance(outcomes[1], StacklmError) and "is training this run" in str(outcomes[1])
    for index in (0, 2):
        assert isinstance(outcomes[index], TrainResult)
        assert_same_run((runs[index].model, outcomes[index]), alone("LSTM", SEEDS[index], CONFIGS[index]))
        assert checkpoint.keyed_path(tmp_path / f"{SEEDS[index]}.pt", checkpoint.fingerprint(sources[index])).exists()
