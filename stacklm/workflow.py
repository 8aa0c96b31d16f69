"""What the Snakefile asks of stacklm: the resolved settings, the hyperparameter draw, the
choice of the best trial, and every path and target of the DAG.

The Snakefile hands this module ``config.yaml`` and the user's keys; ``resolve`` applies the
chosen preset between them (the user's keys win), checks the resolved settings against
``workflow/schemas/config.schema.yaml`` and what JSON Schema cannot express (architecture
names live in the model registry), and the module answers the workflow's lookups, so that no
decision lives in Snakemake code.

The DAG (DuSell & Cotterell (2025) §5, App. D), per task T and architecture A:

- ``hparams``: trial k = 1..K draws B ~ U{B_low..B_high} and a learning rate ~ log-U[lr_low,
  lr_high] from a seed derived from (salt, T, A, k) — a pure function, so the DAG is static;
- ``train`` (phase ``search``, index k): at most ``search.max_epochs`` epochs (null: to
  convergence, as the authors' search script trains its trials), seed k — when
  K > 1: a search of one trial has nothing to compare, and trains no search model;
- ``select``: the trial with the lowest validation cross-entropy (the only one when K = 1),
  ``max_epochs`` set to ``final.max_epochs`` (null: to convergence);
- ``train`` (phase ``final``, index s) for every seed s, then ``evaluate``;
- ``aggregate`` → ``results/metrics.parquet`` → ``report`` (tables and figures);
- ``tracking_sync`` (per task T, and per CFL language): every run's Parquet files → MLflow,
  a mirror for browsing that the report never reads.

The CFL experiments of DuSell & Chiang (2022) (``stacklm.cfl.experiment``), per language L and model X:
``cfl_generate`` (the seed-0 test set of L), ``cfl_train`` for every grid point (learning
rate × m for Gref/JM × restart), ``cfl_select`` (lowest validation Δ), ``cfl_evaluate`` (test
Δ overall and per length), then ``cfl_figures`` → ``results/cfl/{curves,metrics}.parquet``
and the figures.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import math
import random
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping

from stacklm.atomic import write_text_atomically
from stacklm.cfl.experiment import CflSettings, parse_setting
from stacklm.cfl.experiment import grid as cfl_grid
from stacklm.data.settings import data_settings, data_targets
from stacklm.errors import StacklmError
from stacklm.settings_file import SECTIONS, read_settings

if TYPE_CHECKING:
    import pandas as pd

Phase = Literal["search", "final"]
PHASES: tuple[Phase, ...] = ("search", "final")

# Every file of the DAG, as Snakemake patterns: {architecture} is the registry's path slug.
SETTINGS_FILE = "results/settings/{reader}.json"  # the sections of the settings one kind of job reads
TRACKING_MARKER = "results/tracking/initialised"
TRACKING_MANIFEST = "results/tracking/{experiment}.json"  # an experiment's runs in MLflow: key → run id
DATA_FILE = "results/data/{task}/{split}.tsv"
DATA_DIR = "results/data/{task}"
TRIAL_HPARAMS = "results/search/{task}/{architecture}/trial{trial}.json"
BEST_HPARAMS = "results/search/{task}/{architecture}/best.json"
RUN_DIR = "results/runs/{task}/{architecture}/{phase}/{index}"
RUN_MODEL = RUN_DIR + "/model.pt"
RUN_CURVE = RUN_DIR + "/train.parquet"
RUN_METRICS = RUN_DIR + "/metrics.parquet"
CHECKPOINT = "results/checkpoints/{task}/{architecture}/{phase}/{index}.pt"
TRAIN_LOG = "logs/train/{task}/{architecture}/{phase}/{index}.log"  # among a run's artifacts in MLflow
EVALUATE_LOG = "logs/evaluate/{task}/{architecture}/{phase}/{index}.log"
METRICS = "results/metrics.parquet"
REPORT_TABLE = "results/report/tables/{task}.tex"
REPORT_MARKDOWN = "results/report/tables/{task}.md"
REPORT_HTML = "results/report/tables/{task}.html"  # the Markdown table as a page of `snakemake --report`
REPORT_DOCUMENT = "results/report/report.tex"
REPORT_FIGURE = "results/report/figures/figure3.{extension}"
CURVES = "results/curves/{task}.parquet"  # the generalization curves of a task's final runs
CURVE_FIGURE = "results/report/figures/curves-{task}.{extension}"
FIGURE_EXTENSIONS: tuple[str, ...] = ("png", "pdf")

# The CFL experiments of DuSell & Chiang (2022) (stacklm.cfl.experiment): {language}, {model} (the registry's
# path slug, cfl-ns+s+u) and {setting} (a grid point, lr0.001-m20-r3).
CFL_TEST = "results/cfl/data/{language}/test.tsv"
CFL_RUNS = "results/cfl/runs/{language}/{model}"
CFL_RUN_DIR = CFL_RUNS + "/{setting}"
CFL_RUN_MODEL = CFL_RUN_DIR + "/model.pt"
CFL_RUN_CURVE = CFL_RUN_DIR + "/train.parquet"
CFL_CHECKPOINT = "results/cfl/checkpoints/{language}/{model}/{setting}.pt"
CFL_TRAIN_LOG = "logs/cfl/train/{language}/{model}/{setting}.log"
CFL_EVALUATE_LOG = "logs/cfl/evaluate/{language}/{model}.log"
CFL_SELECTED = "results/cfl/selected/{language}/{model}.parquet"
CFL_EVALUATION = "results/cfl/evaluation/{language}/{model}.parquet"
CFL_CURVES = "results/cfl/curves.parquet"
CFL_METRICS = "results/cfl/metrics.parquet"
CFL_FIGURE = "results/cfl/figures/{figure}.{extension}"
CFL_FIGURES: tuple[str, ...] = ("validation", "test-by-length")  # Figure 1; test Δ by length

# The settings sections each kind of job reads (results/settings/{reader}.json holds those only):
# a change of config reruns a job only when a section it reads changed. A section missing
# here is an error naming the file when the job asks for it (stacklm.settings_file).
SETTINGS_READ: dict[str, tuple[str, ...]] = {
    "train": ("training", "evaluation", "model"),
    "evaluate": ("evaluation",),
    "hparams": ("search",),
    "select": ("final",),
    "report": ("tasks", "architectures", "final", "report"),
    "tracking": ("tasks", "cfl", "tracking"),
    "cfl_train": ("cfl", "training"),
    "cfl_evaluate": ("cfl", "evaluation"),
}

# Training and evaluation both read every split (the data version is a hash of all four).
SPLITS: tuple[str, ...] = ("train", "validation", "test", "generalization")


# ---------------------------------------------------------------------------------------------
# Settings: config.yaml, the preset over it, the user's keys over both; then validated whole.

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"
PRESET_KEYS = ("preset", "presets")  # choose the preset; not settings any job reads
STRING_HINT = (
    "(a nested value given with --config arrives as a string: put nested keys in a YAML file"
    " passed with --configfile, README \"Running it\")"
)


def apply_preset(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the preset named by ``config['preset']`` merged over it (dicts deeply)."""
    name = config.get("preset")
    presets = config.get("presets", {})
    resolved = {key: copy.deepcopy(value) for key, value in config.items() if key not in PRESET_KEYS}
    if name is None:
        return resolved
    if not isinstance(name, str) or name not in presets:
        raise StacklmError(f"config key 'preset': unknown preset {name!r}; known: {', '.join(sorted(presets))}")
    if not isinstance(presets[name], dict):
        raise StacklmError(f"config key 'presets.{name}': expected a mapping of settings, found {presets[name]!r}")
    return _merge(resolved, presets[name], path="presets." + name)


