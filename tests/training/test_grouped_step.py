"""Several runs' losses and gradients in one vmapped forward equal each run's alone, dropout included."""

import random

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.models.lexicon import task_features, task_vocabulary
from stacklm.models.options import ModelOptions
from stacklm.models.registry import ARCHITECTURES, build_model
from stacklm.training.batching import make_batch
from stacklm.training.buckets import pad_to_bucket, padded_loss
from stacklm.training.grouped_step import GroupedStep
from stacklm.training.loss import batch_loss
from stacklm.training.run_dropout import RunRandomness

CPU = torch.device("cpu")
PLAIN = [name for name, entry in ARCHITECTURES.items() if entry.family == "bearing-syntactic-fruit" and not entry.syntax]


def strings(count: int, seed: int) -> list[list[int]]:
    generator = random.Random(seed)
    return [[generator.randrange(5) for _ in range(generator.randint(1, 7))] for _ in range(count)]


def tiny(name: str, seed: int, dropout: float = 0.3) -> torch.nn.Module:
    return build_model(name, 6, options=ModelOptions(width=8, dropout=dropout), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", PLAIN)
def test_each_run_of_a_grouped_step_has_its_loss_and_gradient_alone(name: str) -> None:
    """Batches of three shapes (padded to the largest), dropout drawn from each run's seed."""
    data = strings(30, 0)
    models = [tiny(name, seed) for seed in (1, 2, 3)]
    batches = [make_batch(data, indices, 5) for indices in ([0, 1, 2], list(range(5, 12)), [20, 21])]
    losses = GroupedStep(models[0]).losses(models, batches, [RunRandomness.seeded(seed, CPU) for seed in (1, 2, 3)])
    losses.sum().backward()
    grouped = [[parameter.grad.clone() for parameter in model.parameters()] for model in models]
    for seed, model, batch, loss, gradients in zip((1, 2, 3), models, batches, losses, grouped):
        model.zero_grad()
        torch.manual_seed(seed)
        alone = batch_loss(model, batch)
        alone.backward()
        assert loss.item() == pytest.approx(alone.item(), rel=1e-6, abs=1e-6)
        for gradient, parameter in zip(gradients, model.parameters()):
            torch.testing.assert_close(gradient, parameter.grad, rtol=1e-5, atol=1e-6)


def test_each_run_draws_from_its_own_generator() -> None:
    """Two runs of one seed get one loss; the state each run leaves is the one it would leave alone."""
    data = strings(10, 0)
    models = [tiny("Tf", 1), tiny("Tf", 1)]
    batch = make_batch(data, [0, 1, 2, 3], 5)
    randomness = [RunRandomness.seeded(7, CPU), RunRandomness.seeded(7, CPU)]
    losses = GroupedStep(models[0]).losses(models, [batch, batch], randomness)
    assert losses[0].item() == losses[1].item()
    torch.manual_seed(7)
    batch_loss(models[0], batch)
    assert torch.equal(randomness[0].cpu, torch.get_rng_state()) and torch.equal(randomness[1].cpu, torch.get_rng_state())


def test_runs_of_other_architectures_are_refused() -> None:
    batch = make_batch(strings(4, 0), [0, 1], 5)
    with pytest.raises(StacklmError, match="share their architecture"):
        GroupedStep(tiny("Tf", 1)).losses([tiny("Tf", 1), tiny("LSTM", 1)], [batch, batch], [RunRandomness.seeded(1, CPU)] * 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the fused dropout's masks and the vmapped kernels on a GPU")
@pytest.mark.parametrize("name", ["Tf", "Tf+Nd", "Tf+Sup", "LSTM", "LSTM+Nd+R"])
def test_on_cuda_each_run_of_a_grouped_step_has_its_loss_and_gradient_alone(name: str) -> None:
    cuda = torch.device("cuda")
    data = strings(30, 0)
    models = [tiny(name, seed).to(cuda) for seed in (1, 2, 3)]
    batches = [make_batch(data, indices, 5).to(cuda) for indices in ([0, 1, 2], list(range(5, 12)), [20, 21])]
    losses = GroupedStep(models[0]).losses(models, batches, [RunRandomness.seeded(seed, cuda) for seed in (1, 2, 3)])
    losses.sum().backward()
    grouped = [[parameter.grad.clone() for parameter in model.parameters()] for model in models]
    for seed, model, batch, loss, gradients in zip((1, 2, 3), models, batches, losses, grouped):
        model.zero_grad()
        torch.manual_seed(seed)
        alone = batch_loss(model, batch)
        alone.backward()
        assert loss.item() == pytest.approx(alone.item(), rel=1e-5, abs=1e-5)
        for gradient, parameter in zip(gradients, model.parameters()):
            torch.testing.assert_close(gradient, parameter.grad, rtol=1e-4, atol=1e-5)


def test_a_syntax_infused_architecture_shares_its_feature_table_between_the_runs() -> None:
    """+Syn: the feature table is a buffer, the same in every run of the task."""
    vocabulary = len(task_vocabulary("question-formation"))
    models = [build_model("Tf+Syn", vocabulary, token_features=task_features("question-formation"), options=ModelOptions(width=32, dropout=0.3),
                          generator=torch.Generator().manual_seed(seed)) for seed in (1, 2)]
    data = [[index % (vocabulary - 1) for index in range(start, start + length)] for start, length in ((0, 5), (3, 7), (9, 2), (4, 4))]
    batches = [make_batch(data, [0, 1], vocabulary - 1), make_batch(data, [2, 3], vocabulary - 1)]
    losses = GroupedStep(models[0]).losses(models, batches, [RunRandomness.seeded(seed, CPU) for seed in (1, 2)])
    for seed, model, batch, loss in zip((1, 2), models, batches, losses):
        torch.manual_seed(seed)
        assert loss.item() == pytest.approx(batch_loss(model, batch).item(), rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("name", ["Tf", "Tf+Nd", "LSTM"])
def test_bucketed_each_run_has_the_loss_and_gradient_of_its_graphed_step_alone(name: str) -> None:
    """On CUDA a run alone steps on its batch padded to its bucket (``cuda_graph``), drawing its masks
    for that shape: the bucketed step draws them so too (here on the CPU, the padded loss eagerly)."""
    data = strings(30, 0)
    models = [tiny(name, seed) for seed in (1, 2, 3)]
    batches = [make_batch(data, indices, 5) for indices in ([0, 1, 2], list(range(5, 12)), [20, 21])]
    losses = GroupedStep(models[0], bucketed=True).losses(models, batches, [RunRandomness.seeded(seed, CPU) for seed in (1, 2, 3)])
    losses.sum().backward()
    grouped = [[parameter.grad.clone() for parameter in model.parameters()] for model in models]
    for seed, model, batch, loss, gradients in zip((1, 2, 3), models, batches, losses, grouped):
        model.zero_grad()
        torch.manual_seed(seed)
        alone = padded_loss(model, pad_to_bucket(batch))
        alone.backward()
        assert loss.item() == pytest.approx(alone.item(), rel=1e-6, abs=1e-6)
        for gradient, parameter in zip(gradients, model.parameters()):
            torch.testing.assert_close(gradient, parameter.grad, rtol=1e-5, atol=1e-6)
