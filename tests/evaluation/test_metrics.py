import math
import random
from typing import Sequence

import pytest
import torch

from stacklm.data.vocabulary import Vocabulary
from stacklm.evaluation.cfl import cross_entropy_difference, cross_entropy_difference_by_length
from stacklm.evaluation.metrics import PartialAccuracy, TaskEvaluator, curve_subset, log_ratio
from stacklm.evaluation.settings import EvaluationSettings
from stacklm.evaluation.probabilities import score_outputs, second_token_log_probabilities
from stacklm.evaluation.sampling import sample_outputs
from stacklm.models.registry import ARCHITECTURES
from stacklm.tasks.example import Example
from tests.models.conftest import TOY_VOCABULARY_SIZE, tiny_model
from tests.training.toy_language_model import ToyLanguageModel

VOCABULARY = Vocabulary.from_tokens(["a", "b", "c", "d", "m"])
EOS = VOCABULARY.eos_index


def toy_model(seed: int = 0) -> ToyLanguageModel:
    model = ToyLanguageModel(len(VOCABULARY), hidden_size=8)
    model.initialize(torch.Generator().manual_seed(seed))
    return model


def random_pairs(count: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    generator = random.Random(seed)
    prompts = [[generator.randrange(EOS) for _ in range(generator.randint(1, 7))] for _ in range(count)]
    outputs = [[generator.randrange(EOS) for _ in range(generator.randint(0, 5))] for _ in range(count)]
    return prompts, outputs


def one_at_a_time(model: ToyLanguageModel, prompt: list[int], output: list[int], with_eos: bool = True) -> tuple[float, float]:
    """p(y·EOS | x) and p(x·y·EOS) (without EOS: p(y… | x), p(x·y…)), one next-token probability at a time."""
    state = model.initial_state(1)
    conditional = joint = 1.0
    for position, token in enumerate(prompt + output + ([EOS] if with_eos else [])):
        probability = float(torch.softmax(state.output().double(), dim=-1)[0, token])
        joint *= probability
        if position >= len(prompt):
            conditional *= probability
        state = state.next(torch.tensor([token]))
    return conditional, joint


def test_batched_full_accuracy_equals_per_token_products_one_string_at_a_time() -> None:
    model = toy_model()
    model.eval()
    prompts, outputs = random_pairs(40, 1)
    scores = score_outputs(model, prompts, outputs, eos_index=EOS, tokens_per_batch=30)  # many padded batches
    with torch.no_grad():
        expected = [one_at_a_time(model, prompt, output) for prompt, output in zip(prompts, outputs)]
    torch.testing.assert_close(scores.output.exp(), torch.tensor([value[0] for value in expected], dtype=torch.float64), rtol=1e-5, atol=0)
    torch.testing.assert_close(scores.string.exp(), torch.tensor([value[1] for value in expected], dtype=torch.float64), rtol=1e-5, atol=0)
    assert scores.output_tokens.tolist() == [len(output) + 1 for output in outputs]


def test_exact_second_word_probability_sums_over_the_first_word_step_by_step() -> None:
    model = toy_model(2)
    model.eval()
    prompts, _ = random_pairs(12, 4)
    seconds = [index % EOS for index in range(12)]
    exact = second_token_log_probabilities(model, prompts, seconds, eos_index=EOS, tokens_per_batch=16).exp()
    with torch.no_grad():
        expected = [sum(one_at_a_time(model, prompt, [first, second], with_eos=False)[0] for first in range(EOS))
                    for prompt, second in zip(prompts, seconds)]
    torch.testing.assert_close(exact, torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=0)
    assert second_token_log_probabilities(model, [[0, 4]], [None], eos_index=EOS, tokens_per_batch=16).item() == -math.inf


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_second_token_probabilities_from_copied_states_equal_whole_sequence_forward_passes(name: str) -> None:
    """Every architecture's state, copied after the prompt and advanced by each first token a,
    gives the p(a | x) · p(r_2 | x a) of the whole sequences x·a run through the model."""
    model = tiny_model(name, seed=3).double().eval()
    eos = TOY_VOCABULARY_SIZE - 1
    prompts = [[0, 1, 2], [3, 3, 4], [5, 0], [2, 4, 1, 3]]
    seconds = [1, 4, 0, 5]
    exact = second_token_log_probabilities(model, prompts, seconds, eos_index=eos, tokens_per_batch=8)
    with torch.no_grad():
        expected = []
        for prompt, second in zip(prompts, seconds):
            inputs = torch.tensor([prompt + [first] for first in range(eos)])  # (V − 1, n + 1)
            log_probabilities = torch.log_softmax(model(inputs).double(), dim=-1)
            terms = log_probabilities[:, len(prompt), :eos].diagonal() + log_probabilities[:, len(prompt) + 1, second]
            expected.append(torch.logsumexp(terms, dim=0))
    torch.testing.assert_close(exact, torch.stack(expected), rtol=1e-9, atol=1e-9)


def test_exact_second_word_accuracy_lies_in_the_confidence_interval_of_10000_samples() -> None:
    model = toy_model(3)
    prompts = [[0, 1, 4], [2, 2, 4], [3, 0, 1, 4], [1, 4]]
    references = [[0, 2, 1], [1, 3], [2, 0, 0], [3, 1]]
    exact = second_token_log_probabilities(model, prompts, [reference[1] for reference in references], eos_index=EOS, tokens_per_batch=64).exp()
    samples = sample_outputs(model, prompts, num_samples=2500, max_length=3, seed=5, eos_index=EOS, tokens_per_batch=4096)
    assert [len(drawn) for drawn in samples] == [2500] * 4
    hits = [sum(len(output) > 1 and output[1] == reference[1] for output in drawn) / 2500 for drawn, reference in zip(samples, references)]
    estimate = sum(hits) / 4
    standard_error = math.sqrt(float((exact * (1 - exact)).sum()) / 2500) / 4
    assert abs(estimate - float(exact.mean())) < 4.5 * standard_error  # two-sided p ≈ 7e-6
    # the interval is narrow enough to tell the second word from the first
    first = [sum(len(output) > 0 and output[0] == reference[1] for output in drawn) / 2500 for drawn, reference in zip(samples, references)]
    assert abs(sum(first) / 4 - float(exact.mean())) > 4.5 * standard_error


def test_sampling_is_seeded_and_stops_at_eos() -> None:
    model = toy_model(4)
    prompts = [[0, 4], [1, 2, 4], [3, 4]]
    first = sample_outputs(model, prompts, num_samples=10, max_length=50, seed=123, eos_index=EOS, tokens_per_batch=256)
    assert first == sample_outputs(model, prompts, num_samples=10, max_length=50, seed=123, eos_index=EOS, tokens_per_batch=256)
    assert first != sample_outputs(model, prompts, num_samples=10, max_length=50, seed=124, eos_index=EOS, tokens_per_batch=256)
    assert all(EOS not in output and len(output) <= 50 for outputs in first for output in outputs)


def test_samples_cut_at_their_prompts_lengths_are_the_whole_samples_cut() -> None:
    """Stopping a batch once every row has its tokens changes no draw: prompts 0, 2 and 3 share a
    batch (one length) and need 1, 50 and 60 (more than max_length) tokens."""
    model = toy_model(4)
    prompts = [[0, 4], [1, 2, 4], [3, 4], [2, 4]]
    lengths = [1, 3, 50, 60]
    whole = sample_outputs(model, prompts, num_samples=10, max_length=50, seed=123, eos_index=EOS, tokens_per_batch=256)
    cut = sample_outputs(model, prompts, num_samples=10, max_length=50, seed=123, eos_index=EOS, tokens_per_batch=256, lengths=lengths)
    assert cut == [[output[:length] for output in outputs] for outputs, length in zip(whole, lengths)]
    assert any(len(output) == 3 for output in cut[1]) and any(len(output) > 3 for output in whole[1])


def test_the_sampled_partial_accuracies_of_cut_samples_are_those_of_whole_samples() -> None:
    """A match that needs the output's length (tense reinflection's) is decided after |r| + 1 tokens."""

    def match(output: Sequence[str], reference: Sequence[str]) -> bool:
        return len(output) == len(reference) and output[-1:] == reference[-1:]

    model = toy_model(6)
    settings = EvaluationSettings(tokens_per_batch=128, samples_per_input=10, max_sample_length=30)
    rows = [
        TaskEvaluator(model, VOCABULARY, PartialAccuracy("pos_main_word", match, decided_by), settings).evaluate(
            examples(10, 1, False), examples(12, 2, False), examples(15, 3, True)
        )
        for decided_by in (lambda reference: len(reference) + 1, lambda reference: 30)
    ]
    assert rows[0] == rows[1]
    sampled = [row.value for row in rows[0] if row.metric == "partial_accuracy_sampled"]
    assert len(sampled) == 3 and all(0 < value < 1 for value in sampled)


def examples(count: int, seed: int, with_linear: bool) -> list[Example]:
    generator = random.Random(seed)
    words = ["a", "b", "c", "d"]
    result = []
    for _ in range(count):
        sentence = tuple(generator.choice(words) for _ in range(generator.randint(1, 4)))
        result.append(Example(sentence + ("m",), tuple(reversed(sentence)), sentence if with_linear else None))
    return result


@pytest.mark.parametrize("kind", ["first_word", "second_word", "pos_main_word"])
def test_task_evaluation_rows_and_log_ratios(kind: str) -> None:
    model = toy_model(5)
    partial = PartialAccuracy(kind, lambda output, reference: len(output) > 1 and len(reference) > 1 and output[1] == reference[1], lambda reference: 2)
    settings = EvaluationSettings(tokens_per_batch=128, samples_per_input=10)
    evaluator = TaskEvaluator(model, VOCABULARY, partial, settings)
    rows = evaluator.evaluate(examples(10, 1, False), examples(12, 2, False), examples(15, 3, True))
    table = {(row.split, row.rule, row.metric): row.value for row in rows}
    assert len(table) == len(rows)
    exact = kind != "pos_main_word"
    sampled = kind != "first_word"
    for split, rule in [("test", None), ("generalization", "hierarchical"), ("generalization", "linear")]:
        for metric in ["cross_entropy", "conditional_cross_entropy", "full_accuracy"]:
            assert (split, rule, metric) in table
        assert ((split, rule, "partial_accuracy") in table) == exact
        assert ((split, rule, "partial_accuracy_sampled") in table) == sampled
    assert ("validation", None, "cross_entropy") in table
    hierarchical = table[("generalization", "hierarchical", "full_accuracy")]
    linear = table[("generalization", "linear", "full_accuracy")]
    assert table[("generalization", None, "log_ratio")] == pytest.approx(math.log(hierarchical / linear))
    partial_name = "partial_accuracy" if exact else "partial_accuracy_sampled"
    expected_partial = log_ratio(table[("generalization", "hierarchical", partial_name)], table[("generalization", "linear", partial_name)])
    assert table[("generalization", None, "partial_log_ratio")] == pytest.approx(expected_partial)
    assert (("generalization", None, "partial_log_ratio_sampled") in table) == (kind == "second_word")
    generalization = examples(15, 3, True)
    sources = [VOCABULARY.encode(example.source) for example in generalization]
    with torch.no_grad():
        differences = [
            math.log(one_at_a_time(model, source, VOCABULARY.encode(example.target))[0]) - math.log(one_at_a_time(model, source, VOCABULARY.encode(example.linear))[0])
            for source, example in zip(sources, generalization)
        ]
    assert table[("generalization", None, "mean_log_ratio")] == pytest.approx(sum(differences) / len(differences), rel=1e-5)


def test_log_ratio_of_zero_accuracies() -> None:
    assert log_ratio(0.5, 0.25) == pytest.approx(math.log(2))
    assert log_ratio(0.0, 0.5) == -math.inf and log_ratio(0.5, 0.0) == math.inf and math.isnan(log_ratio(0.0, 0.0))


def test_cfl_difference_is_zero_for_the_true_distribution_and_the_excess_otherwise() -> None:
    lengths = [41, 41, 61, 99]
    true = torch.tensor([-(length // 2) * math.log(2) for length in lengths], dtype=torch.float64)  # marked reversal given |w|
    assert cross_entropy_difference(true, true, lengths) == 0.0
    model = true - 0.5  # half a nat worse on every string
    assert cross_entropy_difference(model, true, lengths) == pytest.approx(0.5 * 4 / sum(length + 1 for length in lengths))
    by_length = cross_entropy_difference_by_length(model, true, lengths)
    assert by_length == pytest.approx({41: 0.5 / 42, 61: 0.5 / 62, 99: 0.5 / 100})
    # the per-length true cross-entropy of marked reversal at ℓ = 41 (docs/design/cfl-and-ptb.md#true-cross-entropy)
    assert -float(true[0]) / 42 == pytest.approx(0.330070, abs=1e-6)


def test_cfl_difference_of_a_model_on_a_cfl_data_set() -> None:
    from stacklm.cfl.datasets import CflDataset, length_bin_cross_entropy, true_cross_entropy
    from stacklm.evaluation.cfl import score_cfl_dataset
    from stacklm.training.batching import make_batch
    from stacklm.training.strings import validation_cross_entropy

    generator = random.Random(0)
    strings = []
    for length in (5, 5, 7, 9, 9, 9):  # marked reversal over {0, 1}, # = 2: w = u # reverse(u)
        half = [generator.randrange(2) for _ in range(length // 2)]
        strings.append(half + [2] + half[::-1])
    given_length = [-(len(string) // 2) * math.log(2) for string in strings]
    dataset = CflDataset(strings, [value - math.log(3) for value in given_length], given_length)
    model = ToyLanguageModel(4, hidden_size=8)
    model.initialize(torch.Generator().manual_seed(0))
    scores = score_cfl_dataset(model, dataset, eos_index=3, tokens_per_batch=20)
    model_cross_entropy = validation_cross_entropy(model, [make_batch(strings, range(6), eos_index=3)])
    assert scores.overall == pytest.approx(model_cross_entropy - true_cross_entropy(dataset), rel=1e-5)
    assert set(scores.by_length) == {5, 7, 9}
    nine = [string for string in strings if len(string) == 9]
    model_nine = validation_cross_entropy(model, [make_batch(nine, range(3), eos_index=3)])
    assert scores.by_length[9] == pytest.approx(model_nine - length_bin_cross_entropy(dataset)[9], rel=1e-5)


@pytest.mark.parametrize("kind", ["first_word", "pos_main_word"])
def test_checkpoint_scores_are_the_full_and_partial_accuracies_one_string_at_a_time(kind: str) -> None:
    model = toy_model(5)
    second = lambda output, reference: len(output) > 1 and len(reference) > 1 and output[1] == reference[1]  # noqa: E731
    partial = PartialAccuracy(kind, second, lambda reference: 2)
    evaluator = TaskEvaluator(model, VOCABULARY, partial, EvaluationSettings(tokens_per_batch=128, samples_per_input=10))
    test, generalization = examples(12, 2, False), examples(15, 3, True)
    scores = evaluator.checkpoint_scores(test, generalization)
    assert set(scores) == {f"{name}_{measure}_accuracy" for name in ("test", "hierarchical", "linear") for measure in ("full", "partial")}
    for name, data, targets in (
        ("test", test, [example.target for example in test]),
        ("hierarchical", generalization, [example.target for example in generalization]),
        ("linear", generalization, [example.linear for example in generalization]),
    ):
        with torch.no_grad():
            full = [one_at_a_time(model, VOCABULARY.encode(example.source), VOCABULARY.encode(target))[0] for example, target in zip(data, targets)]
            first = [one_at_a_time(model, VOCABULARY.encode(example.source), VOCABULARY.encode(target[:1]), with_eos=False)[0] for example, target in zip(data, targets)]
        assert scores[f"{name}_full_accuracy"] == pytest.approx(sum(full) / len(full), rel=1e-5)
        if kind == "first_word":
            assert scores[f"{name}_partial_accuracy"] == pytest.approx(sum(first) / len(first), rel=1e-5)
    # the sampled partial accuracy is the evaluation's own (same seed, same samples)
    rows = {(row.split, row.rule, row.metric): row.value for row in evaluator.evaluate(examples(10, 1, False), test, generalization)}
    expected = "partial_accuracy" if kind == "first_word" else "partial_accuracy_sampled"
    assert scores["hierarchical_partial_accuracy"] == rows[("generalization", "hierarchical", expected)]
    assert scores["linear_partial_accuracy"] == rows[("generalization", "linear", expected)]
    assert scores["test_partial_accuracy"] == rows[("test", None, expected)]


def test_checkpoint_scores_draw_no_sample_where_the_partial_accuracy_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Passivization's second word: the curves take the exact expectation, so no sample is drawn
    for them; the evaluation still draws its samples, and the curves' values are the evaluation's."""
    second = lambda output, reference: len(output) > 1 and len(reference) > 1 and output[1] == reference[1]  # noqa: E731
    evaluator = TaskEvaluator(toy_model(5), VOCABULARY, PartialAccuracy("second_word", second, lambda reference: 2),
                              EvaluationSettings(tokens_per_batch=128, samples_per_input=10))
    test, generalization = examples(12, 2, False), examples(15, 3, True)
    rows = {(row.split, row.rule, row.metric): row.value for row in evaluator.evaluate(examples(10, 1, False), test, generalization)}
    assert ("generalization", "hierarchical", "partial_accuracy_sampled") in rows

    def no_samples(*arguments: object) -> None:
        raise AssertionError("a checkpoint drew samples")

    monkeypatch.setattr(evaluator, "samples", no_samples)
    scores = evaluator.checkpoint_scores(test, generalization)
    assert scores["hierarchical_partial_accuracy"] == rows[("generalization", "hierarchical", "partial_accuracy")]
    assert scores["linear_partial_accuracy"] == rows[("generalization", "linear", "partial_accuracy")]
    assert scores["test_partial_accuracy"] == rows[("test", None, "partial_accuracy")]
    assert scores["test_full_accuracy"] == rows[("test", None, "full_accuracy")]


def test_the_curve_subset_is_fixed_and_in_file_order() -> None:
    data = examples(50, 4, True)
    subset = curve_subset(data, 10)
    assert subset == curve_subset(list(data), 10) and len(subset) == 10
    positions = [next(index for index, candidate in enumerate(data) if candidate is example) for example in subset]
    assert positions == sorted(positions) and positions != list(range(10))
    assert curve_subset(data, 50) == data and curve_subset(data, 80) == data


def labelled(count: int, seed: int) -> tuple[list[Example], list[str]]:
    """Generalization examples with a construction each: "short" for sentences of one or two words, else "long"."""
    data = examples(count, seed, True)
    return data, ["short" if len(example.source) <= 3 else "long" for example in data]


@pytest.mark.parametrize("kind", ["first_word", "second_word", "pos_main_word"])
def test_the_whole_sets_metrics_are_todays_formulas_bit_for_bit(kind: str) -> None:
    """The rows of ``evaluate`` equal, float for float, the averages it has always taken of the
    per-example scores: mean p(y·EOS | x), mean exact partial, the sampled share, the cross-entropies."""
    model = toy_model(5)
    second = lambda output, reference: len(output) > 1 and len(reference) > 1 and output[1] == reference[1]  # noqa: E731
    evaluator = TaskEvaluator(model, VOCABULARY, PartialAccuracy(kind, second, lambda reference: 2), EvaluationSettings(tokens_per_batch=128, samples_per_input=10))
    test, generalization = examples(12, 2, False), examples(25, 3, True)
    rows = {(row.split, row.rule, row.metric): row.value for row in evaluator.evaluate(examples(10, 1, False), test, generalization)}
    both = [[example.target, example.linear] for example in generalization]
    samples = {"test": evaluator.samples(test, [[example.target] for example in test]), "generalization": evaluator.samples(generalization, both)}
    for split, rule, data, references in (
        ("test", None, test, [example.target for example in test]),
        ("generalization", "hierarchical", generalization, [example.target for example in generalization]),
        ("generalization", "linear", generalization, [example.linear for example in generalization]),
    ):
        prompts = [VOCABULARY.encode(example.source) for example in data]
        scores = score_outputs(model, prompts, [VOCABULARY.encode(reference) for reference in references], eos_index=EOS, tokens_per_batch=128)
        assert rows[(split, rule, "cross_entropy")] == float(-scores.string.sum() / scores.string_tokens.sum())
        assert rows[(split, rule, "conditional_cross_entropy")] == float(-scores.output.sum() / scores.output_tokens.sum())
        assert rows[(split, rule, "full_accuracy")] == float(scores.output.exp().mean())
        if kind == "first_word":
            assert rows[(split, rule, "partial_accuracy")] == float(scores.first_token.exp().mean())
        if kind == "second_word":
            seconds = [VOCABULARY.encode(reference[1:2])[0] if len(reference) > 1 else None for reference in references]
            partial = second_token_log_probabilities(model, prompts, seconds, eos_index=EOS, tokens_per_batch=128)
            assert rows[(split, rule, "partial_accuracy")] == float(partial.exp().mean())
        if kind != "first_word":
            matches = [second(output, reference) for outputs, reference in zip(samples[split], references) for output in outputs]
            assert rows[(split, rule, "partial_accuracy_sampled")] == sum(matches) / len(matches)


def test_construction_metrics_are_each_constructions_averages_one_string_at_a_time() -> None:
    model = toy_model(5)
    evaluator = TaskEvaluator(model, VOCABULARY, PartialAccuracy("first_word", lambda output, reference: output[:1] == reference[:1], lambda reference: 1),
                              EvaluationSettings(tokens_per_batch=128))
    generalization, constructions = labelled(30, 3)
    results = evaluator.construction_scores(generalization, constructions)
    assert [result.construction for result in results] == list(dict.fromkeys(constructions)) and len(results) == 2
    for result in results:
        members = [example for example, construction in zip(generalization, constructions) if construction == result.construction]
        assert result.count == len(members) > 0
        values = {(row.split, row.rule, row.metric): row.value for row in result.rows}
        for rule in ("hierarchical", "linear"):
            targets = [example.target if rule == "hierarchical" else example.linear for example in members]
            with torch.no_grad():
                full = [one_at_a_time(model, VOCABULARY.encode(example.source), VOCABULARY.encode(target))[0] for example, target in zip(members, targets)]
                first = [one_at_a_time(model, VOCABULARY.encode(example.source), VOCABULARY.encode(target[:1]), with_eos=False)[0] for example, target in zip(members, targets)]
            assert values[("generalization", rule, "full_accuracy")] == pytest.approx(sum(full) / len(full), rel=1e-5)
            assert values[("generalization", rule, "partial_accuracy")] == pytest.approx(sum(first) / len(first), rel=1e-5)
    with pytest.raises(ValueError, match="29 construction labels for 30 generalization examples"):
        evaluator.construction_scores(generalization, constructions[1:])


@pytest.mark.parametrize("kind", ["first_word", "second_word", "pos_main_word"])
def test_the_whole_sets_accuracies_are_the_count_weighted_means_of_the_constructions(kind: str) -> None:
    second = lambda output, reference: len(output) > 1 and len(reference) > 1 and output[1] == reference[1]  # noqa: E731
    evaluator = TaskEvaluator(toy_model(5), VOCABULARY, PartialAccuracy(kind, second, lambda reference: 2), EvaluationSettings(tokens_per_batch=128, samples_per_input=10))
    generalization, constructions = labelled(40, 7)
    whole = {(row.rule, row.metric): row.value for row in evaluator.evaluate(examples(10, 1, False), examples(12, 2, False), generalization)}
    results = evaluator.construction_scores(generalization, constructions)
    assert sum(result.count for result in results) == len(generalization) and len(results) == 2
    partial = "partial_accuracy" if kind != "pos_main_word" else "partial_accuracy_sampled"
    for rule in ("hierarchical", "linear"):
        for metric in ("full_accuracy", partial):
            weighted = sum(result.count * next(row.value for row in result.rows if (row.rule, row.metric) == (rule, metric)) for result in results)
            assert weighted / len(generalization) == pytest.approx(whole[(rule, metric)], rel=1e-12, abs=1e-15)
