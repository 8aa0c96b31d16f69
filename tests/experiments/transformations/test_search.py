"""stacklm.experiments.transformations.search: the deterministic draw of Appendix D, the trial
selection, and ``stacklm hparams`` and ``stacklm select`` (light: no torch, no pandas)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import stacklm.experiments.transformations.dag as transformations
import stacklm.experiments.transformations.search as search_stage
import stacklm.workflow.dag as pipeline
from stacklm.cli import main
from stacklm.workflow.settings import ResolvedSettings, plain


def test_draw_is_a_pure_function_of_task_architecture_trial(settings: ResolvedSettings) -> None:
    search = settings.search
    first = search_stage.draw_hyperparameters(search, "question-formation", "Tf+Nd", 3)
    assert first == search_stage.draw_hyperparameters(replace(search), "question-formation", "Tf+Nd", 3)
    others = {
        search_stage.draw_hyperparameters(search, "question-formation", "Tf+Nd", 4),
        search_stage.draw_hyperparameters(search, "passivization", "Tf+Nd", 3),
        search_stage.draw_hyperparameters(search, "question-formation", "Tf", 3),
        search_stage.draw_hyperparameters(replace(search, salt=1), "question-formation", "Tf+Nd", 3),
    }
    assert first not in others and len(others) == 4
    assert first.max_epochs == 5  # the search's: at most 5 epochs (DuSell & Cotterell (2025) §5)


def test_draw_follows_the_distributions_of_appendix_d(settings: ResolvedSettings) -> None:
    draws = [search_stage.draw_hyperparameters(settings.search, "t", "Tf", trial) for trial in range(1, 4001)]
    batches = [draw.tokens_per_batch for draw in draws]
    assert min(batches) >= 512 and max(batches) <= 2048 and all(isinstance(b, int) for b in batches)
    assert min(batches) < 530 and max(batches) > 2030  # the whole range is reached
    logs = [math.log10(draw.learning_rate) for draw in draws]
    assert -5 <= min(logs) and max(logs) <= -3
    # log-uniform: each decade holds about half of the draws (binomial sd ≈ 32 of 4000)
    assert abs(sum(log < -4 for log in logs) - 2000) < 160
    assert abs(sum(batch < 1280 for batch in batches) - 2000) < 160


def test_lowest_validation_cross_entropy_reads_the_best_checkpoint() -> None:
    curve = pd.DataFrame({"validation_cross_entropy": [2.0, 0.7, 0.9]})
    assert search_stage.lowest_validation_cross_entropy(curve) == 0.7


def test_commands_write_trials_and_select_the_best(tmp_path: Path, settings: ResolvedSettings) -> None:
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(plain(settings)), "--out", str(settings_path)]) == 0
    assert json.loads(settings_path.read_text()) == plain(settings)
    trial_paths = [str(tmp_path / f"trial{trial}.json") for trial in range(1, 11)]
    assert main(["hparams", "--task", "passivization", "--architecture", "Tf", "--settings", str(settings_path), "--out", *trial_paths]) == 0
    drawn = [json.loads(Path(path).read_text()) for path in trial_paths]
    assert drawn[1] == {**search_stage.draw_hyperparameters(settings.search, "passivization", "Tf", 2).__dict__}
    curves = []
    for trial, loss in enumerate([3.0, 1.0, 0.5, 2.0, 4.0, 5.0, 6.0, 7.0, 0.6, 9.0], start=1):
        curves.append(str(tmp_path / f"curve{trial}.parquet"))
        pd.DataFrame({"validation_cross_entropy": [loss + 1, loss, loss + 0.5]}).to_parquet(curves[-1])
    best = tmp_path / "best.json"
    assert main(["select", "--settings", str(settings_path), "--hparams", *trial_paths, "--curves", *curves, "--out", str(best)]) == 0
    assert json.loads(best.read_text()) == {**drawn[2], "max_epochs": None}


def test_select_names_a_trials_curve_it_cannot_read(tmp_path: Path, settings: ResolvedSettings, capsys: pytest.CaptureFixture[str]) -> None:
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(plain(settings)), "--out", str(settings_path)]) == 0
    trials = [str(tmp_path / f"trial{trial}.json") for trial in range(1, 11)]
    assert main(["hparams", "--task", "passivization", "--architecture", "Tf", "--settings", str(settings_path), "--out", *trials]) == 0
    curves = [tmp_path / f"curve{trial}.parquet" for trial in range(1, 11)]
    for curve in curves:
        pd.DataFrame({"validation_cross_entropy": [1.0]}).to_parquet(curve)
    curves[6].write_text("cut off by a full disk")
    arguments = ["select", "--settings", str(settings_path), "--hparams", *trials, "--curves", *map(str, curves), "--out", str(tmp_path / "best.json")]
    assert main(arguments) != 0
    error = capsys.readouterr().err
    assert len(error.splitlines()) == 1 and f"{curves[6]}: cannot read the trial's curve: " in error
    assert not (tmp_path / "best.json").exists()


LIGHT_RUN = """
import sys
from stacklm.cli import main
from stacklm.workflow.settings import ResolvedSettings, plain
status = main(sys.argv[1:])
heavy = sorted({"torch", "pandas", "mlflow", "sympy"} & set(sys.modules))
sys.exit(f"imported {heavy}" if heavy else status)
"""


def test_hparams_imports_neither_torch_nor_pandas(tmp_path: Path, settings: ResolvedSettings) -> None:
    """hparams runs once per task and architecture: each job starts in a fraction of a second."""
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(plain(settings)), "--out", str(settings_path)]) == 0
    run = [sys.executable, "-c", LIGHT_RUN]
    out = [str(tmp_path / f"trial{trial}.json") for trial in transformations.trials(settings.search)]
    result = subprocess.run([*run, "hparams", "--task", "passivization", "--architecture", "Tf", "--settings", str(settings_path), "--out", *out],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(Path(out[1]).read_text()) == {**search_stage.draw_hyperparameters(settings.search, "passivization", "Tf", 2).__dict__}


def test_a_single_trial_is_selected_without_training_a_search_model(tmp_path: Path, settings: ResolvedSettings) -> None:
    assert transformations.trained_trials(settings.search) == list(range(1, 11))
    settings = replace(settings, search=replace(settings.search, trials=1))
    assert transformations.trials(settings.search) == [1] and transformations.trained_trials(settings.search) == []
    assert not [path for path in pipeline.tracking_records(settings, "passivization")["curves"] if "/search/" in path]
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(plain(settings)), "--out", str(settings_path)]) == 0
    trial = str(tmp_path / "trial1.json")
    assert main(["hparams", "--task", "passivization", "--architecture", "Tf", "--settings", str(settings_path), "--out", trial]) == 0
    best = tmp_path / "best.json"
    assert main(["select", "--settings", str(settings_path), "--hparams", trial, "--out", str(best)]) == 0
    assert json.loads(best.read_text()) == {**json.loads(Path(trial).read_text()), "max_epochs": settings.final.max_epochs}
    # two trials are compared by their curves: none given is an error, not a silent first pick
    assert main(["select", "--settings", str(settings_path), "--hparams", trial, trial, "--out", str(best)]) == 1


def test_a_job_of_several_architectures_writes_what_a_job_each_writes(tmp_path: Path, settings: ResolvedSettings) -> None:
    """resources.runs_per_job > 1: one `stacklm hparams` and one `stacklm select` for several
    architectures, in the order architecture x trial; the files equal those of a job each, byte for byte."""
    settings = replace(settings, search=replace(settings.search, trials=3))
    settings_path = tmp_path / "resolution.json"
    assert main(["settings", "--json", json.dumps(plain(settings)), "--out", str(settings_path)]) == 0
    architectures = ["Tf", "LSTM+Nd", "RNN+Sup"]
    losses = {"Tf": [3.0, 1.0, 2.0], "LSTM+Nd": [0.5, 0.7, 0.6], "RNN+Sup": [9.0, 8.0, 0.1]}  # trials 2, 1 and 3 win
    curves = {}
    for name in architectures:
        curves[name] = [str(tmp_path / f"{name}-curve{trial}.parquet") for trial in (1, 2, 3)]
        for path, loss in zip(curves[name], losses[name]):
            pd.DataFrame({"validation_cross_entropy": [loss + 1, loss]}).to_parquet(path)
    alone, together = tmp_path / "alone", tmp_path / "together"
    for name in architectures:
        trials = [str(alone / f"{name}-trial{trial}.json") for trial in (1, 2, 3)]
        assert main(["hparams", "--task", "passivization", "--architecture", name, "--settings", str(settings_path), "--out", *trials]) == 0
        assert main(["select", "--settings", str(settings_path), "--hparams", *trials, "--curves", *curves[name],
                     "--out", str(alone / f"{name}-best.json")]) == 0
    trials = [str(together / f"{name}-trial{trial}.json") for name in architectures for trial in (1, 2, 3)]
    assert main(["hparams", "--task", "passivization", "--architecture", *architectures, "--settings", str(settings_path), "--out", *trials]) == 0
    selections = [option for position, name in enumerate(architectures)
                  for option in ["--hparams", *trials[3 * position : 3 * position + 3], "--curves", *curves[name]]]
    bests = [str(together / f"{name}-best.json") for name in architectures]
    assert main(["select", "--settings", str(settings_path), *selections, "--out", *bests]) == 0
    assert sorted(path.name for path in together.iterdir()) == sorted(path.name for path in alone.iterdir())
    for path in alone.iterdir():
        assert (together / path.name).read_bytes() == path.read_bytes()
    for name, trial in zip(architectures, (2, 1, 3)):  # each architecture's own winner, not another's
        expected = {**search_stage.draw_hyperparameters(settings.search, "passivization", name, trial).__dict__, "max_epochs": None}
        assert json.loads((together / f"{name}-best.json").read_text()) == expected
    # --out not one per --hparams, --curves given for some of them only, --out not one per trial: refused
    assert main(["select", "--settings", str(settings_path), *selections, "--out", *bests[:2]]) == 2
    assert main(["select", "--settings", str(settings_path), "--hparams", trials[0], "--hparams", trials[3], "--curves", curves["Tf"][0],
                 "--out", *bests[:2]]) == 2
    assert main(["hparams", "--task", "passivization", "--architecture", *architectures, "--settings", str(settings_path), "--out", *trials[:3]]) == 1