def _merge(base: dict[str, Any], override: Mapping[str, Any], path: str | None) -> dict[str, Any]:
    """``override`` over ``base``, dicts deeply. ``path`` names where ``override`` comes from, and
    a key of it that ``base`` lacks is an error; None takes any key (the schema names it)."""
    merged = dict(base)
    for key, value in override.items():
        inner = None if path is None else f"{path}.{key}"
        if key not in base and path is not None:
            raise StacklmError(f"config key '{inner}': not a key of the settings")
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merge(base[key], value, inner)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def resolve(config: Mapping[str, Any], user_keys: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings every job reads: config.yaml, the preset over it, the user's keys over
    both, validated as a whole (``validate_settings``).

    ``config`` is Snakemake's ``config``: config.yaml with the user's keys already merged in;
    ``user_keys`` are those keys alone (``--configfile`` files, then ``--config``: Snakemake's
    ``workflow.config_settings.overwrite_config``), merged again over the preset so that a
    key the user sets wins over the preset's.
    """
    settings = apply_preset(config)
    user = {key: value for key, value in (user_keys or {}).items() if key not in PRESET_KEYS}
    settings = _merge(settings, user, path=None)
    validate_settings(settings)
    return settings


def snakefile_settings(config: Mapping[str, Any], user_keys: Mapping[str, Any]) -> dict[str, Any]:
    """``resolve`` for the Snakefile: an invalid setting stops Snakemake before any job with
    the messages naming the keys, and no traceback."""
    try:
        return resolve(config, user_keys)
    except StacklmError as error:
        raise SystemExit(f"stacklm: invalid settings\n{error}") from None


def validate_settings(settings: Mapping[str, Any]) -> None:
    """Raise a ``StacklmError`` naming the key of every value the schema rejects (one per
    line), else of the first one no run could use (``check_settings``)."""
    errors = list(_settings_validator().iter_errors(settings))
    if errors:
        lines = sorted({line for error in errors for line in _schema_messages(error)})  # by key
        if any(error.validator == "type" and isinstance(error.instance, str) for error in errors):
            lines.append(STRING_HINT)
        raise StacklmError("\n".join(lines))
    check_settings(settings)


@functools.cache
def _settings_validator() -> Any:
    """The schema's validator, where an integer is an ``int`` (JSON Schema also takes 2.0)."""
    import jsonschema
    import yaml

    base = jsonschema.Draft202012Validator
    strict = base.TYPE_CHECKER.redefine("integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool))
    return jsonschema.validators.extend(base, type_checker=strict)(yaml.safe_load(SCHEMA.read_text()))


def _key(path: Any) -> str:
    """``search.tokens_per_batch.low``, ``architectures[1]``: a key as the errors name it."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")


def _schema_messages(error: Any) -> list[str]:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = error.schema.get("properties", {})
        return [f"config key '{_key([*path, name])}': not a key of the settings" for name in error.instance if name not in known]
    if error.validator == "required":
        return [f"config key '{_key([*path, name])}': required" for name in error.validator_value if name not in error.instance]
    return [f"config key '{_key(path)}': {error.message}"]


def check_settings(settings: Mapping[str, Any]) -> None:
    """Raise a ``StacklmError`` naming the key of the first setting no run could use, among
    those the schema cannot judge: registry names, task names, the order of bounds."""
    known = known_architectures()
    for position, name in enumerate(settings["architectures"]):
        if name not in known:
            raise StacklmError(
                f"config key 'architectures[{position}]': unknown architecture {name!r}; known: {', '.join(known)}"
            )
    search = settings["search"]
    _check_range(search["tokens_per_batch"], "search.tokens_per_batch")
    _check_range(search["learning_rate"], "search.learning_rate")
    data_settings(settings)
    cfl_settings(settings)


def _check_range(bounds: Mapping[str, float], key: str) -> None:
    """The bounds of a draw in order (the schema checks each)."""
    low, high = bounds["low"], bounds["high"]
    if low > high:
        raise StacklmError(f"config key '{key}': low {low!r} exceeds high {high!r}")


# ---------------------------------------------------------------------------------------------
# Architecture names (tables, config) and slugs (paths), from the model registry. The registry
# imports torch, so it is imported where needed: `stacklm hparams` and `select` start quickly.


def known_architectures() -> tuple[str, ...]:
    """The registry names a task table can carry (the CFL models have a grid of their own)."""
    from stacklm.models.registry import ARCHITECTURES

    return tuple(name for name, entry in ARCHITECTURES.items() if entry.family == "bearing-syntactic-fruit")


def architecture_slug(name: str) -> str:
    from stacklm.models.registry import ARCHITECTURES

    return ARCHITECTURES[name].slug


@functools.cache
def architecture_name(slug: str) -> str:
    """The registry name whose path slug is ``slug`` (asked for every job of the DAG: cached)."""
    from stacklm.models.registry import ARCHITECTURES

    for name, entry in ARCHITECTURES.items():
        if entry.slug == slug:
            return name
    raise StacklmError(f"no architecture has the path slug {slug!r}")


# ---------------------------------------------------------------------------------------------
# The random search (App. D): a deterministic draw per (task, architecture, trial).


@dataclass(frozen=True)
class Hyperparameters:
    """The contents of one ``HP.json``; ``max_epochs`` None means train to convergence."""

    learning_rate: float
    tokens_per_batch: int
    max_epochs: int | None


def derived_seed(*parts: str | int) -> int:
    """A 64-bit seed that depends on every part and on nothing else (not on PYTHONHASHSEED)."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def draw_hyperparameters(search: dict[str, Any], task: str, architecture: str, trial: int) -> Hyperparameters:
    """Trial ``trial``'s hyperparameters: B ~ U{low..high}, learning rate ~ log-U[low, high]."""
    generator = random.Random(derived_seed(search["salt"], task, architecture, trial))
    batch = search["tokens_per_batch"]
    tokens_per_batch = generator.randint(batch["low"], batch["high"])
    rate = search["learning_rate"]
    learning_rate = math.exp(generator.uniform(math.log(rate["low"]), math.log(rate["high"])))
    return Hyperparameters(learning_rate=learning_rate, tokens_per_batch=tokens_per_batch, max_epochs=search["max_epochs"])


def trials(settings: dict[str, Any]) -> list[int]:
    return list(range(1, settings["search"]["trials"] + 1))


def trained_trials(settings: dict[str, Any]) -> list[int]:
    """The trials whose search model is trained: all of them, or none when there is one (its
    draw is the selection whatever its validation cross-entropy; the small preset's case)."""
    drawn = trials(settings)
    return drawn if len(drawn) > 1 else []


def lowest_validation_cross_entropy(curve: pd.DataFrame) -> float:
    """The best checkpoint's validation cross-entropy per token in one ``train.parquet``."""
    values = curve["validation_cross_entropy"].to_numpy(dtype=float)
    if len(values) == 0:
        raise StacklmError("a learning curve has no checkpoint")
    return float(values.min())


def select_trial(scores: list[float]) -> int:
    """Index of the lowest finite score (the first on ties); a NaN or ∞ trial never wins."""
    finite = [(score, position) for position, score in enumerate(scores) if math.isfinite(score)]
    if not finite:
        raise StacklmError("no search trial reached a finite validation cross-entropy")
    return min(finite)[1]


# ---------------------------------------------------------------------------------------------
# Lookups of the rules.


def settings_file(reader: str) -> str:
    """The settings file of the jobs of kind ``reader`` (a key of ``SETTINGS_READ``)."""
    if reader not in SETTINGS_READ:
        raise StacklmError(f"no settings file for {reader!r}; known: {', '.join(SETTINGS_READ)}")
    return SETTINGS_FILE.format(reader=reader)


def settings_for(settings: dict[str, Any], reader: str) -> dict[str, Any]:
    """The contents of ``reader``'s settings file: its sections of ``settings``, and their list."""
    sections = SETTINGS_READ[reader]
    return {SECTIONS: list(sections), **{section: settings[section] for section in sections if section in settings}}


def hparams_path(task: str, architecture: str, phase: str, index: str | int) -> str:
    """The ``HP.json`` a run trains with: its trial's draw (search) or the selected one (final)."""
    if phase == "search":
        return TRIAL_HPARAMS.format(task=task, architecture=architecture, trial=index)
    if phase == "final":
        return BEST_HPARAMS.format(task=task, architecture=architecture)
    raise StacklmError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")


def trial_option(phase: str, index: str | int) -> str:
    """The ``--trial`` option of a search run's ``stacklm train`` (empty for a final run)."""
    return f" --trial {index}" if phase == "search" else ""


def data_files(task: str) -> list[str]:
    return [DATA_FILE.format(task=task, split=split) for split in SPLITS]


def device(gpus: int) -> str:
    """The torch device of a job given its ``gpu`` resource."""
    return "cuda" if gpus > 0 else "cpu"


@dataclass(frozen=True)
class JobResources:
    runtime_min: int
    mem_mb: int


def train_resources(settings: dict[str, Any], architecture: str, attempt: int) -> JobResources:
    """Time and memory of a training job: its family's base values × growth^(attempt − 1).

    An architecture belongs to the first family in ``resources.families`` one of whose
    components (``Nd``, ``Sup``, …) appears in its name; otherwise to ``resources.default``.
    """
    table = settings["resources"]
    components = set(architecture_name(architecture).split("+"))
    base = table["default"]
    for family in table["families"]:
        if components & set(family["components"]):
            base = family
            break
    factor = table["growth_per_retry"] ** (attempt - 1)
    return JobResources(runtime_min=math.ceil(base["runtime_min"] * factor), mem_mb=math.ceil(base["mem_mb"] * factor))


# ---------------------------------------------------------------------------------------------
# Targets.


def final_runs(settings: dict[str, Any]) -> list[dict[str, str | int]]:
    """Wildcards of every final run: task × architecture slug × seed."""
    return [
        {"task": task, "architecture": architecture_slug(name), "phase": "final", "index": seed}
        for task in settings["tasks"]
        for name in settings["architectures"]
        for seed in settings["final"]["seeds"]
    ]


def final_metrics(settings: dict[str, Any]) -> list[str]:
    return [RUN_METRICS.format(**run) for run in final_runs(settings)]


def final_curves(settings: dict[str, Any], task: str) -> list[str]:
    return [RUN_CURVE.format(**run) for run in final_runs(settings) if run["task"] == task]


def curve_figures(task: str) -> list[str]:
    return [CURVE_FIGURE.format(task=task, extension=extension) for extension in FIGURE_EXTENSIONS]


def report_outputs(settings: dict[str, Any]) -> dict[str, list[str]]:
    return {
        "tables": [REPORT_TABLE.format(task=task) for task in settings["tasks"]],
        "markdown": [REPORT_MARKDOWN.format(task=task) for task in settings["tasks"]],
        "document": [REPORT_DOCUMENT],
        "figures": [REPORT_FIGURE.format(extension=extension) for extension in FIGURE_EXTENSIONS],
    }


def all_targets(settings: dict[str, Any]) -> list[str]:
    outputs = report_outputs(settings)
    return [
        *data_targets(settings),
        METRICS,
        *(path for paths in outputs.values() for path in paths),
        *(REPORT_HTML.format(task=task) for task in settings["tasks"]),
        *(path for task in settings["tasks"] for path in [CURVES.format(task=task), *curve_figures(task)]),
        *cfl_targets(settings),
        *(TRACKING_MANIFEST.format(experiment=name) for name in tracking_experiments(settings)),
    ]


def finished_message(settings: dict[str, Any]) -> str:
    """What Snakemake prints when a run succeeds: where the results are and how to open them."""
    from stacklm.tracking.mlflow_mirror import TrackingSettings

    tables = REPORT_TABLE.format(task="<task>").removesuffix(".tex")
    lines = [
        "stacklm: the results are in",
        f"  {tables}.{{tex,md,html}}, {REPORT_DOCUMENT}, {REPORT_FIGURE.format(extension='png')}",
        f"  {METRICS} (every final run's metrics), {RUN_DIR.split('/{')[0]}/ (models and curves)",
        *([f"  {CFL_FIGURE.split('/{')[0]}/ (the CFL figures), {CFL_METRICS}"] if cfl_targets(settings) else []),
        "  logs/ (one log per job)",
        "Every table and figure in one page: snakemake --report report.html (with this run's --config or --configfile)",
    ]
    tracking = TrackingSettings.from_dict(settings.get("tracking", {}))
    if tracking.enabled and tracking.sqlite_path() is not None:
        lines += [
            f"The runs in MLflow: mlflow server --backend-store-uri {tracking.resolved_uri()} --host 127.0.0.1 --port 5000 --workers 1",
            "  then open http://127.0.0.1:5000/#/experiments/1/runs (or switch MLflow's top-left toggle to 'Model training')",
        ]
    elif tracking.enabled:
        lines.append(f"The runs in MLflow: {tracking.uri}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The MLflow mirror: one experiment per task and per CFL language, synced from its runs' Parquet.


def tracking_experiments(settings: dict[str, Any]) -> list[str]:
    """The MLflow experiments: every task, then every CFL language (the CFL runs' ``task``)."""
    return [*settings.get("tasks", []), *cfl_settings(settings).languages]  # a CFL-only settings file has no tasks


def tracking_records(settings: dict[str, Any], experiment: str) -> dict[str, list[str]]:
    """The files ``stacklm tracking sync`` mirrors for ``experiment``: ``curves``, every run's
    ``train.parquet``; ``metrics``, the final runs' ``metrics.parquet`` of a task, the
    evaluation of each model of a CFL language; ``curve_logs`` and ``metrics_logs``, the logs
    of the jobs that wrote them, in the same order."""
    if experiment in cfl_settings(settings).languages:
        pairs = [pair for pair in cfl_pairs(settings) if pair["language"] == experiment]
        return {
            "curves": [path for pair in pairs for path in cfl_run_files(settings, experiment, pair["model"], CFL_RUN_CURVE)],
            "metrics": [CFL_EVALUATION.format(**pair) for pair in pairs],
            "curve_logs": [path for pair in pairs for path in cfl_run_files(settings, experiment, pair["model"], CFL_TRAIN_LOG)],
            "metrics_logs": [CFL_EVALUATE_LOG.format(**pair) for pair in pairs],
        }
    if experiment not in settings["tasks"]:
        raise StacklmError(f"no task or CFL language is named {experiment!r}")
    searched = [
        {"task": experiment, "architecture": architecture_slug(name), "phase": "search", "index": trial}
        for name in settings["architectures"]
        for trial in trained_trials(settings)
    ]
    final = [run for run in final_runs(settings) if run["task"] == experiment]
    return {
        "curves": [RUN_CURVE.format(**run) for run in searched + final],
        "metrics": [RUN_METRICS.format(**run) for run in final],
        "curve_logs": [TRAIN_LOG.format(**run) for run in searched + final],
        "metrics_logs": [EVALUATE_LOG.format(**run) for run in final],
    }


def tracking_inputs(settings: dict[str, Any], experiment: str) -> dict[str, list[str]]:
    """The Parquet files of ``tracking_records``: the rule's inputs (a log is no rule's output)."""
    records = tracking_records(settings, experiment)
    return {"curves": records["curves"], "metrics": records["metrics"]}


def tracking_log_options(settings: dict[str, Any], experiment: str) -> str:
    """``--curve-logs … --metrics-logs …`` of ``stacklm tracking sync``: the jobs' logs, artifacts of their runs."""
    records = tracking_records(settings, experiment)
    return shlex.join(["--curve-logs", *records["curve_logs"], "--metrics-logs", *records["metrics_logs"]])


# ---------------------------------------------------------------------------------------------
# The CFL experiments: every (language, model) pair's grid of runs, its selection and test.


def cfl_settings(settings: dict[str, Any]) -> CflSettings:
    """The ``cfl`` section (the paper's grid where absent); an error names the key."""
    return CflSettings.from_dict(settings.get("cfl", {}))


def cfl_pairs(settings: dict[str, Any]) -> list[dict[str, str]]:
    """Wildcards of every (language, model slug) pair of the CFL experiments."""
    cfl = cfl_settings(settings)
    return [{"language": language, "model": architecture_slug(model)} for language in cfl.languages for model in cfl.models]


def cfl_pair_files(settings: dict[str, Any], pattern: str) -> list[str]:
    """``pattern`` (CFL_SELECTED, CFL_EVALUATION) for every (language, model) pair."""
    return [pattern.format(**pair) for pair in cfl_pairs(settings)]


def cfl_run_files(settings: dict[str, Any], language: str, model: str, pattern: str) -> list[str]:
    """``pattern`` (CFL_RUN_MODEL, CFL_RUN_CURVE) for every grid run of ``language`` and the model slug ``model``."""
    runs = cfl_grid(cfl_settings(settings), language, architecture_name(model))
    return [pattern.format(language=language, model=model, setting=run.setting) for run in runs]


def cfl_train_options(setting: str) -> str:
    """The grid point's options of ``stacklm cfl train``."""
    learning_rate, vector_size, restart = parse_setting(setting)
    size = ["--vector-size", str(vector_size)] if vector_size is not None else []
    return shlex.join(["--learning-rate", repr(learning_rate), *size, "--restart", str(restart)])


def cfl_figures(figure: str) -> list[str]:
    return [CFL_FIGURE.format(figure=figure, extension=extension) for extension in FIGURE_EXTENSIONS]


def cfl_targets(settings: dict[str, Any]) -> list[str]:
    """The CFL records and figures; none when ``cfl.languages`` is empty."""
    if not cfl_settings(settings).languages:
        return []
    return [CFL_CURVES, CFL_METRICS, *(path for figure in CFL_FIGURES for path in cfl_figures(figure))]


# ---------------------------------------------------------------------------------------------
# Commands of the rules ``settings``, ``hparams`` and ``select``.


def write_json(path: str | Path, data: Any) -> None:
    """``data`` as sorted, indented JSON at ``path``, written atomically."""
    write_text_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def settings_command(args: argparse.Namespace) -> int:
    try:
        settings = json.loads(args.json)
    except json.JSONDecodeError as error:
        raise StacklmError(f"--json: not JSON: {error}") from None
    if not isinstance(settings, dict):
        raise StacklmError("--json: not a JSON object")
    if SECTIONS not in settings:  # a whole settings file; a reader's sections were checked whole by `resolve`
        validate_settings(settings)
    write_json(args.out, settings)
    return 0


def hparams_command(args: argparse.Namespace) -> int:
    settings = read_settings(args.settings)
    expected = settings["search"]["trials"]
    if len(args.out) != expected:
        raise StacklmError(f"--out: {len(args.out)} files given for {expected} trials (search.trials)")
    for trial, path in enumerate(args.out, start=1):
        write_json(path, asdict(draw_hyperparameters(settings["search"], args.task, args.architecture, trial)))
    return 0


def select_command(args: argparse.Namespace) -> int:
    settings = read_settings(args.settings)
    if len(args.hparams) == 1 and not args.curves:
        best, reason = 0, "the only trial, not trained: nothing to compare it with"
    elif len(args.hparams) != len(args.curves):
        raise StacklmError(f"--hparams and --curves differ in length ({len(args.hparams)} and {len(args.curves)})")
    else:
        import pandas as pd  # here, not at the top: hparams and settings, hundreds of jobs, do without it

        scores = [lowest_validation_cross_entropy(pd.read_parquet(path)) for path in args.curves]
        best = select_trial(scores)
        reason = f"validation cross-entropy {scores[best]:.6f}, the lowest of {len(scores)} trials"
    chosen = json.loads(Path(args.hparams[best]).read_text())
    chosen["max_epochs"] = settings["final"]["max_epochs"]
    write_json(args.out, chosen)
    print(f"selected trial {best + 1} ({reason}): {args.hparams[best]}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    settings = subparsers.add_parser("settings")
    settings.add_argument("--json", required=True, help="the resolved settings (preset applied), or the sections one kind of job reads, as JSON")
    settings.add_argument("--out", required=True, help="where to write them: results/settings/<reader>.json")
    settings.set_defaults(func=settings_command)

    hparams = subparsers.add_parser("hparams")
    hparams.add_argument("--task", required=True)
    hparams.add_argument("--architecture", required=True, help="registry name, e.g. Tf+Nd")
    hparams.add_argument("--settings", required=True)
    hparams.add_argument("--out", required=True, nargs="+", help="one HP.json per trial, trial 1 first")
    hparams.set_defaults(func=hparams_command)

    select = subparsers.add_parser("select")
    select.add_argument("--settings", required=True)
    select.add_argument("--hparams", required=True, nargs="+", help="the trials' HP.json files, trial 1 first")
    select.add_argument("--curves", default=[], nargs="*", help="the trials' train.parquet files, same order (none for a single trial)")
    select.add_argument("--out", required=True, help="the chosen HP.json, with final.max_epochs")
    select.set_defaults(func=select_command)

