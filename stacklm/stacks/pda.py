"""The weighted-PDA dynamic program behind the nondeterministic stacks (NS, RNS, dVPDA).

Written once over a semiring (LOG for the stacks, REAL for tests, MAX_PLUS for Viterbi
weights); ``nondeterministic.py`` and ``vector_nondeterministic.py`` add actions and readings.

Paper notation (RNS-RNN: DuSell & Chiang (2022), eqs. 2–5 and §5.1; dVPDA: DuSell & Cotterell (2025), §3.2
and eq. 6). A PDA
with states Q (q0 = 0) and stack symbols Γ (⊥ = 0) takes, at step t, transitions of weight
Δ⁺_t[q,x→r,y] (push y), Δ^R_t[q,x→r,y] (replace the top by y) and Δ⁻_t[q,x→r] (pop). For
−1 ≤ i < t, γ[i→t][q,x→r,y] is the weight of the ways to go from (i, q, x) to (t, r, y)
with one element, pushed at step i+1, above x all along:

    γ[i→t][q,x→r,y] = 𝟙[i = t−1] Δ⁺_t[q,x→r,y]                              (push)
                    + Σ_{s,z} γ[i→t−1][q,x→s,z] Δ^R_t[s,z→r,y]              (replace)
                    + Σ_{k=i+1}^{t−2} Σ_u γ[i→k][q,x→u,y] γ'_t[k][u,y,r]    (pop)
    γ'_t[k][u,y,r]  = Σ_{s,z} γ[k→t−1][u,y→s,z] Δ⁻_t[s,z→r]                 (factorised pop)
    α[t][r,y]       = Σ_{i=−1}^{t−1} Σ_{q,x} α[i][q,x] γ[i→t][q,x→r,y],   α[0] = α[−1] = 𝟙[q0, ⊥]

Row i = −1 is the bottom element: γ[−1→0] = 𝟙[q0,⊥→q0,⊥] (a fictitious push of ⊥) when the
bottom may be replaced (the dVPDA of DuSell & Cotterell (2025): runs "never fully empty the stack, replacing
the bottom does not count"); for the NS family of DuSell & Chiang (2022) it is zero, so i ≥ 0, the first
action is a push, and no configuration at t ≥ 1 has ⊥-from-time-0 on top.

Vectors without ζ. The dVPDA's reading needs η[t][r,y,:], the sum over runs ending at
(t, r, y) of weight × top vector. The reference keeps ζ[i→t] (γ with the top vector), an
O(n²·Q²S²·m) table. Here only its α-weighted rows are kept,

    η[i→t][r,y,:] = Σ_{q,x} α[i][q,x] ζ[i→t][q,x→r,y,:],      η[t] = Σ_i η[i→t],

and splitting the runs by their last transition gives the same three terms as γ:

    η[t−1→t][r,y,:] = (Σ_{q,x} α[t−1][q,x] Δ⁺_t[q,x→r,y]) v_t                  (push)
    η[i→t]          += Σ_{s,z} η[i→t−1][s,z,:] Δ^R_t[s,z→r,y]                  (replace keeps the vector)
    η[i→t]          += Σ_k Σ_u η[i→k][u,y,:] γ'_t[k][u,y,r]                    (pop exposes the vector
                                                                                 on top at k)

Without a window the pop never needs the rows apart, so they are summed into one: this is
the recursion η[t] = push + η[t−1] Δ^R + Σ_k η[k] γ'_t[k]
(``docs/design/stack-dp.md#readings-without-zeta``), O(n²·Q²S·m) in total. With a window the rows are kept (row i leaves when t − i > D).
Because the η rows obey the same terms as γ rows, they are stored as extra rows of the
γ columns, and one contraction serves both.

Window D (DuSell & Chiang (2022), §5.1): γ[i→t] = 0 when t − i > D, for every row i ≥ 0. Column t then
depends on rows t−D … t−1 and columns t−D+1 … t−1 only, so the state between chunks is the
last D − 1 columns (D + 1 for the dVPDA, whose bottom row reaches two split points further
back) and D values of α: O(D²) per sequence, and truncated BPTT runs arbitrarily long text in
chunks. The bottom row i = −1 of the dVPDA is exempt, like the glue rules of §5.1: a
run may return to the bottom at any time (the NS family has no such row), so D ≥ n is the
full stack for both.

Layout (N = Q·S, configuration (q, x) at index q·S + x). Column t is one tensor
(B, G·m + slots·N, N): first the η rows (G groups of m), then the γ rows, N per slot; entry
[row, (r, y)]. A ``Layout`` places the rows and says which columns are kept, and ``advance``
is written once over it. ``FullStack`` (no window): slot s holds row i = s − 1, column t has
t + 1 slots, G = 1, and every column is kept. ``Window``: slot s < D holds the row i ≡ s
(mod D) of the current frame t−D … t−1, slot D the bottom row (dVPDA only), a mask hides
the rows a column does not have, G = number of slots, and only the columns still read are
kept. The state also holds α of the rows of the last column (B, slots, N), α[t] (B, N) and
η[t] (B, m, N).

The sums of products are left to a ``Contraction`` (``contraction.py``): the reference one
materialises every term in the semiring (the definition; REAL, LOG, MAX_PLUS); the shifted
one (LOG) turns each into a real matrix product shifted by log α and keeps each column, once
made, in real form (``shifted.py``). Each engine keeps its columns as its own typed
column, buffers included; the DP below is the same for both.

Cost per sequence, full stack: the pop contraction, Σ_t (t·N + m) × (t·Q) × Q per symbol,
≈ n³·Q³S²/3 multiply-adds (plus O(n²·N²) for the rest); memory kept for backward
O(n²·N²): the columns (log, Ĝ, shares, buffer) and O(t·N²) per step, never a step's O(t²)
operand. With a window: O(n·D²·Q³S²) time and O(n·D·N²) memory.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Generic, Sequence

import torch
from torch import Tensor

from stacklm.semiring import Semiring
from stacklm.stacks.contraction import ColumnT, Contraction
from stacklm.stacks.device_tables import device_index


@dataclass(frozen=True)
class PDASizes:
    """The sizes and variant of one PDA."""

    num_states: int  # |Q|
    num_symbols: int  # |Γ|
    vector_size: int  # m; 0 for the NS family (no vectors)
    window: int | None  # D, or None for the full stack
    bottom_replaceable: bool  # the dVPDA's row i = −1; False for the NS family

    def __post_init__(self) -> None:
        if self.num_states < 1 or self.num_symbols < 1 or self.vector_size < 0:
            raise ValueError(f"PDA sizes must be positive, got {self}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")

    @property
    def num_configurations(self) -> int:
        return self.num_states * self.num_symbols

    @cached_property
    def layout(self) -> Layout:
        """The full stack, or window D."""
        return FullStack(self) if self.window is None else Window(self)


@dataclass(frozen=True)
class Layout(ABC):
    """Where the rows of each column are (G groups of m η rows, then slots of N γ rows), and
    which columns later steps read: all that the full stack and a window do differently."""

    sizes: PDASizes

    @property
    @abstractmethod
    def eta_groups(self) -> int:
        """G, the groups of m η rows of every column (0 without vectors)."""

    @abstractmethod
    def slots(self, step: int) -> int:
        """The γ row slots of column ``step``."""

    @abstractmethod
    def slot(self, row: int) -> int:
        """The slot that holds row i."""

    @abstractmethod
    def eta_group(self, row: int) -> int:
        """The η group that holds row i's vectors."""

    @abstractmethod
    def entering_alpha(self, alpha_rows: Tensor, alpha: Tensor, step: int) -> Tensor:
        """α of the rows of column t (B, slots(t), N), from those of column t−1 and α[t−1] (B, N)."""

    @abstractmethod
    def splits(self, first_column: int, step: int) -> list[int]:
        """The split points k of the pop at step t, given the first column kept."""

    @abstractmethod
    def split_mask(self, step: int, splits: list[int], device: torch.device) -> Tensor | None:
        """(G·m + slots·N, K) bool: the rows of column t's frame that are below each split k; None: all."""

    @abstractmethod
    def bottom_splits(self, first_column: int, step: int) -> list[int]:
        """The split points that only the bottom row −1 reaches (``bottom_pop_term``)."""

    @abstractmethod
    def entering_push(
        self, body: Tensor, push: Tensor, push_vector: Tensor | None, step: int, semiring: type[Semiring]
    ) -> Tensor:
        """Column t (B, rows(t), N): the replace and pop terms ``body`` (B, rows(t−1), N), with row t−1
        entering as the push (B, N, N) and its η group as the pushed vector (B, m, N), if any."""

    @abstractmethod
    def column_index(self, step: int) -> int | None:
        """k of column ``step`` when every column is kept, else None (``Contraction.prepare``)."""

    @abstractmethod
    def first_kept(self, first_column: int, step: int) -> int:
        """The first column that the steps after t read."""

    @property
    def eta_rows(self) -> int:
        return self.eta_groups * self.sizes.vector_size

    def num_rows(self, step: int) -> int:
        """The rows of column ``step``: G·m + slots·N."""
        return self.eta_rows + self.slots(step) * self.sizes.num_configurations

    def bottom_rows(self) -> list[tuple[int, int]]:
        """The row ranges of a column that belong to the bottom row −1: its η group, its γ slot."""
        group, slot = self.eta_group(-1), self.slot(-1)
        vector_size, num_configurations = self.sizes.vector_size, self.sizes.num_configurations
        ranges = [(group * vector_size, (group + 1) * vector_size)] if vector_size else []
        start = self.eta_rows + slot * num_configurations
        return ranges + [(start, start + num_configurations)]

    def row_weights(self, alpha_rows: Tensor, semiring: type[Semiring]) -> Tensor:
        """α of each row of a column (B, G·m + slots·N): 1̄ for η rows, which carry α already."""
        batch_size = alpha_rows.size(0)
        gamma_rows = alpha_rows.reshape(batch_size, -1)
        if self.eta_rows == 0:
            return gamma_rows
        return torch.cat([gamma_rows.new_full((batch_size, self.eta_rows), semiring.one), gamma_rows], dim=1)


