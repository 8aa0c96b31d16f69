"""stacklm.experiments.transformations.settings: the transformations' sections, built from plain
values by the one builder, each bad value named by its key."""

from __future__ import annotations

import pytest

from stacklm.data.splits import SplitSizes
from stacklm.errors import StacklmError
from stacklm.experiments.transformations.settings import (
    DataSettings,
    IntegerRange,
    JobSize,
    LogRange,
    ResourceFamily,
    ResourceSettings,
    SearchSettings,
    check_tasks,
)
from stacklm.settings_file import build


def settings(**data):
    return build(DataSettings, data, "data")


def test_defaults_and_typed_fields():
    assert build(DataSettings, {}) == DataSettings("upstream", 1, SplitSizes(), None, "error")
    parsed = build(DataSettings, {"source": "upstream", "seed": 3, "sizes": {"train": 10}, "upstream_mirror": "/m"})
    assert parsed.sizes == SplitSizes(train=10) and parsed.upstream_mirror == "/m"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"sead": 1}, "config key 'data.sead': unknown"),
        ({"source": "web"}, "config key 'data.source': 'web' is not one of 'generate', 'upstream'"),
        ({"seed": "one"}, "config key 'data.seed': expected int"),
        ({"upstream_mirror": 3}, "config key 'data.upstream_mirror': expected str, got 3"),
        ({"sizes": {"tests": 3}}, "config key 'data.sizes.tests': unknown"),
        ({"source": "upstream", "sizes": {"validation": 2000}}, "config key 'data.sizes.validation': upstream has 1000"),
        ({"sizes": {"train": 100_001}}, "config key 'data.sizes.train': upstream has 100000"),
        ({"missing": "skip"}, "config key 'data.missing': 'skip' is not one of 'error', 'generate'"),
    ],
)
def test_bad_settings_name_the_key(data, message):
    with pytest.raises(StacklmError, match=message):
        settings(**data)


def test_an_unknown_task_is_named_by_its_key():
    with pytest.raises(StacklmError, match=r"config key 'tasks\[1\]': unknown task 'passivisation'"):
        check_tasks(("question-formation", "passivisation"))


def test_search_bounds_in_order_and_resources_by_family():
    search = build(SearchSettings, {"trials": 3, "tokens_per_batch": {"low": 600, "high": 600}, "learning_rate": {"low": 1e-4, "high": 1e-3}}, "search")
    assert search == SearchSettings(3, 5, IntegerRange(600, 600), LogRange(1e-4, 1e-3), 0)
    with pytest.raises(StacklmError, match="^config key 'search.tokens_per_batch': low 4096 exceeds high 2048$"):
        build(SearchSettings, {"tokens_per_batch": {"low": 4096, "high": 2048}}, "search")
    with pytest.raises(StacklmError, match="^config key 'search.learning_rate.high': required by LogRange$"):
        build(SearchSettings, {"learning_rate": {"low": 1e-4}}, "search")
    resources = build(ResourceSettings, {"default": {"runtime_min": 10, "mem_mb": 20}, "families": [{"stacks": ["Nd"], "runtime_min": 1, "mem_mb": 2}]}, "resources")
    assert resources == ResourceSettings(2, JobSize(10, 20), (ResourceFamily(("Nd",), 1, 2),))
