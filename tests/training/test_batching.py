import random

import pytest
import torch

from stacklm.training.batching import epoch_groups, group_by_length, group_by_token_budget, make_batch
from stacklm.training.config import TokenBudget, TrainConfig, TrainingSettings, cfl_train_config


@pytest.mark.parametrize("token_budget, counted", [("raw", 0), ("scored", 1)])
def test_token_budget_groups_fit_the_budget_and_cover_every_string_once(token_budget: TokenBudget, counted: int) -> None:
    generator = random.Random(0)
    lengths = [generator.randint(1, 30) for _ in range(500)]
    config = TrainConfig(learning_rate=1e-3, tokens_per_batch=128, token_budget=token_budget)
    groups = epoch_groups(lengths, config, seed=3, epoch=0)
    assert sorted(index for group in groups for index in group) == list(range(500))
    for group in groups:
        longest = max(lengths[index] for index in group)
        assert len(group) * (longest + counted) <= 128
    # grouped by length: a batch spans a narrow range of lengths
    assert max(max(lengths[i] for i in group) - min(lengths[i] for i in group) for group in groups) <= 2


def test_the_default_budget_counts_raw_lengths_as_the_authors_code() -> None:
    # docs/design/authors-code.md#token-budget-and-batching: batch size × longest raw length ≤ B; the paper's text
    # (App. D) counts EOS too. Four strings of 4 tokens under B = 12: 3 per batch, or 2 with EOS.
    assert TrainConfig(learning_rate=1e-3, tokens_per_batch=12).token_budget == "raw"
    assert TrainingSettings().token_budget == "raw"
    assert group_by_token_budget([4, 4, 4, 4], [0, 1, 2, 3], 12) == [[0, 1, 2], [3]]
    assert group_by_token_budget([4, 4, 4, 4], [0, 1, 2, 3], 12, "scored") == [[0, 1], [2, 3]]


def test_an_over_long_string_forms_its_own_batch() -> None:
    assert group_by_token_budget([3, 100, 3], [0, 1, 2], 16) == [[0, 2], [1]]


def test_epoch_order_is_a_function_of_seed_and_epoch() -> None:
    lengths = [random.Random(1).randint(1, 9) for _ in range(100)]
    config = TrainConfig(learning_rate=1e-3, tokens_per_batch=40)
    assert epoch_groups(lengths, config, 1, 4) == epoch_groups(lengths, config, 1, 4)
    assert epoch_groups(lengths, config, 1, 4) != epoch_groups(lengths, config, 1, 5)
    assert epoch_groups(lengths, config, 1, 4) != epoch_groups(lengths, config, 2, 4)


def test_same_length_batches_keep_the_data_sets_batches() -> None:
    lengths = [5] * 10 + [7] * 10 + [5] * 10
    assert group_by_length(lengths, 10) == [list(range(10)), list(range(20, 30)), list(range(10, 20))]
    groups = epoch_groups(lengths, cfl_train_config(0.01), seed=0, epoch=0)
    assert sorted(map(sorted, groups)) == [list(range(10)), list(range(10, 20)), list(range(20, 30))]


def test_batch_targets_end_with_eos_and_mask_counts_eos() -> None:
    batch = make_batch([[4, 5, 6], [7]], [0, 1], eos_index=9)
    assert batch.inputs.tolist() == [[4, 5, 6], [7, 0, 0]]
    assert batch.targets.tolist() == [[4, 5, 6, 9], [7, 9, 9, 9]]
    assert batch.mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert batch.num_tokens == 6
    assert batch.inputs.dtype == torch.long
