"""stacklm.workflow.settings: presets, the user's keys over them, the checks that name the key, and
``stacklm settings``."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any, get_type_hints

import pytest
import yaml

import stacklm.workflow.settings as resolution
from stacklm.cli import main
from stacklm.errors import StacklmError
from stacklm.experiments.common import with_cadence
from stacklm.experiments.transformations.settings import FinalSettings, IntegerRange, LogRange
from stacklm.settings_file import SECTIONS, read_settings
from stacklm.workflow.settings import ResolvedSettings

ROOT = Path(__file__).resolve().parents[2]


def test_full_config_has_the_papers_settings(settings: ResolvedSettings) -> None:
    assert len(settings.tasks) == 7
    assert {"Tf", "Tf+Nd+Nd", "RNN+Sup+R", "LSTM+Nd+R", "Tf+Syn", "Tf+Nd+Syn"} <= set(settings.architectures)
    assert settings.search.trials == 10
    assert settings.search.max_epochs == 5  # DuSell & Cotterell (2025) §5, and the authors' later search script
    assert settings.data.source == "upstream"  # the paper's data
    assert settings.search.tokens_per_batch == IntegerRange(512, 2048)
    assert settings.search.learning_rate == LogRange(1e-5, 1e-3)
    assert settings.final == FinalSettings(seeds=(1, 2, 3, 4, 5), max_epochs=None)


def test_the_table1_presets_follow_the_papers_protocol(config: dict[str, Any]) -> None:
    """10 trials of at most 5 epochs, 5 seeds on McCoy et al.'s files; the extra arm fixes the
    first run's selected hyperparameters with a one-point search."""
    table1 = resolution.resolve({**copy.deepcopy(config), "preset": "table1"})
    assert (table1.tasks, table1.architectures) == (("question-formation",), ("Tf", "Tf+Nd", "Tf+Sup", "LSTM"))
    assert (table1.data.source, table1.search.trials, table1.search.max_epochs, table1.final.seeds) == ("upstream", 10, 5, (1, 2, 3, 4, 5))
    fixed = resolution.resolve({**copy.deepcopy(config), "preset": "table1-fixed-hp"})
    assert (fixed.architectures, fixed.search.trials, fixed.final.seeds) == (("Tf",), 1, (1, 2, 3))
    assert fixed.search.learning_rate.low == fixed.search.learning_rate.high == pytest.approx(6.1e-4, rel=1e-3)
    assert fixed.search.tokens_per_batch == IntegerRange(643, 643)


@pytest.mark.parametrize("preset", ["small", "ci"])
def test_presets_resolve_and_keep_every_task_architecture_in_small(config: dict[str, Any], preset: str) -> None:
    settings = resolution.resolve({**copy.deepcopy(config), "preset": preset})
    if preset == "small":
        assert list(settings.tasks) == config["tasks"]
        assert list(settings.architectures) == config["architectures"]


