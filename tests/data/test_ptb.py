"""PTB tokens, vocabulary and truncated-BPTT chunks: a hand-made corpus with every tensor written
out by hand, and the real splits' counts (docs/design/cfl-and-ptb.md#ptb-data-and-batching)."""

import hashlib
from pathlib import Path

import pytest
import torch

from stacklm.data.ptb import PTB_SHA256, Chunk, build_vocabulary, chunks, encode, first_lines, read_split, read_tokens, tokens_of_text
from stacklm.errors import StacklmError

CORPUS = " a b \n c \n a c b \n b \n"  # 4 lines, each starting with a space as PTB's do
LETTERS = {"a": 0, "b": 1, "c": 2, "<unk>": 3, "E": 4}  # the vocabulary's order; E = <eos>


def grid(rows: list[str]) -> torch.Tensor:
    return torch.tensor([[LETTERS[token] for token in row.split()] for row in rows])


def stream() -> torch.Tensor:
    vocabulary = build_vocabulary(tokens_of_text(CORPUS))
    return encode(tokens_of_text(CORPUS), vocabulary)


def test_lines_become_words_then_eos_and_the_vocabulary_puts_unk_then_eos_last() -> None:
    tokens = tokens_of_text(" b a \n <unk> c \n")
    assert tokens == ["b", "a", "<eos>", "<unk>", "c", "<eos>"]
    vocabulary = build_vocabulary(tokens)
    assert vocabulary.tokens == ("a", "b", "c", "<unk>") and vocabulary.eos_index == 4 and len(vocabulary) == 5
    assert encode(["c", "zebra", "<eos>", "<unk>"], vocabulary).tolist() == [2, 3, 4, 3]


def assert_chunks(actual: list[Chunk], expected: list[tuple[list[str], list[str]]]) -> None:
    assert len(actual) == len(expected)
    for chunk, (inputs, targets) in zip(actual, expected):
        assert torch.equal(chunk.inputs, grid(inputs)) and torch.equal(chunk.targets, grid(targets))


# The stream a b E c E a c b E b E (N = 11), B = 4: L = ⌈11/4⌉ = 3, streams
#   E | a b E      E | c E a      a | c b E      E | b E   (the last has 2 targets)
# each prefixed with the token before it (E for the first).


def test_chunks_of_two_steps_drop_the_short_stream_after_it_ends() -> None:
    expected = [
        (["E a", "E c", "a c", "E b"], ["a b", "c E", "c b", "b E"]),
        (["b", "E", "b"], ["E", "a", "E"]),  # step 3: the last stream has ended, batch 3
    ]
    assert_chunks(chunks(stream(), eos_index=4, batch_size=4, bptt=2), expected)


def test_a_chunk_in_which_the_short_stream_ends_is_split_there() -> None:
    # a b E c E a c b E b E a a E (N = 14), B = 4: L = 4, streams
    #   E | a b E c    c | E a c b    b | E b E a    a | a E   (the last has 2 targets).
    # Steps 1–3 form one chunk of 3 steps, split after step 2 where the last stream ends.
    corpus = CORPUS + " a a \n"
    tokens = tokens_of_text(corpus)
    expected = [
        (["E a", "c E", "b E", "a a"], ["a b", "E a", "E b", "a E"]),
        (["b", "a", "b"], ["E", "c", "E"]),
        (["E", "c", "E"], ["c", "b", "a"]),
    ]
    result = chunks(encode(tokens, build_vocabulary(tokens)), eos_index=4, batch_size=4, bptt=3)
    assert_chunks(result, expected)
    assert sum(chunk.num_targets for chunk in result) == 14  # every token a target once


def test_the_released_codes_padding_target_adds_one_eos_to_the_short_stream() -> None:
    expected = [(["E a", "E c", "a c", "E b"], ["a b", "c E", "c b", "b E"]), (["b", "E", "b", "E"], ["E", "a", "E", "E"])]
    assert_chunks(chunks(stream(), eos_index=4, batch_size=4, bptt=2, padding_target=True), expected)


def test_fewer_tokens_than_rows_give_fewer_streams() -> None:
    # N = 3, B = 4: L = 1, three streams of one target each.
    result = chunks(torch.tensor([0, 1, 2]), eos_index=4, batch_size=4, bptt=35)
    assert_chunks(result, [(["E", "a", "b"], ["a", "b", "c"])])


def test_a_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "ptb.valid.txt"
    path.write_bytes(b" a b\n c \xff\n")
    with pytest.raises(StacklmError, match=rf"^{path}:2: not UTF-8"):
        read_tokens(path)


def test_a_file_whose_sha256_differs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ptb.test.txt").write_text(" a b\n")
    with pytest.raises(StacklmError, match=r"ptb\.test\.txt: sha256 .* does not match the pinned"):
        read_split(tmp_path, "test")


