"""Checkpoints and model files load without running code, and a bad one names its file.

The malicious file is a real pickle whose loading calls ``os.system``: loaded the unsafe way
(``torch.load(weights_only=False)``, in a child process) it creates its marker file, which
proves the test's file is dangerous; through stacklm's loaders it must not.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stacklm.cli import main
from stacklm.errors import StacklmError
from stacklm.models.registry import build_model
from stacklm.training import checkpoint
from stacklm.training.loop import train
from stacklm.training.progress import Progress
from stacklm.tasks import get_task
from stacklm.training.run_files import SavedModel, load_model, rebuild_model, save_model
from tests.training.toy_language_model import ToyLanguageModel, toy_config, toy_data


class RunsCommand:
    """Unpickling it runs ``touch marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def malicious_file(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": checkpoint.FORMAT, "content": {"parameters": RunsCommand(marker)}}, path)
    return path


def test_the_malicious_file_runs_its_command_when_loaded_unsafely(tmp_path: Path) -> None:
    marker = tmp_path / "unsafe-marker"
    path = malicious_file(tmp_path / "model.pt", marker)
    subprocess.run([sys.executable, "-c", f"import torch; torch.load({str(path)!r}, weights_only=False)"], check=True, timeout=120)
    assert marker.exists()


def test_stacklm_evaluate_refuses_a_malicious_model_file_without_running_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "PWNED"
    run = tmp_path / "run"
    model = malicious_file(run / "model.pt", marker)
    (tmp_path / "settings.json").write_text("{}")
    status = main(["evaluate", "--task", "question-formation", "--run", str(run), "--data-dir", str(tmp_path),
                   "--settings", str(tmp_path / "settings.json"), "--out", str(tmp_path / "metrics.parquet"), "--device", "cpu"])
    assert status != 0
    assert not marker.exists()
    error = capsys.readouterr().err
    assert f"{model}: not a stacklm file that loads safely" in error and "run code" in error and "delete it" in error
    assert not (tmp_path / "metrics.parquet").exists()


def test_resuming_from_a_malicious_checkpoint_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    path = malicious_file(tmp_path / "checkpoint.pt", marker)
    with pytest.raises(StacklmError, match=f"^{path}: not a stacklm file that loads safely"):
        train(ToyLanguageModel(3), toy_data(1), toy_config(), checkpoint_path=path, progress=Progress(io.StringIO()))
    assert not marker.exists()


def small_saved_model() -> SavedModel:
    model = build_model("Tf+Nd", 7, parameter_budget=3_000, generator=torch.Generator().manual_seed(0))
    return SavedModel(
        task="question-formation",
        architecture="Tf+Nd",
        vocabulary=("a", "b", "c", "d", "e", "f"),
        model_config=model.config,
        parameters={name: tensor.detach().clone() for name, tensor in model.state_dict().items()},
        metadata={"seed": 1, "trial": None, "config": "{}"},
        settings={"seed": 1, "hyperparameters": {"learning_rate": 0.001}, "sizes": (1, 2)},
    )


def test_a_model_file_round_trips(tmp_path: Path) -> None:
    saved = small_saved_model()
    save_model(tmp_path / "model.pt", saved)
    loaded = load_model(tmp_path / "model.pt")
    assert loaded.model_config == saved.model_config
    assert loaded.vocabulary == saved.vocabulary and loaded.metadata == saved.metadata and loaded.task == saved.task
    assert loaded.parameters.keys() == saved.parameters.keys()
    for name, tensor in saved.parameters.items():
        assert torch.equal(loaded.parameters[name], tensor)


def test_a_model_file_of_the_older_format_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save(dict(small_saved_model().__dict__), path)  # how stacklm wrote model.pt before: a pickled config dataclass
    with pytest.raises(StacklmError, match=f"^{path}: not a stacklm file that loads safely.*TransformerConfig.*delete it"):
        load_model(path)


@pytest.mark.parametrize("content", [b"", b"garbage, not a torch file\n", "truncated"], ids=["empty", "garbage", "truncated"])
def test_an_empty_garbage_or_truncated_checkpoint_names_the_file_and_what_to_do(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "checkpoint.pt"
    if content == "truncated":
        checkpoint.save(path, {"model": {"weight": torch.arange(1000.0)}})
        content = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(content)
    with pytest.raises(StacklmError, match=f"^{path}: not a stacklm file that loads safely .*; delete it, and the job that wrote it writes it again"):
        checkpoint.load(path)


@pytest.mark.parametrize("change", ["transposed", "cut", "missing"])
def test_a_model_file_whose_parameters_do_not_fit_names_it_in_one_line(tmp_path: Path, change: str) -> None:
    saved = small_saved_model()
    name, tensor = next((name, tensor) for name, tensor in saved.parameters.items() if tensor.dim() == 2 and tensor.size(0) != tensor.size(1))
    parameters = dict(saved.parameters)
    if change == "missing":
        del parameters[name]
    else:
        parameters[name] = tensor.t().contiguous() if change == "transposed" else tensor[:-1].clone()
    path = tmp_path / "model.pt"
    save_model(path, SavedModel(**{**saved.__dict__, "parameters": parameters}))
    with pytest.raises(StacklmError) as refused:
        rebuild_model(load_model(path), get_task("question-formation"))
    message = str(refused.value)
    assert message.startswith(f"{path}: its parameters do not fit the model it describes (") and "\n" not in message
    assert name in message and message.endswith("; delete it, and the job that wrote it writes it again")


def toy_state(tmp_path: Path) -> Path:
    """The training state of a finished toy run."""
    path = tmp_path / "state.pt"
    train(ToyLanguageModel(3), toy_data(1), toy_config(), checkpoint_path=path, fingerprint="f", progress=Progress(io.StringIO()))
    return path


def resume(path: Path) -> None:
    train(ToyLanguageModel(3), toy_data(1), toy_config(), checkpoint_path=path, fingerprint="f", progress=Progress(io.StringIO()))


def test_a_training_state_whose_model_does_not_fit_names_it_in_one_line(tmp_path: Path) -> None:
    path = toy_state(tmp_path)
    payload = checkpoint.load(path)
    name, tensor = next((name, tensor) for name, tensor in payload["model"].items() if tensor.dim() == 2 and tensor.size(0) != tensor.size(1))
    payload["model"][name] = tensor.t().contiguous()
    checkpoint.save(path, payload)
    with pytest.raises(StacklmError) as refused:
        resume(path)
    assert str(refused.value).startswith(f"{path}: its parameters do not fit the model it describes (size mismatch for {name}: ")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("key", ["fingerprint", "optimizer", "counters"])
def test_a_training_state_without_a_key_names_it_in_one_line(tmp_path: Path, key: str) -> None:
    path = toy_state(tmp_path)
    payload = checkpoint.load(path)
    del payload[key]
    checkpoint.save(path, payload)
    with pytest.raises(StacklmError) as refused:
        resume(path)
    assert str(refused.value).startswith(f"{path}: ") and "\n" not in str(refused.value)
    assert ("holds no fingerprint" if key == "fingerprint" else f"(KeyError: '{key}')") in str(refused.value)


FULL_DISK = """
import dataclasses, io, resource, signal, sys
from pathlib import Path
from stacklm.errors import StacklmError
from stacklm.training.loop import train
from stacklm.training.progress import Progress
from tests.training.toy_language_model import ToyLanguageModel, toy_config, toy_data

path, limit, epochs = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if limit:  # a write past it fails with EFBIG, as one on a full disk fails with ENOSPC
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    config = dataclasses.replace(toy_config(), max_epochs=epochs)
    train(ToyLanguageModel(3), toy_data(1, config), config, checkpoint_path=path, fingerprint="f", progress=Progress(io.StringIO()))
except StacklmError as error:
    print(error)
"""


@pytest.mark.e2e
def test_a_checkpoint_that_cannot_be_written_is_one_line_and_keeps_the_state_saved_before(tmp_path: Path) -> None:
    """torch reported a full disk as "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 768 vs 662"."""
    path = tmp_path / "state.pt"

    def run(limit: int, epochs: int) -> str:
        done = subprocess.run([sys.executable, "-c", FULL_DISK, str(path), str(limit), str(epochs)], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2], timeout=300)
        assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
        return done.stdout

    assert run(0, 1) == ""
    saved = path.read_bytes()
    assert run(len(saved) // 2, 2) == (f"{path}: cannot write: {os.strerror(27)}; the training state saved before (if any) is kept as it was: "
                                       "once the file can be written, the same command continues from it\n")  # EFBIG
    assert path.read_bytes() == saved and not [item for item in tmp_path.iterdir() if item.name.endswith(".tmp")]
    assert run(0, 2) == "" and checkpoint.load(path)["counters"]["epoch"] == 2
