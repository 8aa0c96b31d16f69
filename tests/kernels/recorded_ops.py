"""The ops a call sends to the dispatcher, for the tests of the compiled kernels' schemas."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class RecordedOps(TorchDispatchMode):
    """The ops that reach the dispatcher's Python key, by name: a composite op shows its insides."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(func._schema.name)
        return func(*args, **(kwargs or {}))
