"""The dVPDA's whole-sequence forward and backward as one compiled CPU kernel (``dvpda.cpp``).

The same library holds the dropout kernel of ``stacklm.models.dropout`` (``dropout.cpp``): one
build, one load for both.

The kernel runs the dynamic program of ``pda.py`` (full stack, bottom replaceable, vectors)
with the numerics of ``ShiftedLogContraction`` (``shifted.py``): products shifted by log α,
exact per-column normalisers, the pop read from shares Ŝ ∈ [0, 1]. Groups of eight batch
elements run at once, one per vector lane (a last group of fewer pads its lanes), one group per
task (OpenMP through ``at::parallel_for``, so ``torch.set_num_threads`` applies), every step
in one call: no tensor operation per step. Its backward is written by hand in the same
kernel (each log-sum-exp passes g·exp(term − result), from the same shifted products).
The γ rows of each new column are summed in real space relative to one scale per
configuration, the largest of their terms' log offsets (as scaled forward algorithms for HMMs
do), so they take no exp or log per row; their log γ is not kept past column 0 (``gamma`` holds log η).
What it keeps for backward is O(B·n²·N²) (B rounded up to a multiple of eight): the columns of log η, the shares, and
each step's pops (three tensors of one size, each allocated apart: glibc serves blocks of up to
32 MB from its heap once freed, larger ones by mmap, whose fresh pages fault on every call), and
α. A step's pops are the pop totals of its η rows and the inverse of each configuration's total
over the γ rows (m + 1 values per configuration and step; the γ rows' pop totals live in scratch
memory reused by every step, which stays in cache): the backward takes the replace and pop
terms' adjoints of a γ row from its share in column t, that inverse and the terms' factors per
configuration (recomputed), as every gradient of a γ row is its share times a factor.

Both ops read the actions packed as a controller's linear layers give them (one gather in the
kernel, no copy; the one-step op at any row stride, the whole-sequence op from contiguous rows): per step the N·(2N + Q) log transition weights, per
configuration (q, x) its N push, N replace and Q pop weights (``NondeterministicActions.from_logits``);
the whole-sequence op reads the pushed vector's part from the same rows, after them, and takes
log v_t = log σ(x_t) of it itself where asked (a stack-attention layer's one product with the
stacked input weights, :func:`compiled_readings`), so that its backward returns one gradient for
that whole output.

The same DP also runs one step per call (:func:`compiled_step`), for controllers whose actions
at step t depend on the reading of step t − 1 (stack RNNs): the tables are allocated for the
run's length once (:class:`StepTables`), in the groups of eight lanes of the whole-sequence
kernel, and each step writes its column into them (only its logits, v_t and reading move in and
out of lanes); each step's
backward is the same code as the whole-sequence backward's step t, adding into adjoint tables
shared by the run. A (B, 0) tensor passed from step to step orders them in autograd, so the
backward of step t runs after those of steps t + 1 … n, which complete the adjoints it reads.

The extension is built with ``torch.utils.cpp_extension.load`` at first use (``-O3
-fopenmp`` and a digest of the headers, :func:`compile_flags`; the system C++ compiler; about a
minute on two cores, several on loaded ones; one process at a time, under the folder's lock,
:func:`load`) into a folder of this checkout's
own (:func:`build_directory`) under ``$TORCH_EXTENSIONS_DIR`` or, without it,
``~/.cache/stacklm/extensions`` (``$XDG_CACHE_HOME`` respected); later processes load the
built library. :func:`load` raises if the build fails;
:func:`available` says whether it built, and why not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from stacklm.build_lock import build_lock
from stacklm.errors import StacklmError

NAME = "stacklm_kernels"
SOURCE = Path(__file__).with_name("dvpda.cpp")
SOURCES = [SOURCE, Path(__file__).with_name("dropout.cpp"), Path(__file__).with_name("attention.cpp"), Path(__file__).with_name("recurrent.cpp")]  # one library: the dVPDA, dropout (``stacklm.models.dropout``), attention (``stacklm.models.transformer_attention``) and the stack RNNs' step (``stacklm.models.recurrent``)
HEADERS = [Path(__file__).with_name("lanes.h")]  # included by the sources (``#include "…"``)

BUILD_WAIT_S = 20 * 60  # how long a process waits for another's build: a first build took 3.5 min on a loaded machine

_loaded = False
_error: BaseException | None = None


AVX512 = ("avx512f", "avx512vl", "avx512dq", "avx512bw")


def vector_flags() -> list[str]:
    """-mavx2 -mfma where this CPU has them (8 floats per SIMD exp/log instead of 4), else none;
    with AVX-512 also its instructions on 256-bit vectors, for their 32 registers: the pop's
    backward keeps nine sums, nine weights and six columns in flight, which spill from AVX2's 16
    (dVPDA 5–6% faster at n = 32, same results; 512-bit vectors were 7–10% slower on this AMD EPYC)."""
    try:
        cpu_flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return []
    if not {"avx2", "fma"} <= cpu_flags:
        return []
    flags = ["-mavx2", "-mfma"]
    if set(AVX512) <= cpu_flags:
        flags += [f"-m{name}" for name in AVX512] + ["-mprefer-vector-width=256"]
    return flags


def extension_name() -> str:
    """One build per instruction set, so a cache shared by different machines never runs the wrong one."""
    flags = vector_flags()
    return NAME + ("_avx512vl" if "-mavx512vl" in flags else "_avx2" if flags else "")


def build_directory() -> Path:
    """Where the extension is built: $TORCH_EXTENSIONS_DIR/<name>-<checkout> or
    ~/.cache/stacklm/extensions/<name>-<checkout>, with <checkout> a digest of the source's
    path: the build records that path, so two checkouts sharing one folder would rebuild over
    each other's library at every switch, and under a process still loading it."""
    checkout = hashlib.sha256(str(SOURCE.resolve()).encode()).hexdigest()[:12]
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stacklm" / "extensions")
    return Path(root) / f"{extension_name()}-{checkout}"


