"""The SG score and its circuits (``docs/design/cfl-and-ptb.md#sg-score``, step 8; DuSell & Chiang (2022) App. 11).

``circuits.json`` holds ``{"circuits": [{"name": …, "suites": [suite names]}, …]}``; each suite
belongs to one circuit. The SG score is the unweighted mean of the suite accuracies; a
circuit's score is the unweighted mean over its suites.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacklm.errors import StacklmError


@dataclass(frozen=True)
class Circuit:
    name: str
    suites: tuple[str, ...]


@dataclass(frozen=True)
class SGScores:
    overall: float
    circuits: tuple[tuple[str, float], ...]  # (circuit name, score), in the file's order


def circuits_from_dict(data: Any, source: str) -> tuple[Circuit, ...]:
    if not isinstance(data, dict) or not isinstance(data.get("circuits"), list) or not data["circuits"]:
        raise StacklmError(f"{source}: expected {{\"circuits\": [{{\"name\": …, \"suites\": […]}}, …]}}")
    circuits: list[Circuit] = []
    seen: dict[str, str] = {}
    for index, entry in enumerate(data["circuits"], start=1):
        where = f"{source}: circuit {index}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise StacklmError(f"{where}: missing string key 'name'")
        suites = entry.get("suites")
        if not isinstance(suites, list) or not suites or not all(isinstance(suite, str) for suite in suites):
            raise StacklmError(f"{where} ({entry['name']!r}): 'suites' must be a non-empty list of suite names")
        for suite in suites:
            if suite in seen:
                raise StacklmError(f"{where} ({entry['name']!r}): suite {suite!r} is already in circuit {seen[suite]!r}")
            seen[suite] = entry["name"]
        circuits.append(Circuit(entry["name"], tuple(suites)))
    return tuple(circuits)


def read_circuits(path: str | Path) -> tuple[Circuit, ...]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StacklmError(f"{path}: circuits file not found") from None
    except json.JSONDecodeError as error:
        raise StacklmError(f"{path}:{error.lineno}: not valid JSON ({error.msg}, column {error.colno})") from None
    return circuits_from_dict(data, str(path))


def sg_scores(accuracies: Mapping[str, float], circuits: tuple[Circuit, ...]) -> SGScores:
    """The SG score over exactly the circuits' suites, and each circuit's score."""
    expected = {suite for circuit in circuits for suite in circuit.suites}
    missing, extra = sorted(expected - accuracies.keys()), sorted(accuracies.keys() - expected)
    if missing or extra:
        raise StacklmError(f"suite accuracies do not match the circuits: missing {missing}, in no circuit {extra}")
    overall = sum(accuracies[suite] for suite in expected) / len(expected)
    return SGScores(
        overall, tuple((circuit.name, sum(accuracies[s] for s in circuit.suites) / len(circuit.suites)) for circuit in circuits)
    )
