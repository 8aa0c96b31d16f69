"""Log-probabilities of language-model strings, and the training loss of App. D.

For a batch of strings w (each scored as w·EOS), the loss is the mean over strings of
−log p_M(w·EOS) = −Σ_{t=0}^{|w|} log p_M(w_{t+1} | w_1 … w_t), with w_{|w|+1} = EOS.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from stacklm.training.batching import Batch


def position_log_probabilities(model: nn.Module | Callable[[Tensor], Tensor], inputs: Tensor, targets: Tensor) -> Tensor:
    """log p(targets_t | inputs_1 … inputs_t) for every position: (B, n + 1); ``model`` may be any
    function of the inputs that gives the logits (a ``functional_call``)."""
    logits = model(inputs)  # (B, n + 1, V)
    log_probabilities = torch.log_softmax(logits.float(), dim=-1)  # (B, n + 1, V)
    return log_probabilities.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, n + 1)


def string_log_probabilities(model: nn.Module, batch: Batch) -> Tensor:
    """log p_M(w·EOS) of each string of the batch: (B,)."""
    positions = position_log_probabilities(model, batch.inputs, batch.targets)  # (B, n + 1)
    return positions.masked_fill(~batch.mask, 0.0).sum(dim=1)


def batch_loss(model: nn.Module, batch: Batch) -> Tensor:
    """Mean over strings of −log p_M(w·EOS): a scalar."""
    return -string_log_probabilities(model, batch).mean()
