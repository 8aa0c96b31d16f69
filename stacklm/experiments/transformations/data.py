"""The data stage's lookups for ``workflow/rules/data.smk`` (its settings: ``DataSettings``).

Paths of the stage (Snakemake patterns):

    results/upstream/{task}/{split}.tsv            upstream file, blob-id-checked (rule data_fetch)
    results/upstream/{task}/{split}.repaired.tsv   after the German passivization repair (data_repair)
    results/data/{task}/{split}.tsv                the four splits (data_generate)
    results/data/{task}/construction.json          construction counts (data_generate)
    results/data/{task}/summary.parquet            summary (data_summarize)
    results/data/report.txt                        every task's summary, printed (data_report)
"""

from __future__ import annotations

import shlex

from stacklm.data.splits import SPLITS
from stacklm.data.upstream import REPAIRED_TASKS, UPSTREAM_SPLITS, mirror_path
from stacklm.errors import StacklmError
from stacklm.experiments.transformations.settings import DataSettings, TransformationsSettings

UPSTREAM_RAW = "results/upstream/{task}/{split}.tsv"
UPSTREAM_REPAIRED = "results/upstream/{task}/{split}.repaired.tsv"
DATA_DIR = "results/data/{task}"
DATA_FILE = "results/data/{task}/{split}.tsv"
CONSTRUCTION = "results/data/{task}/construction.json"
SUMMARY = "results/data/{task}/summary.parquet"
REPORT = "results/data/report.txt"


def upstream_path(task: str, split: str) -> str:
    """The upstream split file the data folder reads: repaired where the task needs it."""
    return (UPSTREAM_REPAIRED if task in REPAIRED_TASKS else UPSTREAM_RAW).format(task=task, split=split)


def upstream_splits(data: DataSettings, task: str) -> tuple[str, ...]:
    """The splits of ``task`` taken from upstream files: none for ``generate``; for ``upstream``
    every split, but one whose file the mirror lacks is drawn instead (``data.missing:
    generate``) or stops the run here, when the DAG is built, naming the file."""
    if data.source == "generate":
        return ()
    if data.upstream_mirror is None:
        return UPSTREAM_SPLITS
    splits = []
    for split in UPSTREAM_SPLITS:
        path = mirror_path(task, split, data.upstream_mirror)
        if path.is_file():
            splits.append(split)
        elif data.missing == "error":
            raise StacklmError(f"config key 'data.upstream_mirror': {path} not found ({task}'s upstream {split} file); put it there, "
                               f"or set data.upstream_mirror: null to download it, or data.missing: generate to draw that split "
                               f"from the grammar instead")
    return tuple(splits)


def generate_inputs(data: DataSettings, task: str) -> dict[str, str]:
    return {split: upstream_path(task, split) for split in upstream_splits(data, task)}


def generate_options(data: DataSettings, task: str) -> str:
    """Options of ``stacklm data generate`` for ``task`` (seed, sizes, upstream files), quoted
    for the rule's shell."""
    options = ["--seed", str(data.seed)]
    for split in SPLITS:
        options += [f"--{split}", str(getattr(data.sizes, split))]
    for split, path in generate_inputs(data, task).items():
        options += [f"--{split}-file", path]
    return shlex.join(options)


def fetch_options(data: DataSettings) -> str:
    """``--mirror FOLDER`` of ``stacklm data fetch``, quoted for the rule's shell: the folder is
    a config string, so no character of it (space, ``$(…)``, quote) may reach bash as syntax."""
    mirror = data.upstream_mirror
    return shlex.join(["--mirror", mirror]) if mirror is not None else ""


def data_files(task: str) -> list[str]:
    """The four splits of ``task``, which training and evaluation both read (the data version
    is a hash of all four)."""
    return [DATA_FILE.format(task=task, split=split) for split in SPLITS]


def data_targets(settings: TransformationsSettings) -> list[str]:
    """Every task's summary, and the report that prints them; none without a task."""
    return [SUMMARY.format(task=task) for task in settings.tasks] + [REPORT] if settings.tasks else []
