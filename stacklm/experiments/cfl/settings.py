"""The ``cfl`` section of the settings (DuSell & Chiang (2022) §4, App. 8): the languages, the
models, the grid searched (learning rates × stack vector sizes m of Gref and JM × restarts) and
the sizes of each run's data, with the paper's values by default; the PDA sizes of the NS models
per language (|Q| = 2, |Γ| = 3 for the reversal and Dyck languages, |Q| = 3, |Γ| = 3 for padded
reversal and the hardest CFL) and the runs that log their stack actions for Figure 2.

No torch here: the Snakefile and ``stacklm.workflow`` read this section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stacklm.errors import StacklmError
from stacklm.models.cfl_names import CFL_MODELS

VECTOR_MODELS: tuple[str, ...] = ("cfl/Gref", "cfl/JM")  # searched over the stack vector size m
ACTION_LANGUAGE = "marked-reversal"  # Figure 2: the stack actions of NS+S and NS+S+U over training
ACTION_MODELS: tuple[str, ...] = ("cfl/NS+S", "cfl/NS+S+U")  # normalized, unnormalized
PDA_SIZES: dict[str, tuple[int, int]] = {  # language → (|Q|, |Γ|), App. 8; in the paper's order
    "marked-reversal": (2, 3),
    "unmarked-reversal": (2, 3),
    "padded-reversal": (3, 3),
    "dyck-2": (2, 3),
    "hardest-cfl": (3, 3),
}


@dataclass(frozen=True)
class CflSettings:
    """The ``cfl`` section of the settings; an empty ``languages`` runs no CFL job."""

    languages: tuple[str, ...] = tuple(PDA_SIZES)
    models: tuple[str, ...] = CFL_MODELS
    learning_rates: tuple[float, ...] = (0.01, 0.005, 0.001, 0.0005)
    vector_sizes: tuple[int, ...] = (2, 20, 40)  # m of Gref and JM
    restarts: int = 5
    max_epochs: int = 200
    train_batches: int = 1_000  # batches of 10 strings of one length
    validation_batches: int = 100
    test_strings_per_length: int = 100  # of the fixed test set's 100 per length
    action_log_every: int = 100  # updates between the stack-action rows of Figure 2 (10 per epoch of 1,000 batches)

    def __post_init__(self) -> None:
        for position, language in enumerate(self.languages):
            if language not in PDA_SIZES:
                raise StacklmError(f"config key 'cfl.languages[{position}]': unknown language {language!r}; known: {', '.join(PDA_SIZES)}")
        for position, model in enumerate(self.models):
            if model not in CFL_MODELS:
                raise StacklmError(f"config key 'cfl.models[{position}]': unknown CFL model {model!r}; known: {', '.join(CFL_MODELS)}")
        if self.languages and not self.models:
            raise StacklmError("config key 'cfl.models': at least one model is needed")
        if self.languages and not self.learning_rates:
            raise StacklmError("config key 'cfl.learning_rates': at least one learning rate is needed")
        for position, rate in enumerate(self.learning_rates):
            if not (math.isfinite(rate) and rate > 0):
                raise StacklmError(f"config key 'cfl.learning_rates[{position}]': must be positive, got {rate!r}")
        if any(model in VECTOR_MODELS for model in self.models) and not self.vector_sizes:
            raise StacklmError("config key 'cfl.vector_sizes': Gref and JM need at least one stack vector size")
        for position, size in enumerate(self.vector_sizes):
            if size < 1:
                raise StacklmError(f"config key 'cfl.vector_sizes[{position}]': must be at least 1, got {size!r}")
        for name in ("restarts", "max_epochs", "train_batches", "validation_batches", "action_log_every"):
            if getattr(self, name) < 1:
                raise StacklmError(f"config key 'cfl.{name}': must be at least 1, got {getattr(self, name)!r}")
        if not 1 <= self.test_strings_per_length <= 100:
            raise StacklmError(f"config key 'cfl.test_strings_per_length': must lie in 1..100, got {self.test_strings_per_length!r}")
