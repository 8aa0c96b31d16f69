"""Reading a Parquet file (a run's curve or metrics, a selection, a summary): a file that is
missing, truncated or not Parquet is one line naming it, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stacklm.errors import located

if TYPE_CHECKING:
    import pandas as pd


def read_parquet(path: str | Path, what: str) -> pd.DataFrame:
    """The table in ``path``; a :class:`~stacklm.errors.StacklmError` ``path: cannot read <what>: …``
    where it cannot be read. pandas and pyarrow load here, not at import."""
    import pandas as pd
    import pyarrow as pa

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise located(path, None, f"cannot read {what}: {error}") from None
