"""stacklm.experiments.common: the selection rule, the architectures' path slugs, a job's device."""

from __future__ import annotations

import pytest

import stacklm.experiments.common as shared
from stacklm.errors import StacklmError
from stacklm.workflow.settings import ResolvedSettings


def test_select_trial_takes_the_lowest_finite_score_first_on_ties() -> None:
    assert shared.select_lowest([2.0, 1.5, 1.5, 3.0], "search trial") == 1
    assert shared.select_lowest([float("nan"), float("inf"), 4.0], "search trial") == 2
    with pytest.raises(StacklmError, match="no search trial"):
        shared.select_lowest([float("nan")], "search trial")


def test_slugs_round_trip(settings: ResolvedSettings) -> None:
    slugs = [shared.architecture_slug(name) for name in settings.architectures]
    assert len(set(slugs)) == len(slugs) and all("/" not in slug for slug in slugs)
    assert tuple(shared.architecture_name(slug) for slug in slugs) == settings.architectures


def test_device_from_the_gpu_resource() -> None:
    assert shared.device(0) == "cpu"
    assert shared.device(1) == "cuda"
