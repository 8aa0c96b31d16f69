"""stacklm.workflow: presets, the checks that name the key, the deterministic draw, selection,
lookups and targets."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import stacklm.experiments.common as shared
import stacklm.experiments.transformations.dag as transformations
import stacklm.workflow.dag as pipeline
import stacklm.experiments.transformations.search as search_stage
import stacklm.workflow.settings as resolution
from stacklm.cli import main
from stacklm.errors import StacklmError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture
def settings(config: dict[str, Any]) -> dict[str, Any]:
    return resolution.resolve(copy.deepcopy(config))


def test_full_config_has_the_papers_settings(settings: dict[str, Any]) -> None:
    assert len(settings["tasks"]) == 7
    assert {"Tf", "Tf+Nd+Nd", "RNN+Sup+R", "LSTM+Nd+R", "Tf+Syn", "Tf+Nd+Syn"} <= set(settings["architectures"])
    assert settings["search"]["trials"] == 10
    assert settings["search"]["max_epochs"] is None  # each trial to convergence, as the authors' search script
    assert settings["search"]["tokens_per_batch"] == {"low": 512, "high": 2048}
    assert settings["search"]["learning_rate"] == {"low": 1e-5, "high": 1e-3}
    assert settings["final"] == {"seeds": [1, 2, 3, 4, 5], "max_epochs": None}


@pytest.mark.parametrize("preset", ["small", "ci"])
def test_presets_resolve_and_keep_every_task_architecture_in_small(config: dict[str, Any], preset: str) -> None:
    settings = resolution.resolve({**copy.deepcopy(config), "preset": preset})
    assert "presets" not in settings and "preset" not in settings
    if preset == "small":
        assert settings["tasks"] == config["tasks"]
        assert settings["architectures"] == config["architectures"]


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
    ],
)
def test_invalid_settings_name_the_key(settings: dict[str, Any], change: Any, key: str) -> None:
    change(settings)
    with pytest.raises(StacklmError, match=f"config key '{key}'"):
        resolution.validate_settings(settings)


@pytest.mark.parametrize(
    ("preset", "key"),
    [
        ({"search": {"trials": 0}}, r"search\.trials"),
        ({"search": {"trials": "2"}}, r"search\.trials': '2' is not of type 'integer'"),
        ({"tasks": []}, r"tasks"),
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
    assert settings["search"] == {**config["search"], **config["presets"]["ci"]["search"], "trials": 3}
    assert settings["final"] == {"seeds": [7], "max_epochs": 1}  # the preset's max_epochs stays
    assert settings["tasks"] == config["presets"]["ci"]["tasks"]
    # the same keys in config.yaml itself are defaults: the preset wins over them
    assert resolution.resolve(snakemake_config(config, user))["search"]["trials"] == config["presets"]["ci"]["search"]["trials"]


def test_draw_is_a_pure_function_of_task_architecture_trial(settings: dict[str, Any]) -> None:
    search = settings["search"]
    first = search_stage.draw_hyperparameters(search, "question-formation", "Tf+Nd", 3)
    assert first == search_stage.draw_hyperparameters(copy.deepcopy(search), "question-formation", "Tf+Nd", 3)
    others = {
        search_stage.draw_hyperparameters(search, "question-formation", "Tf+Nd", 4),
        search_stage.draw_hyperparameters(search, "passivization", "Tf+Nd", 3),
        search_stage.draw_hyperparameters(search, "question-formation", "Tf", 3),
        search_stage.draw_hyperparameters({**search, "salt": 1}, "question-formation", "Tf+Nd", 3),
    }
    assert first not in others and len(others) == 4
    assert first.max_epochs is None  # the search's: to convergence


def test_draw_follows_the_distributions_of_appendix_d(settings: dict[str, Any]) -> None:
    draws = [search_stage.draw_hyperparameters(settings["search"], "t", "Tf", trial) for trial in range(1, 4001)]
    batches = [draw.tokens_per_batch for draw in draws]
    assert min(batches) >= 512 and max(batches) <= 2048 and all(isinstance(b, int) for b in batches)
    assert min(batches) < 530 and max(batches) > 2030  # the whole range is reached
    logs = [math.log10(draw.learning_rate) for draw in draws]
    assert -5 <= min(logs) and max(logs) <= -3
    # log-uniform: each decade holds about half of the draws (binomial sd ≈ 32 of 4000)
    assert abs(sum(log < -4 for log in logs) - 2000) < 160
    assert abs(sum(batch < 1280 for batch in batches) - 2000) < 160


def test_select_trial_takes_the_lowest_finite_score_first_on_ties() -> None:
    assert shared.select_lowest([2.0, 1.5, 1.5, 3.0], "search trial") == 1
    assert shared.select_lowest([float("nan"), float("inf"), 4.0], "search trial") == 2
    with pytest.raises(StacklmError, match="no search trial"):
        shared.select_lowest([float("nan")], "search trial")


def test_lowest_validation_cross_entropy_reads_the_best_checkpoint() -> None:
    curve = pd.DataFrame({"validation_cross_entropy": [2.0, 0.7, 0.9]})
    assert search_stage.lowest_validation_cross_entropy(curve) == 0.7


def test_hparams_path_by_phase() -> None:
    assert transformations.hparams_path("qf", "tf", "search", "3") == "results/search/qf/tf/trial3.json"
    assert transformations.hparams_path("qf", "tf", "final", "2") == "results/search/qf/tf/best.json"
    with pytest.raises(StacklmError, match="unknown phase"):
        transformations.hparams_path("qf", "tf", "warmup", "1")


def test_slugs_round_trip(settings: dict[str, Any]) -> None:
    slugs = [shared.architecture_slug(name) for name in settings["architectures"]]
    assert len(set(slugs)) == len(slugs) and all("/" not in slug for slug in slugs)
    assert [shared.architecture_name(slug) for slug in slugs] == settings["architectures"]


def test_train_resources_by_family_grow_with_each_attempt(settings: dict[str, Any]) -> None:
    slug = shared.architecture_slug
    assert transformations.train_resources(settings, slug("Tf+Nd"), 1) == transformations.JobResources(1440, 16000)
    assert transformations.train_resources(settings, slug("LSTM+Sup+R"), 1) == transformations.JobResources(480, 8000)
    assert transformations.train_resources(settings, slug("RNN"), 1) == transformations.JobResources(240, 4000)
    assert transformations.train_resources(settings, slug("Tf+Nd"), 3) == transformations.JobResources(4 * 1440, 4 * 16000)


def test_only_search_runs_name_their_trial() -> None:
    assert transformations.trial_option("search", "7") == " --trial 7"
    assert transformations.trial_option("final", "2") == ""


def test_device_from_the_gpu_resource() -> None:
    assert shared.device(0) == "cpu"
    assert shared.device(1) == "cuda"


def test_targets_cover_every_final_run_and_the_report(settings: dict[str, Any]) -> None:
    runs = transformations.final_runs(settings)
    assert len(runs) == 7 * len(settings["architectures"]) * 5
    assert "results/runs/question-formation/tf+nd/final/3/metrics.parquet" in transformations.final_metrics(settings)
    targets = pipeline.all_targets(settings)
    assert transformations.METRICS in targets and transformations.REPORT_DOCUMENT in targets
    assert "results/report/tables/german-passivization.tex" in targets
    assert {"results/report/figures/figure3.png", "results/report/figures/figure3.pdf"} <= set(targets)


def test_commands_write_trials_and_select_the_best(tmp_path: Path, settings: dict[str, Any]) -> None:
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(settings), "--out", str(settings_path)]) == 0
    assert json.loads(settings_path.read_text()) == settings
    trial_paths = [str(tmp_path / f"trial{trial}.json") for trial in range(1, 11)]
    assert main(["hparams", "--task", "passivization", "--architecture", "Tf", "--settings", str(settings_path), "--out", *trial_paths]) == 0
    drawn = [json.loads(Path(path).read_text()) for path in trial_paths]
    assert drawn[1] == {**search_stage.draw_hyperparameters(settings["search"], "passivization", "Tf", 2).__dict__}
    curves = []
    for trial, loss in enumerate([3.0, 1.0, 0.5, 2.0, 4.0, 5.0, 6.0, 7.0, 0.6, 9.0], start=1):
        curves.append(str(tmp_path / f"curve{trial}.parquet"))
        pd.DataFrame({"validation_cross_entropy": [loss + 1, loss, loss + 0.5]}).to_parquet(curves[-1])
    best = tmp_path / "best.json"
    assert main(["select", "--settings", str(settings_path), "--hparams", *trial_paths, "--curves", *curves, "--out", str(best)]) == 0
    assert json.loads(best.read_text()) == {**drawn[2], "max_epochs": None}


LIGHT_RUN = """
import sys
from stacklm.cli import main
status = main(sys.argv[1:])
heavy = sorted({"torch", "pandas", "mlflow", "sympy"} & set(sys.modules))
sys.exit(f"imported {heavy}" if heavy else status)
"""


def test_hparams_imports_neither_torch_nor_pandas(tmp_path: Path, settings: dict[str, Any]) -> None:
    """hparams runs once per task and architecture: each job starts in a fraction of a second."""
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(settings), "--out", str(settings_path)]) == 0
    run = [sys.executable, "-c", LIGHT_RUN]
    out = [str(tmp_path / f"trial{trial}.json") for trial in transformations.trials(settings)]
    result = subprocess.run([*run, "hparams", "--task", "passivization", "--architecture", "Tf", "--settings", str(settings_path), "--out", *out],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(Path(out[1]).read_text()) == {**search_stage.draw_hyperparameters(settings["search"], "passivization", "Tf", 2).__dict__}


def test_a_single_trial_is_selected_without_training_a_search_model(tmp_path: Path, settings: dict[str, Any]) -> None:
    assert transformations.trained_trials(settings) == list(range(1, 11))
    settings["search"]["trials"] = 1
    assert transformations.trials(settings) == [1] and transformations.trained_trials(settings) == []
    assert not [path for path in pipeline.tracking_records(settings, "passivization")["curves"] if "/search/" in path]
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(settings), "--out", str(settings_path)]) == 0
    trial = str(tmp_path / "trial1.json")
    assert main(["hparams", "--task", "passivization", "--architecture", "Tf", "--settings", str(settings_path), "--out", trial]) == 0
    best = tmp_path / "best.json"
    assert main(["select", "--settings", str(settings_path), "--hparams", trial, "--out", str(best)]) == 0
    assert json.loads(best.read_text()) == {**json.loads(Path(trial).read_text()), "max_epochs": settings["final"]["max_epochs"]}
    # two trials are compared by their curves: none given is an error, not a silent first pick
    assert main(["select", "--settings", str(settings_path), "--hparams", trial, trial, "--out", str(best)]) == 1


def test_settings_command_rejects_invalid_settings(tmp_path: Path, settings: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    settings["search"]["trials"] = 0
    settings["training"]["parameter_budget"] = 0
    assert main(["settings", "--json", json.dumps(settings), "--out", str(tmp_path / "s.json")]) == 1
    error = capsys.readouterr().err
    assert "'search.trials'" in error and "'training.parameter_budget'" in error
    assert not (tmp_path / "s.json").exists()
