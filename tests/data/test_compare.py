"""``stacklm data compare``: profiles, total variation, seed noise, folders and upstream files."""

from __future__ import annotations

from collections import Counter

import pytest

from stacklm.cli import main
from stacklm.data.compare import compare, noise_sizes, profile, read_dataset, split_of, total_variation
from stacklm.data.dataset import write_dataset
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.errors import StacklmError
from stacklm.tasks import get_task
from stacklm.tasks.example import Example

SIZES = SplitSizes(train=400, validation=40, test=60, generalization=50)
TASK = "question-formation"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two generated data folders of question formation, seeds 3 and 4."""
    task = get_task(TASK)
    paths = []
    for seed in (3, 4):
        folder = tmp_path_factory.mktemp(f"seed{seed}")
        write_dataset(task, build_splits(task, SIZES, seed), folder)
        paths.append(folder)
    return paths


def source(text: str) -> Example:
    tokens = tuple(text.split())
    return Example(tokens, tokens[:-1])


def test_profile_is_marker_by_construction():
    task = get_task(TASK)
    examples = [source("my yak does sleep . decl"), source("my yaks do sleep . decl"),
                source("my yak by your newt does confuse her quail . decl")]
    assert profile(task, examples) == Counter({"decl subject=bare object=none": 2, "decl subject=PP object=bare": 1})


def test_total_variation():
    assert total_variation(Counter(a=2, b=2), Counter(a=1, b=1)) == 0.0
    assert total_variation(Counter(a=1), Counter(b=5)) == 1.0
    assert total_variation(Counter(a=3, b=1), Counter(a=1, b=1)) == pytest.approx(0.25)
    with pytest.raises(StacklmError, match="empty"):
        total_variation(Counter(), Counter(a=1))


def test_split_is_read_off_the_file_name(tmp_path):
    assert [split_of(tmp_path / name) for name in ("question.train", "passiv_en_nps.dev", "test.tsv", "question.gen", "generalization.tsv")] == \
        ["train", "validation", "test", "generalization", "generalization"]
    with pytest.raises(StacklmError, match="notes.txt: cannot tell the split"):
        split_of(tmp_path / "notes.txt")


def test_a_folder_against_itself_is_at_distance_zero_and_noise_is_positive(folders):
    task = get_task(TASK)
    dataset = read_dataset(folders[0])
    assert noise_sizes(dataset) == SIZES
    comparisons = compare(task, dataset, dataset)
    assert [comparison.split for comparison in comparisons] == ["train", "validation", "test", "generalization"]
    assert all(comparison.distance == 0.0 and comparison.noise > 0.0 for comparison in comparisons)


def test_two_seeds_lie_within_a_few_noises(folders):
    task = get_task(TASK)
    comparisons = compare(task, read_dataset(folders[0]), read_dataset(folders[1]))
    train = comparisons[0]
    assert 0.0 < train.distance < 3 * train.noise
    assert sum(train.first.values()) == 400


def test_single_files_of_different_splits_compare_as_one_split(folders):
    task = get_task(TASK)
    [comparison] = compare(task, read_dataset(folders[0] / "train.tsv"), read_dataset(folders[1] / "test.tsv"))
    assert comparison.split == "train" and sum(comparison.second.values()) == 60


def test_cli_prints_both_profiles_distance_and_noise(folders, capsys):
    assert main(["data", "compare", "--task", TASK, str(folders[0]), str(folders[1] / "train.tsv")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"train: A = {folders[0]} (400 lines), B = {folders[1] / 'train.tsv'} (400 lines)")
    assert "decl subject=bare object=bare" in printed and "TV(A, B) = " in printed and "seed noise TV(generator seed 1, seed 2)" in printed


def test_missing_dataset_is_named(tmp_path):
    with pytest.raises(StacklmError, match="nothing: no such file or folder"):
        read_dataset(tmp_path / "nothing")
    with pytest.raises(StacklmError, match="no split file"):
        read_dataset(tmp_path)


def test_upstream_files_are_read_as_they_are(upstream_dir):
    """McCoy's dev against his test (``source<TAB>target`` lines, no third field): one distribution."""
    task = get_task(TASK)
    folder = upstream_dir / TASK
    dev, test = read_dataset(folder / "question.dev"), read_dataset(folder / "question.test")
    assert list(dev) == ["validation"] and len(test["test"]) == 10_000
    distance = total_variation(profile(task, dev["validation"]), profile(task, test["test"]))
    assert distance < 0.1
