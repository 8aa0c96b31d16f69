"""A PTB language model as the SG score's ``TokenLogProbs`` (``docs/design/cfl-and-ptb.md#sg-score``, step 3).

Each call scores one sentence from the model's initial state (no context carried from other
sentences): the inputs' log-softmax at each position, read at the target. Tokens map to the
model's vocabulary, ``<eos>`` to its EOS; ``words`` is the set the SG tokenizer checks words
against (anything else becomes ``<unk>`` there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from stacklm.data.ptb import UNK
from stacklm.data.vocabulary import EOS, Vocabulary
from stacklm.errors import StacklmError
from stacklm.models.ptb import PtbLanguageModel


@dataclass(frozen=True)
class PtbScorer:
    model: PtbLanguageModel
    vocabulary: Vocabulary
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {token: position for position, token in enumerate(self.vocabulary.tokens)}
        index[EOS] = self.vocabulary.eos_index
        if UNK not in index:
            raise StacklmError(f"the vocabulary has no {UNK}")
        object.__setattr__(self, "_index", index)

    @property
    def words(self) -> frozenset[str]:
        return frozenset(self._index)

    def _encode(self, tokens: tuple[str, ...]) -> torch.Tensor:
        try:
            return torch.tensor([[self._index[token] for token in tokens]], device=self.model.output.weight.device)
        except KeyError as error:
            raise StacklmError(f"token {error.args[0]!r} is not in the model's vocabulary") from None

    def __call__(self, inputs: tuple[str, ...], targets: tuple[str, ...]) -> list[float]:
        """ln p(targets[k] | inputs[0..k]) from the initial state."""
        if len(inputs) != len(targets):
            raise StacklmError(f"{len(inputs)} inputs for {len(targets)} targets")
        with torch.no_grad():
            logits, _ = self.model(self._encode(inputs), self.model.initial_state(1))  # (1, n, V)
            log_probs = logits.log_softmax(dim=-1)[0]  # (n, V)
            return log_probs.gather(1, self._encode(targets)[0].unsqueeze(1)).squeeze(1).tolist()
