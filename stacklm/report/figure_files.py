"""Writing a matplotlib figure to its files: one format per suffix, atomically, and
reproducibly (no creation date in a PDF, so the same data give the same bytes)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from stacklm.atomic import write_bytes_atomically

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def save_figure(figure: Figure, paths: Sequence[str | Path], dpi: int = 150) -> None:
    for path in paths:
        buffer = io.BytesIO()
        pdf = str(path).endswith(".pdf")
        figure.savefig(buffer, format=Path(path).suffix[1:], dpi=dpi, metadata={"CreationDate": None} if pdf else None)
        write_bytes_atomically(path, buffer.getvalue())
