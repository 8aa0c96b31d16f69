"""Scores from a toy bigram language model whose probabilities are powers of 1/2, so every
surprisal is a whole number of bits that the expected values below add up by hand."""

import math
from pathlib import Path

import pytest

from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.circuits import Circuit, read_circuits, sg_scores
from stacklm.evaluation.syntaxgym.formula import parse_formula
from stacklm.evaluation.syntaxgym.score import PredictionResult, region_values, score_suite, token_surprisals
from stacklm.evaluation.syntaxgym.suite import Condition, Item, Region, Suite, read_suite

UNK, EOS = "<unk>", "<eos>"
VOCABULARY = {"the", "cat", "cats", "is", "are", UNK, EOS}
# p(next | previous): surprisals in bits are −log₂ of these.
BIGRAM = {
    (EOS, "the"): 1 / 2,
    ("the", "cat"): 1 / 4,
    ("the", "cats"): 1 / 8,
    ("the", UNK): 1 / 8,
    ("cat", "is"): 1 / 2,
    ("cat", "are"): 1 / 8,
    ("cats", "is"): 1 / 4,
    ("cats", "are"): 1 / 2,
    (UNK, "is"): 1 / 8,
    (UNK, "are"): 1 / 2,
}


class Bigram:
    """ln p(target_k | input_k), recording what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def __call__(self, inputs: tuple[str, ...], targets: tuple[str, ...]) -> list[float]:
        self.calls.append((inputs, targets))
        return [math.log(BIGRAM[previous, token]) for previous, token in zip(inputs, targets, strict=True)]


def condition(name: str, subject: str, verb: str) -> Condition:
    return Condition(name, (Region(1, subject), Region(2, verb)))


def test_each_sentence_starts_after_eos_and_the_final_eos_is_not_scored() -> None:
    model = Bigram()
    assert token_surprisals(("the", "cat", "is"), model) == pytest.approx((1.0, 2.0, 1.0))
    assert model.calls == [((EOS, "the", "cat"), ("the", "cat", "is"))]


def test_a_region_sums_its_tokens_surprisals_an_unknown_word_scored_as_unk() -> None:
    # "The dog is": dog → <unk>; region 1 = −log₂(1/2 · 1/8) = 4 bits, region 2 = −log₂(1/8) = 3.
    values = region_values(condition("c", "The dog", "is"), VOCABULARY, Bigram())
    assert values == pytest.approx({1: 4.0, 2: 3.0})


def toy_suite() -> Suite:
    items = (
        Item(1, (condition("match", "The cat", "is"), condition("mismatch", "The cat", "are"))),
        Item(2, (condition("match", "The cats", "are"), condition("mismatch", "The cats", "is"))),
        Item(3, (condition("match", "The dog", "is"), condition("mismatch", "The dog", "are"))),
    )
    predictions = tuple(
        parse_formula(text) for text in ("(2;%match%) < (2;%mismatch%)", "(1;%match%) = (1;%mismatch%)", "(2;%match%) > (2;%mismatch%)")
    )
    return Suite("toy", "toy.json", predictions, items)


def test_suite_accuracy_counts_every_item_and_prediction_pair() -> None:
    # Region 2 (bits), match vs mismatch: item 1: 1 vs 3; item 2: 1 vs 2; item 3 (<unk>): 3 vs 1.
    # Region 1 is the same in both conditions of an item, so "=" holds everywhere.
    result = score_suite(toy_suite(), VOCABULARY, Bigram())
    holds = [(1, 1, True), (1, 2, True), (1, 3, False), (2, 1, True), (2, 2, True), (2, 3, False), (3, 1, False), (3, 2, True), (3, 3, True)]
    assert result.results == tuple(PredictionResult(*row) for row in holds)
    assert result.accuracy == pytest.approx(6 / 9)  # not 1/3, the share of items passing all three


def test_a_sentence_that_does_not_align_names_the_file_item_and_condition() -> None:
    # "paint a b c": <unk> stops where "a" first occurs, inside "paint"; "a" then matches,
    # "b" matches nothing and is passed over, and "c" is left with no region after the last.
    regions = (Region(1, "paint a b c"),)
    suite = Suite("toy", "toy.json", (parse_formula("(1;%x%) > 0"),), (Item(7, (Condition("x", regions),)),))
    with pytest.raises(StacklmError, match=r"^toy\.json: item 7, condition 'x': tokens \['c'\] are left after the last region"):
        score_suite(suite, {"a", "b", "c"}, lambda inputs, targets: [0.0] * len(targets))


def test_the_sg_score_is_the_mean_over_suites_not_over_circuits() -> None:
    circuits = (Circuit("X", ("a", "b")), Circuit("Y", ("c",)))
    scores = sg_scores({"a": 0.5, "b": 1.0, "c": 0.0}, circuits)
    assert scores.overall == pytest.approx(0.5)  # the mean of the circuits would be 0.375
    assert scores.circuits == (("X", 0.75), ("Y", 0.0))
    with pytest.raises(StacklmError, match=r"missing \['c'\], in no circuit \['d'\]"):
        sg_scores({"a": 0.5, "b": 1.0, "d": 0.0}, circuits)


def test_the_papers_circuits_cover_the_33_suites_once(upstream_dir: Path) -> None:
    circuits = read_circuits(upstream_dir / "sg-test-suites" / "circuits.json")
    suites = sorted(path.stem for path in (upstream_dir / "sg-test-suites" / "syntaxgym-format").glob("*.json"))
    assert [(c.name, len(c.suites)) for c in circuits] == [
        ("Agreement", 3),
        ("Licensing", 10),
        ("Garden-Path Effects", 6),
        ("Gross Syntactic Expectation", 4),
        ("Center Embedding", 2),
        ("Long-Distance Dependencies", 8),
    ]
    assert sorted(s for c in circuits for s in c.suites) == suites


def test_a_suite_scored_with_one_bit_per_token_counts_region_tokens(upstream_dir: Path) -> None:
    # Each token costs 1 bit, so a region's value is its number of tokens. number_orc compares the
    # one-word verb region 7 across conditions: equal, so "<" fails, except where "disguised"
    # (an <unk>) takes the verb "is" into region 6 and leaves region 7 empty (0 bits): the
    # match_sing condition of items 12 and 19 (0 < 1 holds) and their mismatch_plural (1 < 0 fails).
    vocabulary = {word for line in (upstream_dir / "ptb" / "ptb.train.txt").open() for word in line.split()}
    suite = read_suite(upstream_dir / "sg-test-suites" / "syntaxgym-format" / "number_orc.json")
    result = score_suite(suite, vocabulary, lambda inputs, targets: [-math.log(2)] * len(targets))
    assert [(r.item, r.prediction) for r in result.results if r.holds] == [(12, 1), (19, 1)]
    assert result.accuracy == pytest.approx(2 / 38)


def test_a_suite_in_two_circuits_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "circuits.json"
    path.write_text('{"circuits": [{"name": "A", "suites": ["s", "t"]}, {"name": "B", "suites": ["t"]}]}')
    with pytest.raises(StacklmError, match=rf"^{path}: circuit 2 \('B'\): suite 't' is already in circuit 'A'"):
        read_circuits(path)
