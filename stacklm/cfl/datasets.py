"""The CFL data sets of DuSell & Chiang (2022) App. 8 and their true cross-entropy
(``docs/design/cfl-and-ptb.md#cfl-data-sets``, ``docs/design/cfl-and-ptb.md#true-cross-entropy``).

Splits, with the valid lengths L = {ℓ ∈ [low, high] : β(S, ℓ) > 0}:

- train: 1,000 batches of 10; each batch draws ℓ uniformly from L over [40, 80], then 10
  strings from p_G(w | |w| = ℓ);
- validation: 100 batches of 10, drawn the same way from the same generator right after the
  training batches (so a seed fixes both);
- test: 100 strings for each ℓ ∈ L over [40, 100], in increasing ℓ (the paper uses seed 0).

The true distribution is uniform over L, then the PCFG conditioned on the length:

    ln p_true(w) = −ln |L| + ln p_G(w) − ln β(S, |w|),

with p_G(w) summed over all parses by the inside algorithm. Each string is stored with
ln p_true(w) and with the per-length-bin value ln p_G(w | |w|) = ln p_G(w) − ln β(S, |w|)
(no length term). EOS costs nothing under p_true, since |w| fixes its position, so

    H(S, p_true) = −Σ_{w∈S} ln p_true(w) / Σ_{w∈S} (|w| + 1)   nats per symbol.

Strings keep their sampling order, so in train and validation the strings 10b … 10b+9
(0-based) form batch b, of one length. A seed fixes the data for this code: the sampler
draws once per rule choice and once per binary split of the compiled grammar
(:mod:`stacklm.cfl.inside`), so a change to the compilation changes which strings a seed
gives, though never their distribution.

File format (UTF-8 TSV, one header line, then one string per line, in sampling order):
``tokens<TAB>true_logprob<TAB>length_bin_logprob`` with space-separated integer tokens and
floats written with full round-trip precision.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from stacklm.atomic import write_text_atomically
from stacklm.cfl.inside import string_weights
from stacklm.cfl.languages import CflLanguage
from stacklm.cfl.sampling import LengthSampler
from stacklm.cfl.splits import BATCH_SIZE, SPLIT_LENGTHS, TEST_STRINGS_PER_LENGTH, TRAIN_BATCHES, VALIDATION_BATCHES
from stacklm.errors import StacklmError, located
from stacklm.semiring import LOG

HEADER = "tokens\ttrue_logprob\tlength_bin_logprob"


@dataclass(frozen=True)
class CflDataset:
    """Strings of one split, each with ln p_true(w) and ln p_G(w | |w|)."""

    strings: list[list[int]]
    true_logprob: list[float]
    length_bin_logprob: list[float]

    def __post_init__(self) -> None:
        if not len(self.strings) == len(self.true_logprob) == len(self.length_bin_logprob):
            raise StacklmError(
                f"a data set needs one log-probability of each kind per string: {len(self.strings)} strings, "
                f"{len(self.true_logprob)} true, {len(self.length_bin_logprob)} length-bin log-probabilities"
            )


def check_split(split: str) -> str:
    if split not in SPLIT_LENGTHS:
        raise StacklmError(f"unknown split {split!r}; expected one of {', '.join(SPLIT_LENGTHS)}")
    return split


def sample_strings(sampler: LengthSampler, split: str, seed: int) -> list[list[int]]:
    """The strings of ``split`` in sampling order, with ``random.Random(seed)``."""
    check_split(split)
    generator = random.Random(seed)
    lengths = sampler.valid_lengths(*SPLIT_LENGTHS[split])
    if split == "test":
        return [sampler.sample(length, generator) for length in lengths for _ in range(TEST_STRINGS_PER_LENGTH)]
    batches: list[list[list[int]]] = []
    for _ in range(TRAIN_BATCHES + (VALIDATION_BATCHES if split == "validation" else 0)):
        length = generator.choice(lengths)
        batches.append([sampler.sample(length, generator) for _ in range(BATCH_SIZE)])
    first = TRAIN_BATCHES if split == "validation" else 0
    return [string for batch in batches[first:] for string in batch]


def score_strings(sampler: LengthSampler, strings: list[list[int]], num_valid_lengths: int) -> CflDataset:
    """Attach ln p_true(w) = −ln |L| + ln p_G(w) − ln β(S, |w|) and ln p_G(w | |w|) to each string.

    Strings of one length are scored together by the inside algorithm (LOG semiring).
    """
    by_length: dict[int, list[int]] = defaultdict(list)
    for position, string in enumerate(strings):
        by_length[len(string)].append(position)
    length_bin = [0.0] * len(strings)
    for length, positions in by_length.items():
        log_total = sampler.log_total(length)
        log_probabilities = string_weights(sampler.circuit, [strings[p] for p in positions], LOG).tolist()
        for position, log_probability in zip(positions, log_probabilities):
            if log_probability == -math.inf:
                raise StacklmError(f"string {strings[position]} is not in the language")
            length_bin[position] = log_probability - log_total
    length_term = math.log(num_valid_lengths)
    return CflDataset(strings, [value - length_term for value in length_bin], length_bin)


def generate_split(language: CflLanguage, split: str, seed: int, strings_per_length: int | None = None) -> CflDataset:
    """Sample and score one split of ``language``; the same seed gives the same data.

    ``strings_per_length`` keeps, of the test split, only the first so many strings of each
    length — the same strings and log-probabilities as in the whole split — and scores only
    those (scoring the hardest CFL's 6,100 test strings takes a CPU-minute).
    """
    low, high = SPLIT_LENGTHS[check_split(split)]
    if strings_per_length is not None and (split != "test" or not 1 <= strings_per_length <= TEST_STRINGS_PER_LENGTH):
        raise StacklmError(
            f"strings per length: only the test split has them, from 1 to {TEST_STRINGS_PER_LENGTH}; "
            f"got {strings_per_length} for the {split} split"
        )
    sampler = LengthSampler.build(language.grammar, high)
    strings = sample_strings(sampler, split, seed)
    if strings_per_length is not None:
        strings = [strings[position] for position in first_positions_per_length(strings, strings_per_length)]
    return score_strings(sampler, strings, len(sampler.valid_lengths(low, high)))


def first_positions_per_length(strings: list[list[int]], strings_per_length: int) -> list[int]:
    """Positions of the first ``strings_per_length`` strings of each length, in order."""
    kept: dict[int, int] = defaultdict(int)
    positions = []
    for position, string in enumerate(strings):
        if kept[len(string)] < strings_per_length:
            kept[len(string)] += 1
            positions.append(position)
    return positions


def true_cross_entropy(dataset: CflDataset) -> float:
    """H(S, p_true) = −Σ ln p_true(w) / Σ (|w| + 1), in nats per symbol (the +1 is EOS)."""
    return _cross_entropy(dataset.strings, dataset.true_logprob)


def length_bin_cross_entropy(dataset: CflDataset) -> dict[int, float]:
    """Per length ℓ: H(S_ℓ, p_G(· | ℓ)) over the strings of length ℓ (no length term), sorted by ℓ."""
    by_length: dict[int, list[int]] = defaultdict(list)
    for position, string in enumerate(dataset.strings):
        by_length[len(string)].append(position)
    return {
        length: _cross_entropy([dataset.strings[p] for p in positions], [dataset.length_bin_logprob[p] for p in positions])
        for length, positions in sorted(by_length.items())
    }


def _cross_entropy(strings: list[list[int]], log_probabilities: list[float]) -> float:
    if not strings:
        raise StacklmError("the cross-entropy of an empty set of strings is undefined")
    return -math.fsum(log_probabilities) / sum(len(string) + 1 for string in strings)


def write_split(dataset: CflDataset, path: str | Path) -> None:
    """Write ``dataset`` as TSV atomically (``stacklm.atomic``)."""
    lines = [HEADER] + [
        f"{' '.join(map(str, string))}\t{true_logprob!r}\t{length_bin_logprob!r}"
        for string, true_logprob, length_bin_logprob in zip(dataset.strings, dataset.true_logprob, dataset.length_bin_logprob)
    ]
    write_text_atomically(path, "\n".join(lines) + "\n")


def read_split(path: str | Path) -> CflDataset:
    """Read a file written by :func:`write_split`; errors name the file and line."""
    strings: list[list[int]] = []
    true_logprob: list[float] = []
    length_bin_logprob: list[float] = []
    with open(path, encoding="utf-8", newline="\n") as file:
        header = file.readline().rstrip("\n")
        if header != HEADER:
            raise located(path, 1, f"expected the header {HEADER!r}, found {header!r}")
        for number, line in enumerate(file, start=2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                raise located(path, number, f"expected 3 tab-separated fields (tokens, true_logprob, length_bin_logprob), found {len(fields)}")
            try:
                string = [int(token) for token in fields[0].split(" ")] if fields[0] else []
            except ValueError:
                raise located(path, number, f"tokens must be space-separated integers, found {fields[0]!r}") from None
            if any(token < 0 for token in string):
                raise located(path, number, f"tokens must be nonnegative, found {fields[0]!r}")
            values = []
            for name, text in zip(("true_logprob", "length_bin_logprob"), fields[1:]):
                try:
                    value = float(text)
                except ValueError:
                    raise located(path, number, f"{name} must be a number, found {text!r}") from None
                if not value <= 0.0:
                    raise located(path, number, f"{name} must be a log-probability (≤ 0), found {text!r}")
                values.append(value)
            strings.append(string)
            true_logprob.append(values[0])
            length_bin_logprob.append(values[1])
    return CflDataset(strings, true_logprob, length_bin_logprob)
