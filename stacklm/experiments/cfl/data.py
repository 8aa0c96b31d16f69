"""The data of the CFL experiments (DuSell & Chiang (2022) App. 8): the fixed test set of each
language (``stacklm cfl generate``, seed 0), each run's own training and validation sets
(re-sampled per run) and the part of the test set a run is scored on."""

from __future__ import annotations

import argparse
import random

from stacklm.cfl.datasets import CflDataset, first_positions_per_length, generate_split, score_strings, write_split
from stacklm.cfl.languages import LANGUAGES, CflLanguage
from stacklm.cfl.sampling import LengthSampler
from stacklm.cfl.splits import BATCH_SIZE, SPLIT_LENGTHS
from stacklm.errors import StacklmError


def generate_command(args: argparse.Namespace) -> int:
    """``stacklm cfl generate``: one split of a language, each string with its true log-probabilities."""
    import torch  # here: the runs' data below need none

    if args.threads < 1:
        raise StacklmError(f"--threads must be at least 1, not {args.threads}")
    torch.set_num_threads(args.threads)
    write_split(generate_split(LANGUAGES[args.language], args.split, args.seed, args.strings_per_length), args.out)
    return 0


def sample_run_data(language: CflLanguage, seed: int, train_batches: int, validation_batches: int) -> tuple[list[list[int]], CflDataset]:
    """A run's training strings and its scored validation set (``docs/design/cfl-and-ptb.md#cfl-data-sets``).

    The procedure of :func:`stacklm.cfl.datasets.sample_strings` with the given numbers of
    batches: one generator ``random.Random(seed)``; each batch draws a valid length in
    [40, 80] uniformly, then 10 strings of it; the validation batches follow the training
    ones. Only the validation strings are scored (the training strings need no p_true).
    """
    low, high = SPLIT_LENGTHS["train"]
    sampler = LengthSampler.build(language.grammar, high)
    lengths = sampler.valid_lengths(low, high)
    generator = random.Random(seed)
    batches: list[list[list[int]]] = []
    for _ in range(train_batches + validation_batches):
        length = generator.choice(lengths)
        batches.append([sampler.sample(length, generator) for _ in range(BATCH_SIZE)])
    training = [string for batch in batches[:train_batches] for string in batch]
    validation = [string for batch in batches[train_batches:] for string in batch]
    return training, score_strings(sampler, validation, len(lengths))


def first_strings_per_length(dataset: CflDataset, strings_per_length: int) -> CflDataset:
    """The first ``strings_per_length`` strings of each length, in data order."""
    positions = first_positions_per_length(dataset.strings, strings_per_length)
    return CflDataset(
        [dataset.strings[p] for p in positions],
        [dataset.true_logprob[p] for p in positions],
        [dataset.length_bin_logprob[p] for p in positions],
    )
