"""Generated splits against the upstream ones: construction frequencies and lengths.

Tolerances (total variation distance between the two empirical distributions):
- generalization (ours 10,000 vs upstream 10,000): TV ≤ 0.03 for every statistic;
- in-distribution (our test split against upstream's, 10,000 each, drawn at the same place of
  the stream): TV ≤ 0.05 for subject kind, object kind and marker, TV ≤ 0.07 for length;
- train, for the four tasks whose upstream train file we have (100,000 each): TV of the
  construction profiles (``stacklm.data.compare``) within twice the generator's seed noise.
"""

from __future__ import annotations

from collections import Counter

import pytest

from stacklm.data.compare import compare, total_variation
from stacklm.data.splits import SplitSizes, build_splits
from stacklm.data.weights import TRAIN_FILE_TASKS
from stacklm.tasks import TASK_NAMES, get_task

GENERALIZATION_TOLERANCE = 0.03
IN_DISTRIBUTION_TOLERANCE = {"subject": 0.05, "object": 0.05, "marker": 0.05, "length": 0.07}


def statistics(task, examples) -> dict[str, Counter]:
    tallies = {name: Counter() for name in ("subject", "object", "construction", "marker", "length")}
    for example in examples:
        construction = task.construction(task.parse(example.source[:-1]))
        subject, obj = construction.split()
        tallies["subject"][subject] += 1
        tallies["object"][obj] += 1
        tallies["construction"][construction] += 1
        tallies["marker"][example.marker] += 1
        tallies["length"][len(example.source)] += 1
    return tallies


# McCoy's tense_aux test split holds 6.8 % bare intransitives where our fitted generator, cutting
# test first from a stream keyed by sentence, draws 11.7 % (docs/data-validation.md, "Tasks
# without a train file"): the one split whose procedure is not reproduced.
KNOWN_DEPARTURES = {"tense-reinflection-do": "McCoy's tense_aux test: fewer bare intransitives than the modelled procedure gives"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_DEPARTURES[name], strict=True))
                                  if name in KNOWN_DEPARTURES else name for name in TASK_NAMES])
def test_generated_splits_match_upstream_proportions(name, upstream_examples):
    task = get_task(name)
    splits = build_splits(task, SplitSizes(), seed=1)  # full size: de-duplication depends on it
    ours_generalization = statistics(task, splits.generalization)
    theirs_generalization = statistics(task, upstream_examples(name, "generalization"))
    for statistic in ours_generalization:
        distance = total_variation(ours_generalization[statistic], theirs_generalization[statistic])
        assert distance <= GENERALIZATION_TOLERANCE, (statistic, distance)
    ours = statistics(task, splits.test)
    theirs = statistics(task, upstream_examples(name, "test"))
    for statistic, tolerance in IN_DISTRIBUTION_TOLERANCE.items():
        distance = total_variation(ours[statistic], theirs[statistic])
        assert distance <= tolerance, (statistic, distance)
    if name in TRAIN_FILE_TASKS:
        [comparison] = compare(task, {"train": splits.train}, {"train": upstream_examples(name, "train")})
        assert comparison.distance <= 2 * comparison.noise, (comparison.distance, comparison.noise)
