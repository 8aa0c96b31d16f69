"""The ``stacklm`` entry point: each command imports only its own module; ``--help``,
``--version`` and a typo import none; the commands of the DAG's many small jobs import no
torch, pandas or MLflow; every command and action documents a working example; exit status 1
for a failed command, 2 for a wrong command line."""

import argparse
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from stacklm import cli

PROBE = """
import sys
from stacklm.cli import COMMAND_MODULES, build_parser
build_parser(sys.argv[1:])
print(" ".join(name for name in [*COMMAND_MODULES, "torch", "pandas", "mlflow", "sympy"] if name in sys.modules))
"""


def loaded_modules(*argv: str) -> set[str]:
    """The command modules (and heavy libraries) imported after building the parser for ``argv`` in a fresh interpreter."""
    probe = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    return set(probe.stdout.split())


def stacklm(*argv: str, cwd: Path | None = None, timeout_s: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stacklm.cli", *argv], capture_output=True, text=True, cwd=cwd, timeout=timeout_s)


@pytest.mark.e2e
@pytest.mark.parametrize("module", sorted(cli.COMMAND_MODULES))
def test_a_command_imports_its_own_module_only(module: str) -> None:
    command = cli.COMMAND_MODULES[module][0]
    loaded = loaded_modules(command, "--help-is-not-parsed-here") & set(cli.COMMAND_MODULES)
    assert module in loaded
    # a command module may import another one it builds on, never all of them
    assert loaded < set(cli.COMMAND_MODULES), loaded


@pytest.mark.e2e
@pytest.mark.parametrize("argv", [(), ("--help",), ("--version",), ("trian",)])
def test_help_version_and_a_typo_import_no_command_module(argv: tuple[str, ...]) -> None:
    assert loaded_modules(*argv) == set()


@pytest.mark.e2e
@pytest.mark.parametrize("argv", [("cfl", "select"), ("settings",), ("hparams",), ("select",), ("html",)])
def test_the_commands_of_small_jobs_import_no_torch_pandas_or_mlflow(argv: tuple[str, ...]) -> None:
    """Each of these jobs would pay seconds of start-up for them: they load in the commands that need them."""
    assert loaded_modules(*argv) & {"torch", "pandas", "mlflow"} == set()


@pytest.mark.e2e
def test_train_help_imports_no_torch_and_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    """`stacklm train --help` answered in 7 s, importing torch and the Parquet records to print options."""
    assert loaded_modules("train") & {"torch", "pandas", "mlflow"} == set()
    train = cli.build_parser(["train"])._subparsers._group_actions[0].choices["train"]  # type: ignore[union-attr]
    assert [action.dest for action in train._actions if action.help is None] == []


@pytest.mark.e2e
def test_evaluate_imports_no_sympy() -> None:
    """Sizing a model needs SymPy, rebuilding a saved one does not: each of the hundreds of evaluation
    jobs would pay 0.4 CPU-seconds for it (stacklm.models.sizing loads it at the first count)."""
    assert "sympy" not in loaded_modules("evaluate")


@pytest.mark.e2e
def test_help_lists_every_command_with_its_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping: argparse may break a summary at a hyphen ("cross- entropy")
    listing = stacklm("--help")
    assert listing.returncode == 0
    text = " ".join(listing.stdout.split())
    for name, command in cli.COMMANDS.items():
        assert f"{name} {command.summary}" in text


@pytest.mark.e2e
def test_version_is_the_installed_distributions() -> None:
    answer = stacklm("--version")
    assert (answer.returncode, answer.stdout) == (0, f"stacklm {version('stacklm')}\n")


def command_paths(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> set[str]:
    """Every command and action below ``parser``, as its words after ``stacklm``."""
    paths = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                paths |= {" ".join((*words, name))} | command_paths(child, (*words, name))
    return paths


def test_every_command_and_action_has_an_example() -> None:
    registered = set().union(*(command_paths(cli.build_parser([command])) for command in cli.COMMANDS))
    assert registered == set(cli.EXAMPLES)


@pytest.mark.parametrize("path", sorted(cli.EXAMPLES))
def test_each_example_parses_into_its_command_and_shows_in_its_help(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    example = cli.EXAMPLES[path]
    argv = shlex.split(example[example.index("stacklm ") :])[1:]  # after a pipe into stacklm, if any
    assert " ".join(argv[: len(path.split())]) == path or path in ("data", "cfl", "tracking")
    parsed = cli.build_parser(argv).parse_args(argv)
    assert callable(parsed.func)
    with pytest.raises(SystemExit) as stop:
        cli.build_parser(path.split()).parse_args([*path.split(), "--help"])
    assert stop.value.code == 0
    help_text = capsys.readouterr().out
    assert f"example:\n  {example}" in help_text
    summary = cli.COMMANDS[path].summary if path in cli.COMMANDS else None
    assert summary is None or summary in " ".join(help_text.split())


@pytest.mark.e2e
def test_a_failed_command_exits_1_and_a_wrong_command_line_2(tmp_path: Path) -> None:
    failed = stacklm("html", "--markdown", "missing.md", "--title", "t", "--out", "t.html", cwd=tmp_path)
    assert failed.returncode == 1 and failed.stderr == "stacklm: error: missing.md: cannot read the Markdown table: " \
        "[Errno 2] No such file or directory: 'missing.md'\n"
    missing_option = stacklm("html", "--markdown", "missing.md", cwd=tmp_path)
    assert missing_option.returncode == 2 and "the following arguments are required: --title, --out" in missing_option.stderr
    typo = stacklm("trian")
    assert typo.returncode == 2 and "invalid choice: 'trian'" in typo.stderr


@pytest.fixture(scope="module")
def probe_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data of 60 examples, a search run trained on them, settings files and a plain file."""
    root = tmp_path_factory.mktemp("probes")
    generated = stacklm("data", "generate", "--task", "question-formation", "--seed", "1", "--train", "60", "--validation", "10",
                        "--test", "10", "--generalization", "10", "--out", "data", cwd=root)
    assert generated.returncode == 0, generated.stderr
    trained = stacklm("train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", "data", "--learning-rate", "0.001",
                      "--tokens-per-batch", "512", "--max-epochs", "1", "--phase", "search", "--trial", "1", "--threads", "1", "--out", "search-run", cwd=root)
    assert trained.returncode == 0, trained.stderr
    (root / "nan.json").write_text('{"model": {"dropout": NaN}}')
    (root / "evaluate.json").write_text("{}")
    (root / "report.json").write_text('{"tasks": ["question-formation"], "architectures": ["Tf"]}')
    (root / "a-file").write_text("")
    return root


TRAIN = ("train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", "data", "--learning-rate", "0.001", "--max-epochs", "1")
GENERATE = ("data", "generate", "--task", "question-formation", "--out", "generated")


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        ((*TRAIN, "--tokens-per-batch", "512", "--out", "run", "--threads", "-1"), 2, "--threads: expected an integer >= 1, got -1"),
        ((*TRAIN, "--tokens-per-batch", "512", "--out", "run", "--settings", "nan.json"), 1, "nan.json: config key 'model.dropout': expected a finite number"),
        ((*TRAIN, "--tokens-per-batch", "512", "--out", "a-file"), 2, "--out a-file: an existing file, not a run folder"),
        (("report", "--metrics", "nope.parquet", "--settings", "report.json", "--tables", "t.tex", "--markdown", "t.md", "--document", "r.tex",
          "--figures", "f.png"), 1, "nope.parquet: cannot read the metrics"),
        ((*TRAIN, "--tokens-per-batch", "512", "--out", "run", "--seed", "-3"), 2, "--seed: expected an integer >= 0, got -3"),
        ((*GENERATE, "--seed", "-1"), 2, "--seed: expected an integer >= 0, got -1"),
        ((*TRAIN, "--tokens-per-batch", "3", "--out", "run"), 2, "tokens_per_batch 3 (Tf, seed 1) is below the longest training string"),
        ((*GENERATE, "--seed", "1", "--train", "0"), 2, "--train: expected at least 1 example, got 0"),
        ((*GENERATE, "--seed", "1", "--train", "100000000000"), 2, "--train: at most 1,000,000 examples"),
        (("evaluate", "--task", "question-formation", "--run", "search-run", "--data-dir", "data", "--settings", "evaluate.json", "--out", "m.parquet"),
         1, "search-run/model.pt: a run of the hyperparameter search (trial 1), not a final run"),
    ],
    ids=["threads", "nan-dropout", "out-file", "missing-metrics", "train-seed", "data-seed", "tiny-budget", "no-train", "huge-train", "search-run"],
)
def test_a_careless_command_line_is_refused_in_one_line(probe_folder: Path, argv: tuple[str, ...], status: int, message: str) -> None:
    """The probes of issue 33: four tracebacks and six inputs accepted that should not be (--train 10^11 never ended)."""
    done = stacklm(*argv, cwd=probe_folder, timeout_s=300)
    assert (done.returncode, "Traceback" in done.stderr) == (status, False), done.stderr[-2000:]
    assert message in done.stderr and done.stderr.strip().splitlines()[-1].startswith(("stacklm: error:", "stacklm train: error:", "usage:"))
    assert not (probe_folder / "run").exists() and not (probe_folder / "generated").exists() and not (probe_folder / "m.parquet").exists()
