"""``stacklm ptb train|evaluate`` on a slice of the real PTB (the reference copies beside the
checkout; skipped without them): the files each writes, the same restart trained twice giving
the same bits, the restart's draw and parameters as their seeds give them, the test perplexity
against the model fed the whole slice as one stream, the SG rows against ``score_all``."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch

from stacklm.cli import main
from stacklm.data.ptb import build_vocabulary, encode, first_lines, read_split
from stacklm.data.vocabulary import Vocabulary
from stacklm.evaluation.syntaxgym.model import PtbScorer
from stacklm.evaluation.syntaxgym.sources import score_all
import stacklm.experiments.ptb.training as ptb_training
import stacklm.workflow.settings as resolution
from stacklm.experiments.common import derived_seed
from stacklm.experiments.ptb.search import draw_hyperparameters, restart_draw, restart_seeds
from stacklm.experiments.ptb.settings import PtbSettings
from stacklm.models.ptb import PtbLanguageModel, ptb_config
from stacklm.training import checkpoint as checkpoint_file
from stacklm.training.run_files import load_model, rebuild_ptb_model
from stacklm.training.schedule import perplexity

LINES = 40  # about 900 tokens a split: one chunk of 32 × 28
SUITES = ("number_src", "center_embed")


def train(upstream: Path, model: str, restart: int, out: Path, *extra: str) -> int:
    return main([
        "ptb", "train", "--model", model, "--restart", str(restart), "--data", str(upstream / "ptb"), "--lines", str(LINES),
        "--max-epochs", "2", "--checkpoint", str(out.parent / f"{out.name}.ckpt.pt"), "--out", str(out), "--threads", "1", *extra,
    ])


def evaluate(upstream: Path, run: Path) -> int:
    return main([
        "ptb", "evaluate", "--run", str(run), "--data", str(upstream / "ptb"), "--syntaxgym", str(upstream / "sg-test-suites"),
        "--lines", str(LINES), "--suites", *SUITES, "--out", str(run / "metrics.parquet"), "--threads", "1",
    ])


@pytest.fixture(scope="module")
def trained(upstream_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One restart of the LSTM, the RNS-RNN (2, 3) and JM pushing a learned vector, trained and scored."""
    folder = tmp_path_factory.mktemp("ptb")
    runs = {}
    for model in ("lstm", "rns-2-3", "jm-learned"):
        run = folder / model
        assert train(upstream_dir, model, 3, run) == 0
        assert evaluate(upstream_dir, run) == 0
        runs[model] = run
    return runs


def test_a_restart_draws_from_its_own_seeds() -> None:
    seeds = restart_seeds(0, "rns-2-3", 3)
    assert seeds.draw == derived_seed("ptb", 0, "rns-2-3", 3, "draw") and seeds.parameters == derived_seed("ptb", 0, "rns-2-3", 3, "parameters")
    assert restart_draw(0, "rns-2-3", 3) == draw_hyperparameters(random.Random(seeds.draw))
    others = {restart_draw(salt, model, restart) for salt, model, restart in [(0, "rns-2-3", 4), (1, "rns-2-3", 3), (0, "lstm", 3)]}
    assert restart_draw(0, "rns-2-3", 3) not in others and len(others) == 3


