"""What ``results/report/report.pdf`` says about the scale it was run at, and its CFL and PTB parts.

A preset's outputs look like the papers' tables and figures; at a reduced scale (the ``small``
preset: 500 generated examples, one epoch, one seed) their numbers show the pipeline working,
not the papers' findings. So every part of the report states its scale, built here from the
resolved settings and the preset's name, and passed to the commands that write captions:

- :func:`transformations_scale`: the preset, the data source, the examples per split, the
  search and the final runs (trials, seeds, epochs) of *Bearing Syntactic Fruit* (DuSell &
  Cotterell, 2025);
- :func:`cfl_scale`: the CFL grid of *Learning Hierarchical Structures with Differentiable
  Nondeterministic Stacks* (DuSell & Chiang, 2022): restarts, epochs, batches, test strings;
- :func:`ptb_scale`: that paper's Penn Treebank runs: lines, restarts, epochs, SyntaxGym suites.

Each ends in "A reduced scale: …" when a quantity is below the papers' settings (the defaults of
the settings' dataclasses). ``stacklm report`` puts the transformations' statement in its table
captions and Figure 3's, and lays out the document: a title page with every statement, the
transformation tables and Figure 3, then :func:`document_parts` (the CFL figures, the PTB tables
and figure, each caption ending in its part's statement). ``stacklm ptb report`` puts the PTB
statement in its table captions. The rules pass them as options (:func:`report_options`,
:func:`ptb_report_options`), so a change of scale rewrites the captions.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from stacklm.experiments.cfl import dag as cfl_dag
from stacklm.experiments.cfl.settings import CflSettings
from stacklm.experiments.ptb import dag as ptb_dag
from stacklm.experiments.ptb.settings import PtbSettings
from stacklm.experiments.transformations.settings import DataSettings, FinalSettings, SearchSettings
from stacklm.workflow.settings import ResolvedSettings

SOURCES = {"generate": "data drawn from stacklm's grammars", "upstream": "the upstream data (McCoy et al., 2020; Mueller et al., 2022)"}
REDUCED = "A reduced scale: these numbers show the pipeline working, not the papers' results."
CFL_CITATION = "DuSell & Chiang (2022)"
CFL_FIGURE_CAPTIONS = {
    "validation": f"Validation cross-entropy above the true distribution's (nats per symbol) by epoch, of each model's selected run ({CFL_CITATION}, Figure 1).",
    "test-by-length": f"Test cross-entropy above the true distribution's (nats per symbol) by string length, of each model's selected run ({CFL_CITATION}).",
    cfl_dag.CFL_ACTIONS_FIGURE: f"Probability of the correct stack action of NS+S and NS+S+U on marked reversal over training ({CFL_CITATION}, Figure 2).",
}
PTB_FIGURE_CAPTION = f"SG score against test perplexity of every random restart ({CFL_CITATION}, App. 11)."


def _count(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


def _epochs(max_epochs: int | None) -> str:
    return "to convergence" if max_epochs is None else f"at most {_count(max_epochs, 'epoch')}"


def _statement(preset: str | None, details: list[str], reduced: bool) -> str:
    opening = "The papers' settings (no preset)" if preset is None else f"Preset {preset}"
    return f"{opening}: {'; '.join(details)}." + (f" {REDUCED}" if reduced else "")


def _below(value: int | None, paper: int | None) -> bool:
    """Whether a cap of ``value`` (None: none) is below the paper's ``paper``."""
    return value is not None and (paper is None or value < paper)


def transformations_scale(preset: str | None, settings: ResolvedSettings) -> str:
    """The scale of the syntactic-transformation runs: data source and sizes, search, final runs."""
    data, search, final = settings.data, settings.search, settings.final
    sizes = data.sizes
    paper_data, paper_search, paper_final = DataSettings(), SearchSettings(), FinalSettings()
    details = [
        SOURCES[data.source],
        f"{_count(sizes.train, 'training example')} per task ({sizes.validation:,} validation, {sizes.test:,} test, "
        f"{sizes.generalization:,} generalization)",
        f"{_count(search.trials, 'search trial')} of {_epochs(search.max_epochs)}",
        f"{_count(len(final.seeds), 'seed')} trained {_epochs(final.max_epochs)}",
    ]
    reduced = (
        data.source != paper_data.source
        or any(getattr(sizes, split) < getattr(paper_data.sizes, split) for split in ("train", "validation", "test", "generalization"))
        or search.trials < paper_search.trials
        or _below(search.max_epochs, paper_search.max_epochs)
        or len(final.seeds) < len(paper_final.seeds)
        or _below(final.max_epochs, paper_final.max_epochs)
    )
    return _statement(preset, details, reduced)