@pytest.mark.parametrize(
    ("split", "md5", "tokens", "released_targets"),
    [
        ("train", "f26c4b92c5fdc7b3f8c7cdcb991d8420", 929_589, 929_590),
        ("valid", "aa0affc06ff7c36e977d7cd49e3839bf", 73_760, 73_760),
        ("test", "8b80168b89c18661a38ef683c0dc3721", 82_430, 82_431),
    ],
)
def test_the_ptb_splits_have_the_stated_sizes(upstream_dir: Path, split: str, md5: str, tokens: int, released_targets: int) -> None:
    path = upstream_dir / "ptb" / f"ptb.{split}.txt"
    assert hashlib.md5(path.read_bytes()).hexdigest() == md5  # the published checksum, so the pinned sha256 is of the right file
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PTB_SHA256[split]  # type: ignore[index]
    vocabulary = build_vocabulary(read_split(upstream_dir / "ptb", "train"))
    assert len(vocabulary) == 10_000 and vocabulary.tokens[-1] == "<unk>"
    indices = encode(read_split(upstream_dir / "ptb", split), vocabulary)  # type: ignore[arg-type]
    assert indices.numel() == tokens
    assert int((indices == vocabulary.eos_index).sum()) == {"train": 42_068, "valid": 3_370, "test": 3_761}[split]
    exact = chunks(indices, vocabulary.eos_index)
    assert sum(chunk.num_targets for chunk in exact) == tokens
    sizes = [chunk.batch_size for chunk in exact]
    assert sizes == sorted(sizes, reverse=True) and set(sizes) <= {32, 31}
    assert max(chunk.inputs.size(1) for chunk in exact) == 35
    assert sum(chunk.num_targets for chunk in chunks(indices, vocabulary.eos_index, padding_target=True)) == released_targets
    # The targets, row by row and chunk by chunk, are the split itself.
    rows: list[list[int]] = [[] for _ in range(32)]
    for chunk in exact:
        for row in range(chunk.batch_size):
            rows[row].extend(chunk.targets[row].tolist())
    assert [index for row in rows for index in row] == indices.tolist()


def test_a_slice_is_the_first_lines_through_their_eos() -> None:
    tokens = tokens_of_text(" a b\n c\n d e f\n")
    assert first_lines(tokens, 1) == ["a", "b", "<eos>"]
    assert first_lines(tokens, 2) == ["a", "b", "<eos>", "c", "<eos>"]
    assert first_lines(tokens, 3) == first_lines(tokens, 9) == first_lines(tokens, None) == tokens
    with pytest.raises(StacklmError, match="at least 1 line, got 0"):
        first_lines(tokens, 0)


def simple_examples(path: Path, files: dict[str, bytes]) -> Path:
    """A ``simple-examples.tgz`` laid out as Mikolov's: ``./simple-examples/data/<name>`` for each of ``files``."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            member = tarfile.TarInfo(f"./simple-examples/data/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


def reference_files(upstream_dir: Path) -> dict[str, bytes]:
    return {f"ptb.{split}.txt": (upstream_dir / "ptb" / f"ptb.{split}.txt").read_bytes() for split in ("train", "valid", "test")}


def test_the_download_extracts_the_three_files_of_simple_examples_each_checked(tmp_path: Path, upstream_dir: Path) -> None:
    from stacklm.data.ptb import download_ptb

    archive = simple_examples(tmp_path / "simple-examples.tgz", reference_files(upstream_dir) | {"ptb.char.train.txt": b"a b\n"})
    download_ptb(tmp_path / "resources" / "ptb", url=archive.as_uri())
    assert sorted(path.name for path in (tmp_path / "resources" / "ptb").iterdir()) == ["ptb.test.txt", "ptb.train.txt", "ptb.valid.txt"]
    assert len(read_split(tmp_path / "resources" / "ptb", "valid")) == 70_390 + 3_370  # words, then an <eos> per line


def test_an_archive_whose_files_are_not_the_pinned_ones_writes_nothing(tmp_path: Path, upstream_dir: Path) -> None:
    from stacklm.data.ptb import download_ptb, extract_ptb

    files = reference_files(upstream_dir)
    tampered = simple_examples(tmp_path / "tampered.tgz", files | {"ptb.valid.txt": files["ptb.valid.txt"] + b" extra\n"})
    with pytest.raises(StacklmError, match=r"tampered.tgz: simple-examples/data/ptb.valid.txt has sha256 \w+, not the pinned c9fe6985"):
        download_ptb(tmp_path / "out", url=tampered.as_uri())
    assert not (tmp_path / "out").exists()  # not even the files that matched
    partial = simple_examples(tmp_path / "partial.tgz", {"ptb.train.txt": files["ptb.train.txt"]})
    with pytest.raises(StacklmError, match="partial.tgz: no simple-examples/data/ptb.valid.txt in the archive"):
        download_ptb(tmp_path / "out", url=partial.as_uri())
    with pytest.raises(StacklmError, match="page.html: not a readable .tgz archive"):
        extract_ptb(b"<html>moved</html>", "page.html", tmp_path / "out")


def test_a_failed_download_names_the_url_and_the_offline_mirror(tmp_path: Path) -> None:
    from stacklm.data.ptb import download_ptb

    missing = (tmp_path / "absent.tgz").as_uri()
    with pytest.raises(StacklmError, match=f"{missing}: download failed .*set ptb.mirror to a folder holding ptb/ptb"):
        download_ptb(tmp_path / "out", url=missing)
