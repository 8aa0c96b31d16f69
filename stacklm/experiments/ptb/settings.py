"""The ``ptb`` section of the settings (DuSell & Chiang (2022) §5.2, App. 10–11).

Per model of ``models`` (names of ``stacklm.models.ptb``: ``lstm``, ``lstm-H``, ``jm-hidden``,
``jm-learned``, ``ns-Q-S``, ``rns-Q-S``), ``restarts`` random restarts, restart k drawing its
learning rate and clipping factor (App. 10) and its initial parameters from seeds derived from
(``salt``, model, k) alone, so the DAG is static and a rerun reproduces a restart. Each trains
on PTB (the first ``lines`` lines of each split, or all of them) for at most ``max_epochs``
epochs, then is scored: test perplexity and the SG score over ``suites`` (all 33 when null).
The PTB files and the SyntaxGym suites are inputs of the jobs, in a folder laid out as the
reference copies (``ptb/ptb.{train,valid,test}.txt``, ``sg-test-suites/circuits.json`` and
``sg-test-suites/syntaxgym-format/<suite>.json``; :meth:`PtbSettings.ptb_files`,
:meth:`PtbSettings.syntaxgym_files`), each refused unless its sha256 is the pinned one:
``mirror`` when set (to work offline; a file it lacks stops the run when the settings are built,
naming the key and where to get the file), else ``resources/`` inside the working directory,
where the rules ``ptb_download`` and ``ptb_suites`` download them.

No torch here: the Snakefile reads this module for every lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stacklm.errors import StacklmError

DOWNLOADS = "resources"  # where the download rules put the files when ptb.mirror is null (git ignores it)
PTB_FOLDER = "ptb"
SYNTAXGYM_FOLDER = "sg-test-suites"
WHERE_TO_GET = (
    "ptb/ptb.{train,valid,test}.txt are data/ptb.*.txt of Mikolov's simple-examples.tgz; sg-test-suites/ holds data/circuits.json"
    " and data/syntaxgym/<suite>.json (as syntaxgym-format/<suite>.json) of bdusell/nondeterministic-stack-rnn at the tag iclr2022;"
    " or set ptb.mirror: null to download them"
)

# The configurations of the authors' released scripts: which of them the paper's main table shows
# and which its appendix table is not recoverable from its text
# (docs/design/cfl-and-ptb.md#ptb-models-and-parameter-counts).
PAPER_PDA_SIZES: tuple[tuple[int, int], ...] = (
    (1, 2), (1, 3), (1, 4), (1, 5), (1, 6), (1, 7), (1, 11), (2, 2), (2, 3), (2, 4), (2, 5), (3, 2), (3, 3), (3, 4), (4, 3),
)
PAPER_MODELS: tuple[str, ...] = (
    "lstm", "lstm-258", "lstm-267", "jm-hidden", "jm-learned",
    *(f"ns-{states}-{symbols}" for states, symbols in PAPER_PDA_SIZES),
    *(f"rns-{states}-{symbols}" for states, symbols in PAPER_PDA_SIZES),
)


@dataclass(frozen=True)
class PtbSettings:
    """The ``ptb`` section; an empty ``models`` runs no PTB job."""

    models: tuple[str, ...] = PAPER_MODELS
    restarts: int = 10  # random-search runs per model (App. 10)
    salt: int = 0  # change it to draw another set of restarts
    max_epochs: int = 100  # the released code's cap; early stopping usually ends a run sooner
    lines: int | None = None  # train, validate and test on each split's first lines only; null: all
    suites: tuple[str, ...] | None = None  # SyntaxGym suites scored; null: all 33
    figure_models: tuple[str, ...] = ("lstm", "rns-2-3")  # App. 11's figure: SG score against test perplexity of every restart
    mirror: str | None = None  # a folder of ptb/ and sg-test-suites/ (offline); None: downloaded into resources/
    progress_interval_s: float = 60.0  # seconds between progress lines in the training logs

    def __post_init__(self) -> None:
        from stacklm.evaluation.syntaxgym.sources import SUITE_SHA256  # no torch

        if len(set(self.models)) != len(self.models):
            raise StacklmError(f"config key 'ptb.models': a model is listed twice in {list(self.models)}")
        if self.models and not self.figure_models:
            raise StacklmError("config key 'ptb.figure_models': at least one model, whose restarts App. 11's figure shows")
        for position, model in enumerate(self.figure_models):
            if self.models and model not in self.models:
                raise StacklmError(f"config key 'ptb.figure_models[{position}]': {model!r} is not among ptb.models")
        for name in ("restarts", "max_epochs"):
            if getattr(self, name) < 1:
                raise StacklmError(f"config key 'ptb.{name}': must be at least 1, got {getattr(self, name)!r}")
        if self.lines is not None and self.lines < 1:
            raise StacklmError(f"config key 'ptb.lines': must be at least 1 or null, got {self.lines!r}")
        if self.suites is not None:
            if not self.suites:
                raise StacklmError("config key 'ptb.suites': at least one suite, or null for all 33")
            for position, suite in enumerate(self.suites):
                if suite not in SUITE_SHA256:
                    raise StacklmError(f"config key 'ptb.suites[{position}]': unknown suite {suite!r}; known: {', '.join(SUITE_SHA256)}")
        if self.progress_interval_s <= 0:
            raise StacklmError(f"config key 'ptb.progress_interval_s': must be positive, got {self.progress_interval_s!r}")
        if self.models and self.mirror is not None:
            missing = [path for path in (*self.ptb_files(), *self.syntaxgym_files()) if not Path(path).is_file()]
            if missing:
                raise StacklmError(
                    f"config key 'ptb.mirror': {missing[0]} not found ({len(missing)} of the PTB and SyntaxGym files missing); {WHERE_TO_GET}"
                )

    @property
    def data_root(self) -> str:
        """The folder laid out as the reference copies that the jobs read: the mirror, or the downloads."""
        return self.mirror if self.mirror is not None else DOWNLOADS

    def ptb_files(self) -> list[str]:
        """The PTB splits the jobs read."""
        return ptb_files(self.data_root)

    def syntaxgym_files(self) -> list[str]:
        """The circuit map and the suites scored (``suites``, or all 33), that the jobs read."""
        return syntaxgym_files(self.data_root, self.suites)

    def check_models(self) -> None:
        """Every model a name of ``stacklm.models.ptb``, as that module writes it (``lstm``, not
        ``lstm-256``). Apart from the other checks: the names are parsed beside the models, which
        import torch, and the light jobs that read this section (the MLflow mirror's) never do."""
        from stacklm.models.ptb import ptb_config, ptb_model_name

        for position, model in enumerate(self.models):
            try:
                canonical = ptb_model_name(ptb_config(model))
            except StacklmError as error:
                raise StacklmError(f"config key 'ptb.models[{position}]': {error}") from None
            if canonical != model:
                raise StacklmError(f"config key 'ptb.models[{position}]': the model {model!r} is called {canonical!r}")


def ptb_files(root: str) -> list[str]:
    """The PTB splits in the folder ``root`` laid out as the reference copies."""
    return [f"{root}/{PTB_FOLDER}/ptb.{split}.txt" for split in ("train", "valid", "test")]


def syntaxgym_files(root: str, suites: tuple[str, ...] | None) -> list[str]:
    """The circuit map and ``suites`` (None: all 33) in the folder ``root`` laid out as the reference copies."""
    from stacklm.evaluation.syntaxgym.sources import CIRCUITS_FILE, SUITE_FOLDER, SUITE_SHA256  # no torch

    folder = f"{root}/{SYNTAXGYM_FOLDER}"
    return [f"{folder}/{CIRCUITS_FILE}", *(f"{folder}/{SUITE_FOLDER}/{name}.json" for name in suites or tuple(SUITE_SHA256))]