def headers_digest() -> str:
    """A digest of the headers' names and contents."""
    digest = hashlib.sha256()
    for header in HEADERS:
        digest.update(header.name.encode() + b"\0" + header.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def compile_flags() -> list[str]:
    """The compiler's flags, the headers' digest among them as a macro no source reads.

    ``cpp_extension.load`` decides whether to rebuild from the sources it is given and these
    flags, never from the headers they include (ninja follows them by modification time only, and
    not at all where the library of these sources and flags is already loaded in the process): with
    the digest in the flags, a header whose content changed changes the command line, which
    rebuilds the library."""
    return ["-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", *vector_flags(), f"-DSTACKLM_HEADERS_DIGEST={headers_digest()}"]


def is_built(directory: Path) -> bool:
    """Whether ``directory`` holds the library, newer than every source and header (else loading builds it)."""
    library = directory / f"{extension_name()}.so"
    return library.is_file() and all(library.stat().st_mtime >= path.stat().st_mtime for path in [*SOURCES, *HEADERS])


def load() -> None:
    """Build (once per source and compiler flags) and load the kernels, and keep freed memory with
    the process (:func:`keep_freed_memory`); raises if it cannot build.

    The build holds the lock of its folder (``stacklm.build_lock``): a process that finds it
    held says so and waits at most ``BUILD_WAIT_S``, and a lock left by a killed build is taken
    over. SIGTERM while waiting or building raises ``BuildInterrupted``, and a wait that runs out
    ``BuildLockTimeout``: ``StacklmError``s, which end the command rather than fall back to the
    PyTorch code (whose dropout draws other masks). A build says so on stderr."""
    global _loaded, _error
    if _loaded:
        return
    if _error is not None:
        raise RuntimeError(f"the compiled kernels (dVPDA, dropout) failed to build: {_error}") from _error
    from torch.utils import cpp_extension

    directory = build_directory()
    try:
        with build_lock(directory, "the compiled kernels' build", BUILD_WAIT_S):
            (directory / "lock").unlink(missing_ok=True)  # torch's own lock: under ours, only a killed build leaves it, and torch would wait on it forever
            if not is_built(directory):
                print("building the compiled kernels (first use, about a minute)…", file=sys.stderr, flush=True)
            cpp_extension.load(
                name=extension_name(),
                sources=[str(source) for source in SOURCES],
                extra_cflags=compile_flags(),
                extra_ldflags=["-fopenmp", "-lmvec"],
                build_directory=str(directory),
                is_python_module=False,
                verbose=False,
            )
    except StacklmError:  # the lock's: a SIGTERM, or a wait that ran out; the command ends
        raise
    except Exception as error:  # the compiler's output is in the exception
        _error = error
        raise RuntimeError(f"the compiled kernels (dVPDA, dropout) failed to build: {error}") from error
    keep_freed_memory()
    _loaded = True


def keep_freed_memory() -> bool:
    """glibc's allocator keeps freed blocks for the process rather than returning them to the OS.

    By default a block of 32 MB or more (the dVPDA's tables for the backward at n ≥ 32, batch
    32) is its own mmap, unmapped when freed and page-faulted back on the next call, and freed
    heap memory is trimmed back: the kernel's time rose with what ran before it in the process
    (``bench/stacks.py``). ``mallopt`` raises both thresholds; the process then keeps its peak
    memory. False where the C library is not glibc (nothing changed).
    """
    name = ctypes.util.find_library("c")
    try:
        library = ctypes.CDLL(name) if name else None
        mallopt = library.mallopt if library is not None else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    trim_threshold, mmap_threshold = -1, -3  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD of <malloc.h>
    return bool(mallopt(mmap_threshold, 2**30)) and bool(mallopt(trim_threshold, 2**31 - 1))


def available() -> tuple[bool, str]:
    """Whether the kernel is built and loaded (building it now if needed), and the error if not."""
    try:
        load()
    except RuntimeError as error:
        return False, str(error)
    return True, ""


class _CompiledReadings(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, bottom: Tensor, num_states: int, num_symbols: int, log_sigmoid: bool) -> Tensor:
        readings, *saved = torch.ops.stacklm_dvpda.forward(logits, bottom, num_states, num_symbols, log_sigmoid)
        ctx.save_for_backward(logits, readings, *saved)
        ctx.arguments = num_states, num_symbols, log_sigmoid
        return readings

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_logits, grad_bottom = torch.ops.stacklm_dvpda.backward(grad.contiguous(), *ctx.saved_tensors, *ctx.arguments)
        return grad_logits, grad_bottom, None, None, None


def compiled_readings(logits: Tensor, bottom: Tensor, num_states: int, num_symbols: int, log_sigmoid: bool) -> Tensor:
    """r_1 … r_n (B, n, N·m) in the order (r, y, m), on the CPU, float32 or float64.

    ``logits`` (B, n, N·(2N + Q) + m), N = Q·S: per step the N·(2N + Q) log transition weights,
    per configuration (q, x) its N push, N replace and Q pop weights (the layout of
    ``VectorNondeterministicActions.from_logits`` and of :func:`compiled_step`), then the pushed
    vector's part: log v_t, or x_t with log v_t = log σ(x_t) taken in the kernel where
    ``log_sigmoid`` (the stacked input layers' output as it is). ``bottom`` log v₀ (B, m).
    The gradient of ``logits`` is one tensor of its shape (the pushed part's that of x_t).
    """
    load()
    return _CompiledReadings.apply(logits.contiguous(), bottom.contiguous(), num_states, num_symbols, log_sigmoid)


class StepTables:
    """The tables of one run of at most ``capacity`` steps, filled one column per :func:`compiled_step`.

    ``log_bottom`` (B, m) is log v₀. ``steps`` counts the columns written after column 0.
    ``columns`` are the (G, table, L) tables of the columns (gamma first, then what the backward
    reads), ``alpha`` (G, capacity + 1, N, L): element b in lane b mod L of group b // L,
    G = ⌈B / L⌉, L the kernel's lane count (``LANE_COUNT`` in ``lanes.h``: the tables' last
    dimension, as ``start`` makes them; :func:`batch_of`, :func:`lanes_of`). The adjoint tables
    are made by the first backward step of the run and dropped after step 1's.
    """

    def __init__(self, log_bottom: Tensor, capacity: int, num_states: int, num_symbols: int) -> None:
        load()
        bottom = log_bottom.detach().contiguous()
        *columns, self.alpha = torch.ops.stacklm_dvpda.start(bottom, capacity, num_states, num_symbols)
        self.columns: tuple[Tensor, ...] = tuple(columns)
        self.batch_size = bottom.size(0)
        self.capacity = capacity
        self.vector_size = bottom.size(1)
        self.steps = 0
        self.grad_gamma: Tensor | None = None
        self.grad_alpha: Tensor | None = None

    def _replaced(self, columns: list[Tensor], alpha: Tensor, batch_size: int, capacity: int, steps: int) -> StepTables:
        copy = object.__new__(StepTables)
        copy.columns, copy.alpha = tuple(columns), alpha
        copy.batch_size, copy.capacity, copy.steps, copy.vector_size = batch_size, capacity, steps, self.vector_size
        copy.grad_gamma = copy.grad_alpha = None
        return copy

    def prefix(self, steps: int, capacity: int) -> StepTables:
        """Tables of ``capacity`` steps holding a copy of columns 0 … ``steps`` (no gradients)."""
        groups, _, configurations, lanes = self.alpha.shape
        used = _table_size(steps, configurations, self.vector_size)
        tensors = []
        for table in self.columns:
            copy = table.new_empty(groups, _table_size(capacity, configurations, self.vector_size), lanes)
            copy[:, :used] = table[:, :used]
            tensors.append(copy)
        alpha = self.alpha.new_empty(groups, capacity + 1, configurations, lanes)
        alpha[:, : steps + 1] = self.alpha[:, : steps + 1]
        return self._replaced(tensors, alpha, self.batch_size, capacity, steps)

    def transform(self, function: Callable[[Tensor], Tensor]) -> StepTables:
        """``function`` applied to every table along the batch dimension, into tables of their own
        holding columns 0 … ``steps`` and room for one more step (a copy grows past it like any
        state): a copy of every prompt for each of V − 1 first tokens takes only what it reads."""
        configurations, lanes = self.alpha.shape[2:]
        used = _table_size(self.steps, configurations, self.vector_size)
        capacity = self.steps + 1
        tensors = []
        for table in self.columns:
            part = lanes_of(function(batch_of(table[:, :used], self.batch_size)), lanes)  # (G', used, L)
            copy = part.new_empty(part.size(0), _table_size(capacity, configurations, self.vector_size), lanes)
            copy[:, :used] = part
            tensors.append(copy)
        part = function(batch_of(self.alpha[:, : self.steps + 1], self.batch_size))  # (B', steps + 1, N)
        batch_size = part.size(0)
        part = lanes_of(part, lanes)  # (G', steps + 1, N, L)
        alpha = part.new_empty(part.size(0), capacity + 1, configurations, lanes)
        alpha[:, : self.steps + 1] = part
        return self._replaced(tensors, alpha, batch_size, capacity, self.steps)


def batch_of(lanes: Tensor, batch_size: int) -> Tensor:
    """(B, …) from the lanes (⌈B / L⌉, …, L) of the kernel's tables: element b is lane b mod L of group b // L."""
    batch_first = lanes.movedim(-1, 1)  # (G, 8, …)
    return batch_first.reshape(-1, *batch_first.shape[2:])[:batch_size]


def lanes_of(batch: Tensor, lanes: int) -> Tensor:
    """(⌈B / L⌉, …, L) from (B, …), L = ``lanes``, the inverse of :func:`batch_of`; a last group of
    fewer elements repeats its last one in the lanes past the batch (a valid state, whose results are dropped)."""
    padding = -batch.size(0) % lanes
    if padding:
        batch = torch.cat([batch, batch[-1:].expand(padding, *batch.shape[1:])])
    return batch.reshape(-1, lanes, *batch.shape[1:]).movedim(1, -1)


def _table_size(steps: int, configurations: int, vector_size: int) -> int:
    """N · Σ_{t ≤ steps} rows(t), rows(t) = m + (t + 1)·N: the flat size of columns 0 … steps."""
    columns = steps + 1
    return configurations * (columns * vector_size + configurations * columns * (columns + 1) // 2)


class _CompiledStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, pushed: Tensor, order: Tensor, tables: StepTables) -> tuple[Tensor, Tensor]:
        step = tables.steps + 1
        reading = torch.ops.stacklm_dvpda.step(step, logits, pushed, *tables.columns, tables.alpha)
        tables.steps = step
        ctx.save_for_backward(logits, pushed, reading)
        ctx.tables = tables
        ctx.step = step
        ctx.order_shape = order.shape
        return reading, reading.new_zeros(reading.size(0), 0)

    @staticmethod
    def backward(ctx: Any, grad_reading: Tensor, grad_order: Tensor) -> tuple[Tensor | None, ...]:
        tables: StepTables = ctx.tables
        if tables.grad_gamma is None or tables.grad_alpha is None:
            tables.grad_gamma = torch.zeros_like(tables.columns[0])
            tables.grad_alpha = torch.zeros_like(tables.alpha)
        logits, pushed, reading = ctx.saved_tensors
        grad_logits, grad_pushed = torch.ops.stacklm_dvpda.step_backward(
            ctx.step, grad_reading.contiguous(), logits, pushed, reading,
            *tables.columns, tables.alpha, tables.grad_gamma, tables.grad_alpha,
        )  # fmt: skip
        if ctx.step == 1:
            # Step 1 received log v₀ as its order tensor: the adjoint of column 0's η rows.
            grad_order = batch_of(tables.grad_gamma[:, : ctx.order_shape[1]], ctx.order_shape[0]).clone()
            tables.grad_gamma = tables.grad_alpha = None
        else:
            grad_order = grad_reading.new_zeros(ctx.order_shape)
        return grad_logits, grad_pushed, grad_order, None


def compiled_step(tables: StepTables, logits: Tensor, pushed: Tensor, order: Tensor) -> tuple[Tensor, Tensor]:
    """r_t (B, N·m) of the next step t = ``tables.steps`` + 1, and the order tensor of step t.

    ``logits`` (B, N·(2N + Q)): per configuration c the log weights of its N pushes, N replaces
    and Q pops, as the controller's output is laid out (``NondeterministicActions.from_logits``;
    rows of any stride, no copy); ``pushed`` log v_t (B, m); the tables' dtype. ``order``: log v₀
    (B, m) at step 1, else what step t − 1 returned.
    """
    if tables.steps >= tables.capacity:
        raise ValueError(f"the tables hold {tables.capacity} steps")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    return _CompiledStep.apply(logits, pushed.contiguous(), order, tables)
