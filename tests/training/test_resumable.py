"""A resumable training run: a changed config trains afresh beside the old state, which is then
removed; a second writer of one state is refused until the first dies."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.training import checkpoint
from stacklm.training.resumable import resumable_training
from tests.training.toy_language_model import ToyLanguageModel, toy_config, toy_data


def toy_training(checkpoint_base: Path, fingerprint_source: dict) -> None:
    model = ToyLanguageModel(3)
    model.initialize(torch.Generator().manual_seed(1))
    resumable_training(model, toy_data(1), toy_config(), fingerprint_source=fingerprint_source, checkpoint=checkpoint_base, device=torch.device("cpu"), progress_interval_s=60.0)


def states(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.suffix == ".pt")


def test_a_changed_config_trains_afresh_beside_the_old_state_which_is_then_removed(tmp_path: Path) -> None:
    base = tmp_path / "checkpoints" / "1.pt"
    base.parent.mkdir()
    base.write_bytes(b"an unkeyed state of an older stacklm")
    toy_training(base, {"data": "old"})
    [old] = states(base.parent)
    assert re.fullmatch(r"1\.[0-9a-f]{16}\.pt", old)
    toy_training(base, {"data": "new"})  # the same command after a config change: no "belongs to another run"
    [new] = states(base.parent)
    assert new != old and not (base.parent / old).with_suffix(".lock").exists()


HOLDER = """
import sys, time
from pathlib import Path
from stacklm.training.checkpoint import exclusive
with exclusive(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_writer_of_one_state_is_refused_until_the_first_dies(tmp_path: Path) -> None:
    base = tmp_path / "checkpoints" / "1.pt"
    source = {"data": "one"}
    state = checkpoint.keyed_path(base, hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest())
    orphan = subprocess.Popen([sys.executable, "-c", HOLDER, str(state)], stdout=subprocess.PIPE, text=True)
    try:
        assert orphan.stdout.readline() == "held\n"
        with pytest.raises(StacklmError, match=f"^{state}: process {orphan.pid} on .* is training this run"):
            toy_training(base, source)
        assert not state.exists()
    finally:
        orphan.kill()  # SIGKILL: the kernel releases its lock
        orphan.wait()
    toy_training(base, source)
    assert state.exists()