@dataclass(frozen=True)
class FullStack(Layout):
    """No window: column t holds rows −1 … t−1, slot s = row s − 1, one η group; every column is kept."""

    @property
    def eta_groups(self) -> int:
        return 1 if self.sizes.vector_size else 0

    def slots(self, step: int) -> int:
        return step + 1

    def slot(self, row: int) -> int:
        return row + 1

    def eta_group(self, row: int) -> int:
        return 0

    def entering_alpha(self, alpha_rows: Tensor, alpha: Tensor, step: int) -> Tensor:
        return torch.cat([alpha_rows, alpha.unsqueeze(1)], dim=1)

    def splits(self, first_column: int, step: int) -> list[int]:
        return list(range(first_column, step - 1))

    def split_mask(self, step: int, splits: list[int], device: torch.device) -> Tensor | None:
        return None  # column k holds exactly the rows i < k

    def bottom_splits(self, first_column: int, step: int) -> list[int]:
        return []  # the bottom row is a row like the others

    def entering_push(
        self, body: Tensor, push: Tensor, push_vector: Tensor | None, step: int, semiring: type[Semiring]
    ) -> Tensor:
        gamma = torch.cat([body[:, self.eta_rows :], push], dim=1)  # a new slot for row t−1
        if push_vector is None:
            return gamma
        return torch.cat([semiring.plus(body[:, : self.eta_rows], push_vector), gamma], dim=1)

    def column_index(self, step: int) -> int | None:
        return step

    def first_kept(self, first_column: int, step: int) -> int:
        return first_column


