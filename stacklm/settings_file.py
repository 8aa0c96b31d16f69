"""Reading the settings file a command is given, JSON files with errors naming their line, and
``build``: the one builder of typed settings from plain values, naming each bad key.

In the workflow a job reads ``results/settings/<reader>.json``: only the sections of the
resolved config that this kind of job reads (``stacklm.workflow.settings.SETTINGS_READ``), listed under
``"sections"``. A change elsewhere in the config (the tracking URI, the report threshold) then
leaves that file, and the job, as they were. Asking such a file for a section it does not list
is an error naming the file and the section, never a silent default. A file without
``"sections"`` (a whole settings file, written by hand) answers every section it holds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, TypeVar, Union, get_args, get_origin, get_type_hints

from stacklm.errors import StacklmError, located

SETTINGS_FILE = "results/settings/{reader}.json"  # in the workflow, the sections of the settings one kind of job reads

SECTIONS = "sections"
SettingsT = TypeVar("SettingsT")


def read_json(path: str | Path) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except OSError as error:
        raise located(path, None, f"cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise located(path, error.lineno, f"not valid JSON: {error.msg}") from None


class Settings(Mapping[str, Any]):
    """The sections of one settings file; a section the file does not list is an error."""

    def __init__(self, path: str | Path, values: dict[str, Any]) -> None:
        self.path = path
        self.values = {key: value for key, value in values.items() if key != SECTIONS}
        self.sections: list[str] | None = values.get(SECTIONS)

    def __getitem__(self, section: str) -> Any:
        if section in self.values:
            return self.values[section]
        if self.sections is not None and section not in self.sections:
            raise located(self.path, None, f"holds the sections {', '.join(self.sections)} only, not {section!r}: "
                                           "list it among its reader's sections in stacklm.workflow.settings.SETTINGS_READ")
        raise KeyError(section)

    def section(self, name: str, cls: type[SettingsT]) -> SettingsT:
        """The section ``name`` as ``cls`` (``build``: an error names this file and the key);
        ``cls``'s defaults where a whole settings file written by hand has no such section."""
        return build(cls, self.get(name, {}), name, source=self.path)

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def read_settings(path: str | Path) -> Settings:
    values = read_json(path)
    if not isinstance(values, dict):
        raise located(path, None, "the settings must be a JSON object")
    return Settings(path, values)


# ---------------------------------------------------------------------------------------------
# The one builder of typed settings: a frozen dataclass from the plain values of a JSON or YAML
# file (a settings section, a trial's HP.json, a saved model's config).

def build(cls: type[SettingsT], data: Any, key: str = "", source: str | Path | None = None) -> SettingsT:
    """The ``cls`` instance that ``data`` describes (``cls`` a dataclass, or a type such as
    ``tuple[str, ...]``), read by ``cls``'s type hints: nested
    dataclasses from mappings (a union of dataclasses by their ``kind``), tuples and lists from
    lists, ``Literal`` values among theirs, ``X | None`` as null or an ``X``; a field ``data``
    leaves out takes its default. An unknown key, a missing required one, a value of the wrong
    type or one that ``cls`` refuses raises a ``StacklmError`` naming the key under ``key``
    (``config key 'training.max_epochs': ...``), and ``source``, the file, when given.

    A ``float`` must be finite: NaN and infinity are refused by key, where a NaN dropout or
    learning rate would only fail later, in every job that reads it. An integer stands for a
    ``float`` as it is (JSON and YAML write 60 and 60.0 alike; the
    settings files are written back unchanged)."""
    try:
        return _build(cls, data, key) if dataclasses.is_dataclass(cls) else _value(cls, data, key)
    except StacklmError as error:
        if source is None:
            raise
        raise located(source, None, str(error)) from None


def _build(cls: type[SettingsT], data: Any, key: str) -> SettingsT:
    if not isinstance(data, Mapping):
        raise _refused(key, f"expected a mapping of {cls.__name__}'s keys, got {data!r}")
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    for name in data:
        if name not in fields:
            raise _refused(_join(key, name), f"unknown key of {cls.__name__}; known: {', '.join(fields)}")
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _value(hints[name], data[name], _join(key, name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise _refused(_join(key, name), f"required by {cls.__name__}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise _refused(key or cls.__name__, str(error)) from None


def _refused(key: str, message: str) -> StacklmError:
    return StacklmError(f"config key '{key}': {message}")


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _value(hint: Any, value: Any, key: str) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [option for option in get_args(hint) if option is not type(None)]
        if value is None and len(options) < len(get_args(hint)):
            return None
        if len(options) == 1:
            return _value(options[0], value, key)
        if all(dataclasses.is_dataclass(option) for option in options):
            return _tagged(options, value, key)
        for option in options:
            try:
                return _value(option, value, key)
            except StacklmError:
                continue
        raise _refused(key, f"expected {' or '.join(getattr(option, '__name__', str(option)) for option in options)}, got {value!r}")
    if origin is Literal:
        if value not in get_args(hint):
            raise _refused(key, f"{value!r} is not one of {', '.join(map(repr, get_args(hint)))}")
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, key)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise _refused(key, f"expected a list, got {value!r}")
        arguments = get_args(hint)
        element = arguments[0] if arguments else Any
        items = [_value(element, item, f"{key}[{index}]") for index, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if hint is Any:
        return value
    if hint is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _refused(key, f"expected a number, got {value!r}")
        if not math.isfinite(value):  # YAML's .nan and .inf, JSON's NaN and Infinity
            raise _refused(key, f"expected a finite number, got {value!r}")
        return value
    if hint in (int, str, bool):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise _refused(key, f"expected {hint.__name__}, got {value!r}")
        return value
    raise TypeError(f"{key}: no builder for the type {hint}")


def _tagged(options: list[Any], value: Any, key: str) -> Any:
    """One of several dataclasses, chosen by the ``kind`` key that each declares first, as a default."""
    kinds = {dataclasses.fields(option)[0].default: option for option in options}
    if not isinstance(value, Mapping) or value.get("kind") not in kinds:
        raise _refused(_join(key, "kind"), f"expected one of {', '.join(map(repr, kinds))}")
    return _build(kinds[value["kind"]], value, key)
