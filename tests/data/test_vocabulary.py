import pytest

from stacklm.data.vocabulary import EOS, Vocabulary
from stacklm.errors import StacklmError


def test_sorted_indices_and_eos_last():
    vocabulary = Vocabulary.from_tokens(["b", "a", "b", "c"])
    assert vocabulary.tokens == ("a", "b", "c")
    assert len(vocabulary) == 4 and vocabulary.eos_index == 3
    assert vocabulary.encode(["c", "a"]) == [2, 0]
    assert vocabulary.decode([2, 0, 3]) == ("c", "a", EOS)


def test_unknown_token_is_named():
    with pytest.raises(StacklmError, match="'zebra'"):
        Vocabulary.from_tokens(["a"]).encode(["a", "zebra"])