@dataclass(frozen=True)
class Window(Layout):
    """Window D (DuSell & Chiang (2022), §5.1): slot s < D holds the row i ≡ s (mod D) of the frame
    t−D … t−1, slot D the exempt bottom row (dVPDA only); one η group per slot; the columns
    kept are the last D − 1 (D + 1 with the bottom row)."""

    @property
    def window(self) -> int:
        if self.sizes.window is None:
            raise ValueError("a window layout needs a window")
        return self.sizes.window

    @property
    def eta_groups(self) -> int:
        return self.slots(0) if self.sizes.vector_size else 0

    def slots(self, step: int) -> int:
        return self.window + 1 if self.sizes.bottom_replaceable else self.window

    def slot(self, row: int) -> int:
        if row == -1 and self.sizes.bottom_replaceable:
            return self.window
        return row % self.window

    def eta_group(self, row: int) -> int:
        return self.slot(row)

    def slot_rows(self, step: int) -> list[int]:
        """The row i that each slot of column ``step`` holds (frame step−D … step−1, and −1)."""
        first = step - self.window
        rows = [first + (slot - first) % self.window for slot in range(self.window)]
        return rows + [-1] if self.sizes.bottom_replaceable else rows

    def entering_slot(self, step: int, device: torch.device) -> Tensor:
        """(slots,) bool: the slot of column t that row t−1 takes from row t−1−D, which leaves."""
        return torch.arange(self.slots(step), device=device) == self.slot(step - 1)

    def entering_alpha(self, alpha_rows: Tensor, alpha: Tensor, step: int) -> Tensor:
        entering = self.entering_slot(step, alpha.device).view(1, -1, 1)
        return torch.where(entering, alpha.unsqueeze(1), alpha_rows)

    def splits(self, first_column: int, step: int) -> list[int]:
        return list(range(max(first_column, step - self.window + 1), step - 1))

    def split_mask(self, step: int, splits: list[int], device: torch.device) -> Tensor | None:
        return _window_split_mask(self, tuple(self.slot_rows(step)), tuple(splits), device)

    def bottom_splits(self, first_column: int, step: int) -> list[int]:
        # t−1−k ≤ D: the elements still fit, but rows i ≥ t−D cannot reach k < t−D+1.
        if not self.sizes.bottom_replaceable:
            return []
        return [k for k in (step - 1 - self.window, step - self.window) if first_column <= k <= step - 2]

    def entering_push(
        self, body: Tensor, push: Tensor, push_vector: Tensor | None, step: int, semiring: type[Semiring]
    ) -> Tensor:
        batch_size, slots = body.size(0), self.slots(step)
        num_configurations = self.sizes.num_configurations
        entering = self.entering_slot(step, body.device).view(1, -1, 1, 1)
        gamma = body[:, self.eta_rows :].view(batch_size, slots, num_configurations, num_configurations)
        gamma = torch.where(entering, push.unsqueeze(1), gamma).reshape(batch_size, -1, num_configurations)
        if push_vector is None:
            return gamma
        eta = body[:, : self.eta_rows].view(batch_size, slots, self.sizes.vector_size, num_configurations)
        eta = torch.where(entering, push_vector.unsqueeze(1), eta).reshape(batch_size, -1, num_configurations)
        return torch.cat([eta, gamma], dim=1)

    def column_index(self, step: int) -> int | None:
        return None

    def first_kept(self, first_column: int, step: int) -> int:
        # The bottom row reaches two split points further back than the other rows.
        return max(first_column, min(step, step - self.window + (0 if self.sizes.bottom_replaceable else 2)))


