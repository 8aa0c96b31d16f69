"""The superposition stack (``stacklm.stacks.superposition``: Joulin & Mikolov (2015), as in
DuSell & Cotterell (2025) §3.1 and DuSell & Chiang (2022) App. 7.2) as one compiled step per call,
forward and exact backward (``superposition.cpp``), for stack RNNs.

Step t reads the action layer's and push layer's outputs as they are, (B, 3 + m):
a_t = softmax(columns 0 … 2) over (push, pop, no-op), v_t = σ(columns 3 …), or the columns
themselves with ``pushed_vector="raw"`` (``SuperpositionInterface``), and computes

    V_t[k] = a_t^push V_{t−1}[k − 1] + a_t^noop V_{t−1}[k] + a_t^pop V_{t−1}[k + 1]   (k < h_t),
    V_{t−1}[−1] = v_t,  0 below the bottom,   r_t = V_t[0],

with the heights h_t = min(t, D, N − t + 1) of the stack's depth limit D and length hint N
(``SuperpositionState.height_after``), so a step is one autograd node, the softmax and σ and their
backward in the kernel's. Backward, exact, with ∂L/∂V_t kept in a table shared by the run's
steps: step t adds ∂L/∂r_t to ∂L/∂V_t[0], then

    ∂L/∂a_t^push = Σ_k ∂L/∂V_t[k] · V_{t−1}[k − 1]   (and a^noop, a^pop with rows k, k + 1),
    ∂L/∂V_{t−1}[k] = a_t^push ∂L/∂V_t[k + 1] + a_t^noop ∂L/∂V_t[k] + a_t^pop ∂L/∂V_t[k − 1],
    ∂L/∂v_t = a_t^push ∂L/∂V_t[0],

and the softmax's ∂L/∂x_a = a_a (∂L/∂a_a − Σ_b a_b ∂L/∂a_b). A (B, 0) tensor passed from step to
step orders the steps in autograd, so the backward of step t runs after those of steps t + 1 … n,
which complete ∂L/∂V_t. Cost per step O(B h_t m); memory O(B m Σ_t h_t) for the run's stacks
(twice that with the adjoints), as the PyTorch code's autograd keeps.

The kernel is part of the library of ``stacklm.kernels.build``.
"""

from __future__ import annotations

from itertools import accumulate
import torch
from torch import Tensor

from stacklm.kernels import build
from stacklm.kernels.one_step import StepRun, StepTables
from stacklm.models.stack_interface import SuperpositionInterface


class SuperpositionTables(StepTables):
    """The stacks V_1 … V_capacity of one run of ``batch_size`` sequences, side by side in one table
    (B, Σ_t h_t, m), V_t from row ``offsets[t]`` with ``heights[t]`` rows (index 0: the empty V_0), filled one
    step per :func:`~stacklm.kernels.one_step.next_step` (logits (B, 3 + m): the action and push layers' outputs
    side by side, a_t before the softmax, v_t before σ unless ``raw_pushed``). The adjoint table ∂L/∂V (the same shape) is made by the first
    backward step of the run and dropped after step 1's. ``raw_pushed``: v_t is the push layer's output
    itself, not σ of it."""

    def __init__(self, batch_size: int, heights: list[int], vector_size: int, raw_pushed: bool, like: Tensor) -> None:
        build.load()
        self.heights = [0, *heights]  # h_0 … h_capacity
        self.offsets = [0, *accumulate(heights[:-1], initial=0)]  # V_t from row h_1 + … + h_{t−1}
        self.elements = like.new_empty(batch_size, sum(heights), vector_size)
        self.capacity = len(heights)
        self.raw_pushed = raw_pushed
        self.steps = 0
        self.grad_elements: Tensor | None = None

    def rows(self, step: int) -> tuple[int, int, int, int]:
        """Where V_{t−1} and V_t lie for step t: (offset, height) of each."""
        return self.offsets[step - 1], self.heights[step - 1], self.offsets[step], self.heights[step]

    def forward(self, step: int, logits: Tensor) -> Tensor:
        return torch.ops.stacklm_superposition.step(*self.rows(step), logits, self.raw_pushed, self.elements)

    def backward(self, step: int, grad_reading: Tensor, logits: Tensor) -> Tensor:
        if self.grad_elements is None:
            self.grad_elements = torch.zeros_like(self.elements)
        grad_logits = torch.ops.stacklm_superposition.step_backward(
            *self.rows(step), grad_reading, logits, self.raw_pushed, self.elements, self.grad_elements
        )
        if step == 1:
            self.grad_elements = None
        return grad_logits


class SuperpositionRun(StepRun):
    """The superposition stack of one whole-sequence forward of a stack RNN (``stacklm.kernels.recurrent``),
    gradients included: tables for ``capacity`` steps at the heights of the interface's stack with
    ``max_steps`` = ``capacity`` (its depth limit, and its length hint where it is on), one kernel call per
    step, driven by the interface's layers' outputs as they are (the logits of
    ``SuperpositionInterface.actions_from_logits``, (B, 3 + m)); r_t (B, m)."""

    def __init__(self, interface: SuperpositionInterface, batch_size: int, like: Tensor, capacity: int) -> None:
        stack = interface.stack
        state = stack.initial_state(batch_size, like, capacity)
        heights = [state.height_after(step) for step in range(1, capacity + 1)]
        self.tables = SuperpositionTables(batch_size, heights, stack.vector_size, interface.pushed_vector == "raw", like)
        self.current = state.reading()  # r_0: the empty stack reads 0
        self.order = like.new_empty(batch_size, 0)


class CompiledSuperpositionInterface(SuperpositionInterface):
    """``SuperpositionInterface`` whose stack RNN's whole-sequence forward runs the stack on the kernel
    (CPU, float32 or float64) as a :class:`SuperpositionRun` (``stacklm.kernels.recurrent``); its
    ``actions``, ``initial_state`` and ``readings`` (stack attention's) stay PyTorch's."""
