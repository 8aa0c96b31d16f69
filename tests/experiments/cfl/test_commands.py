"""``stacklm cfl train``, ``select``, ``evaluate`` and ``figures`` through the real commands, on
tiny marked-reversal runs, checked against values computed here independently."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from stacklm.experiments.cfl.commands import register
from stacklm.experiments.cfl.training import model_options
from stacklm.cfl.datasets import CflDataset, write_split
from stacklm.evaluation.cfl_metric import DELTA
from stacklm.experiments.cfl.search import CflRun, run_seeds
from stacklm.cfl.languages import LANGUAGES
from stacklm.experiments.cfl.data import sample_run_data
from stacklm.errors import StacklmError, UsageError
from stacklm.models.registry import model_for_config
from stacklm.workflow.tracking import register as register_tracking
from stacklm.tracking.records import CURVE_SCHEMA, METRICS_SCHEMA
from stacklm.training.run_files import load_model

LANGUAGE = LANGUAGES["marked-reversal"]
SETTINGS = {
    "cfl": {"train_batches": 3, "validation_batches": 2, "max_epochs": 2, "test_strings_per_length": 2},
    "evaluation": {"tokens_per_batch": 512},
}
RESTARTS = (1, 2)


def stacklm(*arguments: str | Path) -> int:
    root = argparse.ArgumentParser(prog="stacklm")
    register(root.add_subparsers(dest="command", required=True))
    args = root.parse_args(["cfl", *map(str, arguments)])
    return args.func(args)


def tracking(*arguments: str | Path) -> int:
    root = argparse.ArgumentParser(prog="stacklm")
    register_tracking(root.add_subparsers(dest="command", required=True))
    args = root.parse_args(["tracking", *map(str, arguments)])
    return args.func(args)


def train(folder: Path, settings: Path, restart: int, architecture: str = "cfl/LSTM") -> Path:
    run_dir = folder / "runs" / f"lr0.01-r{restart}"
    assert (
        stacklm(
            "train", "--language", LANGUAGE.name, "--architecture", architecture, "--learning-rate", "0.01", "--restart", restart,
            "--settings", settings, "--checkpoint", folder / "checkpoints" / f"{restart}.pt", "--out", run_dir, "--threads", "1",
        )
        == 0
    )
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    folder = tmp_path_factory.mktemp("cfl")
    (folder / "settings.json").write_text(json.dumps(SETTINGS))
    return folder, [train(folder, folder / "settings.json", restart) for restart in RESTARTS]


def string_log_probability(model: torch.nn.Module, string: list[int]) -> float:
    """ln p_M(w·EOS), one string at a time, straight from the model's logits."""
    with torch.no_grad():
        logits = model(torch.tensor([string]))  # (1, n + 1, V)
    targets = torch.tensor(string + [LANGUAGE.eos])
    return float(torch.log_softmax(logits[0].double(), dim=-1).gather(1, targets.unsqueeze(1)).sum())


def saved_model(run_dir: Path) -> torch.nn.Module:
    saved = load_model(run_dir / "model.pt")
    model = model_for_config(saved.model_config)
    model.load_state_dict(saved.parameters)
    return model.eval()


