"""The stratification stack (``stacklm.stacks.stratification``: Grefenstette et al. (2015) as in
DuSell & Chiang (2022) App. 7.1) as one compiled step per call, forward and exact backward
(``stratification.cpp``), for stack RNNs.

Step t reads the stratification layer's and push layer's outputs as they are, (B, 2 + m):
u_t = σ(column 0), d_t = σ(column 1), v_t = tanh(columns 2 …) (``StratificationInterface``), and
computes, with A_i = Σ_{j above i} s[j],

    s_t[i] = max(0, s_{t−1}[i] − max(0, u_t − A_i(s_{t−1})))  (i < t),   s_t[t] = d_t,   V[t] = v_t,
    r_t = Σ_i min(s_t[i], max(0, 1 − A_i(s_t))) V[i],

so a step is one autograd node, σ and tanh and their backward in the kernel's. Backward, exact
(PyTorch's conventions at the kinks: relu passes 0 at 0, minimum passes half to each side at a
tie), with the adjoints of the run kept in tables shared by its steps: ∂L/∂V[i] (summed over the
readings r_i … r_n) and ∂L/∂s_t. Step t's backward adds the reading's part,

    ∂L/∂V[i] += w_i ∂L/∂r_t,   ∂L/∂w_i = ∂L/∂r_t · V[i],   w_i = min(s_t[i], c_i),  c_i = max(0, 1 − A_i(s_t)),
    ∂L/∂s_t[i] += ∂L/∂w_i [s_t[i] < c_i] (½ at a tie),   ∂L/∂s_t[j] −= Σ_{i below j} ∂L/∂c_i [1 − A_i > 0],

then takes ∂L/∂d_t = ∂L/∂s_t[t], ∂L/∂v_t = ∂L/∂V[t] (complete: no later step reads V[t] otherwise)
and passes through the pop, with x_i = s_{t−1}[i] − q_i, q_i = max(0, u_t − A_i(s_{t−1})):

    ∂L/∂s_{t−1}[i] = ∂L/∂s_t[i] [s_t[i] > 0] =: ∂L/∂x_i,   ∂L/∂u_t = −Σ_i ∂L/∂x_i [u_t − A_i > 0],
    ∂L/∂s_{t−1}[j] += Σ_{i below j} ∂L/∂x_i [u_t − A_i > 0].

A (B, 0) tensor passed from step to step orders the steps in autograd, so the backward of step t
runs after those of steps t + 1 … n, which complete the adjoints it reads. Cost per step O(B t m);
memory O(B n (n + m)) for the run's strengths and values.

The kernel is part of the library of ``stacklm.kernels.build``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from stacklm.kernels import build
from stacklm.kernels.one_step import StepRun, StepTables
from stacklm.models.stack_interface import StratificationInterface


class StratificationTables(StepTables):
    """The tables of one run of at most ``capacity`` steps of ``batch_size`` stacks of vectors of size
    ``vector_size``, filled one step per :func:`~stacklm.kernels.one_step.next_step` (logits (B, 2 + m): the
    stratification and push layers' outputs side by side, u_t and d_t before σ, v_t before tanh): the values V[1 … t] (B, capacity, m),
    element i of the stack at index i − 1 from the bottom, and s_t of every step t (B, capacity (capacity + 1) / 2),
    s_t[1 … t] from t (t − 1) / 2. The adjoint tables ∂L/∂V (B, capacity, m) and ∂L/∂s_t (B, capacity) are
    made by the first backward step of the run and dropped after step 1's."""

    def __init__(self, batch_size: int, capacity: int, vector_size: int, like: Tensor) -> None:
        build.load()
        self.values = like.new_empty(batch_size, capacity, vector_size)
        self.strengths = like.new_empty(batch_size, capacity * (capacity + 1) // 2)
        self.capacity = capacity
        self.steps = 0
        self.grad_values: Tensor | None = None
        self.grad_strengths: Tensor | None = None

    def forward(self, step: int, logits: Tensor) -> Tensor:
        return torch.ops.stacklm_stratification.step(step, logits, self.values, self.strengths)

    def backward(self, step: int, grad_reading: Tensor, logits: Tensor) -> Tensor:
        if self.grad_values is None or self.grad_strengths is None:
            self.grad_values = torch.zeros_like(self.values)
            self.grad_strengths = self.values.new_zeros(self.values.size(0), self.capacity)
        grad_logits = torch.ops.stacklm_stratification.step_backward(
            step, grad_reading, logits, self.values, self.strengths, self.grad_values, self.grad_strengths
        )
        if step == 1:
            self.grad_values = self.grad_strengths = None
        return grad_logits


class StratificationRun(StepRun):
    """The stratification stack of one whole-sequence forward of a stack RNN (``stacklm.kernels.recurrent``),
    gradients included: tables for at most ``capacity`` steps, one kernel call per step, driven by
    the interface's layers' outputs as they are (the logits of ``StratificationInterface.actions_from_logits``, (B, 2 + m)); r_t (B, m)."""

    def __init__(self, interface: StratificationInterface, batch_size: int, like: Tensor, capacity: int) -> None:
        self.tables = StratificationTables(batch_size, capacity, interface.stack.vector_size, like)
        self.current = like.new_zeros(batch_size, interface.stack.vector_size)  # r_0: the empty stack reads 0
        self.order = like.new_empty(batch_size, 0)


class CompiledStratificationInterface(StratificationInterface):
    """``StratificationInterface`` whose stack RNN's whole-sequence forward runs the stack on the kernel
    (CPU, float32 or float64) as a :class:`StratificationRun` (``stacklm.kernels.recurrent``); its
    ``actions``, ``initial_state`` and ``readings`` stay PyTorch's."""
