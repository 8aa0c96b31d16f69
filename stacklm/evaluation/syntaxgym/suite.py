"""A SyntaxGym test suite read from its JSON file, checked, with every formula parsed.

The file (the SyntaxGym format of the suites DuSell & Chiang (2022) scored): ``meta`` (``name``,
``metric``), ``predictions`` (``{"type": "formula", "formula": …}``), ``region_meta`` and
``items``, each with an ``item_number`` and ``conditions``, each a ``condition_name`` and
``regions`` (``region_number``, ``content``). Every suite of the paper aggregates a region by
``metric: sum``; no other metric is accepted. As syntaxgym does, a region's content may not
begin or end with whitespace. Every region a formula reads must exist in every item.

Errors name the file and the place: ``path: item 3, condition 'x': …``, ``path: prediction 2: …``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.formula import Formula, FormulaError, parse_formula

SUPPORTED_METRIC = "sum"


@dataclass(frozen=True)
class Region:
    number: int
    content: str


@dataclass(frozen=True)
class Condition:
    name: str
    regions: tuple[Region, ...]  # in the file's order, the order of the sentence


@dataclass(frozen=True)
class Item:
    number: int
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Suite:
    name: str
    source: str  # the file it was read from, for messages
    predictions: tuple[Formula, ...]
    items: tuple[Item, ...]


def _field(data: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise StacklmError(f"{where}: missing key {key!r}")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StacklmError(f"{where}: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _region(data: Any, where: str) -> Region:
    number, content = _field(data, "region_number", int, where), _field(data, "content", str, where)
    if content != content.strip():
        raise StacklmError(f"{where}, region {number}: content {content!r} begins or ends with whitespace")
    return Region(number, content)


def _condition(data: Any, where: str) -> Condition:
    name = _field(data, "condition_name", str, where)
    where = f"{where}, condition {name!r}"
    regions = tuple(_region(region, where) for region in _field(data, "regions", list, where))
    numbers = [region.number for region in regions]
    if len(set(numbers)) != len(numbers):
        raise StacklmError(f"{where}: region numbers repeat: {numbers}")
    if not regions:
        raise StacklmError(f"{where}: no regions")
    return Condition(name, regions)


def _item(data: Any, where: str) -> Item:
    number = _field(data, "item_number", int, where)
    where = f"{where}: item {number}"
    conditions = tuple(_condition(condition, where) for condition in _field(data, "conditions", list, where))
    names = [condition.name for condition in conditions]
    if len(set(names)) != len(names):
        raise StacklmError(f"{where}: condition names repeat: {names}")
    return Item(number, conditions)


def _prediction(data: Any, index: int, where: str) -> Formula:
    where = f"{where}: prediction {index}"
    kind = _field(data, "type", str, where)
    if kind != "formula":
        raise StacklmError(f"{where}: unknown prediction type {kind!r} (only 'formula')")
    text = _field(data, "formula", str, where)
    try:
        return parse_formula(text)
    except FormulaError as error:
        raise StacklmError(f"{where}: formula {text!r}: {error}") from None


def _check_references(predictions: tuple[Formula, ...], items: tuple[Item, ...], where: str) -> None:
    for item in items:
        present = {(condition.name, region.number) for condition in item.conditions for region in condition.regions}
        for index, formula in enumerate(predictions, start=1):
            missing = sorted(formula.regions() - present)
            if missing:
                shown = ", ".join(f"region {region} of condition {condition!r}" for condition, region in missing)
                raise StacklmError(f"{where}: item {item.number}: prediction {index} reads {shown}, which the item lacks")


def suite_from_dict(data: Any, source: str) -> Suite:
    """The suite of a parsed JSON document; ``source`` names it in errors."""
    meta = _field(data, "meta", dict, source)
    name = _field(meta, "name", str, f"{source}: meta")
    metric = _field(meta, "metric", str, f"{source}: meta")
    if metric != SUPPORTED_METRIC:
        raise StacklmError(f"{source}: meta: metric {metric!r} is not supported (every suite of the paper uses {SUPPORTED_METRIC!r})")
    predictions = tuple(_prediction(p, index, source) for index, p in enumerate(_field(data, "predictions", list, source), start=1))
    if not predictions:
        raise StacklmError(f"{source}: no predictions")
    items = tuple(_item(item, source) for item in _field(data, "items", list, source))
    if not items:
        raise StacklmError(f"{source}: no items")
    numbers = [item.number for item in items]
    if len(set(numbers)) != len(numbers):
        raise StacklmError(f"{source}: item numbers repeat")
    _check_references(predictions, items, source)
    return Suite(name, source, predictions, items)


def read_suite(path: str | Path) -> Suite:
    """The suite in the JSON file ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StacklmError(f"{path}: test suite file not found") from None
    except UnicodeDecodeError as error:
        raise StacklmError(f"{path}: not UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise StacklmError(f"{path}:{error.lineno}: not valid JSON ({error.msg}, column {error.colno})") from None
    return suite_from_dict(data, str(path))