def marked_reversal_log_probability(length: int) -> float:
    """ln p_G(w | |w| = 2k + 1) = −k ln 2: uniform given the length."""
    return -((length - 1) // 2) * math.log(2)


@pytest.mark.e2e
def test_train_writes_the_curve_of_validation_delta_per_epoch(runs: tuple[Path, list[Path]]) -> None:
    _, run_dirs = runs
    curve = pd.read_parquet(run_dirs[0] / "train.parquet")
    assert set(CURVE_SCHEMA.names) <= set(curve.columns)
    assert list(curve["epoch"]) == [1, 2]
    assert set(curve["task"]) == {"marked-reversal"} and set(curve["architecture"]) == {"cfl/LSTM"}
    assert set(curve["phase"]) == {"search"} and set(curve["seed"]) == {1} and set(curve["setting"]) == {"lr0.01-r1"}
    assert curve["tokens_per_batch"].isna().all() and curve["vector_size"].isna().all()
    assert set(json.loads(curve["config"].iloc[0])["seeds"].values()) == set(vars(run_seeds(CflRun(LANGUAGE.name, "cfl/LSTM", 0.01, None, 1))).values())

    # the run's validation set, and its true cross-entropy from the closed form (20 valid lengths)
    _, validation = sample_run_data(LANGUAGE, run_seeds(CflRun(LANGUAGE.name, "cfl/LSTM", 0.01, None, 1)).data, 3, 2)
    symbols = sum(len(string) + 1 for string in validation.strings)
    true_cross_entropy = sum(-marked_reversal_log_probability(len(s)) + math.log(20) for s in validation.strings) / symbols
    assert curve["true_cross_entropy"].tolist() == pytest.approx([true_cross_entropy] * 2, abs=1e-12)
    assert curve[DELTA].tolist() == pytest.approx((curve["validation_cross_entropy"] - true_cross_entropy).tolist(), abs=1e-12)
    assert all(math.isfinite(value) and value > 0 for value in curve[DELTA])

    # the saved model is the best epoch's: its cross-entropy on the validation strings, one at a time
    model = saved_model(run_dirs[0])
    model_cross_entropy = -sum(string_log_probability(model, string) for string in validation.strings) / symbols
    assert model_cross_entropy == pytest.approx(curve["validation_cross_entropy"].min(), rel=1e-5)


@pytest.fixture(scope="module")
def selection(runs: tuple[Path, list[Path]]) -> Path:
    folder, run_dirs = runs
    assert stacklm("select", "--curves", *(run_dir / "train.parquet" for run_dir in run_dirs), "--out", folder / "selected.parquet") == 0
    return folder / "selected.parquet"


@pytest.mark.e2e
def test_select_keeps_the_curve_of_the_run_with_the_lowest_best_delta(runs: tuple[Path, list[Path]], selection: Path) -> None:
    _, run_dirs = runs
    curves = [pd.read_parquet(run_dir / "train.parquet") for run_dir in run_dirs]
    best = [float(curve.loc[curve["validation_cross_entropy"].idxmin(), DELTA]) for curve in curves]
    pd.testing.assert_frame_equal(pd.read_parquet(selection), curves[best.index(min(best))])


def hand_made_test_set(path: Path) -> CflDataset:
    """Three strings of length 41 and two of 43, with p_true from the closed form (30 test lengths)."""
    strings = [[0] * 20 + [2] + [0] * 20, [1] * 20 + [2] + [1] * 20, [0, 1] * 10 + [2] + [1, 0] * 10, [0] * 21 + [2] + [0] * 21, [1] * 21 + [2] + [1] * 21]
    length_bin = [marked_reversal_log_probability(len(string)) for string in strings]
    dataset = CflDataset(strings, [value - math.log(30) for value in length_bin], length_bin)
    write_split(dataset, path)
    return dataset


@pytest.fixture(scope="module")
def evaluation(runs: tuple[Path, list[Path]], selection: Path) -> Path:
    folder, _ = runs
    hand_made_test_set(folder / "test.tsv")
    out = folder / "evaluation.parquet"
    arguments = ["--selection", selection, "--runs", folder / "runs", "--test", folder / "test.tsv"]
    assert stacklm("evaluate", *arguments, "--settings", folder / "settings.json", "--out", out, "--threads", "1") == 0
    return out


@pytest.mark.e2e
def test_evaluate_scores_the_selected_run_overall_and_per_length(runs: tuple[Path, list[Path]], selection: Path, evaluation: Path) -> None:
    folder, _ = runs
    dataset = hand_made_test_set(folder / "test.tsv")
    metrics = pd.read_parquet(evaluation)
    assert set(METRICS_SCHEMA.names) <= set(metrics.columns)
    assert set(metrics["metric"]) == {DELTA} and metrics["rule"].isna().all()

    selected = pd.read_parquet(selection)
    model = saved_model(folder / "runs" / selected["setting"].iloc[0])
    kept = [0, 1, 3, 4]  # test_strings_per_length = 2: the third string of length 41 is left out
    per_string = {index: string_log_probability(model, dataset.strings[index]) for index in kept}
    by_length = metrics[metrics["length"].notna()].set_index("length")["value"]
    for length, members in ((41, [0, 1]), (43, [3, 4])):
        differences = [(-per_string[i] + dataset.length_bin_logprob[i]) / (length + 1) for i in members]
        assert by_length[length] == pytest.approx(sum(differences) / len(differences), rel=1e-6)
    overall = metrics[(metrics["split"] == "test") & metrics["length"].isna()]["value"]
    symbols = sum(len(dataset.strings[i]) + 1 for i in kept)
    expected = sum(-per_string[i] + dataset.true_logprob[i] for i in kept) / symbols
    assert overall.tolist() == pytest.approx([expected], rel=1e-6)
    validation = metrics[metrics["split"] == "validation"]["value"]
    assert validation.tolist() == pytest.approx([selected.loc[selected["validation_cross_entropy"].idxmin(), DELTA]])


def assert_same_run(alone: Path, together: Path) -> None:
    """The run in ``together`` equals the run in ``alone``: its curve (but for the wall time) and its parameters, bitwise."""
    timing = ["wall_time_s", "tokens_per_s", "code_version"]
    curves = [pd.read_parquet(run_dir / "train.parquet").drop(columns=timing) for run_dir in (alone, together)]
    pd.testing.assert_frame_equal(curves[0], curves[1], check_exact=True)
    parameters = [load_model(run_dir / "model.pt").parameters for run_dir in (alone, together)]
    assert parameters[0].keys() == parameters[1].keys() and all(torch.equal(parameters[0][key], parameters[1][key]) for key in parameters[0])


@pytest.mark.e2e
def test_runs_trained_in_one_process_equal_each_run_trained_alone(runs: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of cfl/LSTM, in the other order, and one of cfl/NS+S, in one process: each equals the run trained alone."""
    folder, run_dirs = runs
    settings = folder / "settings.json"
    ns_alone = folder / "ns-alone"
    assert stacklm("train", "--language", LANGUAGE.name, "--architecture", "cfl/NS+S", "--setting", "lr0.01-r1", "--settings", settings,
                   "--checkpoint", folder / "checkpoints" / "ns-alone.pt", "--out", ns_alone, "--threads", "1") == 0
    together = folder / "together"
    settings_of_runs = ["lr0.01-r2", "lr0.01-r1", "lr0.01-r1"]
    capsys.readouterr()
    assert stacklm(
        "train", "--language", LANGUAGE.name, "--architecture", "cfl/LSTM", "cfl/LSTM", "cfl/NS+S", "--setting", *settings_of_runs,
        "--settings", settings, "--checkpoint", *(together / f"state{number}.pt" for number in range(3)),
        "--out", *(together / f"run{number}" for number in range(3)), "--log", *(together / f"run{number}.log" for number in range(3)),
        "--threads", "1",
    ) == 0
    assert "run 3 of 3: cfl/NS+S lr0.01-r1" in capsys.readouterr().err
    for alone, number in ((run_dirs[1], 0), (run_dirs[0], 1), (ns_alone, 2)):
        assert_same_run(alone, together / f"run{number}")
        assert "epoch 2" in (together / f"run{number}.log").read_text()


def test_train_takes_one_of_each_per_run_option_per_setting(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps(SETTINGS))
    base = ["train", "--language", LANGUAGE.name, "--architecture", "cfl/LSTM", "--settings", tmp_path / "settings.json"]
    with pytest.raises(UsageError, match="--out: 1 given for 2 --setting"):
        stacklm(*base, "--setting", "lr0.01-r1", "lr0.01-r2", "--checkpoint", tmp_path / "a.pt", tmp_path / "b.pt", "--out", tmp_path / "a")
    with pytest.raises(UsageError, match="given twice"):
        stacklm(*base, "--setting", "lr0.01-r1", "lr0.01-r1", "--checkpoint", tmp_path / "a.pt", tmp_path / "b.pt", "--out", tmp_path / "a", tmp_path / "b")
    with pytest.raises(UsageError, match="--learning-rate needs --restart"):
        stacklm(*base, "--learning-rate", "0.01", "--checkpoint", tmp_path / "a.pt", "--out", tmp_path / "a")
    with pytest.raises(UsageError, match="a --setting names both"):
        stacklm(*base, "--setting", "lr0.01-r1", "--restart", "1", "--checkpoint", tmp_path / "a.pt", "--out", tmp_path / "a")
    with pytest.raises(StacklmError, match="not a CFL run setting"):
        stacklm(*base, "--setting", "lr0.01", "--checkpoint", tmp_path / "a.pt", "--out", tmp_path / "a")


@pytest.mark.e2e
def test_selections_evaluated_in_one_process_equal_each_evaluated_alone(runs: tuple[Path, list[Path]], selection: Path, evaluation: Path) -> None:
    """The selection of cfl/LSTM twice, with a selection that names no saved run between them: the
    other two are written, equal to the evaluation alone, and the command fails naming the bad one."""
    folder, _ = runs
    arguments = ["--test", folder / "test.tsv", "--settings", folder / "settings.json", "--threads", "1"]
    outs = [folder / "evaluated" / f"{number}.parquet" for number in range(3)]
    with pytest.raises(StacklmError, match="1 of 3 runs failed"):
        stacklm("evaluate", "--selection", selection, selection, selection, "--runs", folder / "runs", folder / "nowhere", folder / "runs",
                "--out", *outs, "--log", *(out.with_suffix(".log") for out in outs), *arguments)
    for out in (outs[0], outs[2]):
        pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(evaluation), check_exact=True)
        assert "test Δ" in out.with_suffix(".log").read_text()
    assert not outs[1].exists() and "error:" in outs[1].with_suffix(".log").read_text()


@pytest.mark.e2e
def test_figures_gather_the_records_and_draw_from_parquet_alone(tmp_path: Path, selection: Path, evaluation: Path) -> None:
    copy = tmp_path  # the two Parquet files without the runs
    for source in (selection, evaluation):
        shutil.copy(source, copy / source.name)
    figures = [copy / "figures" / name for name in ("validation.png", "validation.pdf", "test-by-length.png", "test-by-length.pdf")]
    assert (
        stacklm(
            "figures", "--curves", copy / "selected.parquet", "--metrics", copy / "evaluation.parquet",
            "--out-curves", copy / "curves.parquet", "--out-metrics", copy / "metrics.parquet",
            "--validation-figures", *figures[:2], "--test-figures", *figures[2:], "--summary", copy / "summary.md",
        )
        == 0
    )
    pd.testing.assert_frame_equal(pd.read_parquet(copy / "metrics.parquet"), pd.read_parquet(evaluation))
    pd.testing.assert_frame_equal(pd.read_parquet(copy / "curves.parquet"), pd.read_parquet(selection))
    assert figures[0].read_bytes().startswith(b"\x89PNG") and figures[1].read_bytes().startswith(b"%PDF")
    assert all(path.stat().st_size > 1000 for path in figures)
    summary = (copy / "summary.md").read_text().splitlines()
    assert summary[0].startswith("| language | model | run |") and len(summary) == 2 + 1  # the header and one selected model


def test_model_options_give_each_language_its_pda_and_gref_jm_their_vector_size() -> None:
    assert (model_options("marked-reversal", "cfl/NS+S", None).cfl_num_states, model_options("marked-reversal", "cfl/NS+S", None).cfl_num_symbols) == (2, 3)
    assert model_options("hardest-cfl", "cfl/NS+S+U", None).cfl_num_states == 3
    assert model_options("padded-reversal", "cfl/NS", None).cfl_num_states == 3
    assert model_options("dyck-2", "cfl/Gref", 40).cfl_stack_vector_size == 40
    with pytest.raises(StacklmError, match="--vector-size is required"):
        model_options("dyck-2", "cfl/JM", None)
    with pytest.raises(StacklmError, match="refused for cfl/NS"):
        model_options("dyck-2", "cfl/NS", 2)


def test_train_refuses_a_model_that_is_not_a_cfl_model(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps(SETTINGS))
    with pytest.raises(StacklmError, match="not a CFL model"):
        train(tmp_path, tmp_path / "settings.json", 1, architecture="LSTM")


@pytest.mark.e2e
def test_sync_mirrors_the_runs_their_delta_curves_and_the_selected_runs_test_delta_to_mlflow(
    tmp_path: Path, runs: tuple[Path, list[Path]], selection: Path, evaluation: Path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "settings.json").write_text(json.dumps({**SETTINGS, "tracking": {"uri": uri}}))
    _, run_dirs = runs
    settings = ["--settings", tmp_path / "settings.json"]
    curves = [run_dir / "train.parquet" for run_dir in run_dirs]
    assert tracking("init", *settings) == 0
    assert tracking("sync", *settings, "--experiment", LANGUAGE.name, "--curves", *curves, "--metrics", evaluation, "--out", tmp_path / "manifest.json") == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert set(manifest) == {f"marked-reversal/cfl/LSTM/lr0.01-r{restart}" for restart in RESTARTS}
    selected = str(pd.read_parquet(selection)["setting"].iloc[0])
    metrics = pd.read_parquet(evaluation)
    for run_dir in run_dirs:
        found = client.get_run(manifest[f"marked-reversal/cfl/LSTM/{run_dir.name}"])
        curve = pd.read_parquet(run_dir / "train.parquet")
        history = client.get_metric_history(found.info.run_id, "curve/validation_" + DELTA)
        assert [(point.step, point.value) for point in history] == list(zip(curve["epoch"], curve[DELTA]))
        assert found.data.params["settings.language"] == LANGUAGE.name and found.data.params["architecture"] == "cfl/LSTM"
        assert found.data.tags["language"] == LANGUAGE.name and found.data.tags["model"] == "cfl/LSTM"
        assert found.data.params["model.dropout"] == "0.0" and found.data.params["settings.model.dropout"] == "0.1"  # built, not the option
        assert found.data.metrics["best_validation_" + DELTA] == curve[DELTA].min() and found.data.metrics["epochs"] == 2
        if run_dir.name != selected:
            assert "test_" + DELTA not in found.data.metrics
            continue
        test = metrics[metrics["split"] == "test"]
        assert found.data.metrics["test_" + DELTA] == float(test[test["length"].isna()]["value"].iloc[0])
        import mlflow.pytorch  # the selected run's model, through MLflow's own API: the model that was evaluated

        loaded = mlflow.pytorch.load_model(f"runs:/{found.info.run_id}/model")
        saved = load_model(run_dir / "model.pt")
        evaluated = model_for_config(saved.model_config)
        evaluated.load_state_dict(saved.parameters)
        tokens = torch.tensor([[0, 1, 2, 1]])
        with torch.no_grad():
            torch.testing.assert_close(loaded(tokens), evaluated.eval()(tokens), rtol=0, atol=0)
        by_length = client.get_metric_history(found.info.run_id, "curve/test_" + DELTA + "_by_length")
        assert sorted((point.step, point.value) for point in by_length) == sorted(zip(test["length"].dropna().astype(int), test[test["length"].notna()]["value"]))
