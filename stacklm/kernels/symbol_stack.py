"""The nondeterministic stack over symbols (NS, NS+S, NS+U, NS+S+U) as one compiled step per call,
forward and exact backward (``symbol_stack.cpp``), for stack RNNs.

DuSell & Chiang (2022), "Learning Hierarchical Structures with Differentiable Nondeterministic
Stacks", eqs. 2–5, full stack (no window), as ``stacklm.stacks.nondeterministic`` computes it: the
same γ, α and readings. Step t (1-based) adds column t of γ from the log weights log Δ⁺_t, log Δ^R_t
(B, N, N) and log Δ⁻_t (B, N, Q) of the step, N = |Q|·|Γ|, configuration (q, x) at q·|Γ| + x, which it
reads from the action layer's logits of the step as they are, (B, N·(2N + Q)), row (q, x) holding
[log Δ⁺ ; log Δ^R ; log Δ⁻] (``NondeterministicActions.from_logits``): less the row's log-sum-exp
(eq. 1's softmax per (q, x): NS, NS+S) or raw (+U). So a step is one autograd node, the softmax's
backward (g − softmax · Σ g per row) in the kernel's.

Shares instead of weights. With F_t[i][a][c] = α[i][a] γ[i→t][a,c] (so α[t][c] = Σ_{i,a} F_t[i][a][c]),
the kernel keeps the shares Ŝ_t[i][a][c] = F_t[i][a][c] / α[t][c] ∈ [0, 1] and α̂[t] = α[t] / max_c α[t][c].
Multiplying eq. 2 by α[i][a] gives every term of column t as a product of shares, α̂[t−1] and
one step-t weight:

    F_t[t−1][a][c] ∝ α̂[t−1][a] Δ⁺_t[a,c]                                                    (push)
    F_t[i][a][c]   ∝ Σ_b Ŝ_{t−1}[i][a][b] wR[b,c] + Σ_{k=i+1}^{t−2} Σ_u Ŝ_k[i][a][(u,y)] W[k][(u,y)][r]
                      wR[b,c] = α̂[t−1][b] Δ^R_t[b,c],   W[k][d][r] = Σ_b Ŝ_{t−1}[k][d][b] α̂[t−1][b] Δ⁻_t[b,r]

(c = (r, y); α[k][d] γ'_t[k][d][r] = α[t−1]-weighted W[k][d][r], so α[k] cancels from the pop).
Each target c has its own scale, since the shares of column t are normalised per c: the push and
replace terms are computed relative to e^κ[c], κ[c] = max_b (log α̂[t−1][b] + max(log Δ⁺[b,c],
log Δ^R[b,c])), the pops relative to e^λ[r], λ[r] = max_b (log α̂[t−1][b] + log Δ⁻[b,r]), and the
two parts are joined at the larger of their log sums μ[c], by g[c] = e^(κ[c] − μ[c]) and
f[c] = e^(λ[r] − μ[c]). The shares of column t − 1 into each b sum to 1, so the push and replace
terms of c sum to at least 1 at their scale: no part underflows where another is large, and
float32 follows float64 with transition weights e^±90 apart (at e^±300, logits of std 100,
the float32 readings still do, but the backward's H, which grows as 1/Ŝ, overflows). T_t[c], the terms' sum at the joined
scale, normalises them into Ŝ_t; α̂[t][c] ∝ e^μ[c] T_t[c]. The reading is r_t = α[t] / Σ α[t] (+S),
or its sum over states (eq. 5): the scale of α[t−1] cancels.

Backward, exact (the scales are constant factors, which the normalised shares and readings
cancel). With E = ∂L/∂ log γ[i→t][a,c] kept as H_t[i][a][c] = E / Ŝ_t[i][a][c] and
e_t[c] = ∂L/∂ log α[t][c], step t passes, after the reading's part of e_t (in the replace terms ρ is
taken times g[c], in the pop terms times f[c]):

    H_t[i][a][c] += e_t[c];   e_i[a] += Σ_c e_t[c] Ŝ_t[i][a][c]                   (α[t] = Σ α[i] γ[i→t])
    ∂L/∂ log Δ⁺_t[a,c] = H_t[t−1][a][c] Ŝ_t[t−1][a][c]
    ρ[i][a][c] = H_t[i][a][c] / T_t[c]                          (∂L/∂ log γ over the term sum, i ≤ t−2)
    H_{t−1}[i][a][b] += Σ_c ρ[i][a][c] wR[b,c];   ∂L/∂ log Δ^R_t[b,c] = wR[b,c] Σ_{i,a} ρ[i][a][c] Ŝ_{t−1}[i][a][b]
    H_k[i][a][(u,y)] += Σ_r ρ[i][a][(r,y)] W[k][(u,y)][r];   Z[k][(u,y)][r] = Σ_{i<k,a} ρ[i][a][(r,y)] Ŝ_k[i][a][(u,y)]
    H_{t−1}[k][d][b] += Σ_r Z[k][d][r] α̂[t−1][b] Δ⁻_t[b,r];  ∂L/∂ log Δ⁻_t[b,r] = Σ_{k,d} Z[k][d][r] Ŝ_{t−1}[k][d][b] α̂[t−1][b] Δ⁻_t[b,r]

(each log-sum passes ∂L/∂ log of a sum times the term's share of it). H_t is complete once
steps t + 1 … n have run backward, which the order tensor passed from step to step ensures.

Cost per sequence of n steps: ≈ n³·N²·|Q|/6 multiply-adds forward, twice that backward; memory
O(n²·N²) for Ŝ and H. Each op runs groups of eight batch elements, one per vector lane
(``lanes.h``), the batch's last B mod 8 in the narrowest group of 2, 4 or 8 lanes that holds them
(B = 10: 8 + 2 lanes), one group per task (``torch.set_num_threads``).

The library is built at first use like the other compiled kernels
(``stacklm.kernels.build``: its compiler flags, cache root and build lock), in a
folder of its own.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch
from torch import Tensor

from stacklm.build_lock import build_lock
from stacklm.errors import StacklmError
from stacklm.kernels import build
from stacklm.kernels.one_step import StepRun, StepTables
from stacklm.stacks.nondeterministic import NondeterministicStack

NAME = "stacklm_symbol_stack"
SOURCE = Path(__file__).with_name("symbol_stack.cpp")
HEADERS = [Path(__file__).with_name("lanes.h")]

_loaded = False


def build_directory() -> Path:
    """<cache root>/stacklm_symbol_stack<instruction set>-<checkout>, beside the other kernels' folder."""
    checkout = hashlib.sha256(str(SOURCE.resolve()).encode()).hexdigest()[:12]
    suffix = build.extension_name().removeprefix(build.NAME)
    return build.build_directory().parent / f"{NAME}{suffix}-{checkout}"


