"""No config string reaches a rule's shell as shell syntax.

Every string-valued key of the config schema gets a hostile value (spaces, ``$(…)``, backticks,
``;``, quotes) that would create a marker file if bash ever ran it. A key the config check
refuses never reaches a shell; the accepted ones are set all at once, Snakemake renders every
job's shell command (a dry run with ``-p``), and real bash runs each of them with fake
``stacklm`` and ``python`` that record their arguments: no marker may appear, and each value
that reaches a command arrives as one intact argument (or inside the JSON of one).
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from snakemake.utils import update_config

import stacklm.workflow.settings as resolution
from stacklm.data.upstream import UPSTREAM
from stacklm.errors import StacklmError

from tests.workflow.snakemake_runs import ROOT, run_snakemake

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
KeyPath = tuple[str | int, ...]  # keys, and 0 for an array's first item


def string_leaves(schema: dict[str, Any], path: KeyPath = ()) -> Iterator[KeyPath]:
    """Every place of the schema that holds a string: a key, or the items of an array."""
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if "string" in types or any(isinstance(value, str) for value in schema.get("enum", [])):
        yield path
    for key, child in schema.get("properties", {}).items():
        yield from string_leaves(child, (*path, key))
    if "items" in schema:
        yield from string_leaves(schema["items"], (*path, 0))


def hostile(marker: Path) -> str:
    return f"dir with space $(touch {marker}) `touch {marker}`; touch {marker} 'quote\" end"


def set_value(config: dict[str, Any], path: KeyPath, value: str) -> None:
    """``value`` at ``path``; an array becomes (or starts with) one hostile item."""
    parent: Any = config
    for position, key in enumerate(path[:-1]):
        if isinstance(key, int):
            if not parent:
                parent.append({})
        elif key not in parent:
            parent[key] = [] if isinstance(path[position + 1], int) else {}
        parent = parent[key]
    last = path[-1]
    if isinstance(last, int):
        parent[:] = [value]
    else:
        parent[last] = value


def get_value(config: Any, path: KeyPath) -> Any:
    for key in path:
        config = config[key]
    return config


def resolved(overrides: dict[str, Any]) -> dict[str, Any] | None:
    """The settings the Snakefile resolves from a ``--configfile`` holding ``overrides`` (user
    keys, over the preset), or None where its check (the schema, then what it cannot express)
    refuses them."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    update_config(config, copy.deepcopy(overrides))  # Snakemake's `config`
    try:
        return resolution.plain(resolution.resolve(config, overrides))
    except StacklmError:
        return None


def strings_in(argument: str) -> list[str]:
    """``argument`` and, where it is JSON, every string inside it."""
    found = [argument]
    try:
        stack = [json.loads(argument)]
    except json.JSONDecodeError:
        return found
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def fake_commands(folder: Path, record: Path) -> None:
    """``stacklm`` and ``python`` that append their arguments, as JSON, to ``record``."""
    folder.mkdir()
    for name in ("stacklm", "python"):
        script = folder / name
        script.write_text(f"#!{sys.executable}\nimport json, sys\nwith open({str(record)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n")
        script.chmod(0o755)


@pytest.mark.e2e
def test_no_config_string_runs_in_a_rule_shell(workflow_copy, tmp_path: Path) -> None:
    overrides: dict[str, Any] = {"preset": "ci", "data": {"source": "upstream"}}  # the mirror reaches data_fetch
    markers = tmp_path / "markers"
    markers.mkdir()
    values: dict[KeyPath, str] = {}
    for path in string_leaves(yaml.safe_load(SCHEMA.read_text())):
        value = hostile(markers / "-".join(map(str, path)))
        candidate = copy.deepcopy(overrides)
        set_value(candidate, path, value)
        if resolved(candidate) is not None:
            values[path] = value
    assert ("data", "upstream_mirror") in values and ("tracking", "uri") in values
    for path, value in values.items():
        set_value(overrides, path, value)
    settings = resolved(overrides)
    assert settings is not None
    for path, value in values.items():
        assert get_value(settings, path) == value, path

    directory = workflow_copy(overrides)
    # The DAG checks that the mirror holds every upstream file it would read: give it (empty) ones,
    # under the hostile folder name, relative to the workflow's directory.
    for file in UPSTREAM["question-formation"].values():
        copy_path = directory / values[("data", "upstream_mirror")] / "question-formation" / file.name
        copy_path.parent.mkdir(parents=True, exist_ok=True)
        copy_path.touch()
    result = run_snakemake(directory, "-n", "-p", "--workflow-profile", "none", "--configfile", "test.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    commands = [line.split("Shell command: ", 1)[1] for line in output.splitlines() if line.startswith("Shell command: ") and line != "Shell command: None"]
    assert any("stacklm data fetch" in command for command in commands)

    record = tmp_path / "arguments.jsonl"
    fake_commands(tmp_path / "bin", record)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    environment = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    for command in commands:
        words = shlex.split(command)
        for redirect, target in zip(words, words[1:]):
            if redirect in (">", "2>"):
                (sandbox / target).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["bash", "-c", command], cwd=sandbox, env=environment, check=True, timeout=60)
    assert sorted(markers.iterdir()) == []

    arguments = [argument for line in record.read_text().splitlines() for argument in json.loads(line)]
    delivered = {path for path, value in values.items() if any(value in strings_in(argument) for argument in arguments)}
    for path, value in values.items():
        marker = str(markers / "-".join(map(str, path)))
        if any(marker in argument for argument in arguments):
            assert path in delivered, f"{path}: the value reached a command, but not as one intact argument"
    assert ("data", "upstream_mirror") in delivered


@pytest.mark.e2e
def test_a_mirror_folder_named_with_shell_syntax_is_read(workflow_copy, tmp_path: Path, upstream_dir: Path) -> None:
    mirror = tmp_path / "mirror with space $(touch PWNED) `touch PWNED`; touch PWNED 'quote"
    mirror.mkdir()
    (mirror / "question-formation").symlink_to(upstream_dir / "question-formation")
    directory = workflow_copy({"preset": "ci", "data": {"source": "upstream", "upstream_mirror": str(mirror)}})
    target = "results/upstream/question-formation/validation.tsv"
    result = run_snakemake(directory, target, "--cores", "1", "--workflow-profile", "none", "--configfile", "test.yaml")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert not (directory / "PWNED").exists()
    assert (directory / target).read_bytes() == (upstream_dir / "question-formation" / "question.dev").read_bytes()