def test_preset_merges_dicts_deeply_and_rejects_unknown_keys() -> None:
    config = {"preset": "p", "a": {"b": 1, "c": 2}, "presets": {"p": {"a": {"b": 5}}}}
    assert resolution.apply_preset(config) == {"a": {"b": 5, "c": 2}}
    with pytest.raises(StacklmError, match=r"'presets\.p\.a\.x'"):
        resolution.apply_preset({"preset": "p", "a": {"b": 1}, "presets": {"p": {"a": {"x": 1}}}})
    with pytest.raises(StacklmError, match="'preset': unknown preset 'q'"):
        resolution.apply_preset({"preset": "q", "presets": {"p": {}}})


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda s: s["architectures"].append("Tf+Quantum"), r"architectures\[17\]"),
        (lambda s: s["architectures"].__setitem__(0, "cfl/NS+S+U"), r"architectures\[0\]"),
        (lambda s: s["search"].__setitem__("trials", 0), r"search\.trials"),
        (lambda s: s["search"].__setitem__("max_epochs", 0), r"search\.max_epochs"),
        (lambda s: s["search"]["learning_rate"].__setitem__("low", 0.0), r"search\.learning_rate\.low"),
        (lambda s: s["search"]["tokens_per_batch"].__setitem__("low", 4096), r"search\.tokens_per_batch"),
        (lambda s: s["final"].__setitem__("seeds", []), r"final\.seeds"),
        (lambda s: s["final"].__setitem__("max_epochs", 0), r"final\.max_epochs"),
        (lambda s: s.setdefault("training", {}).__setitem__("parameter_budget", 0), r"training\.parameter_budget"),
        (lambda s: s.setdefault("training", {}).__setitem__("parameter_budget", -5), r"training\.parameter_budget"),
        (lambda s: s["report"].__setitem__("min_test_accuracy", 1.5), r"report\.min_test_accuracy"),
        (lambda s: s["data"]["sizes"].__setitem__("test", 0), r"data\.sizes\.test"),  # no mean over no examples
        (lambda s: s["data"]["sizes"].__setitem__("generalization", 0), r"data\.sizes\.generalization"),
    ],
)
def test_invalid_settings_name_the_key(config: dict[str, Any], change: Any, key: str) -> None:
    settings = resolution.apply_preset(copy.deepcopy(config))
    change(settings)
    with pytest.raises(StacklmError, match=f"config key '{key}'"):
        resolution.validate_settings(settings)


@pytest.mark.parametrize(
    ("preset", "key"),
    [
        ({"search": {"trials": 0}}, r"search\.trials"),
        ({"search": {"trials": "2"}}, r"search\.trials': '2' is not of type 'integer'"),
        ({"tasks": ["question-formatoin"]}, r"tasks\[0\]': 'question-formatoin' is not one of"),
        ({"final": {"seeds": [1, 2, 1]}}, r"final\.seeds': \[1, 2, 1\] has non-unique elements"),
        ({"architectures": ["Tf", "LSTM", "Tf"]}, r"architectures': .* has non-unique elements"),
        ({"data": {"sizes": {"train": 0}}}, r"data\.sizes\.train"),
        ({"search": {"tokens_per_batch": {"low": 512.5, "high": 2048}}}, r"search\.tokens_per_batch\.low"),
        ({"search": {"tokens_per_batch": {"low": 512, "high": 2048.0}}}, r"search\.tokens_per_batch\.high"),
        ({"model": {"dropout": 1.5}}, r"model\.dropout"),
        ({"evaluation": {"samples_per_input": 0}}, r"evaluation\.samples_per_input"),
        ({"report": {"min_test_accuracy": 1.5}}, r"report\.min_test_accuracy"),
        ({"search": {"tirals": 3}}, r"presets\.ci\.search\.tirals': not a key of the settings"),
    ],
)
def test_a_presets_values_are_validated_naming_the_key(config: dict[str, Any], preset: dict[str, Any], key: str) -> None:
    broken = copy.deepcopy(config)
    broken["presets"]["ci"] = {**broken["presets"]["ci"], **preset}
    with pytest.raises(StacklmError, match=f"config key '{key}"):
        resolution.resolve({**broken, "preset": "ci"})


def test_every_schema_error_is_named_and_strings_get_the_configfile_hint(config: dict[str, Any]) -> None:
    user = {"search": {"trials": "3"}, "model": {"dropout": 1.5}, "typo": 1}
    with pytest.raises(StacklmError) as raised:
        resolution.resolve(snakemake_config(config, user), user)
    assert str(raised.value).splitlines() == [
        "config key 'model.dropout': 1.5 is greater than or equal to the maximum of 1",
        "config key 'search.trials': '3' is not of type 'integer'",
        "config key 'typo': not a key of the settings",
        resolution.STRING_HINT,
    ]