@pytest.mark.e2e
def test_training_writes_the_model_and_one_curve_row_per_epoch(trained: dict[str, Path]) -> None:
    for model, run in trained.items():
        curve = pd.read_parquet(run / "train.parquet")
        draw = restart_draw(0, model, 3)
        assert list(curve["epoch"]) == [1, 2]
        assert set(curve["task"]) == {"ptb"} and set(curve["architecture"]) == {model} and set(curve["seed"]) == {3}
        assert set(curve["learning_rate"]) == {draw.learning_rate} and set(curve["clip_per_target"]) == {draw.clip_per_target}
        assert curve["learning_rate_used"].iloc[0] == draw.learning_rate
        assert set(curve["parameters"]) == {ptb_config(model).parameter_count()}
        settings = json.loads(curve["config"].iloc[0])
        assert settings["lines"] == LINES and settings["seeds"] == {"draw": restart_seeds(0, model, 3).draw, "parameters": restart_seeds(0, model, 3).parameters}
        saved = load_model(run / "model.pt")  # torch.load(weights_only=True), through stacklm.training.checkpoint
        assert saved.model_config == ptb_config(model) and len(saved.vocabulary) + 1 == 10_000
        assert (saved.task, saved.architecture, saved.settings["draw"]) == ("ptb", model, {"learning_rate": draw.learning_rate, "clip_per_target": draw.clip_per_target})
        best = curve[curve["is_best"]]["validation_perplexity"].iloc[-1]
        assert perplexity(saved.validation_cross_entropy) == best == curve["validation_perplexity"].min()


@pytest.mark.e2e
def test_the_initial_parameters_are_the_restarts_seeds(upstream_dir: Path, tmp_path: Path) -> None:
    # One epoch at learning rate 0 would be a run of its own; instead: the saved model of a
    # 1-epoch run differs from the seeded initialization by one epoch of SGD, so rebuild both.
    model = PtbLanguageModel(ptb_config("lstm"))
    model.initialize(torch.Generator().manual_seed(restart_seeds(0, "lstm", 1).parameters))
    assert train(upstream_dir, "lstm", 1, tmp_path / "run", "--max-epochs", "1") == 0
    saved = load_model(tmp_path / "run" / "model.pt")
    vocabulary = Vocabulary(saved.vocabulary)
    assert vocabulary == build_vocabulary(read_split(upstream_dir / "ptb", "train"))
    # The embedding rows of words absent from the slice's inputs get no gradient: they are the seeded ones.
    seen = set(encode(first_lines(read_split(upstream_dir / "ptb", "train"), LINES), vocabulary).tolist())
    unseen = torch.tensor(sorted(set(range(len(vocabulary))) - seen))
    assert torch.equal(saved.parameters["embedding.weight"][unseen], model.embedding.weight.detach()[unseen])
    assert not torch.equal(saved.parameters["embedding.weight"], model.embedding.weight.detach())


@pytest.mark.e2e
def test_the_same_restart_trains_to_the_same_bits(upstream_dir: Path, trained: dict[str, Path], tmp_path: Path) -> None:
    assert train(upstream_dir, "rns-2-3", 3, tmp_path / "again") == 0
    first, second = load_model(trained["rns-2-3"] / "model.pt"), load_model(tmp_path / "again" / "model.pt")
    assert first.parameters.keys() == second.parameters.keys()
    assert all(torch.equal(first.parameters[name], second.parameters[name]) for name in first.parameters)
    columns = ["epoch", "learning_rate_used", "train_loss", "validation_perplexity", "is_best"]
    pd.testing.assert_frame_equal(pd.read_parquet(trained["rns-2-3"] / "train.parquet")[columns], pd.read_parquet(tmp_path / "again" / "train.parquet")[columns])


@pytest.mark.e2e
def test_a_finished_restart_reruns_from_its_state_without_training(upstream_dir: Path, trained: dict[str, Path], tmp_path: Path, capsys) -> None:
    states = list(trained["lstm"].parent.glob("lstm.ckpt.*.pt"))
    assert len(states) == 1  # keyed by the fingerprint of the model, seeds, draw and data
    assert checkpoint_file.load(states[0])["curve"][-1]["epoch"] == 2
    assert train(upstream_dir, "lstm", 3, trained["lstm"]) == 0
    log = capsys.readouterr().err
    assert "resuming from" in log and not any(line.startswith(("checkpoint 1:", "epoch 3")) for line in log.splitlines())
    assert "\n  checkpoint 1: epoch 1 " in log  # the earlier epochs, repeated after the resume line


