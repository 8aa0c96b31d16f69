"""The public API: ``import stacklm`` stays light; ``stacklm train`` used by hand (flags, no
settings file) writes a run that ``stacklm.load_run`` gives back; the README's example runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

import stacklm
from stacklm.data.examples import write_examples
from stacklm.errors import StacklmError

README = Path(__file__).resolve().parents[1] / "README.md"
RUN = Path("results/runs/question-formation/tf/final/1")  # where the README's example looks


def readme_example() -> str:
    section = README.read_text().split("\n## Python API\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a task's data and one run trained there by `stacklm train` with flags only."""
    root = tmp_path_factory.mktemp("api")
    sizes = stacklm.SplitSizes(train=300, validation=30, test=30, generalization=30)
    for name, examples in stacklm.generate_splits("question-formation", seed=0, sizes=sizes).items():
        write_examples(root / "data" / f"{name}.tsv", examples)
    trained = subprocess.run(
        [sys.executable, "-m", "stacklm.cli", "train", "--task", "question-formation", "--architecture", "Tf", "--data-dir", "data",
         "--learning-rate", "0.001", "--tokens-per-batch", "1024", "--max-epochs", "1", "--device", "cpu", "--threads", "1", "--out", str(RUN)],
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    return root


@pytest.mark.e2e
def test_import_stacklm_loads_no_torch_until_the_api_is_used() -> None:
    probe = "import sys, stacklm; print('torch' in sys.modules); stacklm.load_run; print('torch' in sys.modules)"
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert answer.stdout.split() == ["False", "True"]


@pytest.mark.e2e
def test_dir_lists_the_api_without_loading_it() -> None:
    probe = "import sys, stacklm; print(' '.join(dir(stacklm))); print('torch' in sys.modules)"
    names, loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.splitlines()
    assert set(stacklm.PUBLIC) | {"__version__"} <= set(names.split()) and loaded == "False"
    with pytest.raises(AttributeError, match="no attribute 'train'"):
        stacklm.train  # noqa: B018


@pytest.mark.e2e
def test_a_standalone_run_uses_the_papers_defaults_and_loads_back(project: Path) -> None:
    run = stacklm.load_run(project / RUN)
    assert list((project / RUN).glob("checkpoint*.pt"))  # the default checkpoint path, beside the run
    curve = pq.read_table(project / RUN / "train.parquet").to_pylist()
    config = json.loads(curve[0]["config"])
    assert config["training"]["parameter_budget"] == 200_000 and config["hyperparameters"] == {
        "learning_rate": 0.001, "tokens_per_batch": 1024, "max_epochs": 1}
    saved = torch.load(project / RUN / "model.pt", weights_only=True)["content"]["parameters"]
    loaded = run.model.state_dict()
    assert saved.keys() == loaded.keys() and all(torch.equal(saved[name], loaded[name]) for name in saved)
    assert not run.model.training and sum(parameter.numel() for parameter in run.model.parameters()) == curve[0]["parameters"]
    assert (run.task, run.architecture, run.metrics) == ("question-formation", "Tf", None)
    assert run.vocabulary.tokens == tuple(stacklm.get_task("question-formation").vocabulary())
    assert run.curve["validation_cross_entropy"].tolist() == [row["validation_cross_entropy"] for row in curve]


def test_build_model_and_generate_splits_match_what_the_commands_build() -> None:
    first = stacklm.build_model("Tf+Nd", "question-formation", parameter_budget=20_000, seed=3)
    again = stacklm.build_model("Tf+Nd", stacklm.get_task("question-formation"), parameter_budget=20_000, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    assert abs(sum(parameter.numel() for parameter in first.parameters()) - 20_000) < 2_000
    sizes = stacklm.SplitSizes(train=50, validation=5, test=5, generalization=5)
    splits = stacklm.generate_splits("question-formation", seed=4, sizes=sizes)
    assert splits == stacklm.generate_splits("question-formation", seed=4, sizes=sizes) and len(splits.train) == 50
    assert all(example.linear is not None for example in splits.generalization)


def test_a_folder_without_a_finished_run_is_named(tmp_path: Path) -> None:
    with pytest.raises(StacklmError, match="model.pt: model file not found"):
        stacklm.load_run(tmp_path)


@pytest.mark.e2e
def test_the_readme_example_runs(project: Path) -> None:
    result = subprocess.run([sys.executable, "-c", readme_example()], cwd=project, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("Tf ")


def readme_by_hand_commands() -> list[str]:
    """The commands of the by-hand example the README links to (docs/running.md, "A run by hand"), continuations joined."""
    assert "docs/running.md#a-run-by-hand" in README.read_text()
    section = (README.parent / "docs" / "running.md").read_text().split("\n## A run by hand\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [command for command in block.replace("\\\n", " ").splitlines() if command.strip()]


@pytest.mark.e2e
def test_the_readme_by_hand_example_trains_a_toy_run_in_a_folder_of_its_own(tmp_path: Path) -> None:
    """It writes nowhere under the pipeline's results/, and trains a toy scale: a thousand examples, one epoch."""
    commands = readme_by_hand_commands()
    assert [command.split()[:2] for command in commands] == [["stacklm", "data"], ["stacklm", "train"]]
    outs = [command.split("--out ", 1)[1].split()[0] for command in commands]
    assert all(not out.startswith("results") for out in outs), outs
    environment = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(README.parent)}
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    assert len((tmp_path / outs[0] / "train.tsv").read_text().splitlines()) <= 1000
    run = stacklm.load_run(tmp_path / outs[1])
    assert run.curve["epoch"].max() == 1
