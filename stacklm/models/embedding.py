"""Tied embeddings, plain or syntax-infused (Sundararaman et al. (2019) §4), and the lexicon's feature table.

Plain: one learned matrix E of shape (rows, d); the input embedding of symbol i is E_i and the
output logits are E_{:V} y' (tied input and output embeddings, DuSell & Cotterell (2025) §4; no output bias).

Syntax-infused (+Syn): every symbol i has one value per feature kind (part of speech, case,
subword position), read from the task grammar's lexicon, so generated tokens have them too.
Its embedding is the (d − f)-wide token embedding concatenated with the sum of the f-wide
embeddings of its feature values (Sundararaman et al. (2019) §4, "summed, then concatenated"; f = 20):

    Ẽ_i = [ E_i ; Σ_k F_k[feature_k(i)] ] ∈ ℝ^d.

The output stays tied to the composed matrix Ẽ, so its logits score each symbol by its token
and feature embeddings together. EOS and the transformer's BOS take the value ``BOUNDARY`` in
every kind. Parameters: rows · (d − f) + f · Σ_k |values_k|.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.errors import StacklmError
from stacklm.models.base import uniform_

BOUNDARY = "<boundary>"
FEATURE_KINDS: tuple[str, ...] = ("pos", "case", "subword")


class Lexicon(Protocol):
    """What the +Syn embedding needs from a task: features of each of its tokens."""

    def token_features(self, token: str) -> dict[str, str]: ...


@dataclass(frozen=True)
class FeatureTable:
    """One feature value id per symbol (ordinary tokens in vocabulary order, then EOS) and kind."""

    kinds: tuple[str, ...]
    values: tuple[tuple[str, ...], ...]  # per kind, its values; index 0 is BOUNDARY
    ids: tuple[tuple[int, ...], ...]  # per symbol, one id into values[k] per kind k

    def __post_init__(self) -> None:
        if not self.kinds or len(self.values) != len(self.kinds):
            raise ValueError("a feature table needs one value list per kind, and at least one kind")
        if any(not values or values[0] != BOUNDARY for values in self.values):
            raise ValueError(f"value 0 of every feature kind must be {BOUNDARY!r}")
        for symbol, row in enumerate(self.ids):
            if len(row) != len(self.kinds) or any(not 0 <= value < len(self.values[k]) for k, value in enumerate(row)):
                raise ValueError(f"feature ids of symbol {symbol} do not match the kinds and their values: {row}")

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, str]], kinds: tuple[str, ...] = FEATURE_KINDS) -> FeatureTable:
        """The table for ordinary tokens whose features are ``rows`` (vocabulary order); EOS is appended."""
        values = []
        for kind in kinds:
            seen = set()
            for index, row in enumerate(rows):
                if kind not in row:
                    raise StacklmError(f"token {index} has no {kind!r} feature (it has {', '.join(row) or 'none'})")
                seen.add(row[kind])
            seen.discard(BOUNDARY)
            values.append((BOUNDARY, *sorted(seen)))
        positions = [{value: index for index, value in enumerate(kind_values)} for kind_values in values]
        ids = [tuple(positions[k][row[kind]] for k, kind in enumerate(kinds)) for row in rows]
        ids.append((0,) * len(kinds))  # EOS
        return cls(kinds=kinds, values=tuple(values), ids=tuple(ids))

    @classmethod
    def from_lexicon(cls, lexicon: Lexicon, tokens: Sequence[str]) -> FeatureTable:
        """The table of a task's vocabulary ``tokens`` (ordinary tokens, in index order)."""
        return cls.from_rows([lexicon.token_features(token) for token in tokens])

    @property
    def num_symbols(self) -> int:
        """Symbols described, EOS included."""
        return len(self.ids)

    @property
    def value_count(self) -> int:
        """Σ_k |values_k|, the number of f-wide feature embeddings."""
        return sum(len(values) for values in self.values)

    def id_tensor(self, num_rows: int) -> Tensor:
        """Ids offset into one stacked table of all kinds' values, ``BOUNDARY`` for rows past EOS: (rows, K)."""
        offsets = [sum(len(values) for values in self.values[:k]) for k in range(len(self.kinds))]
        rows = [[offset + value for offset, value in zip(offsets, row)] for row in self.ids]
        rows += [list(offsets)] * (num_rows - len(rows))
        return torch.tensor(rows, dtype=torch.long)


class TiedEmbedding(nn.Module):
    """Ẽ (rows, width): input embeddings and, through its first V rows, the output layer."""

    feature_ids: Tensor  # (rows, K), a buffer, with a feature table only

    def __init__(self, num_rows: int, width: int, features: FeatureTable | None = None, feature_width: int = 20) -> None:
        super().__init__()
        self.width = width
        token_width = width
        if features is not None:
            if features.num_symbols > num_rows:
                raise StacklmError(f"the feature table describes {features.num_symbols} symbols but the model has {num_rows} embedding rows")
            token_width = width - feature_width
            if token_width < 1:
                raise StacklmError(f"width {width} leaves no room for a token embedding beside {feature_width} feature dimensions")
            self.feature_weight = nn.Parameter(torch.empty(features.value_count, feature_width))  # (Σ values, f)
            self.register_buffer("feature_ids", features.id_tensor(num_rows), persistent=False)  # (rows, K)
        self.features = features
        self.token_weight = nn.Parameter(torch.empty(num_rows, token_width))  # (rows, d − f) or (rows, d)

    def matrix(self) -> Tensor:
        """Ẽ: (rows, width)."""
        if self.features is None:
            return self.token_weight
        feature_sum = F.embedding(self.feature_ids, self.feature_weight).sum(dim=1)  # (rows, f)
        return torch.cat([self.token_weight, feature_sum], dim=1)

    def forward(self, indices: Tensor) -> Tensor:
        """Ẽ_i for each index: (…, width)."""
        return F.embedding(indices, self.matrix())

    def logits(self, hidden: Tensor, num_outputs: int) -> Tensor:
        """Ẽ_{:V} y' for y' (…, width): (…, V)."""
        return hidden @ self.matrix()[:num_outputs].t()

    def initialize(self, generator: torch.Generator) -> None:
        uniform_(self.token_weight, generator)
        if self.features is not None:
            uniform_(self.feature_weight, generator)