@pytest.mark.e2e
def test_the_test_perplexity_is_the_models_on_the_slice_as_one_stream(upstream_dir: Path, trained: dict[str, Path]) -> None:
    for model, run in trained.items():
        metrics = pd.read_parquet(run / "metrics.parquet")
        saved = load_model(run / "model.pt")
        network = rebuild_ptb_model(saved).double()
        vocabulary = Vocabulary(saved.vocabulary)
        stream = encode(first_lines(read_split(upstream_dir / "ptb", "test"), LINES), vocabulary)
        # Independent of the chunking: the 32 streams' layout (docs/design/cfl-and-ptb.md#ptb-data-and-batching)
        # as 32 separate passes from the initial state, each the stream's tokens after the one before
        # it (<eos> for the first).
        length = math.ceil(stream.numel() / 32)
        total = 0.0
        with torch.no_grad():
            for row in range(math.ceil(stream.numel() / length)):
                targets = stream[row * length : (row + 1) * length]
                before = stream[row * length - 1 : row * length] if row else torch.tensor([vocabulary.eos_index])
                inputs = torch.cat([before, targets[:-1]])
                logits, _ = network(inputs.unsqueeze(0), network.initial_state(1))
                total += float(torch.nn.functional.cross_entropy(logits[0], targets, reduction="sum"))
        test = metrics[(metrics["split"] == "test") & (metrics["metric"] == "perplexity")]["value"]
        assert test.tolist() == [pytest.approx(math.exp(total / stream.numel()), rel=1e-4)], model
        validation = metrics[(metrics["split"] == "validation")]["value"]
        assert validation.tolist() == [perplexity(saved.validation_cross_entropy)]


@pytest.mark.e2e
def test_the_sg_rows_are_the_suites_scores(upstream_dir: Path, trained: dict[str, Path]) -> None:
    run = trained["jm-learned"]
    metrics = pd.read_parquet(run / "metrics.parquet")
    saved = load_model(run / "model.pt")
    scorer = PtbScorer(rebuild_ptb_model(saved), Vocabulary(saved.vocabulary))
    expected = score_all(upstream_dir / "sg-test-suites", scorer.words, scorer, SUITES)
    rows = metrics[metrics["split"] == "syntaxgym"]
    suites = rows[rows["metric"] == "sg_suite_accuracy"]
    assert dict(zip(suites["suite"], suites["value"])) == {result.suite: result.accuracy for result in expected.suites}
    assert dict(zip(suites["suite"], suites["circuit"])) == {"number_src": "Agreement", "center_embed": "Center Embedding"}
    overall = rows[rows["metric"] == "sg_score"]["value"]
    assert overall.tolist() == [pytest.approx(sum(result.accuracy for result in expected.suites) / 2)]
    assert json.loads(metrics["config"].iloc[0])["evaluation"] == {"lines": LINES, "suites": list(SUITES)}


def test_a_bad_model_or_missing_data_is_one_line_naming_it(upstream_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["ptb", "train", "--model", "rns-2", "--restart", "1", "--data", str(upstream_dir / "ptb"), "--checkpoint", str(tmp_path / "c.pt"), "--out", str(tmp_path / "r")]) == 1
    assert "unknown PTB model 'rns-2'" in capsys.readouterr().err
    assert main(["ptb", "train", "--model", "lstm", "--restart", "1", "--data", str(tmp_path), "--checkpoint", str(tmp_path / "c.pt"), "--out", str(tmp_path / "r")]) == 1
    assert f"{tmp_path / 'ptb.train.txt'}: PTB file not found" in capsys.readouterr().err
    assert main(["ptb", "evaluate", "--run", str(tmp_path / "r"), "--data", str(tmp_path), "--syntaxgym", str(tmp_path), "--out", str(tmp_path / "m.parquet")]) == 1
    assert "model.pt: model file not found" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_progress_interval_comes_from_the_cadence_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """ptb.progress_interval_s reaches `stacklm ptb train` in the workflow's cadence file
    (--cadence), for every restart of the job; without it, the default's. A bad value there is
    refused by its key."""
    intervals: list[float] = []
    monkeypatch.setattr(ptb_training, "train_restart", lambda *args, progress_interval_s, **kwargs: intervals.append(progress_interval_s))
    settings = dataclasses.replace(resolution.ResolvedSettings(), ptb=PtbSettings(progress_interval_s=7.5))
    cadence = tmp_path / "cadence.json"
    assert main(["settings", "--json", json.dumps(resolution.settings_for(settings, "cadence")), "--out", str(cadence)]) == 0
    restarts = ["--model", "lstm", "--restart", "1", "2", "--data", str(tmp_path), "--checkpoint", "a.pt", "b.pt", "--out", "a", "b", "--threads", "1"]
    assert main(["ptb", "train", *restarts, "--cadence", str(cadence)]) == 0
    assert main(["ptb", "train", *restarts]) == 0
    assert intervals == [7.5, 7.5, PtbSettings().progress_interval_s, PtbSettings().progress_interval_s]
    cadence.write_text(json.dumps({"sections": ["training", "ptb"], "ptb": {"progress_interval_s": 0}}))
    assert main(["ptb", "train", *restarts, "--cadence", str(cadence)]) == 1
    assert "config key 'ptb.progress_interval_s': must be positive" in capsys.readouterr().err
    assert len(intervals) == 4