def load() -> None:
    """Build (once per source and compiler flags) and load the kernel; raises if it cannot build."""
    global _loaded
    if _loaded:
        return
    from torch.utils import cpp_extension

    directory = build_directory()
    name = directory.name.rsplit("-", 1)[0]
    try:
        with build_lock(directory, "the symbol stack kernel's build", build.BUILD_WAIT_S):
            (directory / "lock").unlink(missing_ok=True)  # torch's own lock, left only by a killed build
            library = directory / f"{name}.so"
            if not (library.is_file() and all(library.stat().st_mtime >= path.stat().st_mtime for path in [SOURCE, *HEADERS])):
                print("building the symbol stack kernel (first use, about a minute)…", file=sys.stderr, flush=True)
            cpp_extension.load(
                name=name,
                sources=[str(SOURCE)],
                extra_cflags=build.compile_flags(),
                extra_ldflags=["-fopenmp", "-lmvec"],
                build_directory=str(directory),
                is_python_module=False,
                verbose=False,
            )
    except StacklmError:
        raise
    except Exception as error:  # the compiler's output is in the exception
        raise RuntimeError(build.build_failure("the symbol stack kernel", error, directory) + "; nothing runs in its place on the cpu-compiled backend: "
                           "--backend torch runs the PyTorch code") from error
    _loaded = True


