"""Token ↔ index maps. Index ``len(tokens)`` is EOS, which ends every language-model string."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from stacklm.errors import StacklmError

EOS = "<eos>"


@dataclass(frozen=True)
class Vocabulary:
    tokens: tuple[str, ...]  # ordinary tokens, in index order; EOS follows them
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(set(self.tokens)) != len(self.tokens) or EOS in self.tokens:
            raise StacklmError("vocabulary tokens must be distinct and must not include " + EOS)
        object.__setattr__(self, "_index", {token: index for index, token in enumerate(self.tokens)})

    @classmethod
    def from_tokens(cls, tokens: Iterable[str]) -> "Vocabulary":
        """The vocabulary of a set of tokens, sorted so that it does not depend on their order."""
        return cls(tuple(sorted(set(tokens))))

    @property
    def eos_index(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        """Number of output symbols, EOS included."""
        return len(self.tokens) + 1

    def encode(self, tokens: Sequence[str]) -> list[int]:
        try:
            return [self._index[token] for token in tokens]
        except KeyError as error:
            raise StacklmError(f"token {error.args[0]!r} is not in the vocabulary") from None

    def decode(self, indices: Sequence[int]) -> tuple[str, ...]:
        return tuple(EOS if index == self.eos_index else self.tokens[index] for index in indices)