@functools.lru_cache(maxsize=4096)
def _window_split_mask(layout: Window, slot_rows: tuple[int, ...], splits: tuple[int, ...], device: torch.device) -> Tensor:
    """``Window.split_mask`` for the rows ``slot_rows`` of each slot and the split points ``splits``,
    built once per value and device (``stacklm.stacks.device_tables``)."""
    below = device_index(splits, device)
    valid = device_index(slot_rows, device).unsqueeze(-1) < below  # (slots, K)
    gamma_valid = valid.repeat_interleave(layout.sizes.num_configurations, dim=0)
    if layout.sizes.vector_size == 0:
        return gamma_valid
    eta_valid = valid.repeat_interleave(layout.sizes.vector_size, dim=0)
    return torch.cat([eta_valid, gamma_valid], dim=0)


@dataclass(frozen=True)
class Transitions:
    """The transition weights of one step, in the semiring's representation."""

    push: Tensor  # (B, N, N): Δ⁺[q,x→r,y]
    replace: Tensor  # (B, N, N): Δ^R[q,x→r,y]
    pop: Tensor  # (B, N, Q): Δ⁻[s,z→r]
    pushed: Tensor | None  # (B, m): v_t, or None without vectors


@dataclass(frozen=True)
class PDATables(Generic[ColumnT]):
    """The part of γ, α and η that later steps need, after ``steps`` steps."""

    steps: int  # t
    first_column: int  # index k of columns[0]
    columns: tuple[ColumnT, ...]  # columns k = first_column … t, each (B, G·m + slots·N, N), kept by the engine
    alpha_rows: Tensor  # (B, slots(t), N): α[i] of the row i of each slot of column t
    alpha: Tensor  # (B, N): α[t]
    eta: Tensor | None  # (B, m, N): η[t]

    def transform_tensors(
        self, function: Callable[[Tensor], Tensor], engine: Contraction[ColumnT]
    ) -> PDATables[ColumnT]:
        return PDATables(
            steps=self.steps,
            first_column=self.first_column,
            columns=engine.transform(self.columns, function),
            alpha_rows=function(self.alpha_rows),
            alpha=function(self.alpha),
            eta=None if self.eta is None else function(self.eta),
        )


