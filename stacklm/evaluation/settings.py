"""The ``evaluation`` section of the settings (``stacklm evaluate``, the generalization curves of
``stacklm train``, ``stacklm cfl evaluate``). No torch: the workflow's settings tree holds it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvaluationSettings:
    """The ``evaluation`` section of the settings."""

    tokens_per_batch: int = 2048  # budget of the scoring and sampling batches (the reference's default)
    samples_per_input: int = 10  # DuSell & Cotterell (2025) §5
    sample_seed: int = 123  # the reference's --random-seed
    max_sample_length: int = 50  # the reference's --max-length
    curve_examples: int = 1000  # test and generalization examples scored at each training checkpoint; 0: no curves

    def __post_init__(self) -> None:
        for name in ("tokens_per_batch", "samples_per_input", "max_sample_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.curve_examples < 0:
            raise ValueError(f"curve_examples must not be negative, got {self.curve_examples!r}")
