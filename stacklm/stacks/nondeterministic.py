"""The nondeterministic stack of the NS-RNN and RNS-RNN: NS, NS+S, NS+U, NS+S+U (DuSell & Chiang 2022, §2.4, §3, §5.1).

The stack simulates a weighted PDA with states Q (q0 = 0) and symbols Γ (⊥ = 0). At step t
the controller gives Δ[t]: for each (q, x), |Q||Γ| push weights Δ⁺[q,x→r,y], |Q||Γ| replace
weights Δ^R[q,x→r,y] and |Q| pop weights Δ⁻[q,x→r] (eq. 1):

    NS, NS+S (normalized):   log Δ[t][q,x,·] = log_softmax over the 2|Q||Γ| + |Q| choices
    NS+U, NS+S+U (+U):       log Δ[t] = the logits themselves (Δ = exp(logits))

γ and α follow eqs. 2–4 with 0 ≤ i < t (``pda.py`` gives the recurrence, shapes and cost):
the first action is necessarily a push and every configuration at t ≥ 1 has a symbol above
the ⊥ of time 0 (the 2022 code, not the later "bottom fix"). The reading is always normalized:

    without states (NS, NS+U):  r_t[y]   = Σ_r α[t][r,y] / Σ_{r',y'} α[t][r',y']   (eq. 5), size |Γ|
    with states (+S):           r_t[r,y] = α[t][r,y] / Σ_{r',y'} α[t][r',y'],           size |Q||Γ|

r_0 is one-hot at ⊥ (or (q0, ⊥)). The memory-limited variant (§5.1) is ``window=D``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Self

import torch
from torch import Tensor

from stacklm.semiring import LOG, Semiring
from stacklm.stacks.base import Stack, StackState
from stacklm.stacks.contraction import Contraction, engine_for
from stacklm.stacks.pda import (
    PDASizes,
    PDATables,
    Transitions,
    advance,
    from_log,
    initial_tables,
    normalize,
)


def num_action_logits(num_states: int, num_symbols: int) -> int:
    """Q·S·(2·Q·S + Q): the controller's output size per step."""
    configurations = num_states * num_symbols
    return configurations * (2 * configurations + num_states)


@dataclass(frozen=True)
class NondeterministicActions:
    """Log transition weights; the leading dimensions are (B,) for one step, (B, n) for a sequence."""

    push: Tensor  # (..., Q, S, Q, S): log Δ⁺[q,x→r,y]
    replace: Tensor  # (..., Q, S, Q, S): log Δ^R[q,x→r,y]
    pop: Tensor  # (..., Q, S, Q): log Δ⁻[q,x→r]

    @staticmethod
    def from_logits(logits: Tensor, num_states: int, num_symbols: int, normalize: bool) -> NondeterministicActions:
        """Split controller logits (..., Q·S·(2QS + Q)); ``normalize`` takes eq. 1's softmax per (q, x)."""
        configurations = num_states * num_symbols
        per_configuration = logits.view(*logits.shape[:-1], num_states, num_symbols, 2 * configurations + num_states)
        if normalize:
            per_configuration = per_configuration.log_softmax(dim=-1)
        push, replace_, pop = per_configuration.split([configurations, configurations, num_states], dim=-1)
        lead = logits.shape[:-1]
        return NondeterministicActions(
            push=push.reshape(*lead, num_states, num_symbols, num_states, num_symbols),
            replace=replace_.reshape(*lead, num_states, num_symbols, num_states, num_symbols),
            pop=pop,
        )


ACTION_TYPES: tuple[str, ...] = ("push", "replace", "pop")  # the order of ``action_type_probabilities``


def action_type_probabilities(actions: NondeterministicActions) -> Tensor:
    """The probability of each action type at each step (DuSell & Chiang (2022), Figure 2): (..., 3).

    A softmax over the log-summed weights of every transition of each type, taken over all
    source configurations (q, x) and targets,

        P_t(type) ∝ Σ_{q,x,r,y} Δ⁺_t[q,x→r,y],  Σ_{q,x,r,y} Δ^R_t[q,x→r,y],  Σ_{q,x,r} Δ⁻_t[q,x→r],

    in the order ``ACTION_TYPES``, of the weights the stack runs on: after eq. 1's softmax per
    (q, x) when normalized (NS, NS+S), so each (q, x) counts equally; the raw exp(logits) with +U.
    """
    lead = actions.pop.shape[:-3]
    sums = torch.stack(
        [
            actions.push.reshape(*lead, -1).logsumexp(dim=-1),
            actions.replace.reshape(*lead, -1).logsumexp(dim=-1),
            actions.pop.reshape(*lead, -1).logsumexp(dim=-1),
        ],
        dim=-1,
    )  # (..., 3): log Σ Δ of each type
    return sums.softmax(dim=-1)