def _one_hot(semiring: type[Semiring], size: int, index: int, like: Tensor) -> Tensor:
    positions = torch.arange(size, device=like.device)
    return torch.where(positions == index, semiring.one, semiring.zero).to(like.dtype)


def initial_tables(
    sizes: PDASizes,
    batch_size: int,
    bottom: Tensor | None,
    engine: Contraction[ColumnT],
    like: Tensor,
    max_steps: int | None = None,
) -> PDATables[ColumnT]:
    """t = 0: α[0] = 𝟙[q0, ⊥]; the bottom row −1 (weight 𝟙 if it may be replaced); η[0] = v₀ at (q0, ⊥).

    ``bottom``: v₀ (B, m) in the semiring's representation, or None without vectors;
    ``max_steps``, when known, sizes the engine's buffers once.
    """
    semiring = engine.semiring
    layout = sizes.layout
    num_configurations = sizes.num_configurations
    options = {"dtype": like.dtype, "device": like.device}
    first_configuration = _one_hot(semiring, num_configurations, 0, like)  # (N,)
    slots = layout.slots(0)
    bottom_slot = layout.slot(-1)
    bottom_push = semiring.zeros(num_configurations, num_configurations, **options)
    if sizes.bottom_replaceable:
        bottom_push = torch.where(
            torch.eye(num_configurations, device=like.device, dtype=torch.bool), first_configuration, semiring.zero
        )
    slot_positions = torch.arange(slots, device=like.device).view(slots, 1, 1)
    gamma_rows = torch.where(slot_positions == bottom_slot, bottom_push, semiring.zero)  # (slots, N, N)
    gamma_rows = gamma_rows.reshape(1, slots * num_configurations, num_configurations).expand(batch_size, -1, -1)
    alpha_bottom = first_configuration if sizes.bottom_replaceable else semiring.zeros(num_configurations, **options)
    alpha_rows = torch.where(slot_positions.view(slots, 1) == bottom_slot, alpha_bottom, semiring.zero)
    alpha_rows = alpha_rows.unsqueeze(0).expand(batch_size, -1, -1).contiguous()
    alpha = first_configuration.unsqueeze(0).expand(batch_size, -1).contiguous()
    eta = None
    column = gamma_rows.contiguous()
    if sizes.vector_size > 0:
        if bottom is None:
            raise ValueError("a PDA with vectors needs a bottom vector")
        eta = semiring.times(bottom.to(like.dtype).unsqueeze(-1), first_configuration)  # (B, m, N)
        groups = layout.eta_groups
        group_positions = torch.arange(groups, device=like.device).view(1, groups, 1, 1)
        eta_rows = torch.where(group_positions == layout.eta_group(-1), eta.unsqueeze(1), semiring.zero)
        column = torch.cat(
            [eta_rows.reshape(batch_size, groups * sizes.vector_size, num_configurations), column], dim=1
        )
    prepared = engine.prepare(
        column,
        alpha,
        layout.row_weights(alpha_rows, semiring),
        sizes.num_states,
        None,
        layout.column_index(0),
        None if max_steps is None else max_steps + 1,
    )
    return PDATables(steps=0, first_column=0, columns=(prepared,), alpha_rows=alpha_rows, alpha=alpha, eta=eta)


def push_term(transitions: Transitions) -> Tensor:
    """γ[t−1→t][q,x→r,y] = Δ⁺_t[q,x→r,y] -> (B, N, N)."""
    return transitions.push


