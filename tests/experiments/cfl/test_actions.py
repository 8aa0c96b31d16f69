"""Figure 2 of DuSell & Chiang (2022): the stack-action log of ``stacklm cfl train --actions`` and
``stacklm cfl actions``, which draws it from Parquet alone."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import torch

from stacklm.cfl.languages import LANGUAGES
from stacklm.errors import StacklmError
from stacklm.experiments.cfl.actions import ACTIONS_SCHEMA, correct_actions, logged_string
from stacklm.models.stack_actions import string_action_types
from stacklm.tracking.records import write_table
from tests.experiments.cfl.test_commands import saved_model, stacklm

LANGUAGE = LANGUAGES["marked-reversal"]
SETTINGS = {"cfl": {"train_batches": 3, "validation_batches": 2, "max_epochs": 2, "action_log_every": 3}}  # a row per epoch


def test_the_correct_action_is_push_before_the_marker_replace_at_it_and_pop_after() -> None:
    assert correct_actions(["0", "1", "#", "1", "0"]) == ["push", "push", "replace", "pop", "pop"]
    with pytest.raises(StacklmError, match="exactly one '#'"):
        correct_actions(["0", "1", "1", "0"])


def test_the_logged_string_is_one_fixed_marked_reversal_of_a_training_length() -> None:
    tokens = logged_string("marked-reversal")
    assert tokens == logged_string("marked-reversal")
    symbols = [LANGUAGE.terminal_names[token] for token in tokens]
    middle = symbols.index("#")
    assert 41 <= len(tokens) <= 79 and len(tokens) == 2 * middle + 1
    assert symbols[:middle] == symbols[middle + 1 :][::-1] and "#" not in symbols[:middle]


def train(folder: Path, architecture: str, actions: bool) -> Path:
    run_dir = folder / ("logged" if actions else "plain") / architecture.replace("/", "-") / "lr0.01-r1"
    extra = ["--actions", run_dir / "actions.parquet"] if actions else []
    assert (
        stacklm(
            "train", "--language", LANGUAGE.name, "--architecture", architecture, "--learning-rate", "0.01", "--restart", "1",
            "--settings", folder / "settings.json", "--checkpoint", run_dir.parent / "checkpoint.pt", "--out", run_dir,
            "--threads", "1", *extra,
        )
        == 0
    )
    return run_dir


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("actions")
    (folder / "settings.json").write_text(json.dumps(SETTINGS))
    return folder


@pytest.mark.e2e
@pytest.mark.parametrize("architecture", ["cfl/NS+S", "cfl/NS+S+U"])
def test_train_logs_the_actions_of_the_fixed_string_and_trains_the_same(folder: Path, architecture: str) -> None:
    logged, plain = train(folder, architecture, actions=True), train(folder, architecture, actions=False)
    curve = pd.read_parquet(logged / "train.parquet")
    plain_curve = pd.read_parquet(plain / "train.parquet")
    columns = ["epoch", "validation_cross_entropy", "train_loss", "is_best"]
    pd.testing.assert_frame_equal(curve[columns], plain_curve[columns])
    for name, tensor in saved_model(logged).state_dict().items():
        assert torch.equal(tensor, saved_model(plain).state_dict()[name])

    actions = pd.read_parquet(logged / "actions.parquet")
    assert list(actions.columns) == ACTIONS_SCHEMA.names
    tokens = logged_string(LANGUAGE.name)
    positions = len(tokens) - 1
    assert actions["update"].tolist() == [0] * positions + [3] * positions + [6] * positions  # 0: the initial parameters
    assert actions["epoch"].tolist() == [1] * 2 * positions + [2] * positions
    assert set(actions["architecture"]) == {architecture} and set(actions["setting"]) == {"lr0.01-r1"}
    first = actions[actions["update"] == 3]
    assert first["position"].tolist() == list(range(1, positions + 1))
    assert first["symbol"].tolist() == [LANGUAGE.terminal_names[token] for token in tokens[:-1]]
    middle = first["symbol"].tolist().index("#")
    assert first["correct_action"].tolist() == ["push"] * middle + ["replace"] + ["pop"] * (positions - middle - 1)
    chosen = [row[f"{row['correct_action']}_probability"] for _, row in actions.iterrows()]
    assert actions["correct_probability"].tolist() == chosen

    # the rows logged at the end of the best epoch are the saved (best) model's actions
    best_epoch = int(curve.loc[curve["validation_cross_entropy"].idxmin(), "epoch"])
    with torch.no_grad():
        expected = string_action_types(saved_model(logged), tokens).double()
    at_best = actions[actions["update"] == 3 * best_epoch]
    torch.testing.assert_close(torch.tensor(at_best[["push_probability", "replace_probability", "pop_probability"]].to_numpy()), expected)


def test_train_refuses_to_log_a_model_or_language_without_these_actions(folder: Path) -> None:
    for language, architecture in (("marked-reversal", "cfl/LSTM"), ("dyck-2", "cfl/NS+S")):
        with pytest.raises(StacklmError, match="--actions logs the stack actions of an NS model"):
            stacklm(
                "train", "--language", language, "--architecture", architecture, "--learning-rate", "0.01", "--restart", "1",
                "--settings", folder / "settings.json", "--checkpoint", folder / "refused.pt", "--out", folder / "refused",
                "--actions", folder / "refused" / "actions.parquet",
            )


def hand_written_log(architecture: str, setting: str) -> pd.DataFrame:
    """Two updates over the string 0 # 0 (positions 1, 2)."""
    rows = []
    for update, p_push in ((100, 0.2), (200, 0.9)):
        for position, symbol, correct in ((1, "0", "push"), (2, "#", "replace")):
            probabilities = {"push": p_push, "replace": 1 - p_push, "pop": 0.0}
            rows.append({"task": "marked-reversal", "architecture": architecture, "setting": setting, "update": update, "epoch": 1,
                         "position": position, "symbol": symbol, "correct_action": correct, "correct_probability": probabilities[correct]}
                        | {f"{name}_probability": value for name, value in probabilities.items()})
    return pd.DataFrame(rows)


