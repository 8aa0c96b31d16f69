"""What a nondeterministic-stack RNN does with its stack on one string (DuSell & Chiang (2022), Figure 2).

At each stack update t the controller's h_t gives the transition weights Δ_t (eq. 1); the
probability of each action type is the softmax over log Σ Δ⁺_t, log Σ Δ^R_t and log Σ Δ⁻_t,
each summed over every (q, x) and target (:func:`stacklm.stacks.nondeterministic.action_type_probabilities`).
Without +R (every CFL model) the actions of h_t, read after w_t, drive the update before
w_{t+1}: a string of n symbols has n − 1 updates, from h_1 … h_{n−1}; with +R it has n.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from stacklm.errors import StacklmError
from stacklm.models.base import LanguageModel
from stacklm.models.recurrent import RecurrentLanguageModel
from stacklm.models.stack_interface import NondeterministicInterface
from stacklm.stacks.nondeterministic import action_type_probabilities


def string_action_types(model: LanguageModel, tokens: Sequence[int]) -> Tensor:
    """P_t(push), P_t(replace), P_t(pop) at every stack update of ``model`` reading ``tokens``
    (w_1 … w_n): (updates, 3), row t − 1 from h_t. Gradients flow unless the caller disables them."""
    if not isinstance(model, RecurrentLanguageModel) or not isinstance(model.interface, NondeterministicInterface):
        raise StacklmError(f"action types need a nondeterministic-stack RNN (cfl/NS … cfl/NS+S+U), not a {type(model).__name__}")
    interface = model.interface
    device = model.layers[0].input_weight.device
    state = model.initial_state(1)
    hidden = []
    for token in tokens:
        state = state.next(torch.tensor([token], device=device))
        hidden.append(state.hidden[-1])  # h_t (1, d)
    updates = len(tokens) if model.config.reading_to_output else max(len(tokens) - 1, 0)
    if updates == 0:
        return interface.action_layer.weight.new_zeros(0, 3)
    actions = interface.actions(torch.stack(hidden[:updates], dim=1))  # (1, updates, …)
    return action_type_probabilities(actions)[0]
