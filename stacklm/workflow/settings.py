"""The settings every job reads: config.yaml, the chosen preset over it, the user's keys over
both (``--configfile`` files, then ``--config``), validated as a whole before any job runs, and
written per kind of job as ``results/settings/<reader>.json``.

``resolve`` checks the resolved settings against ``config.schema.yaml`` beside this module (types,
bounds, descriptions), builds ``ResolvedSettings`` from them (``stacklm.settings_file.build``:
each section's frozen dataclass, which owns its defaults and refuses what the schema cannot
express, such as bounds in order or the CFL grid), then asks each experiment what needs its
registries (architecture, task and PTB model names): every bad value is named by its key. The
Snakefile's lookups read that one tree; each job builds its sections from its file with the
same builder.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from stacklm.errors import StacklmError
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.experiments.cfl.settings import CflSettings
from stacklm.experiments.common import write_json
from stacklm.experiments.ptb.settings import PtbSettings
from stacklm.experiments.transformations.dag import check_settings as check_transformations
from stacklm.experiments.transformations.settings import (
    PAPER_ARCHITECTURES,
    DataSettings,
    FinalSettings,
    ReportSettings,
    ResourceSettings,
    SearchSettings,
)
from stacklm.models.options import ModelSettings
from stacklm.settings_file import SECTIONS, SETTINGS_FILE, build
from stacklm.tasks import TASK_NAMES
from stacklm.tracking.mlflow_mirror import TrackingSettings
from stacklm.training.config import TrainingSettings


# Settings that say how often a job reports, never what it computes: they belong to no reader's
# file (nor to any run's fingerprint), so that changing them reruns nothing. The file of the reader
# "cadence" holds them alone; the jobs that report read it as an ancient input (workflow/rules/
# train.smk, cfl.smk, ptb.smk: Snakemake reruns no job for a newer ancient file), through --cadence.
CADENCE: dict[str, tuple[str, ...]] = {"training": ("progress_interval_s",), "ptb": ("progress_interval_s",)}
CADENCE_READER = "cadence"

# The settings sections each kind of job reads (results/settings/{reader}.json holds those only):
# a change of config reruns a job only when a section it reads changed. A section missing
# here is an error naming the file when the job asks for it (stacklm.settings_file).
SETTINGS_READ: dict[str, tuple[str, ...]] = {
    "train": ("training", "evaluation", "model"),
    "evaluate": ("evaluation",),
    "hparams": ("search",),
    "select": ("final",),
    "report": ("tasks", "architectures", "final", "report"),
    "tracking": ("tasks", "cfl", "ptb", "tracking"),
    "cfl_train": ("cfl", "training"),
    "cfl_evaluate": ("cfl", "evaluation"),
    "cadence": tuple(CADENCE),  # the cadence settings alone (below)
}

@dataclass(frozen=True)
class ResolvedSettings:
    """The whole settings tree, a section per top-level key of config.yaml: the transformations'
    (``tasks`` … ``resources``), the library's (``model``, ``training``, ``evaluation``,
    ``tracking``), the CFL experiments' (``cfl``) and the PTB experiment's (``ptb``). The
    defaults are the papers' settings, owned by each section's dataclass; config.yaml lists the
    same values (tests/workflow/test_settings.py keeps them equal)."""

    tasks: tuple[str, ...] = TASK_NAMES
    data: DataSettings = field(default_factory=DataSettings)
    architectures: tuple[str, ...] = PAPER_ARCHITECTURES
    search: SearchSettings = field(default_factory=SearchSettings)
    final: FinalSettings = field(default_factory=FinalSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    resources: ResourceSettings = field(default_factory=ResourceSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    tracking: TrackingSettings = field(default_factory=TrackingSettings)
    cfl: CflSettings = field(default_factory=CflSettings)
    ptb: PtbSettings = field(default_factory=PtbSettings)


def plain(value: Any) -> Any:
    """``value`` as the plain values of a settings file: a dataclass as a dict, tuples as lists."""
    if dataclasses.is_dataclass(value):
        return {item.name: plain(getattr(value, item.name)) for item in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    return value


SCHEMA = Path(__file__).with_name("config.schema.yaml")  # package data; workflow/schemas/ links to it
PRESET_KEYS = ("preset", "presets")  # choose the preset; not settings any job reads
STRING_HINT = (
    "(a nested value given with --config arrives as a string: put nested keys in a YAML file"
    " passed with --configfile, docs/running.md)"
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


def resolve(config: Mapping[str, Any], user_keys: Mapping[str, Any] | None = None) -> ResolvedSettings:
    """The settings every job reads: config.yaml, the preset over it, the user's keys over
    both, validated as a whole (``validate_settings``).

    ``config`` is Snakemake's ``config``: config.yaml with the user's keys already merged in;
    ``user_keys`` are those keys alone (``--configfile`` files, then ``--config``: Snakemake's
    ``workflow.config_settings.overwrite_config``), merged again over the preset so that a
    key the user sets wins over the preset's.
    """
    settings = apply_preset(config)
    user = {key: value for key, value in (user_keys or {}).items() if key not in PRESET_KEYS}
    return validate_settings(_merge(settings, user, path=None))


def snakefile_settings(config: Mapping[str, Any], user_keys: Mapping[str, Any]) -> ResolvedSettings:
    """``resolve`` for the Snakefile: an invalid setting stops Snakemake before any job with
    the messages naming the keys, and no traceback."""
    try:
        return resolve(config, user_keys)
    except StacklmError as error:
        raise SystemExit(f"stacklm: invalid settings\n{error}") from None


def validate_settings(settings: Mapping[str, Any]) -> ResolvedSettings:
    """``settings`` (plain values: the whole config, preset applied) as ``ResolvedSettings``.
    Raise a ``StacklmError`` naming the key of every value the schema rejects (one per line),
    else of the first one no run could use (``build``, then ``check_settings``)."""
    errors = list(_settings_validator().iter_errors(settings))
    if errors:
        lines = sorted({line for error in errors for line in _schema_messages(error)})  # by key
        if any(error.validator == "type" and isinstance(error.instance, str) for error in errors):
            lines.append(STRING_HINT)
        raise StacklmError("\n".join(lines))
    resolved = build(ResolvedSettings, settings)
    check_settings(resolved)
    return resolved


@functools.cache
def _settings_validator() -> Any:
    """The schema's validator, where an integer is an ``int`` (JSON Schema also takes 2.0)."""
    import jsonschema
    import yaml

    if not SCHEMA.is_file():  # an install that left out the package data
        raise StacklmError(f"the settings schema {SCHEMA} is missing from the installed package: reinstall stacklm (README \"Two commands\")")
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


