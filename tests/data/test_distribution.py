"""Generated splits against the upstream ones: construction frequencies and lengths.

Tolerances (total variation distance between the two empirical distributions):
- generalization (ours 10,000 vs upstream 10,000): TV ≤ 0.03 for every statistic;
- in-distribution (our test split, 10,000 drawn exactly like validation, vs upstream dev,
  1,000): TV ≤ 0.05 for subject kind, object kind and marker, TV ≤ 0.07 for length. The
  upstream side alone has sampling noise E[TV] ≈ 0.02 on 3–5 categories and ≈ 0.05 on the
  ~18 length bins at n = 1,000, so tighter bounds would test the noise.
"""

from __future__ import annotations

from collections import Counter

import pytest

from stacklm.data.compare import total_variation
from stacklm.data.splits import SplitSizes, build_splits
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


@pytest.mark.parametrize("name", TASK_NAMES)
def test_generated_splits_match_upstream_proportions(name, upstream_examples):
    task = get_task(name)
    splits = build_splits(task, SplitSizes(), seed=1)  # full size: de-duplication depends on it
    ours_generalization = statistics(task, splits.generalization)
    theirs_generalization = statistics(task, upstream_examples(name, "generalization"))
    for statistic in ours_generalization:
        distance = total_variation(ours_generalization[statistic], theirs_generalization[statistic])
        assert distance <= GENERALIZATION_TOLERANCE, (statistic, distance)
    ours = statistics(task, splits.test)
    theirs = statistics(task, upstream_examples(name, "validation"))
    for statistic, tolerance in IN_DISTRIBUTION_TOLERANCE.items():
        distance = total_variation(ours[statistic], theirs[statistic])
        assert distance <= tolerance, (statistic, distance)
