"""Reading Parquet files: a missing, truncated or foreign file is one error line naming it (the
commands' use of it: e.g. tests/experiments/transformations/test_search.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stacklm.errors import StacklmError
from stacklm.parquet_file import read_parquet


def test_a_table_comes_back_as_written(tmp_path: Path) -> None:
    frame = pd.DataFrame({"epoch": [1, 2], "validation_cross_entropy": [1.5, 1.25]})
    frame.to_parquet(tmp_path / "train.parquet", index=False)
    pd.testing.assert_frame_equal(read_parquet(tmp_path / "train.parquet", "the run's curve"), frame)


@pytest.mark.parametrize("content", [None, b"", b"not parquet at all\n", b"PAR1\x00\x00"], ids=["missing", "empty", "text", "truncated"])
def test_an_unreadable_file_is_an_error_naming_it(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "train.parquet"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(StacklmError, match=rf"^{path}: cannot read the run's curve: "):
        read_parquet(path, "the run's curve")

