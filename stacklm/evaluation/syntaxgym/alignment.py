"""From a condition's regions to tokens, and each token to its region (``docs/design/cfl-and-ptb.md#sg-score``,
steps 1, 2 and 4), as syntaxgym 0.5 with the PTB model of DuSell & Chiang (2022) does it.

1. The sentence joins the non-empty region contents (leading spaces stripped) with single spaces.
2. The PTB tokenizer lower-cases it and splits on whitespace; a token outside the model's input
   vocabulary becomes ``<unk>`` (punctuation too: PTB has none).
3. Alignment walks through the region texts, lower-cased, from left to right:

   - spaces are skipped; an exhausted region gives way to the next one (once per token);
   - a token that the remaining text starts with is consumed from it and belongs to the region;
   - an ``<unk>`` takes the text up to the first place where the next token's string occurs,
     looking through the current region and then the later ones: the whole run of tokens up
     to that next token belongs to the region where the run began (so ``athlete ,`` as two
     ``<unk>``s both count in the region of ``athlete``). When no later token occurs, every
     remaining token belongs to the current region (the next one if the current is exhausted,
     none if it is the last);
   - any other token matches nowhere: it belongs to no region, and the walk moves to the next
     region.

   The search is by substring, as syntaxgym's is: in ``paint | a painting`` with ``paint`` an
   ``<unk>``, the next token ``a`` is found inside ``paint``, so the region of ``paint`` gets
   ``<unk> a`` and ``painting`` belongs to no region. As in syntaxgym, regions after the one being
   read are searched as written, not lower-cased. Where syntaxgym would step past the last region
   after the last token (an ``IndexError`` there) the walk simply ends; a token left with no region
   to go to is an ``AlignmentError``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from stacklm.evaluation.syntaxgym.suite import Condition

UNK = "<unk>"


class AlignmentError(ValueError):
    """Tokens left over after the last region."""


def sentence(condition: Condition) -> str:
    """Step 1: the non-empty region contents, leading spaces stripped, joined by single spaces."""
    return " ".join(region.content.lstrip() for region in condition.regions if region.content.strip())


def tokenize(text: str, vocabulary: Collection[str]) -> tuple[str, ...]:
    """Step 2: lower-case, split on whitespace, ``<unk>`` for a word outside ``vocabulary``."""
    return tuple(word if word in vocabulary else UNK for word in text.lower().split())


def _next_match(contents: Sequence[str], region: int, text: str, token: str) -> tuple[int, str] | None:
    """The first occurrence of ``token`` in ``text`` (of ``region``) or a later region: that region
    and its text from the occurrence on."""
    for index in range(region, len(contents)):
        candidate = text if index == region else contents[index]
        found = candidate.find(token)
        if found >= 0:
            return index, candidate[found:]
    return None


def align(contents: Sequence[str], tokens: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Step 4: for each region (in order), the positions of the tokens that belong to it."""
    if not contents:
        raise AlignmentError("no regions")
    assigned: list[list[int]] = [[] for _ in contents]
    last = len(contents) - 1
    region, text, position = 0, contents[0], 0

    def advance() -> bool:
        """Move to the next region; False when there is none."""
        nonlocal region, text
        if region == last:
            return False
        region, text = region + 1, contents[region + 1]
        return True

    while position < len(tokens):
        token = tokens[position]
        text = text.lstrip()
        if not text and not advance():
            raise AlignmentError(f"tokens {list(tokens[position:])} are left after the last region")
        text = text.lower()
        if text.startswith(token):
            assigned[region].append(position)
            text = text[len(token) :]
            position += 1
        elif token == UNK:
            match = None
            for run_end in range(position + 1, len(tokens)):
                match = _next_match(contents, region, text, tokens[run_end])
                if match is not None:
                    break
            if match is None:
                if not text.strip() and not advance():
                    break
                assigned[region].extend(range(position, len(tokens)))
                break
            assigned[region].extend(range(position, run_end))
            position = run_end
            region, text = match
            if not text.strip() and region == last:
                break
        else:
            position += 1
            if not advance():
                if position < len(tokens):
                    raise AlignmentError(f"tokens {list(tokens[position:])} are left after the last region")
                break
            continue
        if not text.strip() and region < last:
            advance()
    return tuple(tuple(positions) for positions in assigned)
