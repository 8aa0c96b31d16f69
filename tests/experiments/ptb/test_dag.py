"""The ``ptb`` section and the PTB DAG's lookups: the paper's grid by default (35 configurations ×
10 restarts, docs/design/cfl-and-ptb.md#ptb-models-and-parameter-counts), each bad value named by
its key, the jobs' options as the settings give them (quoted), the targets and the MLflow
mirror's files."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from stacklm.errors import StacklmError
from stacklm.experiments.ptb import dag
from stacklm.experiments.ptb.settings import PAPER_MODELS, PtbSettings, ptb_files, syntaxgym_files
from stacklm.models.ptb import ptb_config
from stacklm.settings_file import build

SMALL_SECTION = {"models": ["lstm", "rns-2-3"], "restarts": 2, "lines": 50, "max_epochs": 2, "suites": ["number_src", "cleft"]}
SMALL = build(PtbSettings, SMALL_SECTION, "ptb")


def mirror_folder(root: Path, suites: tuple[str, ...] = ("number_src", "cleft")) -> Path:
    """A folder laid out as the reference copies (empty files: the jobs check the contents, the settings their presence)."""
    for path in [*ptb_files(str(root)), *syntaxgym_files(str(root), suites)]:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()
    return root


def test_the_default_grid_is_every_configuration_of_the_released_scripts() -> None:
    settings = PtbSettings()
    assert (settings.restarts, settings.max_epochs, settings.lines, settings.suites) == (10, 100, None, None)
    assert len(PAPER_MODELS) == 35 and len(set(PAPER_MODELS)) == 35
    # docs/design/cfl-and-ptb.md#ptb-models-and-parameter-counts, by parameter count: 3 LSTMs, 2 JMs, 15 NS and 15 RNS configurations
    counts = {name: ptb_config(name).parameter_count() for name in PAPER_MODELS}
    assert [counts[name] for name in ("lstm", "lstm-258", "lstm-267", "jm-hidden", "jm-learned")] == [5_656_336, 5_704_576, 5_922_448, 5_684_828, 5_685_289]
    assert counts["ns-1-11"] == 5_732_621 and counts["ns-4-3"] == 5_745_760 and counts["rns-4-3"] == 5_754_976 and counts["rns-1-7"] == counts["ns-1-7"]
    settings.check_models()
    assert len(dag.runs(settings)) == 350 and dag.runs(settings)[:2] == [{"ptb_model": "lstm", "restart": 1}, {"ptb_model": "lstm", "restart": 2}]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"models": ["lstm", "lstm"]}, "config key 'ptb.models': a model is listed twice"),
        ({"restarts": 0}, "config key 'ptb.restarts': must be at least 1, got 0"),
        ({"max_epochs": 0}, "config key 'ptb.max_epochs': must be at least 1"),
        ({"lines": 0}, "config key 'ptb.lines': must be at least 1 or null"),
        ({"suites": []}, "config key 'ptb.suites': at least one suite"),
        ({"suites": ["cleft", "nn-nv-rpl"]}, "config key 'ptb.suites\\[1\\]': unknown suite 'nn-nv-rpl'"),
        ({"models": ["lstm"], "figure_models": ["rns-2-3"]}, "config key 'ptb.figure_models\\[0\\]': 'rns-2-3' is not among ptb.models"),
        ({"figure_models": []}, "config key 'ptb.figure_models': at least one model"),
        ({"progress_interval_s": 0}, "config key 'ptb.progress_interval_s': must be positive"),
        ({"restart": 3}, "'ptb.restart'"),  # an unknown key
    ],
)
def test_a_bad_value_is_named_by_its_key(section: dict, message: str) -> None:
    with pytest.raises(StacklmError, match=message):
        build(PtbSettings, section, "ptb")


@pytest.mark.parametrize(
    ("models", "message"),
    [(["lstm", "rns-2"], "config key 'ptb.models\\[1\\]': unknown PTB model 'rns-2'"), (["lstm-256"], "the model 'lstm-256' is called 'lstm'")],
)
def test_a_model_name_is_checked_with_the_models(models: list[str], message: str) -> None:
    section = build(PtbSettings, {"models": models, "figure_models": models[:1]}, "ptb")  # parsing the section alone imports no model
    with pytest.raises(StacklmError, match=message):
        section.check_models()


def test_the_jobs_options_come_from_the_section_quoted(tmp_path: Path) -> None:
    mirror = mirror_folder(tmp_path / "my mirror")
    settings = build(PtbSettings, SMALL_SECTION | {"mirror": str(mirror)}, "ptb")
    assert shlex.split(dag.train_options(settings)) == [
        "--data", f"{mirror}/ptb", "--salt", "0", "--lines", "50", "--max-epochs", "2",
    ]
    assert shlex.split(dag.evaluate_options(settings)) == [
        "--data", f"{mirror}/ptb", "--syntaxgym", f"{mirror}/sg-test-suites", "--lines", "50", "--suites", "number_src", "cleft",
    ]
    # no mirror (the default): the files the download rules write under resources/
    assert shlex.split(dag.train_options(PtbSettings())) == ["--data", "resources/ptb", "--salt", "0", "--max-epochs", "100"]
    assert shlex.split(dag.evaluate_options(PtbSettings())) == ["--data", "resources/ptb", "--syntaxgym", "resources/sg-test-suites"]
    assert shlex.split(dag.report_options(SMALL)) == ["--figure-models", "lstm", "rns-2-3"]


def test_another_progress_interval_leaves_the_training_jobs_options_as_they_were() -> None:
    """ptb.progress_interval_s says how often progress lines come: it reaches `stacklm ptb train`
    in the cadence file (--cadence), so that another value changes no ptb_train command, and
    Snakemake reruns no training job (it reran every one while the value was an option)."""
    for section in ({}, SMALL_SECTION):
        assert dag.train_options(build(PtbSettings, section | {"progress_interval_s": 7.5}, "ptb")) == dag.train_options(build(PtbSettings, section, "ptb"))


def test_the_files_of_the_dag() -> None:
    assert dag.run_files(SMALL, dag.RUN_CURVE) == [f"results/ptb/runs/{model}/{restart}/train.parquet" for model in ("lstm", "rns-2-3") for restart in (1, 2)]
    assert dag.run_files(SMALL, dag.RUN_METRICS, "rns-2-3") == ["results/ptb/runs/rns-2-3/1/metrics.parquet", "results/ptb/runs/rns-2-3/2/metrics.parquet"]
    assert dag.selected_files(SMALL) == ["results/ptb/selected/lstm.json", "results/ptb/selected/rns-2-3.json"]
    assert dag.targets(SMALL) == [
        "results/ptb/metrics.parquet",
        "results/ptb/report/ptb.tex", "results/ptb/report/circuits.tex", "results/ptb/report/ptb.md", "results/ptb/report/circuits.md",
        "results/ptb/report/sg-against-perplexity.png", "results/ptb/report/sg-against-perplexity.pdf",
        "results/ptb/report/ptb.html", "results/ptb/report/circuits.html",
    ]
    assert dag.targets(build(PtbSettings, {"models": []}, "ptb")) == []
    records = dag.tracking_records(SMALL)
    assert records["curves"] == dag.run_files(SMALL, dag.RUN_CURVE) and records["metrics"] == dag.run_files(SMALL, dag.RUN_METRICS)
    assert records["curve_logs"][0] == "logs/ptb/train/lstm/1.log" and records["metrics_logs"][-1] == "logs/ptb/evaluate/rns-2-3/2.log"


def test_runs_per_job_groups_the_restarts_in_the_order_model_by_restart() -> None:
    assert dag.run_groups(SMALL, 1) == []  # 1: the rules ptb_train and ptb_evaluate, a job per restart
    assert dag.single_restarts(1) == r"[1-9][0-9]*" and dag.single_restarts(3) == "(?!)"
    first, second = dag.run_groups(SMALL, 3)
    assert first.runs == (("lstm", 1), ("lstm", 2), ("rns-2-3", 1)) and second.runs == (("rns-2-3", 2),)
    assert (first.rule("train"), second.rule("evaluate")) == ("ptb_train_group1", "ptb_evaluate_group2")
    assert first.paths(dag.CHECKPOINT) == ["results/ptb/checkpoints/lstm/1.pt", "results/ptb/checkpoints/lstm/2.pt", "results/ptb/checkpoints/rns-2-3/1.pt"]
    assert second.paths(dag.EVALUATE_LOG) == ["logs/ptb/evaluate/rns-2-3/2.log"]
    assert (first.log(dag.TRAIN_GROUP_LOG), second.log(dag.EVALUATE_GROUP_LOG)) == ("logs/ptb/train/group1.log", "logs/ptb/evaluate/group2.log")
    assert first.train_options == "--model lstm lstm rns-2-3 --restart 1 2 1"
    (whole,) = dag.run_groups(SMALL, 17)
    assert [path for group in dag.run_groups(SMALL, 3) for path in group.paths(dag.RUN_METRICS)] == whole.paths(dag.RUN_METRICS) == dag.run_files(SMALL, dag.RUN_METRICS)


def test_without_a_mirror_the_jobs_read_what_the_download_rules_write() -> None:
    assert SMALL.ptb_files() == dag.downloaded_ptb() == ["resources/ptb/ptb.train.txt", "resources/ptb/ptb.valid.txt", "resources/ptb/ptb.test.txt"]
    assert SMALL.syntaxgym_files() == dag.downloaded_suites(SMALL) == [
        "resources/sg-test-suites/circuits.json", "resources/sg-test-suites/syntaxgym-format/number_src.json", "resources/sg-test-suites/syntaxgym-format/cleft.json",
    ]
    assert len(dag.downloaded_suites(PtbSettings())) == 1 + 33  # every suite, by default
    assert shlex.split(dag.suites_options(SMALL)) == ["--suites", "number_src", "cleft", "--out", "resources/sg-test-suites"]
    assert shlex.split(dag.suites_options(PtbSettings())) == ["--out", "resources/sg-test-suites"]
    assert shlex.split(dag.download_options()) == ["--out", "resources/ptb"]


def test_a_mirror_that_lacks_a_file_stops_the_settings_naming_the_key_the_file_and_where_to_get_it(tmp_path: Path) -> None:
    mirror = mirror_folder(tmp_path / "mirror")
    assert build(PtbSettings, SMALL_SECTION | {"mirror": str(mirror)}, "ptb").ptb_files()[0] == f"{mirror}/ptb/ptb.train.txt"
    (mirror / "ptb" / "ptb.valid.txt").unlink()
    with pytest.raises(StacklmError, match=r"config key 'ptb.mirror': .*mirror/ptb/ptb.valid.txt not found .*simple-examples.tgz.*ptb.mirror: null to download"):
        build(PtbSettings, SMALL_SECTION | {"mirror": str(mirror)}, "ptb")
    with pytest.raises(StacklmError, match=r"config key 'ptb.mirror': .*nowhere/ptb/ptb.train.txt not found \(37 of"):
        build(PtbSettings, {"mirror": str(tmp_path / "nowhere")}, "ptb")  # every suite of the default settings, and the three splits
    assert build(PtbSettings, {"models": [], "mirror": str(tmp_path / "nowhere")}, "ptb").models == ()  # no PTB job: nothing to read
