"""stacklm: stack-augmented neural language models, reproduced end to end.

The public API (``stacklm.api``), loaded at first use so that ``import stacklm`` (and every
``stacklm`` command) does not pay for torch:

- ``get_task(name)``, ``generate_splits(task, seed, sizes)``, ``SplitSizes``: a task and its data;
- ``build_model(architecture, task)``: a model by its name in the papers' tables;
- ``load_run(folder)``: a trained run's model, vocabulary, settings, curve and metrics.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

PUBLIC = ("get_task", "generate_splits", "SplitSizes", "build_model", "load_run", "TrainedRun")  # from stacklm.api
__all__ = ["__version__", *PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module 'stacklm' has no attribute {name!r}")
    from stacklm import api

    return getattr(api, name)


def __dir__() -> list[str]:
    """The module's names and the API's, which load at first use (``dir(stacklm)`` lists them without loading torch)."""
    return sorted({*globals(), *PUBLIC})