def snakemake_config(config: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """Snakemake's ``config``: config.yaml with the user's keys merged in."""
    from snakemake.utils import update_config

    merged = copy.deepcopy(config)
    update_config(merged, copy.deepcopy(user))
    return merged


def test_the_users_keys_win_over_the_presets(config: dict[str, Any]) -> None:
    user = {"preset": "ci", "search": {"trials": 3}, "final": {"seeds": [7]}}
    settings = resolution.resolve(snakemake_config(config, user), user)
    assert resolution.plain(settings.search) == {**config["search"], **config["presets"]["ci"]["search"], "trials": 3}
    assert settings.final == FinalSettings(seeds=(7,), max_epochs=1)  # the preset's max_epochs stays
    assert list(settings.tasks) == config["presets"]["ci"]["tasks"]
    # the same keys in config.yaml itself are defaults: the preset wins over them
    assert resolution.resolve(snakemake_config(config, user)).search.trials == config["presets"]["ci"]["search"]["trials"]


def test_settings_command_rejects_invalid_settings(tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    settings = resolution.apply_preset(copy.deepcopy(config))
    settings["search"]["trials"] = 0
    settings["training"]["parameter_budget"] = 0
    assert main(["settings", "--json", json.dumps(settings), "--out", str(tmp_path / "s.json")]) == 1
    error = capsys.readouterr().err
    assert "'search.trials'" in error and "'training.parameter_budget'" in error
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("preset", [None, "small", "ci", "table1"])
def test_every_readers_settings_file_is_byte_identical_to_the_resolved_plain_values(config: dict[str, Any], preset: str | None) -> None:
    """The rule ``settings``'s ``--json`` parameter and the file it writes, from the typed tree,
    are those of before it existed, from the plain resolved values (config.yaml, the preset over
    it): Snakemake sees no changed parameter, and no job reruns."""
    resolved = {**copy.deepcopy(config), "preset": preset}
    values = resolution.apply_preset(resolved)
    settings = resolution.resolve(resolved)
    for reader, sections in resolution.SETTINGS_READ.items():
        before = {SECTIONS: list(sections), **{section: values[section] for section in sections}}
        for section, keys in resolution.CADENCE.items():  # the cadence settings in their own reader's file only
            if section in before:
                before[section] = {key: value for key, value in before[section].items() if (key in keys) == (reader == resolution.CADENCE_READER)}
        after = resolution.settings_for(settings, reader)
        assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True), reader  # workflow/rules/settings.smk's params
        assert settings_file_text(after) == settings_file_text(before), reader


def test_a_cadence_setting_changes_no_readers_file_but_the_cadence_file(config: dict[str, Any]) -> None:
    """training.progress_interval_s changed only how often progress lines come, yet listed 21 jobs
    to rerun (8 train, 4 evaluate, the report): it sat in the train jobs' settings file. So did
    ptb.progress_interval_s in every PTB training job's options, and in the MLflow mirror's file."""
    settings = resolution.resolve({**copy.deepcopy(config), "preset": "ci"})
    training, ptb = settings.training.progress_interval_s + 7, settings.ptb.progress_interval_s + 5
    changed = dataclasses.replace(
        settings,
        training=dataclasses.replace(settings.training, progress_interval_s=training),
        ptb=dataclasses.replace(settings.ptb, progress_interval_s=ptb),
    )
    differ = [reader for reader in resolution.SETTINGS_READ if resolution.settings_for(settings, reader) != resolution.settings_for(changed, reader)]
    assert differ == [resolution.CADENCE_READER]
    assert resolution.settings_for(changed, "cadence") == {
        SECTIONS: ["training", "ptb"], "training": {"progress_interval_s": training}, "ptb": {"progress_interval_s": ptb},
    }
    rules = {path.name: path.read_text() for path in (ROOT / "workflow" / "rules").glob("*.smk")}
    readers = {name: text.count('settings_file("cadence")') for name, text in rules.items() if 'settings_file("cadence")' in text}
    assert readers == {"train.smk": 2, "cfl.smk": 2, "ptb.smk": 2}
    assert all(text.count('cadence=ancient(settings_file("cadence"))') == readers[name] for name, text in rules.items() if name in readers)


def settings_file_text(contents: dict[str, Any]) -> str:
    """What ``stacklm settings`` writes for the rule's ``--json`` (sorted-key JSON of ``contents``)."""
    return json.dumps(json.loads(json.dumps(contents, sort_keys=True)), indent=2, sort_keys=True) + "\n"


def test_a_job_builds_from_its_file_the_sections_the_snakefile_read(tmp_path: Path, config: dict[str, Any]) -> None:
    """With the cadence file (--cadence) for the sections it holds a part of (training, ptb), as the
    training jobs read it."""
    settings = resolution.resolve({**copy.deepcopy(config), "preset": "small"})
    types = get_type_hints(ResolvedSettings)
    for reader in resolution.SETTINGS_READ:
        assert main(["settings", "--json", json.dumps(resolution.settings_for(settings, reader)), "--out", str(tmp_path / f"{reader}.json")]) == 0
    for reader, sections in resolution.SETTINGS_READ.items():
        if reader == resolution.CADENCE_READER:  # parts of sections, read through with_cadence below
            continue
        read = read_settings(tmp_path / f"{reader}.json")
        for section in sections:
            built = read.section(section, types[section])
            if section in resolution.CADENCE:
                built = with_cadence(built, section, tmp_path / "cadence.json")
            assert built == getattr(settings, section), (reader, section)


def test_config_yaml_lists_exactly_the_dataclasses_defaults(config: dict[str, Any]) -> None:
    """The defaults have one owner, the dataclasses; config.yaml lists the papers' full settings
    for its reader, and must equal them key for key."""
    assert resolution.resolve({**copy.deepcopy(config), "preset": None}) == ResolvedSettings()
    listed = {key: value for key, value in config.items() if key not in resolution.PRESET_KEYS}
    assert listed == resolution.plain(ResolvedSettings())  # every key written out, none left to a default


def test_the_schema_holds_no_defaults() -> None:
    """Types, bounds and descriptions only: a default there would be a second owner."""

    def defaults(schema: Any, path: str) -> list[str]:
        if isinstance(schema, list):
            return [found for index, item in enumerate(schema) for found in defaults(item, f"{path}[{index}]")]
        if not isinstance(schema, dict):
            return []
        found = [path] if "default" in schema else []
        for key, child in schema.items():
            if key in ("properties", "$defs"):
                found += [item for name, value in child.items() for item in defaults(value, f"{path}.{name}")]
            elif key != "default":
                found += defaults(child, f"{path}.{key}")
        return found

    assert defaults(yaml.safe_load(resolution.SCHEMA.read_text()), "") == []


def test_a_missing_schema_names_the_file_and_the_fix(monkeypatch: pytest.MonkeyPatch, config: dict[str, Any], tmp_path: Path) -> None:
    missing = tmp_path / "site-packages" / "stacklm" / "workflow" / "config.schema.yaml"  # an install without the package data
    monkeypatch.setattr(resolution, "SCHEMA", missing)
    resolution._settings_validator.cache_clear()
    try:
        with pytest.raises(StacklmError, match=r"config\.schema\.yaml is missing from the installed package: reinstall stacklm"):
            resolution.resolve(copy.deepcopy(config))
    finally:
        resolution._settings_validator.cache_clear()


def test_final_seeds_stay_below_the_search_trials_seeds(config: dict[str, Any]) -> None:
    settings = copy.deepcopy(config)
    settings["final"]["seeds"] = [1, 2**31]
    with pytest.raises(StacklmError, match=r"config key 'final\.seeds\[1\]': 2147483648 is greater than the maximum"):
        resolution.resolve(settings)


def test_the_schema_is_the_packages_and_the_workflow_links_to_it() -> None:
    """An install without -e copies the package, not workflow/: the schema the settings check
    against lives in the package, and workflow/schemas/ holds a link to that one file."""
    package = Path(resolution.__file__).parent
    assert resolution.SCHEMA == package / "config.schema.yaml" and resolution.SCHEMA.is_file()
    link = package.parents[1] / "workflow" / "schemas" / "config.schema.yaml"
    if not link.exists():
        pytest.skip("not a checkout of the repository: no workflow/ beside the package")
    assert link.is_symlink() and link.resolve() == resolution.SCHEMA.resolve()
