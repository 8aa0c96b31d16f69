"""Syntax-infused embeddings: token part, summed feature part, boundary features, tied output."""

from __future__ import annotations

import pytest
import torch

from stacklm.errors import StacklmError
from stacklm.models.embedding import BOUNDARY, FeatureTable, TiedEmbedding
from stacklm.models.lexicon import task_features, task_vocabulary

ROWS = [
    {"pos": "N", "case": "Nom", "subword": "whole"},
    {"pos": "N", "case": "Acc", "subword": "whole"},
    {"pos": "V", "case": "none", "subword": "whole"},
]


def test_feature_table_ids_and_boundary() -> None:
    table = FeatureTable.from_rows(ROWS)
    assert table.values == ((BOUNDARY, "N", "V"), (BOUNDARY, "Acc", "Nom", "none"), (BOUNDARY, "whole"))
    assert table.ids == ((1, 2, 1), (1, 1, 1), (2, 3, 1), (0, 0, 0))  # EOS last, all boundary
    assert table.id_tensor(5).tolist() == [[1, 5, 8], [1, 4, 8], [2, 6, 8], [0, 3, 7], [0, 3, 7]]
    with pytest.raises(StacklmError, match="no 'case' feature"):
        FeatureTable.from_rows([{"pos": "N", "subword": "whole"}])


def test_syntax_infused_embedding_is_token_part_and_summed_features() -> None:
    table = FeatureTable.from_rows(ROWS)
    embedding = TiedEmbedding(5, 8, table, feature_width=3)
    embedding.initialize(torch.Generator().manual_seed(0))
    matrix = embedding.matrix()
    assert matrix.shape == (5, 8)
    torch.testing.assert_close(matrix[:, :5], embedding.token_weight)
    weight = embedding.feature_weight
    torch.testing.assert_close(matrix[0, 5:], weight[1] + weight[5] + weight[8])
    torch.testing.assert_close(matrix[3, 5:], matrix[4, 5:])  # EOS and BOS share the boundary features
    hidden = torch.randn(2, 8)
    torch.testing.assert_close(embedding.logits(hidden, 4), hidden @ matrix[:4].t())
    torch.testing.assert_close(embedding(torch.tensor([2, 0])), matrix[[2, 0]])


def test_feature_gradients_reach_feature_embeddings() -> None:
    embedding = TiedEmbedding(4, 8, FeatureTable.from_rows(ROWS), feature_width=3)
    embedding.initialize(torch.Generator().manual_seed(0))
    embedding(torch.tensor([0])).sum().backward()
    assert embedding.feature_weight.grad is not None
    assert embedding.feature_weight.grad[[1, 5, 8]].ne(0).all() and embedding.feature_weight.grad[2].eq(0).all()


def test_width_must_leave_room_for_tokens() -> None:
    with pytest.raises(StacklmError, match="no room"):
        TiedEmbedding(4, 3, FeatureTable.from_rows(ROWS), feature_width=3)


def test_task_feature_table_covers_its_vocabulary() -> None:
    table = task_features("german-question-formation")
    assert table.num_symbols == len(task_vocabulary("german-question-formation"))
    assert table.kinds == ("pos", "case", "subword")
    assert len(table.values[1]) > 2  # German tokens carry cases