def cfl_scale(preset: str | None, cfl: CflSettings) -> str:
    """The scale of the CFL runs: the grid, the epochs and their batches, the test strings."""
    paper = CflSettings()
    details = [
        f"{_count(len(cfl.learning_rates), 'learning rate')} with {_count(cfl.restarts, 'restart')} each per model",
        f"{_epochs(cfl.max_epochs)} of {_count(cfl.train_batches, 'batch', 'batches')} of 10 strings",
        f"{_count(cfl.test_strings_per_length, 'test string')} per length",
    ]
    reduced = any(getattr(cfl, name) < getattr(paper, name) for name in ("restarts", "max_epochs", "train_batches", "validation_batches", "test_strings_per_length"))
    return _statement(preset, details, reduced or len(cfl.learning_rates) < len(paper.learning_rates))


def ptb_scale(preset: str | None, ptb: PtbSettings) -> str:
    """The scale of the Penn Treebank runs: the lines read, the restarts and epochs, the suites."""
    paper = PtbSettings()
    suites = "all SyntaxGym suites" if ptb.suites is None else _count(len(ptb.suites), "SyntaxGym suite")
    details = [
        "every line of each PTB split" if ptb.lines is None else f"the first {_count(ptb.lines, 'line')} of each PTB split",
        f"{_count(ptb.restarts, 'restart')} per model of {_epochs(ptb.max_epochs)}",
        suites,
    ]
    reduced = ptb.lines is not None or ptb.suites is not None or ptb.restarts < paper.restarts or ptb.max_epochs < paper.max_epochs
    return _statement(preset, details, reduced)


def document_parts(preset: str | None, settings: ResolvedSettings) -> list[dict[str, Any]]:
    """The document's parts after the transformations' (``stacklm report --parts``): a part per
    experiment that runs, each a heading, its scale, its tables (LaTeX files with their own
    captions) and its figures (a PDF and its caption, which ends in the scale)."""
    parts = []
    cfl = settings.cfl
    if cfl.languages:
        scale = cfl_scale(preset, cfl)
        names = [*cfl_dag.CFL_FIGURES, *([cfl_dag.CFL_ACTIONS_FIGURE] if cfl_dag.action_figure(cfl) else [])]
        figures = [{"path": _pdf(cfl_dag.cfl_figures(name)), "caption": f"{CFL_FIGURE_CAPTIONS[name]} {scale}"} for name in names]
        parts.append({"heading": "Context-free languages (DuSell & Chiang, 2022)", "scale": scale, "tables": [], "figures": figures})
    ptb = settings.ptb
    if ptb.models:
        scale = ptb_scale(preset, ptb)
        figures = [{"path": _pdf(ptb_dag.figures()), "caption": f"{PTB_FIGURE_CAPTION} {scale}"}]
        parts.append({"heading": "Penn Treebank (DuSell & Chiang, 2022)", "scale": scale, "tables": list(ptb_dag.TABLES), "figures": figures})
    return parts


def _pdf(paths: list[str]) -> str:
    return next(path for path in paths if path.endswith(".pdf"))


def document_inputs(preset: str | None, settings: ResolvedSettings) -> list[str]:
    """The files the document's other parts include: inputs of the rule ``report``."""
    return [path for part in document_parts(preset, settings) for path in [*part["tables"], *(figure["path"] for figure in part["figures"])]]


def report_options(preset: str | None, settings: ResolvedSettings) -> str:
    """``--scale`` and ``--parts`` of ``stacklm report``."""
    parts = json.dumps(document_parts(preset, settings), sort_keys=True)
    return shlex.join(["--scale", transformations_scale(preset, settings), "--parts", parts])


def ptb_report_options(preset: str | None, settings: ResolvedSettings) -> str:
    """``--scale`` of ``stacklm ptb report``."""
    return shlex.join(["--scale", ptb_scale(preset, settings.ptb)])
