"""Reading suite files: the paper's 33 suites with their totals, and errors naming file and place."""

import json
from pathlib import Path
from typing import Any

import pytest

from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.formula import Comparison, RegionValue
from stacklm.evaluation.syntaxgym.suite import Region, read_suite


def suite_document() -> dict[str, Any]:
    def condition(name: str, verb: str) -> dict[str, Any]:
        return {"condition_name": name, "regions": [{"region_number": 1, "content": "The cat"}, {"region_number": 2, "content": verb}]}

    return {
        "meta": {"name": "toy", "metric": "sum"},
        "region_meta": {"1": "subject", "2": "verb"},
        "predictions": [{"type": "formula", "formula": "(2;%match%) < (2;%mismatch%)"}],
        "items": [
            {"item_number": 1, "conditions": [condition("match", "is"), condition("mismatch", "are")]},
            {"item_number": 2, "conditions": [condition("match", "sleeps"), condition("mismatch", "sleep")]},
        ],
    }


def write(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(document))
    return path


def test_a_suite_reads_into_its_items_conditions_regions_and_predictions(tmp_path: Path) -> None:
    suite = read_suite(write(tmp_path, suite_document()))
    assert suite.name == "toy"
    assert [item.number for item in suite.items] == [1, 2]
    assert [c.name for c in suite.items[1].conditions] == ["match", "mismatch"]
    assert suite.items[1].conditions[1].regions == (Region(1, "The cat"), Region(2, "sleep"))
    assert suite.predictions[0].expression == Comparison("<", RegionValue(2, "match"), RegionValue(2, "mismatch"))


def broken(change: str) -> dict[str, Any]:
    document = suite_document()
    if change == "formula":
        document["predictions"].append({"type": "formula", "formula": "(2;%match%) <"})
    elif change == "prediction type":
        document["predictions"][0]["type"] = "python"
    elif change == "missing region":
        del document["items"][1]["conditions"][1]["regions"][1]
    elif change == "missing condition":
        del document["items"][1]["conditions"][0]
    elif change == "trailing space":
        document["items"][1]["conditions"][0]["regions"][0]["content"] = "The cat "
    elif change == "metric":
        document["meta"]["metric"] = "mean"
    elif change == "no conditions":
        del document["items"][1]["conditions"]
    elif change == "string item number":
        document["items"][1]["item_number"] = "2"
    return document


@pytest.mark.parametrize(
    ("change", "place"),
    [
        ("formula", "prediction 2: formula '(2;%match%) <': column 14"),
        ("prediction type", "prediction 1: unknown prediction type 'python'"),
        ("missing region", "item 2: prediction 1 reads region 2 of condition 'mismatch'"),
        ("missing condition", "item 2: prediction 1 reads region 2 of condition 'match'"),
        ("trailing space", "item 2, condition 'match', region 1: content 'The cat ' begins or ends with whitespace"),
        ("metric", "meta: metric 'mean' is not supported"),
        ("no conditions", "item 2: missing key 'conditions'"),
        ("string item number", "'item_number' must be int, got str"),
    ],
)
def test_a_malformed_suite_names_the_file_and_the_place(tmp_path: Path, change: str, place: str) -> None:
    path = write(tmp_path, broken(change))
    with pytest.raises(StacklmError) as caught:
        read_suite(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert place in str(caught.value)


def test_a_file_that_is_not_json_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "meta": {\n  "name": oops\n}')
    with pytest.raises(StacklmError, match=rf"^{path}:3: not valid JSON"):
        read_suite(path)


def test_the_papers_suites_have_the_stated_totals(upstream_dir: Path) -> None:
    files = sorted((upstream_dir / "sg-test-suites" / "syntaxgym-format").glob("*.json"))
    suites = [read_suite(path) for path in files]
    # Counted in the authors' suite files (docs/design/cfl-and-ptb.md#sg-score): 33 suites, 841 items, 1,850 pairs.
    assert len(suites) == 33
    assert sum(len(suite.items) for suite in suites) == 841
    assert sum(len(suite.items) * len(suite.predictions) for suite in suites) == 1850
    assert [suite.name for suite in suites] == [path.stem for path in files]
