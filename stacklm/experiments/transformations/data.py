"""The data stage's lookups for ``workflow/rules/data.smk`` (its settings: ``DataSettings``).

Paths of the stage (Snakemake patterns):

    results/upstream/{task}/{split}.tsv            upstream file, sha256-checked (rule data_fetch)
    results/upstream/{task}/{split}.repaired.tsv   after the German passivization repair (data_repair)
    results/data/{task}/{split}.tsv                the four splits (data_generate)
    results/data/{task}/construction.json          construction counts (data_generate)
    results/data/{task}/summary.parquet            summary (data_summarize)
    results/data/report.txt                        every task's summary, printed (data_report)
"""

from __future__ import annotations

import shlex

from stacklm.data.splits import SPLITS
from stacklm.data.upstream import REPAIRED_TASKS, UPSTREAM_SPLITS
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


def generate_inputs(data: DataSettings, task: str) -> dict[str, str]:
    if data.source == "generate":
        return {}
    return {split: upstream_path(task, split) for split in UPSTREAM_SPLITS}


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
    """Every task's summary, and the report that prints them."""
    return [SUMMARY.format(task=task) for task in settings.tasks] + [REPORT]
