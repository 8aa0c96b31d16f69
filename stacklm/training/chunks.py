"""A PTB stream as training data (``stacklm.training.sources.TrainingData``): truncated BPTT over
its chunks (DuSell & Chiang (2022) App. 10; ``docs/design/cfl-and-ptb.md#ptb-data-and-batching``,
``docs/design/cfl-and-ptb.md#ptb-training``).

- An epoch runs the chunks in order from the initial state, carrying the state from chunk to
  chunk, detached, sliced to the chunk's batch where the short stream has ended.
- A chunk's loss is the mean NLL over its B·T targets; the loop clips the gradient's norm at
  c · those targets and records the epoch's NLL per target (``stacklm.training.config.ptb_train_config``).
- The validation cross-entropy is Σ −ln p / N over every target of the validation chunks, run
  the same way without gradients; its exponential is the perplexity.

A run stopped within an epoch saves the carried state's tensors (``carried``); its structure
(step counts, window bookkeeping) is rebuilt on resume by running the model over as many steps of
the epoch (batch 1, under ``no_grad``), which depends on the number of steps alone, and then
given the saved tensors.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from stacklm.data.ptb import Chunk
from stacklm.errors import StacklmError
from stacklm.models.ptb import PtbLanguageModel, PtbState
from stacklm.training import schedule
from stacklm.training.config import TrainConfig
from stacklm.training.sources import BatchLoss
from stacklm.training.step import training_step


def cross_entropy(model: PtbLanguageModel, chunks: Sequence[Chunk]) -> float:
    """−Σ log p / N over every target of ``chunks`` (nats per target), the state carried along."""
    model.eval()
    total, count = 0.0, 0
    state = None
    device = model.output.weight.device
    with torch.no_grad():
        for chunk in chunks:
            state = model.initial_state(chunk.batch_size) if state is None else state.first_rows(chunk.batch_size)
            logits, state = model(chunk.inputs.to(device), state)  # (B, T, V)
            total += float(nn.functional.cross_entropy(logits.flatten(0, 1), chunk.targets.to(device).flatten(), reduction="sum"))
            count += chunk.num_targets
    return total / count


def perplexity(model: PtbLanguageModel, chunks: Sequence[Chunk]) -> float:
    """exp(−Σ log p / N) over every target of ``chunks`` (∞ past the largest float)."""
    return schedule.perplexity(cross_entropy(model, chunks))


class ChunkData:
    """The training chunks of one stream, trained in order each epoch, and the validation chunks."""

    def __init__(self, training: Sequence[Chunk], validation: Sequence[Chunk]) -> None:
        if not training or not validation:
            raise StacklmError("training and validation chunks must not be empty")
        self.training, self.validation = training, validation
        self.state: PtbState | None = None  # carried into the next chunk

    def start_epoch(self, model: nn.Module, epoch: int, done: int, carried: Sequence[Tensor] | None) -> Sequence[Chunk]:
        if done == 0:
            self.state = None
        elif carried is None:
            raise StacklmError(f"{done} chunks of epoch {epoch + 1} are trained, and the state they carry into the next is not saved")
        else:
            self.state = _carried_state(model, self.training[:done], carried)
        return self.training

    def steps(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig, device: torch.device, graphs: bool
    ) -> Callable[[Chunk], BatchLoss]:
        """Eager steps (the state carried from chunk to chunk is no graph's static input), the norm
        clipped at ``gradient_clip_norm`` (c) · the chunk's targets with ``clip_per_token``."""

        def train_on(chunk: Chunk) -> BatchLoss:
            clip = config.gradient_clip_norm * chunk.num_targets if config.clip_per_token else config.gradient_clip_norm
            return BatchLoss(training_step(model, optimizer, lambda: self.loss(model, chunk), clip), chunk.batch_size, chunk.num_targets)

        return train_on

    def loss(self, model: nn.Module, chunk: Chunk) -> Tensor:
        """The mean NLL of ``chunk``'s targets, from the state the chunks before it carry (it then
        carries the state after ``chunk``)."""
        device = model.output.weight.device
        state = model.initial_state(chunk.batch_size) if self.state is None else self.state.detach().first_rows(chunk.batch_size)
        logits, self.state = model(chunk.inputs.to(device), state)  # (B, T, V)
        return nn.functional.cross_entropy(logits.flatten(0, 1), chunk.targets.to(device).flatten())

    def carried(self) -> list[Tensor] | None:
        return None if self.state is None else self.state.detach().tensors()

    def validation_cross_entropy(self, model: nn.Module) -> float:
        return cross_entropy(model, self.validation)


def _carried_state(model: PtbLanguageModel, done: Sequence[Chunk], tensors: Sequence[Tensor]) -> PtbState:
    """The state carried past the chunks ``done``, from its saved tensors: the structure of a state
    after as many steps (the model run on batch 1 without gradients), holding them."""
    device = model.output.weight.device
    with torch.no_grad():
        like = model.initial_state(1)
        for chunk in done:
            _, like = model(torch.zeros(1, chunk.inputs.size(1), dtype=torch.long, device=device), like)
    try:
        return like.with_tensors([tensor.to(device) for tensor in tensors])
    except (ValueError, RuntimeError, TypeError) as error:
        raise StacklmError(f"the saved carried state does not fit this model ({type(error).__name__}: {error})") from None
