"""Building and loading the compiled CPU kernels: one library of the sources beside this file.

``dvpda.cpp`` (the dVPDA, :mod:`stacklm.kernels.dvpda`), ``dropout.cpp`` (:mod:`stacklm.kernels.dropout`),
``attention.cpp`` (:mod:`stacklm.kernels.attention`), ``recurrent.cpp`` (:mod:`stacklm.kernels.recurrent`),
``stratification.cpp`` and ``superposition.cpp`` (:mod:`stacklm.kernels.stratification`,
:mod:`stacklm.kernels.superposition`), with ``lanes.h``, are built with ``torch.utils.cpp_extension.load`` at first use (``-O3 -fopenmp``,
C++20 (``std::bit_cast``, ``std::remove_cvref_t``) whatever torch's own flags say, this CPU's vector
instructions and a digest of the headers, :func:`compile_flags`; the system C++
compiler; about a minute on two cores, several on loaded ones; one process at a time, under the
folder's lock, :func:`load`) into a folder of this checkout's own (:func:`build_directory`) under
``$TORCH_EXTENSIONS_DIR`` or, without it, ``~/.cache/stacklm/extensions`` (``$XDG_CACHE_HOME``
respected); later processes load the built library. :func:`load` raises if the build fails;
:func:`available` says whether it built, and why not: the compiler's first error line, the whole
output kept in the build folder (``stacklm.kernels.backend`` then says what runs in their place). :func:`vector_capability` names the
instruction set a build uses, which a run records with its backend (``stacklm.kernels.backend``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import re
import sys
from pathlib import Path

from stacklm.build_lock import build_lock
from stacklm.errors import StacklmError

NAME = "stacklm_kernels"
SOURCE = Path(__file__).with_name("dvpda.cpp")
SOURCES = [SOURCE, *(Path(__file__).with_name(name) for name in ("dropout.cpp", "attention.cpp", "recurrent.cpp", "stratification.cpp", "superposition.cpp"))]  # one library
HEADERS = [Path(__file__).with_name("lanes.h")]  # included by the sources (``#include "…"``)

BUILD_WAIT_S = 20 * 60  # how long a process waits for another's build: a first build took 3.5 min on a loaded machine

_loaded = False
_error: BaseException | None = None


AVX512 = ("avx512f", "avx512vl", "avx512dq", "avx512bw")


def vector_flags() -> list[str]:
    """-mavx2 -mfma where this CPU has them (8 floats per SIMD exp/log instead of 4), else none;
    with AVX-512 also its instructions on 256-bit vectors, for their 32 registers: the pop's
    backward keeps nine sums, nine weights and six columns in flight, which spill from AVX2's 16
    (``docs/benchmarks.md``)."""
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


def vector_capability() -> str:
    """The vector instructions a build on this CPU uses (:func:`vector_flags`): "avx512vl", "avx2" or "none".

    Float sums and the exp and log of SIMD lanes may round differently from one to another, so a
    run's results are bit for bit those of another run only on the same capability."""
    flags = vector_flags()
    return "avx512vl" if "-mavx512vl" in flags else "avx2" if flags else "none"


def extension_name() -> str:
    """One build per instruction set, so a cache shared by different machines never runs the wrong one."""
    capability = vector_capability()
    return NAME + ("" if capability == "none" else f"_{capability}")


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
    return ["-std=c++20", "-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", *vector_flags(), f"-DSTACKLM_HEADERS_DIGEST={headers_digest()}"]


def first_error(output: str) -> str:
    """The compiler's first error line in a failed build's ``output`` (``file:line:column: error: …``
    or ``fatal error: …``), else its last non-empty line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if re.search(r"\berror:", line)), lines[-1] if lines else "(no output)")


def build_failure(what: str, error: BaseException, directory: Path) -> str:
    """What a failed build of ``what`` says: the compiler's first error, and where its whole output is
    kept (``build-error.log`` in the build folder)."""
    log = directory / "build-error.log"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        log.write_text(str(error))
    except OSError:
        return f"{what} failed to build: {first_error(str(error))}"
    return f"{what} failed to build: {first_error(str(error))} (the compiler's whole output: {log})"


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
        raise _error
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
        _error = RuntimeError(build_failure(f"the compiled kernels ({', '.join(source.name for source in SOURCES)})", error, directory))
        raise _error from error
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
