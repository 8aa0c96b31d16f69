"""What the Snakefile asks of stacklm: the resolved settings and the list of targets.

The Snakefile validates ``config.yaml`` against ``workflow/schemas/config.schema.yaml``; this
module applies the chosen preset, re-checks what JSON Schema cannot express, and answers the
workflow's lookups, so that no decision lives in Snakemake code.
"""

from __future__ import annotations

import copy
from typing import Any

from stacklm.errors import StacklmError


def apply_preset(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the preset named by ``config['preset']`` merged over it (dicts deeply)."""
    name = config.get("preset")
    presets = config.get("presets", {})
    resolved = {key: copy.deepcopy(value) for key, value in config.items() if key not in ("preset", "presets")}
    if name is None:
        return resolved
    if name not in presets:
        raise StacklmError(f"config key 'preset': unknown preset {name!r}; known: {', '.join(sorted(presets))}")
    return _merge(resolved, presets[name], path="presets." + name)


def _merge(base: dict[str, Any], override: dict[str, Any], path: str) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if key not in base:
            raise StacklmError(f"config key '{path}.{key}': not a key of the settings")
        if isinstance(value, dict) and isinstance(base[key], dict):
            merged[key] = _merge(base[key], value, f"{path}.{key}")
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def resolve(config: dict[str, Any]) -> dict[str, Any]:
    return apply_preset(config)


def all_targets(settings: dict[str, Any]) -> list[str]:
    return []
