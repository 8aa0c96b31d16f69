"""The CFL schedule (DuSell & Chiang (2022) App. 8) through the same loop, scored by the CFL metric Δ."""

import io
from dataclasses import replace

import torch

from stacklm.cfl.datasets import CflDataset, generate_split
from stacklm.cfl.languages import marked_reversal
from stacklm.evaluation.cfl import score_cfl_dataset
from stacklm.models.registry import build_model
from stacklm.training.config import cfl_train_config
from stacklm.training.loop import train
from stacklm.training.progress import Progress
from stacklm.training.strings import StringData


def part(dataset: CflDataset, start: int, stop: int) -> CflDataset:
    return CflDataset(dataset.strings[start:stop], dataset.true_logprob[start:stop], dataset.length_bin_logprob[start:stop])


def test_an_lstm_trained_on_marked_reversal_with_the_cfl_schedule_moves_towards_the_true_distribution() -> None:
    language = marked_reversal()
    data = generate_split(language, "validation", seed=0)  # 100 batches of 10 strings of one length each, lengths 41 … 79
    training, validation = part(data, 0, 300), part(data, 300, 400)
    config = replace(cfl_train_config(0.01), max_epochs=3)
    model = build_model("cfl/LSTM", language.vocabulary_size, generator=torch.Generator().manual_seed(0))
    before = score_cfl_dataset(model, validation, eos_index=language.eos, tokens_per_batch=2048)
    torch.manual_seed(0)
    result = train(model, StringData(training.strings, validation.strings, config, seed=0, eos_index=language.eos), config, progress=Progress(io.StringIO()))
    after = score_cfl_dataset(model, validation, eos_index=language.eos, tokens_per_batch=2048)
    assert [record.epoch for record in result.curve] == [1, 2, 3] and result.steps == 3 * 30  # 30 same-length batches per epoch
    assert 0 < after.overall < before.overall  # Δ ≥ 0 up to sampling, and training lowers it
    assert set(after.by_length) == {len(string) for string in validation.strings}
    assert all(length % 2 == 1 and 40 <= length <= 80 for length in after.by_length)