def check_settings(settings: ResolvedSettings) -> None:
    """Raise a ``StacklmError`` naming the key of the first setting no run could use, among
    those only a registry can judge: each experiment checks its own."""
    check_transformations(settings)
    settings.ptb.check_models()


def settings_file(reader: str) -> str:
    """The settings file of the jobs of kind ``reader`` (a key of ``SETTINGS_READ``)."""
    if reader not in SETTINGS_READ:
        raise StacklmError(f"no settings file for {reader!r}; known: {', '.join(SETTINGS_READ)}")
    return SETTINGS_FILE.format(reader=reader)


def settings_for(settings: ResolvedSettings, reader: str) -> dict[str, Any]:
    """The contents of ``reader``'s settings file: its sections of ``settings`` as plain values,
    and their list; the cadence settings (``CADENCE``) in the cadence reader's file only."""
    sections = SETTINGS_READ[reader]
    values = {section: plain(getattr(settings, section)) for section in sections}
    for section, keys in CADENCE.items():
        if section in values:
            cadence = reader == CADENCE_READER
            values[section] = {key: value for key, value in values[section].items() if (key in keys) == cadence}
    return {SECTIONS: list(sections), **values}


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


def register(subparsers: argparse._SubParsersAction) -> None:
    settings = subparsers.add_parser("settings")
    settings.add_argument("--json", required=True, help="the resolved settings (preset applied), or the sections one kind of job reads, as JSON")
    settings.add_argument("--out", required=True, help="where to write them: results/settings/<reader>.json")
    settings.set_defaults(func=settings_command)