def hand_written_runs(root: Path) -> tuple[list[Path], list[Path]]:
    """A selection and a runs folder per model, the selected run's ``actions.parquet`` in it."""
    selections, runs = [], []
    for architecture, setting in (("cfl/NS+S", "lr0.001-r2"), ("cfl/NS+S+U", "lr0.01-r1")):
        slug = architecture.replace("/", "-").lower()
        selection = root / "selected" / f"{slug}.parquet"
        selection.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"architecture": [architecture], "setting": [setting], "epoch": [1]}).to_parquet(selection)
        run_dir = root / "runs" / slug / setting
        run_dir.mkdir(parents=True)
        write_table(pa.Table.from_pandas(hand_written_log(architecture, setting), schema=ACTIONS_SCHEMA, preserve_index=False), run_dir / "actions.parquet")
        selections.append(selection)
        runs.append(run_dir.parent)
    return selections, runs


def draw(root: Path, selections: list[Path], runs: list[Path], out: str) -> list[Path]:
    figures = [root / out / "stack-actions.png", root / out / "stack-actions.pdf"]
    assert stacklm("actions", "--selections", *selections, "--runs", *runs, "--out", root / out / "actions.parquet", "--figures", *figures) == 0
    return figures


def test_the_figure_is_drawn_from_the_selected_runs_logs(tmp_path: Path) -> None:
    selections, runs = hand_written_runs(tmp_path)
    figures = draw(tmp_path, selections, runs, "first")
    gathered = pd.read_parquet(tmp_path / "first" / "actions.parquet")
    expected = pd.concat([hand_written_log("cfl/NS+S", "lr0.001-r2"), hand_written_log("cfl/NS+S+U", "lr0.01-r1")], ignore_index=True)
    pd.testing.assert_frame_equal(gathered, expected)
    assert figures[0].read_bytes().startswith(b"\x89PNG") and figures[1].read_bytes().startswith(b"%PDF")
    assert all(path.stat().st_size > 1000 for path in figures)
    again = draw(tmp_path, selections, runs, "second")
    assert again[1].read_bytes() == figures[1].read_bytes()  # the same logs, the same PDF


def test_a_bad_log_is_named(tmp_path: Path) -> None:
    selections, runs = hand_written_runs(tmp_path)
    log = runs[1] / "lr0.01-r1" / "actions.parquet"
    log.write_text("not parquet")
    with pytest.raises(StacklmError, match=re.escape(f"{log}: cannot read the run's stack actions: ")):
        draw(tmp_path, selections, runs, "out")
    hand_written_log("cfl/NS+S+U", "lr0.01-r1").drop(columns="symbol").to_parquet(log)
    with pytest.raises(StacklmError, match=re.escape(f"{log}: not a stack-action log: no column symbol")):
        draw(tmp_path, selections, runs, "out")
    shutil.copy(runs[0] / "lr0.001-r2" / "actions.parquet", log)
    with pytest.raises(StacklmError, match=re.escape(f"{log}: holds the actions of another run")):
        draw(tmp_path, selections, runs, "out")
