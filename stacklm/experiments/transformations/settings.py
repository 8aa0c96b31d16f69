"""The sections of the settings the syntactic transformations read (DuSell & Cotterell (2025) §5,
App. D): ``tasks``, ``data``, ``architectures``, ``search``, ``final``, ``report`` and
``resources``, each a frozen dataclass whose defaults are the paper's (config.yaml lists them,
and a test keeps the two equal). ``stacklm.workflow.settings.ResolvedSettings`` holds them with
the other experiments' sections; this experiment's lookups take any object that has its
sections (``TransformationsSettings``).

No torch here: the Snakefile and the light jobs read these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from stacklm.data.splits import SplitSizes
from stacklm.data.upstream import UPSTREAM_LINES
from stacklm.errors import StacklmError
from stacklm.tasks import TASK_NAMES

# DuSell & Cotterell (2025), Tables 1-7, plus the syntax-infused transformers of Sundararaman et al. (2019).
PAPER_ARCHITECTURES: tuple[str, ...] = (
    "Tf", "Tf+Sup", "Tf+Sup+Sup", "Tf+Nd", "Tf+Nd+Nd",
    "RNN", "RNN+Sup", "RNN+Sup+R", "RNN+Nd", "RNN+Nd+R",
    "LSTM", "LSTM+Sup", "LSTM+Sup+R", "LSTM+Nd", "LSTM+Nd+R",
    "Tf+Syn", "Tf+Nd+Syn",
)


@dataclass(frozen=True)
class DataSettings:
    """The ``data`` section: where the four splits of every task come from, and their sizes.

    ``upstream`` (the paper's data) takes every split from the pinned upstream files, the first
    ``sizes`` lines of each; a file the mirror lacks stops the run, unless ``missing`` is
    ``generate``: then that split is drawn from the grammar."""

    source: Literal["generate", "upstream"] = "upstream"
    seed: int = 1
    sizes: SplitSizes = field(default_factory=SplitSizes)
    upstream_mirror: str | None = None  # folder <mirror>/<task>/<upstream file>; None: download
    missing: Literal["error", "generate"] = "error"

    def __post_init__(self) -> None:
        if self.source == "upstream":
            for split, lines in UPSTREAM_LINES.items():
                if getattr(self.sizes, split) > lines:
                    raise StacklmError(f"config key 'data.sizes.{split}': upstream has {lines} {split} examples per task, "
                                       f"{getattr(self.sizes, split)} requested")


@dataclass(frozen=True)
class IntegerRange:
    """Bounds of a uniform integer draw, ``low`` <= ``high``."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"low {self.low!r} exceeds high {self.high!r}")


@dataclass(frozen=True)
class LogRange:
    """Bounds of a log-uniform draw, 0 < ``low`` <= ``high``."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"low {self.low!r} exceeds high {self.high!r}")


@dataclass(frozen=True)
class SearchSettings:
    """The ``search`` section: the random search per task x architecture (App. D)."""

    trials: int = 10
    max_epochs: int | None = 5  # DuSell & Cotterell (2025) §5, and the authors' later search script; None: to convergence
    tokens_per_batch: IntegerRange = IntegerRange(512, 2048)
    learning_rate: LogRange = LogRange(1.0e-5, 1.0e-3)
    salt: int = 0


@dataclass(frozen=True)
class FinalSettings:
    """The ``final`` section: the models trained with the selected hyperparameters."""

    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    max_epochs: int | None = None  # None: to convergence (early stopping, App. D)


@dataclass(frozen=True)
class ReportSettings:
    """The ``report`` section: Figure 3's threshold and the FA Log Ratio column (App. E)."""

    min_test_accuracy: float = 0.9
    log_ratio: Literal["per_example", "of_means"] = "of_means"


@dataclass(frozen=True)
class JobSize:
    """Time and memory of the first attempt of a training job."""

    runtime_min: float
    mem_mb: float


@dataclass(frozen=True)
class ResourceFamily:
    """The size of the training jobs of the architectures whose stack is listed (the model
    registry's stack names: ``Nd``, ``Sup``)."""

    stacks: tuple[str, ...]
    runtime_min: float
    mem_mb: float


@dataclass(frozen=True)
class ResourceSettings:
    """The ``resources`` section: cluster time and memory of a training job per architecture family
    (the transformation tasks), of a CFL grid run and of a PTB restart, and how many runs one
    training (and evaluation) job takes."""

    growth_per_retry: float = 2
    default: JobSize = JobSize(240, 4000)
    families: tuple[ResourceFamily, ...] = (ResourceFamily(("Nd",), 1440, 16000), ResourceFamily(("Sup",), 480, 8000))
    cfl: JobSize = JobSize(480, 4000)  # `stacklm cfl train`, one grid run
    ptb: JobSize = JobSize(1440, 8000)  # `stacklm ptb train`, one restart
    runs_per_job: int = 1  # 1: a job per run; K: K runs of a task x phase (architecture x index) in one process, one after another (and K architectures' trials drawn, and selected among, in one)
    runs_per_step: int = 1  # 1: as runs_per_job says; K: K runs of a task x phase x architecture to a training job that asks for a GPU and trains them in one step there


class TransformationsSettings(Protocol):
    """The sections this experiment reads, as ``ResolvedSettings`` holds them."""

    @property
    def tasks(self) -> tuple[str, ...]: ...
    @property
    def data(self) -> DataSettings: ...
    @property
    def architectures(self) -> tuple[str, ...]: ...
    @property
    def search(self) -> SearchSettings: ...
    @property
    def final(self) -> FinalSettings: ...
    @property
    def report(self) -> ReportSettings: ...
    @property
    def resources(self) -> ResourceSettings: ...


def check_tasks(tasks: tuple[str, ...]) -> None:
    """Raise a ``StacklmError`` naming the first task ``stacklm.tasks`` does not know."""
    for position, name in enumerate(tasks):
        if name not in TASK_NAMES:
            raise StacklmError(f"config key 'tasks[{position}]': unknown task {name!r}; known: {', '.join(TASK_NAMES)}")
