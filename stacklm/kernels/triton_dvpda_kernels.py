"""The Triton programs of the whole-sequence dVPDA (``stacklm.kernels.triton_dvpda`` runs them).

This module imports Triton, so only ``triton_dvpda`` imports it, at the first kernel call: the
package works without Triton. Triton decides at the definition of each program whether it is
compiled for CUDA or run by its interpreter on the CPU (``TRITON_INTERPRET=1`` when this module is
imported; :data:`INTERPRETED`).

One program per batch element runs every step of the forward (:func:`dvpda_forward`), then every
step in reverse of the exact backward (:func:`dvpda_backward`): one launch each. A stack RNN runs
the same steps one per launch (:func:`dvpda_start`, :func:`dvpda_step`, :func:`dvpda_step_backward`),
into tables that persist between launches. Per element,
column t (t = 0 … n) has rows(t) = m + (t + 1)·N rows (N = Q·S configurations, c = q·S + x): the
m rows of log η[t][j, c], then N rows (i, a) of log γ[i→t][a, c] for i = −1 … t − 1, at row
m + (i + 1)·N + a in every column. A column is stored row by row ([row][c]) at offset(t) = N·Σ_{s<t}
rows(s) of one flat table per element, the layout of ``dvpda.cpp``'s columns transposed. Step t
(DuSell & Chiang (2022), eqs. 2–5; the η rows of DuSell & Cotterell (2025), eq. 6, as ``pda.py``
derives them), every sum a log-sum-exp over its terms relative to their maximum:

    γ'_t[k][(u,y), r] = ⊕_b γ[k→t−1][(u,y), b] ⊗ Δ⁻_t[b, r]                         k = 0 … t−2
    column t, rows of column t−1 = ⊕_b column(t−1)[row, b] ⊗ Δ^R_t[b, c]              (replace)
                                 ⊕ ⊕_{k ≤ t−2, row < rows(k)} ⊕_u column(k)[row, (u,y)] ⊗ γ'_t[k][(u,y), r]
                                                                                     (pop, c = (r, y))
                                 ⊕ log v_t[row] ⊗ ⊕_a α[t−1][a] ⊗ Δ⁺_t[a, c]    (push of v_t, η rows only)
    column t, rows (t−1, a)      = Δ⁺_t[a, c]                                          (push)
    α[t][c] = ⊕_{i, a} α[i][a] ⊗ γ[i→t][a, c]      (α[−1] = α[0] = 𝟙[q0, ⊥])
    r_t[c, j] = exp(log η[t][j, c] − ⊕_c α[t][c])

The pop is one product per split point k: column k times the N × N matrix that holds γ'_t[k][(u,y), r]
at [(u, y), (r, y)] and log 0 elsewhere (the contraction over u for each symbol y). The backward
takes the adjoint of every log-sum-exp, g·exp(term − value) for the value that the column holds
(every term of a column's entry enters one log-sum of it), so it stores no term.

Within a program, a phase that reads what another phase stored waits at a barrier
(``tl.debug_barrier``): on a GPU the threads of a program store and load different entries.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs

INTERPRETED: bool = knobs.runtime.interpret  # whether the programs below run on Triton's CPU interpreter


@triton.jit
def _log_sum_exp(x, axis: tl.constexpr):
    """log Σ exp(x) along ``axis``, −∞ where every term is."""
    high = tl.max(x, axis=axis)
    shift = tl.where(high == float("-inf"), 0.0, high)
    total = tl.sum(tl.exp(x - tl.expand_dims(shift, axis)), axis=axis)
    return tl.where(total > 0, shift + tl.log(tl.where(total > 0, total, 1.0)), float("-inf"))


@triton.jit
def _log_add(a, b):
    """log(exp a + exp b), −∞ where both are."""
    high = tl.maximum(a, b)
    shift = tl.where(high == float("-inf"), 0.0, high)
    total = tl.exp(a - shift) + tl.exp(b - shift)
    return tl.where(total > 0, shift + tl.log(tl.where(total > 0, total, 1.0)), float("-inf"))


@triton.jit
def _log_product(left, right):
    """out[i, j] = log Σ_c exp(left[i, c] + right[c, j]): left (R, C), right (C, J)."""
    return _log_sum_exp(tl.expand_dims(left, 2) + tl.expand_dims(right, 0), 1)


@triton.jit
def _log_product_adjoint(left, right, value, grad):
    """The adjoints of left and right in a log-sum value[i, j] ⊇ log Σ_c exp(left[i, c] + right[c, j]),
    given ∂/∂value: each term passes grad·exp(term − value) (0 where value is −∞)."""
    shift = tl.where(value == float("-inf"), 0.0, value)
    terms = tl.expand_dims(left, 2) + tl.expand_dims(right, 0) - tl.expand_dims(shift, 1)
    passed = tl.expand_dims(grad, 1) * tl.exp(terms)
    return tl.sum(passed, axis=2), tl.sum(passed, axis=0)


@triton.jit
def _offset(t, N: tl.constexpr, M: tl.constexpr):
    """N · Σ_{s<t} rows(s): where column t starts in an element's table."""
    return N * (t * M + N * t * (t + 1) // 2)


@triton.jit
def _row_weights(row, end, alpha, N: tl.constexpr, M: tl.constexpr):
    """log α(row) of the γ rows before ``end``: row (−1, a) is 𝟙[a = q0, ⊥]; row (i, a) for i ≥ 0 is
    α[i][a]; −∞ from ``end`` on."""
    bottom = row < M + N
    loaded = tl.load(alpha + (row - M - N), mask=(row >= M + N) & (row < end), other=float("-inf"))
    return tl.where(bottom, tl.where(row == M, 0.0, float("-inf")), loaded)


@triton.jit
def _pop_matrix(prime, k, BN: tl.constexpr, N: tl.constexpr, Q: tl.constexpr, S: tl.constexpr):
    """(BN, BN): γ'_t[k][(u,y), r] at [(u, y), (r, y)], log 0 elsewhere."""
    p = tl.arange(0, BN)[:, None]
    q = tl.arange(0, BN)[None, :]
    same = (p < N) & (q < N) & (p % S == q % S)
    return tl.load(prime + (k * N + p) * Q + q // S, mask=same, other=float("-inf"))


@triton.jit
def _log_pushed(pushed, row, M: tl.constexpr, LOG_SIGMOID: tl.constexpr):
    """log v_t of the η rows ``row`` (−∞ past m) from the step's pushed part x_t: x_t, or log σ(x_t) where asked."""
    x = tl.load(pushed + row, mask=row < M, other=0.0)
    if LOG_SIGMOID:
        x = tl.minimum(x, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(x)))
    return tl.where(row < M, x, float("-inf"))


@triton.jit
def _transitions(step, BN: tl.constexpr, BQ: tl.constexpr, N: tl.constexpr, Q: tl.constexpr):
    """log Δ⁺_t, log Δ^R_t (BN, BN) and log Δ⁻_t (BN, BQ) of one step's logits: per source configuration
    a its N push, N replace and Q pop weights."""
    a = tl.arange(0, BN)[:, None]
    c = tl.arange(0, BN)[None, :]
    r = tl.arange(0, BQ)[None, :]
    square = (a < N) & (c < N)
    push = tl.load(step + a * (2 * N + Q) + c, mask=square, other=float("-inf"))
    replace = tl.load(step + a * (2 * N + Q) + N + c, mask=square, other=float("-inf"))
    pop = tl.load(step + a * (2 * N + Q) + 2 * N + r, mask=(a < N) & (r < Q), other=float("-inf"))
    return push, replace, pop


@triton.jit
def _pop_primes(previous, prime, t, pop, BR: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr,
                N: tl.constexpr, Q: tl.constexpr, M: tl.constexpr):
    """γ'_t[k][(u,y), r] for k = 0 … t−2 into ``prime`` [(k·N + (u,y)), r]: the rows m + N … of column
    t−1 times Δ⁻_t."""
    c = tl.arange(0, BN)[None, :]
    r = tl.arange(0, BQ)[None, :]
    for first in range(0, (t - 1) * N, BR):
        p = first + tl.arange(0, BR)[:, None]
        inside = p < (t - 1) * N
        left = tl.load(previous + (M + N + p) * N + c, mask=inside & (c < N), other=float("-inf"))
        tl.store(prime + p * Q + r, _log_product(left, pop), mask=inside & (r < Q))


@triton.jit
def _start(bottom, table, alpha, N: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr):
    """Column 0 of one element from log v₀ (m,): η[0] = log v₀ at (q0, ⊥), row −1 the fictitious push
    of ⊥ in q0; α[0] = 𝟙[q0, ⊥]."""
    c = tl.arange(0, BN)[None, :]
    a = tl.arange(0, BN)[:, None]
    j = tl.arange(0, BM)[:, None]
    configurations = tl.arange(0, BN)
    first_vector = tl.load(bottom + j, mask=j < M, other=float("-inf"))
    tl.store(table + j * N + c, tl.where(c == 0, first_vector, float("-inf")), mask=(j < M) & (c < N))
    tl.store(table + (M + a) * N + c, tl.where((a == 0) & (c == 0), 0.0, float("-inf")), mask=(a < N) & (c < N))
    tl.store(alpha + configurations, tl.where(configurations == 0, 0.0, float("-inf")), mask=configurations < N)
    tl.debug_barrier()


@triton.jit
def _forward_step(
    t, step, pushed, table, alpha, prime, reading,
    Q: tl.constexpr, S: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr, BM: tl.constexpr,
    BR: tl.constexpr, LOG_SIGMOID: tl.constexpr,
):
    """Step t ≥ 1 of one element: column t of ``table`` and α[t] from columns 0 … t−1, and r_t (N·m)
    into ``reading``. ``step``: its N·(2N + Q) transition logits; ``pushed``: log v_t (or x_t, m)."""
    N: tl.constexpr = Q * S
    c = tl.arange(0, BN)[None, :]
    a = tl.arange(0, BN)[:, None]
    j = tl.arange(0, BM)[:, None]
    rows_of_block = tl.arange(0, BR)[:, None]
    configurations = tl.arange(0, BN)
    previous = table + _offset(t - 1, N, M)
    column = table + _offset(t, N, M)
    rows = M + t * N  # rows(t − 1)
    push, replace, pop = _transitions(step, BN, BQ, N, Q)
    _pop_primes(previous, prime, t, pop, BR, BN, BQ, N, Q, M)
    tl.debug_barrier()
    previous_alpha = tl.load(alpha + (t - 1) * N + a, mask=a < N, other=float("-inf"))  # (BN, 1)
    reached = _log_sum_exp(previous_alpha + push, 0)  # log Σ_a α[t−1][a] Δ⁺_t[a, c]
    for first in range(0, rows, BR):
        row = first + rows_of_block
        inside = (row < rows) & (c < N)
        left = tl.load(previous + row * N + c, mask=inside, other=float("-inf"))
        value = _log_product(left, replace)
        for k in range(0, t - 1):
            below = (row < M + (k + 1) * N) & (c < N)  # the rows of column k: i < k
            left = tl.load(table + _offset(k, N, M) + row * N + c, mask=below, other=float("-inf"))
            value = _log_add(value, _log_product(left, _pop_matrix(prime, k, BN, N, Q, S)))
        value = _log_add(value, _log_pushed(pushed, row, M, LOG_SIGMOID) + tl.expand_dims(reached, 0))
        tl.store(column + row * N + c, value, mask=inside)
    tl.store(column + (rows + a) * N + c, push, mask=(a < N) & (c < N))
    tl.debug_barrier()
    total = tl.full([BN], float("-inf"), dtype=push.dtype)
    for first in range(M, rows + N, BR):
        row = first + rows_of_block
        weights = _row_weights(row, rows + N, alpha, N, M)
        values = tl.load(column + row * N + c, mask=(row < rows + N) & (c < N), other=float("-inf"))
        total = _log_add(total, _log_sum_exp(weights + values, 0))
    tl.store(alpha + t * N + configurations, total, mask=configurations < N)
    normalizer = _log_sum_exp(total, 0)
    eta = tl.load(column + j * N + c, mask=(j < M) & (c < N), other=float("-inf"))
    shift = tl.where(normalizer == float("-inf"), 0.0, normalizer)
    value = tl.where(normalizer == float("-inf"), 0.0, tl.exp(eta - shift))
    tl.store(reading + c * M + j, value, mask=(j < M) & (c < N))
    tl.debug_barrier()


@triton.jit
def _add(pointer, value, mask):
    tl.store(pointer, tl.load(pointer, mask=mask, other=0.0) + value, mask=mask)


@triton.jit
def _backward_step(
    t, grad_reading, step, pushed, table, alpha, prime, grad_table, grad_alpha, grad_prime, grad_step, grad_pushed,
    Q: tl.constexpr, S: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr, BM: tl.constexpr,
    BR: tl.constexpr, LOG_SIGMOID: tl.constexpr,
):
    """Step t of one element in reverse, when the adjoints of column t and α[t] in ``grad_table`` and
    ``grad_alpha`` are complete (steps t+1 … n have run), given ∂r_t (N·m): the gradients of the step's
    transition logits into ``grad_step`` (N·(2N + Q)) and of its pushed part into ``grad_pushed`` (m);
    adds what it passes to columns 0 … t−1 and α[0 … t−1]. ``grad_prime`` is scratch."""
    N: tl.constexpr = Q * S
    c = tl.arange(0, BN)[None, :]
    a = tl.arange(0, BN)[:, None]
    j = tl.arange(0, BM)[:, None]
    r = tl.arange(0, BQ)[None, :]
    rows_of_block = tl.arange(0, BR)[:, None]
    configurations = tl.arange(0, BN)
    previous = table + _offset(t - 1, N, M)
    column = table + _offset(t, N, M)
    grad_previous = grad_table + _offset(t - 1, N, M)
    grad_column = grad_table + _offset(t, N, M)
    rows = M + t * N  # rows(t − 1)
    push, replace, pop = _transitions(step, BN, BQ, N, Q)
    _pop_primes(previous, prime, t, pop, BR, BN, BQ, N, Q, M)
    # r_t = exp(log η[t] − log Z), log Z = ⊕_c α[t][c]: ∂log η += ∂r ⊙ r, and ∂α[t] gets −Σ ∂r ⊙ r
    # times softmax(α[t]).
    current_alpha = tl.load(alpha + t * N + configurations, mask=configurations < N, other=float("-inf"))
    normalizer = _log_sum_exp(current_alpha, 0)
    shift = tl.where(normalizer == float("-inf"), 0.0, normalizer)
    eta_mask = (j < M) & (c < N)
    eta = tl.load(column + j * N + c, mask=eta_mask, other=float("-inf"))
    reading = tl.where(normalizer == float("-inf"), 0.0, tl.exp(eta - shift))
    passed = tl.load(grad_reading + c * M + j, mask=eta_mask, other=0.0) * reading
    _add(grad_column + j * N + c, passed, eta_mask)
    grad_current = tl.load(grad_alpha + t * N + configurations, mask=configurations < N, other=0.0)
    grad_current += -tl.sum(tl.sum(passed, axis=1), axis=0) * tl.exp(current_alpha - shift)
    tl.debug_barrier()
    # α[t][c] = ⊕_{i,a} α[i][a] ⊗ γ[i→t][a, c]: each term passes ∂α[t][c]·exp(term − α[t][c]).
    alpha_shift = tl.where(current_alpha == float("-inf"), 0.0, current_alpha)
    for first in range(M, rows + N, BR):
        row = first + rows_of_block
        inside = (row < rows + N) & (c < N)
        weights = _row_weights(row, rows + N, alpha, N, M)
        values = tl.load(column + row * N + c, mask=inside, other=float("-inf"))
        terms = tl.expand_dims(grad_current, 0) * tl.exp(weights + values - tl.expand_dims(alpha_shift, 0))
        _add(grad_column + row * N + c, terms, inside)
        weighted = (row >= M + N) & (row < rows + N)
        _add(grad_alpha + (row - M - N), tl.expand_dims(tl.sum(terms, axis=1), 1), weighted)
    tl.debug_barrier()
    # The push rows (t−1, a) hold Δ⁺_t; the replace over every row of column t−1; the push of v_t in the η rows.
    grad_push = tl.load(grad_column + (rows + a) * N + c, mask=(a < N) & (c < N), other=0.0)
    grad_replace = tl.zeros([BN, BN], dtype=push.dtype)
    previous_alpha = tl.load(alpha + (t - 1) * N + a, mask=a < N, other=float("-inf"))  # (BN, 1)
    reached = _log_sum_exp(previous_alpha + push, 0)
    grad_reached = tl.zeros([BN], dtype=push.dtype)
    for first in range(0, rows, BR):
        row = first + rows_of_block
        inside = (row < rows) & (c < N)
        value = tl.load(column + row * N + c, mask=inside, other=float("-inf"))
        grad = tl.load(grad_column + row * N + c, mask=inside, other=0.0)
        left = tl.load(previous + row * N + c, mask=inside, other=float("-inf"))
        grad_left, grad_right = _log_product_adjoint(left, replace, value, grad)
        _add(grad_previous + row * N + c, grad_left, inside)
        grad_replace += grad_right
        if first < M:
            value_shift = tl.where(value == float("-inf"), 0.0, value)
            log_pushed = _log_pushed(pushed, row, M, LOG_SIGMOID)
            terms = grad * tl.exp(log_pushed + tl.expand_dims(reached, 0) - value_shift)
            grad_reached += tl.sum(terms, axis=0)
            grad_log_pushed = tl.expand_dims(tl.sum(terms, axis=1), 1)
            if LOG_SIGMOID:  # ∂ log σ(x) / ∂x = σ(−x)
                grad_log_pushed = grad_log_pushed / (1.0 + tl.exp(tl.load(pushed + row, mask=row < M, other=0.0)))
            tl.store(grad_pushed + row, grad_log_pushed, mask=row < M)
    reached_shift = tl.where(reached == float("-inf"), 0.0, reached)
    terms = tl.expand_dims(grad_reached, 0) * tl.exp(previous_alpha + push - tl.expand_dims(reached_shift, 0))
    grad_push += terms
    _add(grad_alpha + (t - 1) * N + a, tl.expand_dims(tl.sum(terms, axis=1), 1), a < N)
    tl.debug_barrier()
    # The pop: column k (its rows i < k) times γ'_t[k] for every split point k ≤ t − 2.
    for k in range(0, t - 1):
        matrix = _pop_matrix(prime, k, BN, N, Q, S)
        grad_matrix = tl.zeros([BN, BN], dtype=push.dtype)
        for first in range(0, M + (k + 1) * N, BR):
            row = first + rows_of_block
            inside = (row < M + (k + 1) * N) & (c < N)
            value = tl.load(column + row * N + c, mask=inside, other=float("-inf"))
            grad = tl.load(grad_column + row * N + c, mask=inside, other=0.0)
            left = tl.load(table + _offset(k, N, M) + row * N + c, mask=inside, other=float("-inf"))
            grad_left, grad_right = _log_product_adjoint(left, matrix, value, grad)
            _add(grad_table + _offset(k, N, M) + row * N + c, grad_left, inside)
            grad_matrix += grad_right
        same = (a < N) & (c < N) & (a % S == c % S)
        tl.store(grad_prime + (k * N + a) * Q + c // S, grad_matrix, mask=same)
    tl.debug_barrier()
    # γ'_t = the rows m + N … of column t−1 times Δ⁻_t.
    grad_pop = tl.zeros([BN, BQ], dtype=push.dtype)
    for first in range(0, (t - 1) * N, BR):
        p = first + rows_of_block
        inside = p < (t - 1) * N
        left = tl.load(previous + (M + N + p) * N + c, mask=inside & (c < N), other=float("-inf"))
        value = tl.load(prime + p * Q + r, mask=inside & (r < Q), other=float("-inf"))
        grad = tl.load(grad_prime + p * Q + r, mask=inside & (r < Q), other=0.0)
        grad_left, grad_right = _log_product_adjoint(left, pop, value, grad)
        _add(grad_previous + (M + N + p) * N + c, grad_left, inside & (c < N))
        grad_pop += grad_right
    tl.store(grad_step + a * (2 * N + Q) + c, grad_push, mask=(a < N) & (c < N))
    tl.store(grad_step + a * (2 * N + Q) + N + c, grad_replace, mask=(a < N) & (c < N))
    tl.store(grad_step + a * (2 * N + Q) + 2 * N + r, grad_pop, mask=(a < N) & (r < Q))
    tl.debug_barrier()


@triton.jit
def dvpda_forward(
    logits, batch_stride, step_stride, bottom, table, alpha, prime, readings, steps, table_size,
    Q: tl.constexpr, S: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr, BM: tl.constexpr,
    BR: tl.constexpr, LOG_SIGMOID: tl.constexpr,
):
    """Every step of one batch element (program b): its table of log γ and log η columns, log α[0 … n]
    and r_1 … r_n. logits (B, n, W + m) at the given strides (unit stride last), W = N·(2N + Q), the
    pushed part after the transitions; bottom log v₀ (B, m); table (B, table_size); alpha (B, n + 1, N);
    prime (B, n·N·Q) scratch; readings (B, n, N·m)."""
    N: tl.constexpr = Q * S
    W: tl.constexpr = N * (2 * N + Q)
    b = tl.program_id(0).to(tl.int64)
    logits += b * batch_stride
    table += b * table_size
    alpha += b * (steps + 1) * N
    prime += b * steps * N * Q
    readings += b * steps * N * M
    _start(bottom + b * M, table, alpha, N, M, BN, BM)
    for t in range(1, steps + 1):
        step = logits + (t - 1) * step_stride
        _forward_step(t, step, step + W, table, alpha, prime, readings + (t - 1) * N * M, Q, S, M, BN, BQ, BM, BR, LOG_SIGMOID)


@triton.jit
def dvpda_backward(
    grad_readings, logits, batch_stride, step_stride, table, alpha, prime, grad_table, grad_alpha, grad_prime,
    grad_logits, grad_bottom, steps, table_size,
    Q: tl.constexpr, S: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr, BM: tl.constexpr,
    BR: tl.constexpr, LOG_SIGMOID: tl.constexpr,
):
    """The steps of :func:`dvpda_forward` in reverse for one batch element: the gradients of its logits
    ((B, n, W + m), contiguous, every entry written) and of log v₀ (B, m), given ∂r_t (B, n, N·m).
    grad_table and grad_alpha (the table's and alpha's shapes) hold zeros; grad_prime (B, n·N·Q) is scratch."""
    N: tl.constexpr = Q * S
    W: tl.constexpr = N * (2 * N + Q)
    b = tl.program_id(0).to(tl.int64)
    logits += b * batch_stride
    grad_logits += b * steps * (W + M)
    grad_readings += b * steps * N * M
    table += b * table_size
    grad_table += b * table_size
    alpha += b * (steps + 1) * N
    grad_alpha += b * (steps + 1) * N
    prime += b * steps * N * Q
    grad_prime += b * steps * N * Q
    for back in range(0, steps):
        t = steps - back
        step = logits + (t - 1) * step_stride
        grad_step = grad_logits + (t - 1) * (W + M)
        _backward_step(
            t, grad_readings + (t - 1) * N * M, step, step + W, table, alpha, prime, grad_table, grad_alpha,
            grad_prime, grad_step, grad_step + W, Q, S, M, BN, BQ, BM, BR, LOG_SIGMOID,
        )
    # Column 0: only its η rows at (q0, ⊥) depend on an input, log v₀.
    vector = tl.arange(0, BM)
    tl.store(grad_bottom + b * M + vector, tl.load(grad_table + vector * N, mask=vector < M), mask=vector < M)


@triton.jit
def dvpda_start(
    bottom, table, alpha, table_size, capacity,
    Q: tl.constexpr, S: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr,
):
    """Column 0 of the step tables of every element (program b) for ``capacity`` steps, from log v₀
    (B, m): table (B, table_size), alpha (B, capacity + 1, N)."""
    N: tl.constexpr = Q * S
    b = tl.program_id(0).to(tl.int64)
    _start(bottom + b * M, table + b * table_size, alpha + b * (capacity + 1) * N, N, M, BN, BM)


@triton.jit(do_not_specialize=["t"])  # one program for every step
def dvpda_step(
    t, logits, logits_stride, pushed, table, alpha, prime, reading, table_size, capacity,
    Q: tl.constexpr, S: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr, BM: tl.constexpr,
    BR: tl.constexpr, LOG_SIGMOID: tl.constexpr,
):
    """Step t of every element (program b) into the step tables: logits (B, N·(2N + Q)) with row stride
    ``logits_stride``, pushed log v_t (B, m), prime (B, capacity·N·Q) scratch; r_t into reading (B, N·m)."""
    N: tl.constexpr = Q * S
    b = tl.program_id(0).to(tl.int64)
    _forward_step(
        t, logits + b * logits_stride, pushed + b * M, table + b * table_size, alpha + b * (capacity + 1) * N,
        prime + b * capacity * N * Q, reading + b * N * M, Q, S, M, BN, BQ, BM, BR, LOG_SIGMOID,
    )


@triton.jit(do_not_specialize=["t"])  # one program for every step
def dvpda_step_backward(
    t, grad_reading, logits, logits_stride, pushed, table, alpha, prime, grad_table, grad_alpha, grad_prime,
    grad_logits, grad_pushed, table_size, capacity,
    Q: tl.constexpr, S: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, BQ: tl.constexpr, BM: tl.constexpr,
    BR: tl.constexpr, LOG_SIGMOID: tl.constexpr,
):
    """The backward of :func:`dvpda_step` for every element: the gradients of its logits (B, N·(2N + Q),
    contiguous) and pushed (B, m) given ∂r_t (B, N·m), adding into the adjoint tables grad_table and
    grad_alpha (the tables' shapes), after the backward of steps t + 1 … n."""
    N: tl.constexpr = Q * S
    W: tl.constexpr = N * (2 * N + Q)
    b = tl.program_id(0).to(tl.int64)
    _backward_step(
        t, grad_reading + b * N * M, logits + b * logits_stride, pushed + b * M, table + b * table_size,
        alpha + b * (capacity + 1) * N, prime + b * capacity * N * Q, grad_table + b * table_size,
        grad_alpha + b * (capacity + 1) * N, grad_prime + b * capacity * N * Q, grad_logits + b * W,
        grad_pushed + b * M, Q, S, M, BN, BQ, BM, BR, LOG_SIGMOID,
    )