def push_vector_term(alpha: Tensor, transitions: Transitions, engine: Contraction[ColumnT]) -> Tensor:
    """η[t−1→t][r,y,:] = (Σ_{q,x} α[t−1][q,x] Δ⁺_t[q,x→r,y]) v_t -> (B, m, N)."""
    if transitions.pushed is None:
        raise ValueError("a PDA with vectors needs the pushed vector of every step")
    reached = engine.matmul(alpha.unsqueeze(1), transitions.push, alpha).squeeze(1)  # (B, N)
    return engine.semiring.times(transitions.pushed.unsqueeze(-1), reached.unsqueeze(1))


def replace_and_pop_prime_terms(
    previous: ColumnT, alpha: Tensor, transitions: Transitions, sizes: PDASizes, engine: Contraction[ColumnT]
) -> tuple[Tensor, Tensor]:
    """Both products of column t−1 over (s, z), done as one:

        replace:  Σ_{s,z} γ[i→t−1][q,x→s,z] Δ^R_t[s,z→r,y]  -> (B, rows, N), every row (η rows too)
        γ'_t[k][u,y,r] = Σ_{s,z} γ[k→t−1][u,y→s,z] Δ⁻_t[s,z→r]  -> (B, slots(t−1), N, Q), γ rows (k, u, y)

    ``previous``: column t−1; ``alpha``: α[t−1]. A row that a window drops gets the push instead.
    """
    num_configurations = sizes.num_configurations
    products = engine.prepared_matmul(previous, torch.cat([transitions.replace, transitions.pop], dim=-1), alpha)
    replaced = products[..., :num_configurations]
    gamma_prime = products[:, sizes.layout.eta_rows :, num_configurations:]
    return replaced, gamma_prime.reshape(products.size(0), -1, num_configurations, sizes.num_states)


def pop_term(
    columns: Sequence[ColumnT],
    mask: Tensor | None,
    gamma_prime: Tensor,
    alpha: Tensor,
    row_weights: Tensor,
    sizes: PDASizes,
    engine: Contraction[ColumnT],
) -> Tensor:
    """Σ_k Σ_u γ[i→k][q,x→u,y] γ'_t[k][u,y,r] (and the same for η rows) -> (B, rows, N).

    ``columns``: column k for each split point k; ``gamma_prime``: (B, K, N, Q); ``alpha``:
    α[k] (B, K, N); ``row_weights``: α of the output rows (B, rows).
    """
    return engine.pop(columns, mask, gamma_prime, alpha, sizes.num_states, row_weights)


def bottom_pop_term(
    columns: Sequence[ColumnT],
    gamma_prime: Tensor,
    alpha: Tensor,
    sizes: PDASizes,
    engine: Contraction[ColumnT],
) -> Tensor:
    """Σ_{k ∈ {t−1−D, t−D}} Σ_u γ[−1→k][q0,⊥→u,y] γ'_t[k][u,y,r] -> (B, bottom rows, N).

    With a window, the split points k whose elements still fit (t−1−k ≤ D) but that rows
    i ≥ t−D cannot use: only the exempt bottom row (and its η group) reaches them.
    """
    return engine.pop_rows(columns, sizes.layout.bottom_rows(), gamma_prime, alpha, sizes.num_states)


def _plus_at_rows(semiring: type[Semiring], body: Tensor, ranges: list[tuple[int, int]], addend: Tensor) -> Tensor:
    """``body`` with ``addend`` (its rows, range after range) ⊕-added to the rows in ``ranges``."""
    pieces = []
    cursor = 0
    offset = 0
    for start, stop in ranges:
        pieces.append(body[:, cursor:start])
        pieces.append(semiring.plus(body[:, start:stop], addend[:, offset : offset + stop - start]))
        offset += stop - start
        cursor = stop
    pieces.append(body[:, cursor:])
    return torch.cat(pieces, dim=1)


def alpha_term(alpha_rows: Tensor, gamma: Tensor, engine: Contraction[ColumnT]) -> Tensor:
    """α[t][r,y] = Σ_{i,q,x} α[i][q,x] γ[i→t][q,x→r,y] -> (B, N); ``gamma`` (B, slots·N, N)."""
    flat = alpha_rows.reshape(alpha_rows.size(0), 1, -1)
    return engine.matmul(flat, gamma, flat.squeeze(1)).squeeze(1)