class SymbolStackTables(StepTables):
    """The tables of one run of at most ``capacity`` steps of ``batch_size`` sequences, filled one
    column per :func:`~stacklm.kernels.one_step.next_step` (logits (B, Q·S·(2QS + Q)): the step's action
    logits as ``NondeterministicActions.from_logits`` takes them, each row (q, x): log Δ⁺, log Δ^R,
    log Δ⁻ side by side, rows at any stride): Ŝ (Σ_t t·N² per lane), α̂ and T ((capacity + 1)·N per lane), each
    one flat tensor of the groups side by side, group g (elements 8g …, L_g lanes: 8, or 2 or 4 for the
    last) from 8g times the size per lane, laid out [position][lane]. The adjoint tables H and e are
    made by the first backward step of the run and dropped after step 1's. ``normalize``: the steps'
    logits pass through eq. 1's softmax per (q, x) (NS, NS+S), else they are the log weights (+U)."""

    def __init__(
        self, batch_size: int, capacity: int, num_states: int, num_symbols: int, states_in_reading: bool, normalize: bool, like: Tensor
    ) -> None:
        load()
        self.shares, self.alpha, self.totals, self.scales = torch.ops.stacklm_symbol_stack.start(like, batch_size, capacity, num_states, num_symbols)
        self.batch_size = batch_size
        self.capacity = capacity
        self.num_states = num_states
        self.num_symbols = num_symbols
        self.states_in_reading = states_in_reading
        self.normalize = normalize
        self.steps = 0
        self.adjoint: Tensor | None = None
        self.grad_alpha: Tensor | None = None

    strided_rows = True

    def forward(self, step: int, logits: Tensor) -> Tensor:
        return torch.ops.stacklm_symbol_stack.step(
            step, self.num_states, self.num_symbols, logits, self.normalize, self.shares, self.alpha, self.totals, self.scales,
            self.states_in_reading,
        )  # fmt: skip

    def backward(self, step: int, grad_reading: Tensor, logits: Tensor) -> Tensor:
        if self.adjoint is None or self.grad_alpha is None:
            self.adjoint = torch.zeros_like(self.shares)
            self.grad_alpha = torch.zeros_like(self.alpha)
        grad_logits = torch.ops.stacklm_symbol_stack.step_backward(
            step, self.num_states, self.num_symbols, grad_reading, logits, self.normalize,
            self.shares, self.alpha, self.totals, self.scales, self.adjoint, self.grad_alpha, self.states_in_reading,
        )  # fmt: skip
        if step == 1:
            self.adjoint = self.grad_alpha = None
        return grad_logits


class SymbolStackRun(StepRun):
    """The symbol stack of one whole-sequence forward of a stack RNN (``stacklm.kernels.recurrent``),
    gradients included: tables for at most ``capacity`` steps, one kernel call per step, each step
    taken once, driven by the action layer's logits as they are (eq. 1's softmax in the kernel); r_t
    (B, N or |Γ|)."""

    def __init__(self, stack: NondeterministicStack, batch_size: int, like: Tensor, capacity: int, normalize: bool) -> None:
        sizes = stack.sizes
        self.tables = SymbolStackTables(batch_size, capacity, sizes.num_states, sizes.num_symbols, stack.states_in_reading, normalize, like)
        self.current = like.new_zeros(batch_size, stack.reading_size)
        self.current[:, 0] = 1  # r_0: one-hot at ⊥, or (q0, ⊥)
        self.order = like.new_empty(batch_size, 0)


class CompiledNondeterministicStack(NondeterministicStack):
    """``NondeterministicStack`` (full stack, LOG) whose stack RNN's whole-sequence forward runs on the
    kernel (CPU, float32 or float64) as a :class:`SymbolStackRun` (``stacklm.kernels.recurrent``);
    ``initial_state`` and ``readings`` stay the PyTorch DP."""

    def __init__(self, num_states: int, num_symbols: int, states_in_reading: bool) -> None:
        super().__init__(num_states, num_symbols, states_in_reading)
