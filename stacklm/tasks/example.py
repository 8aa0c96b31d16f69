"""An example of a syntactic-transformation task: what a task makes of a sentence and a marker.

The source is the sentence followed by its marker token (``quest``/``decl``,
``PRESENT``/``PAST``, ``passiv``/``decl``); the target is the hierarchical-rule output; an
example of the generalization split also carries the linear-rule output. As a language-model
string an example is ``source · target`` (the marker is the separator). Their TSV files are
``stacklm.data.examples``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    source: tuple[str, ...]  # sentence tokens, then the marker
    target: tuple[str, ...]  # hierarchical-rule output
    linear: tuple[str, ...] | None = None  # linear-rule output (generalization split only)

    @property
    def marker(self) -> str:
        return self.source[-1]

    def language_model_string(self) -> tuple[str, ...]:
        """w = source · target, the string a model is trained on (EOS is added by batching)."""
        return self.source + self.target
