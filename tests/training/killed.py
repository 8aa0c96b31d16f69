"""A training process killed (``kill -9``) right after a save of its resumable state: for tests of
what the files of an unfinished run hold (``stacklm progress``, ``stacklm cfl progress``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import pytest

from stacklm.training import checkpoint


class Killed(Exception):
    """The training process dies just after a state is saved."""


@contextlib.contextmanager
def killed_after_save(checkpoints: int) -> Iterator[None]:
    """Within it, ``checkpoint.save`` saves, then raises :class:`Killed` once the state it saved
    holds ``checkpoints`` checkpoints in its curve; the block must be killed so."""
    save = checkpoint.save

    def save_then_die(state: Path, payload: dict[str, Any]) -> None:
        save(state, payload)
        if len(payload["curve"]) == checkpoints:
            raise Killed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "save", save_then_die)
        with pytest.raises(Killed):
            yield
