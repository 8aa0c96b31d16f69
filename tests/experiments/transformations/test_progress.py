"""``stacklm progress`` on a tiny real pipeline folder: a search trial that ended, one killed
after its second checkpoint (its state left behind), a final run trained and evaluated, and an
unreadable state; every row checked against values read from the files themselves."""

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from stacklm import cli
from stacklm.data.examples import write_examples
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.experiments.transformations import dag
from stacklm.experiments.transformations.progress import find_runs
from stacklm.report.progress import CONVERGED, EVALUATED, MAX_EPOCHS, UNFINISHED, table_row
from stacklm.tasks import get_task
from stacklm.tracking.records import CHECKPOINT_SCHEMA, CURVE_SCORES, checkpoint_table
from stacklm.training import checkpoint
from tests.training.killed import killed_after_save
from stacklm.training.run_state import CheckpointRecord

TASK = "question-formation"
HPARAMS = {1: {"learning_rate": 0.005, "tokens_per_batch": 256, "max_epochs": 1}, 2: {"learning_rate": 0.002, "tokens_per_batch": 300, "max_epochs": 1}}


def path(run_dir: Path, pattern: str, phase: str, index: int) -> Path:
    return run_dir / pattern.format(task=TASK, architecture="tf", phase=phase, index=index)


def hparams_file(run_dir: Path, phase: str, index: int) -> Path:
    return run_dir / dag.hparams_path(TASK, "tf", phase, index)


def train(run_dir: Path, phase: str, index: int) -> int:
    """``stacklm train`` as the rule ``train`` calls it (a search trial's seed is derived from the trial)."""
    seed = dag.run_seed(phase, index)
    trial = ["--trial", str(index)] if phase == "search" else []
    return cli.main(["train", "--task", TASK, "--architecture", "Tf", "--data-dir", str(run_dir / "results/data" / TASK), "--hparams", str(hparams_file(run_dir, phase, index)),
                     "--phase", phase, *trial, "--seed", str(seed), "--settings", str(run_dir / "results/settings/train.json"),
                     "--checkpoint", str(path(run_dir, dag.CHECKPOINT, phase, index)), "--out", str(path(run_dir, dag.RUN_DIR, phase, index)),
                     "--device", "cpu", "--threads", "1"])  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workflow's folder after: trial 1 ended, trial 2 killed after checkpoint 2, final seed 1 evaluated, a garbage state."""
    folder = tmp_path_factory.mktemp("pipeline")
    results = folder / "results"
    splits = build_splits(get_task(TASK), SplitSizes(train=400, validation=40, test=40, generalization=40), seed=0)
    for name, examples in splits.items():
        write_examples(results / "data" / TASK / f"{name}.tsv", examples)
    settings = {"tasks": [TASK], "model": {"dropout": 0.0},
                "training": {"parameter_budget": 6000, "examples_per_checkpoint": 100, "early_stopping_patience": 2, "progress_interval_s": 30},
                "evaluation": {"tokens_per_batch": 2048, "samples_per_input": 1, "curve_examples": 20}}  # fmt: skip
    (results / "settings").mkdir(parents=True)
    (results / "settings/train.json").write_text(json.dumps(settings))
    (results / "settings/evaluate.json").write_text(json.dumps(settings))
    for phase, index, hparams in (("search", 1, HPARAMS[1]), ("search", 2, HPARAMS[2]), ("final", 1, HPARAMS[1])):
        hparams_file(folder, phase, index).parent.mkdir(parents=True, exist_ok=True)
        hparams_file(folder, phase, index).write_text(json.dumps(hparams))
    assert train(folder, "search", 1) == 0
    assert train(folder, "final", 1) == 0
    assert cli.main(["evaluate", "--task", TASK, "--run", str(path(folder, dag.RUN_DIR, "final", 1)), "--data-dir", str(results / "data" / TASK),
                     "--settings", str(results / "settings/evaluate.json"), "--out", str(path(folder, dag.RUN_METRICS, "final", 1))]) == 0  # fmt: skip
    with killed_after_save(2):
        train(folder, "search", 2)
    garbage = path(folder, dag.CHECKPOINT, "final", 2).with_name("2.0123456789abcdef.pt")
    garbage.write_bytes(b"not a checkpoint")
    return folder


def state_of(run_dir: Path, phase: str, index: int) -> Path:
    [state] = path(run_dir, dag.CHECKPOINT, phase, index).parent.glob(f"{index}.*.pt")
    return state


def expected_row(curve: pd.DataFrame, scores: dict[str, float] | None = None) -> list[str]:
    """The table's cells from best validation cross-entropy on, computed from the curve (and the whole-set scores)."""
    best = curve.loc[curve["validation_cross_entropy"].idxmin()]
    values = scores if scores is not None else {name: best[name] for name in CURVE_SCORES}
    where = "whole sets (metrics.parquet)" if scores is not None else "curve sample"
    pairs = [f"{values[f'{prefix}_full_accuracy']:.3f} / {values[f'{prefix}_partial_accuracy']:.3f}" for prefix in ("test", "hierarchical", "linear")]
    return [f"{best['validation_cross_entropy']:.4f}", f"checkpoint {best['checkpoint']}; {where}", *pairs]


