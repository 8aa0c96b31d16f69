"""Sentences, PTB tokens and the token-to-region walk, each case traced by hand from docs/design/cfl-and-ptb.md#sg-score."""

from pathlib import Path

import pytest

from stacklm.evaluation.syntaxgym.alignment import AlignmentError, align, sentence, tokenize
from stacklm.evaluation.syntaxgym.suite import Condition, Region, read_suite

UNK = "<unk>"


def test_the_sentence_joins_the_non_empty_regions() -> None:
    condition = Condition("c", (Region(1, "The"), Region(2, ""), Region(3, "cat"), Region(4, "sat .")))
    assert sentence(condition) == "The cat sat ."


def test_ptb_tokens_are_lower_case_words_with_unk_outside_the_vocabulary() -> None:
    assert tokenize("The Athlete , said", {"the", "said", UNK}) == ("the", UNK, UNK, "said")


def words(contents: list[str], vocabulary: set[str]) -> list[list[str]]:
    tokens = tokenize(" ".join(c for c in contents if c), vocabulary)
    return [[tokens[k] for k in positions] for positions in align(contents, tokens)]


def test_known_words_fall_in_their_regions_and_an_empty_region_gets_none() -> None:
    contents = ["The", "author", "", "is", "very good"]
    assert words(contents, {"the", "author", "is", "very", "good"}) == [["the"], ["author"], [], ["is"], ["very", "good"]]


def test_a_run_of_unks_belongs_to_the_region_where_it_begins() -> None:
    # athlete, telephoned and the comma are outside the vocabulary: the run ends where "the" is
    # found again, in "the coach" ("athlete" and "telephoned" do not contain "the").
    contents = ["Though the athlete", "telephoned", ",", "the coach"]
    assert words(contents, {"though", "the", "coach"}) == [["though", "the", UNK, UNK, UNK], [], [], ["the", "coach"]]


def test_an_unk_stops_where_the_next_token_first_occurs_even_inside_itself() -> None:
    # "a" is found inside "paint": the region of "paint" takes "<unk> a", and "painting" then
    # matches no text and belongs to no region.
    contents = ["What", "he", "did", "was", "paint", "a painting"]
    assert words(contents, {"what", "he", "did", "was", "a", "painting"}) == [["what"], ["he"], ["did"], ["was"], [UNK, "a"], []]


def test_a_final_unk_takes_the_rest() -> None:
    assert words(["he loaded his gun", "."], {"he", "loaded", "his", "gun"}) == [["he", "loaded", "his", "gun"], [UNK]]


def test_later_regions_are_searched_as_written() -> None:
    # After the <unk> "athlete", "the" is looked for in "The coach" without lower-casing it, so it
    # is not found there; the run grows to the next token, "coach".
    contents = ["the athlete", "The coach"]
    assert words(contents, {"the", "coach"}) == [["the", UNK, "the"], ["coach"]]


def test_tokens_left_after_the_last_region_are_an_error() -> None:
    with pytest.raises(AlignmentError, match=r"\['b'\] are left after the last region"):
        align(["a"], ("a", "b"))


def test_every_sentence_of_the_suites_aligns_under_the_ptb_vocabulary(upstream_dir: Path) -> None:
    vocabulary = {word for line in (upstream_dir / "ptb" / "ptb.train.txt").open() for word in line.split()}
    assert len(vocabulary) == 9999  # docs/design/cfl-and-ptb.md#ptb-data-and-batching: 9,998 types and <unk>
    sentences = unassigned = 0
    for path in sorted((upstream_dir / "sg-test-suites" / "syntaxgym-format").glob("*.json")):
        for item in read_suite(path).items:
            for condition in item.conditions:
                tokens = tokenize(sentence(condition), vocabulary)
                positions = align([region.content for region in condition.regions], tokens)
                assigned = [k for region in positions for k in region]
                assert assigned == sorted(assigned)  # regions take tokens in order
                sentences += 1
                unassigned += len(tokens) - len(assigned)
    assert sentences == 3300
    # Tokens that match no text after an unk run stopped inside a word, four sentences each:
    # "paint a painting" (painting), "disguised is good" (good), "mountains in the winter"
    # (the, winter), "microphone on the table" (the, table): 4·(1 + 1 + 2 + 2).
    assert unassigned == 24