def transitions_from_actions(
    actions: NondeterministicActions, semiring: type[Semiring], pushed: Tensor | None
) -> Transitions:
    """One step's actions as (B, N, N), (B, N, N), (B, N, Q) weights in ``semiring``."""
    batch, num_states, num_symbols = actions.pop.shape[:3]
    configurations = num_states * num_symbols
    return Transitions(
        push=from_log(semiring, actions.push.reshape(batch, configurations, configurations)),
        replace=from_log(semiring, actions.replace.reshape(batch, configurations, configurations)),
        pop=from_log(semiring, actions.pop.reshape(batch, configurations, num_states)),
        pushed=pushed,
    )


def symbol_reading(alpha: Tensor, sizes: PDASizes, semiring: type[Semiring], states_in_reading: bool) -> Tensor:
    """r_t from α[t] (..., N): α normalised (+S), or its sum over states normalised (eq. 5)."""
    total = semiring.sum(alpha, dim=-1, keepdim=True)
    if states_in_reading:
        return normalize(semiring, alpha, total)
    per_symbol = semiring.sum(alpha.unflatten(-1, (sizes.num_states, sizes.num_symbols)), dim=-2)
    return normalize(semiring, per_symbol, total)


@dataclass(frozen=True)
class NondeterministicState(StackState[NondeterministicActions]):
    """γ, α of the last columns (``tables``) and how to read them."""

    tables: PDATables
    sizes: PDASizes
    engine: Contraction
    states_in_reading: bool

    def next(self, actions: NondeterministicActions) -> Self:
        transitions = transitions_from_actions(actions, self.engine.semiring, None)
        return replace(self, tables=advance(self.tables, transitions, self.sizes, self.engine))

    def reading(self) -> Tensor:
        return symbol_reading(self.tables.alpha, self.sizes, self.engine.semiring, self.states_in_reading)

    def transform_tensors(self, function: Callable[[Tensor], Tensor]) -> Self:
        return replace(self, tables=self.tables.transform_tensors(function, self.engine))


class NondeterministicStack(Stack[NondeterministicActions]):
    """NS (normalized actions, symbol reading), NS+S, NS+U, NS+S+U; ``window`` = D of §5.1.

    ``semiring`` LOG (default) runs the shifted real-space products when ``fast``; REAL and
    MAX_PLUS (Viterbi weights) materialise every term.
    """

    def __init__(
        self,
        num_states: int,
        num_symbols: int,
        states_in_reading: bool,
        window: int | None = None,
        semiring: type[Semiring] = LOG,
        fast: bool = True,
    ) -> None:
        self.sizes = PDASizes(num_states, num_symbols, vector_size=0, window=window, bottom_replaceable=False)
        self.states_in_reading = states_in_reading
        self.engine = engine_for(semiring, fast)
        self.reading_size = num_states * num_symbols if states_in_reading else num_symbols

    def initial_state(self, batch_size: int, like: Tensor, max_steps: int | None = None) -> NondeterministicState:
        tables = initial_tables(self.sizes, batch_size, None, self.engine, like, max_steps)
        return NondeterministicState(tables, self.sizes, self.engine, self.states_in_reading)

    def step_actions(self, actions: NondeterministicActions, step: int) -> NondeterministicActions:
        return NondeterministicActions(actions.push[:, step], actions.replace[:, step], actions.pop[:, step])

    def num_steps(self, actions: NondeterministicActions) -> int:
        return actions.pop.size(1)

    def readings(
        self, actions: NondeterministicActions, initial: StackState[NondeterministicActions] | None = None
    ) -> Tensor:
        """r_1 … r_n (B, n, reading_size), all read at once after the steps."""
        if initial is not None and not isinstance(initial, NondeterministicState):
            raise TypeError(f"not a state of this stack: {type(initial).__name__}")
        return self.run(actions, initial)[0]

    def run(
        self, actions: NondeterministicActions, initial: NondeterministicState | None = None
    ) -> tuple[Tensor, NondeterministicState]:
        """r_1 … r_n (B, n, reading_size) and the state after step n (for the next chunk)."""
        steps = self.num_steps(actions)
        state = initial if initial is not None else self.initial_state(actions.pop.size(0), actions.pop, steps)
        alphas = []
        for step in range(steps):
            state = state.next(self.step_actions(actions, step))
            alphas.append(state.tables.alpha)
        if not alphas:
            return actions.pop.new_zeros(actions.pop.size(0), 0, self.reading_size), state
        readings = symbol_reading(torch.stack(alphas, dim=1), self.sizes, self.engine.semiring, self.states_in_reading)
        return readings, state
