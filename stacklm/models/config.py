"""Building frozen config dataclasses from plain dicts, rejecting unknown keys by name.

Every model config and option set in ``stacklm.models`` is a frozen dataclass; ``from_dict``
turns the JSON a user wrote into one. Nested dataclass fields are read from nested dicts,
tuple fields from lists; an unknown or missing key raises a ``StacklmError`` naming the key
with its path (``options.reference.pushed_vector``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping, TypeVar, Union, get_args, get_origin, get_type_hints

from stacklm.errors import StacklmError

ConfigT = TypeVar("ConfigT")


def from_dict(cls: type[ConfigT], data: Mapping[str, Any], path: str = "") -> ConfigT:
    """The ``cls`` instance described by ``data``; an error names any unknown or missing key."""
    if not isinstance(data, Mapping):
        raise StacklmError(f"{path or cls.__name__}: expected a mapping, got {type(data).__name__}")
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    for key in data:
        if key not in fields:
            raise StacklmError(f"unknown key {_join(path, key)!r} for {cls.__name__} (known: {', '.join(fields)})")
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _convert(hints[name], data[name], _join(path, name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise StacklmError(f"missing key {_join(path, name)!r} for {cls.__name__}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise StacklmError(f"{path or cls.__name__}: {error}") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _convert(hint: Any, value: Any, path: str) -> Any:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [option for option in get_args(hint) if option is not type(None)]
        if value is None:
            return None
        if len(options) == 1:
            return _convert(options[0], value, path)
        if all(dataclasses.is_dataclass(option) for option in options):
            return _convert_tagged(options, value, path)
        return value
    if origin is typing.Literal:
        if value not in get_args(hint):
            raise StacklmError(f"{path}: {value!r} is not one of {', '.join(map(repr, get_args(hint)))}")
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value, path)
    if origin is tuple:
        if isinstance(value, (str, Mapping)) or not hasattr(value, "__iter__"):
            raise StacklmError(f"{path}: expected a list, got {value!r}")
        element = get_args(hint)[0] if get_args(hint) else Any
        return tuple(value if element is Any else _convert(element, item, f"{path}[{index}]") for index, item in enumerate(value))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and (not isinstance(value, hint) or (hint is not bool and isinstance(value, bool))):
        raise StacklmError(f"{path}: expected {hint.__name__}, got {value!r}")
    return value


def _convert_tagged(options: list[Any], value: Any, path: str) -> Any:
    """One of several dataclasses, chosen by the ``kind`` key that each declares as a default."""
    kinds = {dataclasses.fields(option)[0].default: option for option in options}
    if not isinstance(value, Mapping) or value.get("kind") not in kinds:
        raise StacklmError(f"{_join(path, 'kind')}: expected one of {', '.join(map(repr, kinds))}")
    return from_dict(kinds[value["kind"]], value, path)