def eta_term(column: Tensor, sizes: PDASizes, semiring: type[Semiring]) -> Tensor | None:
    """η[t] = Σ_i η[i→t] -> (B, m, N) from the η groups of column t; None without vectors."""
    layout = sizes.layout
    if layout.eta_rows == 0:
        return None
    groups = column[:, : layout.eta_rows].unflatten(1, (layout.eta_groups, sizes.vector_size))  # (B, G, m, N)
    return groups[:, 0] if layout.eta_groups == 1 else semiring.sum(groups, dim=1)


def advance(
    tables: PDATables[ColumnT], transitions: Transitions, sizes: PDASizes, engine: Contraction[ColumnT]
) -> PDATables[ColumnT]:
    """The tables after step t = tables.steps + 1."""
    semiring = engine.semiring
    layout = sizes.layout
    step = tables.steps + 1
    alpha_rows = layout.entering_alpha(tables.alpha_rows, tables.alpha, step)  # (B, slots(t), N)
    row_weights = layout.row_weights(alpha_rows, semiring)  # (B, rows(t))

    # body (B, rows(t−1), N); gamma_prime (B, slots(t−1), N, Q)
    body, gamma_prime = replace_and_pop_prime_terms(tables.columns[-1], tables.alpha, transitions, sizes, engine)

    def kept(splits: list[int]) -> list[ColumnT]:
        return [tables.columns[k - tables.first_column] for k in splits]

    def at_slots(table: Tensor, splits: list[int]) -> Tensor:
        return table.index_select(1, device_index(tuple(layout.slot(k) for k in splits), table.device))

    splits = layout.splits(tables.first_column, step)
    if splits:
        popped = pop_term(
            kept(splits),
            layout.split_mask(step, splits, body.device),
            at_slots(gamma_prime, splits),
            at_slots(alpha_rows, splits),
            row_weights[:, : layout.num_rows(splits[-1])],
            sizes,
            engine,
        )
        # Rows the split columns lack (the full stack's newest) receive no pop.
        missing = body.size(1) - popped.size(1)
        if missing > 0:
            padding = semiring.zeros(body.size(0), missing, body.size(2), dtype=body.dtype, device=body.device)
            popped = torch.cat([popped, padding], dim=1)
        body = semiring.plus(body, popped)
    bottom_splits = layout.bottom_splits(tables.first_column, step)
    if bottom_splits:
        popped = bottom_pop_term(
            kept(bottom_splits),
            at_slots(gamma_prime, bottom_splits),
            at_slots(tables.alpha_rows, bottom_splits),  # α of the rows before row t−1 took a slot
            sizes,
            engine,
        )
        body = _plus_at_rows(semiring, body, layout.bottom_rows(), popped)

    push_vector = push_vector_term(tables.alpha, transitions, engine) if sizes.vector_size else None
    column = layout.entering_push(body, push_term(transitions), push_vector, step, semiring)
    alpha = alpha_term(alpha_rows, column[:, layout.eta_rows :], engine)
    prepared = engine.prepare(
        column, alpha, row_weights, sizes.num_states, tables.columns[-1], layout.column_index(step)
    )
    first_column = layout.first_kept(tables.first_column, step)
    return PDATables(
        steps=step,
        first_column=first_column,
        columns=(tables.columns + (prepared,))[first_column - tables.first_column :],
        alpha_rows=alpha_rows,
        alpha=alpha,
        eta=eta_term(column, sizes, semiring),
    )


def from_log(semiring: type[Semiring], log_weights: Tensor) -> Tensor:
    """Log weights in the semiring's representation (LOG and MAX_PLUS keep them, REAL exponentiates)."""
    if semiring.zero == -math.inf:
        return log_weights
    return log_weights.exp()


def normalize(semiring: type[Semiring], weights: Tensor, total: Tensor) -> Tensor:
    """weights ⊘ total as real numbers (the readings are ratios of weights); 0 when no run exists."""
    reachable = total != semiring.zero
    if semiring.zero == -math.inf:
        return torch.where(reachable, (weights - torch.where(reachable, total, 0.0)).exp(), 0.0)
    return torch.where(reachable, weights / torch.where(reachable, total, 1.0), 0.0)