def test_every_run_is_shown_as_its_files_hold_it(run_dir: Path) -> None:
    runs, warnings = find_runs(run_dir)
    assert [run.name for run in runs] == ["Tf, search trial 1", "Tf, search trial 2", "Tf, final seed 1"]
    ended, killed, evaluated = runs
    garbage = state_of(run_dir, "final", 2)
    assert len(warnings) == 1 and warnings[0].startswith(f"{garbage}: not a stacklm file")

    curve = pq.read_table(path(run_dir, dag.RUN_CURVE, "search", 1)).to_pandas()
    stopped_early = checkpoint.load(state_of(run_dir, "search", 1))["counters"]["stopped_early"]  # a finished run keeps its state
    assert table_row(ended) == [TASK, "Tf", "search trial 1", "0.005", "256", str(len(curve)), CONVERGED if stopped_early else MAX_EPOCHS,
                                f"{curve['wall_time_s'].iloc[0] / 3600:.1f}", *expected_row(curve)]  # fmt: skip

    payload = checkpoint.load(state_of(run_dir, "search", 2))
    records = pd.DataFrame([record | record["scores"] for record in payload["curve"]])
    assert len(records) == 2 and payload["counters"]["batch_index"] > 0  # killed inside its epoch
    assert not path(run_dir, dag.RUN_CURVE, "search", 2).exists()
    assert table_row(killed) == [TASK, "Tf", "search trial 2", "0.002", "300", "2", UNFINISHED,
                                 f"{payload['counters']['wall_time_s'] / 3600:.1f}", *expected_row(records)]  # fmt: skip

    metrics = pq.read_table(path(run_dir, dag.RUN_METRICS, "final", 1)).to_pylist()
    value = {(row["split"], row["rule"], row["metric"]): row["value"] for row in metrics}
    scores = {f"{prefix}_{kind}": value[("test", None, kind) if prefix == "test" else ("generalization", prefix, kind)]
              for prefix in ("test", "hierarchical", "linear") for kind in ("full_accuracy", "partial_accuracy")}  # fmt: skip
    final_curve = pq.read_table(path(run_dir, dag.RUN_CURVE, "final", 1)).to_pandas()
    assert evaluated.state == EVALUATED and table_row(evaluated)[3:6] == ["0.005", "256", str(len(final_curve))]
    assert table_row(evaluated)[-5:] == expected_row(final_curve, scores)


def test_a_states_curve_has_the_columns_and_values_of_train_parquet(run_dir: Path) -> None:
    """The ended trial's state still holds its whole curve: read as a training run's, it is its train.parquet."""
    payload = checkpoint.load(state_of(run_dir, "search", 1))
    from_state = checkpoint_table([CheckpointRecord(**record) for record in payload["curve"]]).to_pandas()
    from_file = pq.read_table(path(run_dir, dag.RUN_CURVE, "search", 1)).to_pandas()[CHECKPOINT_SCHEMA.names]
    pd.testing.assert_frame_equal(from_state, from_file)


def test_the_page_the_figure_and_stdout(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted((item, item.stat().st_mtime_ns) for item in run_dir.rglob("*"))
    page, figure = tmp_path / "docs/progress.md", tmp_path / "docs/progress-curves.png"
    assert cli.main(["progress", "--markdown", str(page), "--figure", str(figure), "--figure", str(figure.with_suffix(".pdf")), str(run_dir)]) == 0
    output = capsys.readouterr()
    assert f"stacklm: warning: {state_of(run_dir, 'final', 2)}: not a stacklm file" in output.err
    assert output.out.startswith(f"3 runs, {sum(len(run.curve) for run in find_runs(run_dir)[0])} checkpoints -> {page}")
    text = page.read_text()
    assert "![FA (solid) and PA (dashed) at every checkpoint so far](progress-curves.png)" in text
    assert "## Tf, search trial 2 (learning rate 0.002, B = 300; unfinished, " in text
    killed = checkpoint.load(state_of(run_dir, "search", 2))["curve"]
    for record in killed:
        assert f"checkpoint {record['checkpoint']}: epoch {record['epoch']} step {record['step']} examples {record['examples_seen']} " in text
    assert figure.read_bytes().startswith(b"\x89PNG") and figure.with_suffix(".pdf").read_bytes().startswith(b"%PDF")
    assert sorted((item, item.stat().st_mtime_ns) for item in run_dir.rglob("*")) == before  # nothing written in the run's folder

    assert cli.main(["progress", str(run_dir)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| task | architecture | run |") and len(table) == 2 + 3
    assert "| search trial 2 |" in table[3] and "| unfinished |" in table[3]


def test_a_folder_without_results_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["progress", str(tmp_path)]) == 1
    assert f"stacklm: error: {tmp_path / 'results'}: no such folder" in capsys.readouterr().err
