"""A job's settings file answers the sections it lists, and refuses any other by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import stacklm.workflow.settings as resolution
from stacklm.errors import StacklmError
from stacklm.settings_file import read_settings

ROOT = Path(__file__).resolve().parents[1]


def test_a_reader_file_holds_its_sections_only_and_names_any_other_asked_for(tmp_path: Path) -> None:
    settings = resolution.resolve(yaml.safe_load((ROOT / "config.yaml").read_text()))
    path = tmp_path / "train.json"
    path.write_text(json.dumps(resolution.settings_for(settings, "train")))
    read = read_settings(path)
    assert dict(read) == {section: settings[section] for section in resolution.SETTINGS_READ["train"]}
    assert read.get("training", {}) == settings["training"]
    with pytest.raises(StacklmError, match=f"^{path}: holds the sections training, evaluation, model only, not 'tracking'"):
        read.get("tracking", {})


def test_a_listed_section_the_config_lacks_reads_as_its_default(tmp_path: Path) -> None:
    path = tmp_path / "cfl_train.json"
    path.write_text(json.dumps(resolution.settings_for({"training": {"max_epochs": 3}}, "cfl_train")))
    read = read_settings(path)
    assert read.get("cfl", {}) == {} and read["training"] == {"max_epochs": 3}


def test_a_whole_settings_file_answers_every_section_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "resolution.json"
    path.write_text(json.dumps({"training": {"max_epochs": 3}}))
    read = read_settings(path)
    assert read.get("tracking", {}) == {} and read["training"] == {"max_epochs": 3}


def test_every_reader_of_the_workflow_has_a_settings_file_rule() -> None:
    rules = "\n".join(path.read_text() for path in (ROOT / "workflow" / "rules").glob("*.smk"))
    used = {reader for reader in resolution.SETTINGS_READ if f'settings_file("{reader}")' in rules}
    assert used == set(resolution.SETTINGS_READ)
    assert "SETTINGS_JSON" not in rules
