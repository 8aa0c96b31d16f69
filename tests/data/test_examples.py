import pytest

from stacklm.data.examples import read_examples, write_examples
from stacklm.errors import StacklmError
from stacklm.tasks.example import Example


def test_round_trip_with_and_without_linear_target(tmp_path):
    examples = [
        Example(("my", "yak", "does", "smile", ".", "quest"), ("does", "my", "yak", "smile", "?")),
        Example(("a", ".", "quest"), ("b", "?"), linear=("c", "?")),
    ]
    path = tmp_path / "split.tsv"
    write_examples(path, examples)
    assert path.read_text(encoding="utf-8") == "my yak does smile . quest\tdoes my yak smile ?\na . quest\tb ?\tc ?\n"
    assert read_examples(path) == examples
    assert examples[0].marker == "quest"
    assert examples[0].language_model_string()[-6:] == ("quest", "does", "my", "yak", "smile", "?")


@pytest.mark.parametrize("line", ["no tab here", "a\tb\tc\td", "a  b\tc", "a\t"])
def test_bad_line_names_file_and_line(tmp_path, line):
    path = tmp_path / "bad.tsv"
    path.write_text("ok .\tok .\n" + line + "\n", encoding="utf-8")
    with pytest.raises(StacklmError, match=r"bad\.tsv:2: "):
        read_examples(path)


def test_failed_write_leaves_nothing_partial(tmp_path):
    path = tmp_path / "out.tsv"

    def examples():
        yield Example(("a",), ("b",))
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_examples(path, examples())
    assert list(tmp_path.iterdir()) == []
