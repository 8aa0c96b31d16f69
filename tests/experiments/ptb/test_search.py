"""stacklm.experiments.ptb.search: the restarts' draws on App. 10's ranges, and the typed selection
written and read back as the JSON that ``stacklm ptb select`` writes."""

import json
import math
import random
import statistics

import pytest

from stacklm.errors import StacklmError
from stacklm.experiments.ptb.search import PtbSelection, draw_hyperparameters


def test_search_draws_are_log_uniform_on_the_papers_ranges() -> None:
    draws = [draw_hyperparameters(random.Random(seed)) for seed in range(4000)]
    rates, clips = [d.learning_rate for d in draws], [d.clip_per_target for d in draws]
    assert 1 <= min(rates) and max(rates) <= 100 and 1e-5 <= min(clips) and max(clips) <= 1e-3
    # log10 uniform on [0, 2] and [−5, −3]: means 1 and −4, standard deviations 2/√12 = 0.577.
    assert statistics.fmean(math.log10(r) for r in rates) == pytest.approx(1.0, abs=0.03)
    assert statistics.fmean(math.log10(c) for c in clips) == pytest.approx(-4.0, abs=0.03)
    assert statistics.pstdev(math.log10(r) for r in rates) == pytest.approx(2 / math.sqrt(12), abs=0.02)


def test_a_selection_round_trips_through_its_json_a_diverged_restart_as_null(tmp_path) -> None:
    selection = PtbSelection("lstm", 3, 120.0, {1: 150.0, 2: math.inf, 3: 120.0})
    assert selection.as_json() == {"model": "lstm", "restart": 3, "validation_perplexity": 120.0, "restarts": {"1": 150.0, "2": None, "3": 120.0}}
    (tmp_path / "lstm.json").write_text(json.dumps(selection.as_json()))
    assert PtbSelection.read(tmp_path / "lstm.json") == selection
    (tmp_path / "bad.json").write_text(json.dumps({"model": "lstm", "restart": "3"}))
    with pytest.raises(StacklmError, match=r"bad.json: not a PTB selection \(a JSON object with the keys model, restart, validation_perplexity, restarts\)"):
        PtbSelection.read(tmp_path / "bad.json")