@pytest.mark.e2e
def test_restarts_trained_and_evaluated_in_one_process_equal_each_alone(upstream_dir: Path, trained: dict[str, Path], tmp_path: Path) -> None:
    """resources.runs_per_job > 1: `stacklm ptb train` of several restarts (another model's
    between two), then `stacklm ptb evaluate` of them, write what a process each wrote."""
    models = ("rns-2-3", "lstm", "jm-learned")
    runs = [tmp_path / model for model in models]
    logs = [tmp_path / f"{model}.log" for model in models]
    assert main([
        "ptb", "train", "--model", *models, "--restart", "3", "3", "3", "--data", str(upstream_dir / "ptb"), "--lines", str(LINES),
        "--max-epochs", "2", "--checkpoint", *(str(tmp_path / f"{model}.ckpt.pt") for model in models), "--out", *map(str, runs),
        "--log", *map(str, logs), "--threads", "1",
    ]) == 0
    assert main([
        "ptb", "evaluate", "--run", *map(str, runs), "--data", str(upstream_dir / "ptb"), "--syntaxgym", str(upstream_dir / "sg-test-suites"),
        "--lines", str(LINES), "--suites", *SUITES, "--out", *(str(run / "metrics.parquet") for run in runs),
        "--log", *(str(tmp_path / f"{model}-evaluation.log") for model in models), "--threads", "1",
    ]) == 0
    varying = ["code_version", "wall_time_s", "tokens_per_s"]  # the commit and the clock, not the run
    for model, run in zip(models, runs):
        alone, together = load_model(trained[model] / "model.pt"), load_model(run / "model.pt")
        assert alone.parameters.keys() == together.parameters.keys()
        assert all(torch.equal(alone.parameters[name], together.parameters[name]) for name in alone.parameters), model
        curves = [pd.read_parquet(folder / "train.parquet").drop(columns=varying) for folder in (trained[model], run)]
        pd.testing.assert_frame_equal(*curves)
        metrics = [pd.read_parquet(folder / "metrics.parquet").drop(columns=varying) for folder in (trained[model], run)]
        pd.testing.assert_frame_equal(*metrics)
        assert f"{model} restart 3: learning rate" in (tmp_path / f"{model}.log").read_text()
        assert "SG score" in (tmp_path / f"{model}-evaluation.log").read_text()
    # one --out per restart, and no restart twice
    assert main(["ptb", "train", "--model", "lstm", "--restart", "1", "2", "--data", str(upstream_dir / "ptb"),
                 "--checkpoint", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--out", str(tmp_path / "a")]) == 2
    assert main(["ptb", "train", "--model", "lstm", "--restart", "1", "1", "--data", str(upstream_dir / "ptb"),
                 "--checkpoint", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--out", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
