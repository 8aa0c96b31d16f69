"""A job's settings file answers the sections it lists, and refuses any other by name; ``build``
makes typed settings of plain values, naming the key of every bad one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import yaml

import stacklm.workflow.settings as resolution
from stacklm.errors import StacklmError
from stacklm.settings_file import build, read_settings
from stacklm.experiments.cfl.settings import CflSettings
from stacklm.training.config import TrainingSettings

ROOT = Path(__file__).resolve().parents[1]


def test_a_reader_file_holds_its_sections_only_and_names_any_other_asked_for(tmp_path: Path) -> None:
    settings = resolution.resolve(yaml.safe_load((ROOT / "config.yaml").read_text()))
    path = tmp_path / "train.json"
    path.write_text(json.dumps(resolution.settings_for(settings, "train")))
    read = read_settings(path)
    expected = {section: resolution.plain(getattr(settings, section)) for section in resolution.SETTINGS_READ["train"]}
    del expected["training"]["progress_interval_s"]  # a cadence setting: the cadence file's alone
    assert dict(read) == expected
    assert read.section("training", TrainingSettings) == settings.training
    with pytest.raises(StacklmError, match=f"^{path}: holds the sections training, evaluation, model only, not 'tracking'"):
        read.get("tracking", {})


def test_a_listed_section_the_file_lacks_reads_as_its_default(tmp_path: Path) -> None:
    path = tmp_path / "cfl_train.json"
    path.write_text(json.dumps({"sections": ["cfl", "training"], "training": {"max_epochs": 3}}))
    read = read_settings(path)
    assert read.section("cfl", CflSettings) == CflSettings() and read.section("training", TrainingSettings) == TrainingSettings(max_epochs=3)


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


# ---------------------------------------------------------------------------------------------
# build: the one builder of typed settings.

Kind = Literal["a", "b"]


@dataclass(frozen=True)
class Inner:
    count: int
    rate: float = 0.5


@dataclass(frozen=True)
class Outer:
    inner: Inner
    kind: Kind = "a"
    names: tuple[str, ...] = ()
    rows: list[Inner] = field(default_factory=list)
    limit: int | None = None
    flag: bool = False

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must not be negative, got {self.limit}")


def test_build_reads_nested_dataclasses_literals_optionals_tuples_and_lists() -> None:
    built = build(Outer, {"inner": {"count": 2}, "kind": "b", "names": ["x", "y"], "rows": [{"count": 1, "rate": 2}], "limit": None, "flag": True})
    assert built == Outer(Inner(2), "b", ("x", "y"), [Inner(1, 2)], None, True)
    assert isinstance(built.names, tuple) and isinstance(built.rows, list)
    assert build(Outer, {"inner": {"count": 2}}) == Outer(Inner(2))  # defaults where left out


def test_build_keeps_an_integer_given_for_a_float() -> None:
    """60 and 60.0 are the same number in YAML and JSON; the settings files are written back as given."""
    rate = build(Inner, {"count": 1, "rate": 60}).rate
    assert rate == 60 and isinstance(rate, int)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"inner": {"count": 1}, "knd": "a"}, "config key 'outer.knd': unknown key of Outer; known: inner, kind, names, rows, limit, flag"),
        ({"inner": {"cont": 1}}, "config key 'outer.inner.cont': unknown key of Inner"),
        ({"inner": {}}, "config key 'outer.inner.count': required by Inner"),
        ({"inner": {"count": "1"}}, "config key 'outer.inner.count': expected int, got '1'"),
        ({"inner": {"count": True}}, "config key 'outer.inner.count': expected int, got True"),
        ({"inner": {"count": 1, "rate": "fast"}}, "config key 'outer.inner.rate': expected a number, got 'fast'"),
        ({"inner": {"count": 1}, "kind": "c"}, "config key 'outer.kind': 'c' is not one of 'a', 'b'"),
        ({"inner": {"count": 1}, "names": "xy"}, "config key 'outer.names': expected a list, got 'xy'"),
        ({"inner": {"count": 1}, "names": ["x", 3]}, r"config key 'outer.names\[1\]': expected str, got 3"),
        ({"inner": {"count": 1}, "rows": [{"count": 1}, {}]}, r"config key 'outer.rows\[1\].count': required"),
        ({"inner": {"count": 1}, "limit": "none"}, "config key 'outer.limit': expected int, got 'none'"),
        ({"inner": {"count": 1}, "limit": -1}, "config key 'outer': limit must not be negative, got -1"),
        ({"inner": 3}, "config key 'outer.inner': expected a mapping of Inner's keys, got 3"),
        ({"inner": {"count": 1, "rate": float("nan")}}, "config key 'outer.inner.rate': expected a finite number, got nan"),
        ({"inner": {"count": 1, "rate": float("-inf")}}, "config key 'outer.inner.rate': expected a finite number, got -inf"),
    ],
)
def test_build_names_the_key_of_every_bad_value(data: dict, message: str) -> None:
    with pytest.raises(StacklmError, match=f"^{message}"):
        build(Outer, data, "outer")


def test_build_names_the_file_when_given(tmp_path: Path) -> None:
    path = tmp_path / "HP.json"
    with pytest.raises(StacklmError, match=f"^{path}: config key 'count': required by Inner$"):
        build(Inner, {}, source=path)


def test_a_section_of_a_settings_file_is_built_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"sections": ["training"], "training": {"max_epochs": "3"}}))
    with pytest.raises(StacklmError, match=f"^{path}: config key 'training.max_epochs': expected int, got '3'$"):
        read_settings(path).section("training", TrainingSettings)
    with pytest.raises(StacklmError, match="not 'tracking'"):
        read_settings(path).section("tracking", TrainingSettings)


@pytest.mark.parametrize(("key", "value"), [("search.learning_rate.high", ".nan"), ("model.dropout", ".nan"),
                                            ("training.gradient_clip_norm", ".inf"), ("report.min_test_accuracy", ".nan")])
def test_the_resolved_settings_refuse_nan_and_infinity_by_key(config: dict, key: str, value: str) -> None:
    """`stacklm hparams` wrote a NaN learning rate into a trial file (not JSON); a NaN dropout ended every train job in a traceback."""
    *sections, name = key.split(".")
    user: dict = {}
    inner = user
    for section in sections:
        inner = inner.setdefault(section, {})
    inner[name] = yaml.safe_load(value)
    with pytest.raises(StacklmError, match=f"config key '{key}': expected a finite number"):
        resolution.resolve(config, user)
