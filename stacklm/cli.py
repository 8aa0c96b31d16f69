"""The ``stacklm`` command line: one subcommand per workflow rule, each defined beside its user.

Every module named in ``COMMANDS`` exposes ``register(subparsers)``, which adds its
subcommands (and their options) and sets ``func`` on each. This module owns what a user reads
before the options: each command's summary (``stacklm --help``) and one example per command
and per action (``stacklm data generate --help``).

``stacklm X`` imports only the module of X, and ``stacklm --help``, ``--version`` or a mistyped
command import none: the workflow runs hundreds of short jobs, and importing every command's
dependencies (torch, SymPy, matplotlib, MLflow) costs each of them seconds.

Exit status: 0 done; 1 the command failed (a ``StacklmError``: bad input, a missing file,
training stopped by SIGTERM), with a one-line message naming the file or key; 2 the command
line itself is wrong (argparse's usage errors).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from typing import Sequence

from stacklm import __version__
from stacklm.errors import StacklmError, UsageError

DESCRIPTION = (
    "Stack-augmented neural language models: the experiments of DuSell & Cotterell (2025), DuSell & Chiang (2022)"
    " and Sundararaman et al. (2019), end to end. Each command is one step of the workflow (README);"
    " `stacklm COMMAND --help` shows its options and an example."
)
FAILED = 1  # a command that ran and failed
MISUSED = 2  # a wrong command line: argparse's status, and a UsageError's


@dataclass(frozen=True)
class Command:
    module: str  # registers the command
    summary: str  # its line in `stacklm --help`, and the first line of `stacklm X --help`


COMMANDS: dict[str, Command] = {
    "train": Command("stacklm.experiments.transformations.commands", "train one model on a task (App. D schedule of DuSell & Cotterell, 2025); resumes from its checkpoint"),
    "evaluate": Command("stacklm.experiments.transformations.commands", "score a trained run on the test set and the generalization set under both rules"),
    "models": Command("stacklm.models.cli", "list every architecture with its width and parameter count"),
    "data": Command("stacklm.data.cli", "the datasets of the syntactic-transformation tasks"),
    "cfl": Command("stacklm.experiments.cfl.commands", "the context-free languages of DuSell & Chiang (2022), Learning Hierarchical Structures"),
    "ptb": Command("stacklm.experiments.ptb.commands", "the Penn Treebank language models of DuSell & Chiang (2022): perplexity and SG score"),
    "settings": Command("stacklm.workflow.settings", "check the workflow's resolved settings and write them as JSON"),
    "hparams": Command("stacklm.experiments.transformations.commands", "draw the search trials' hyperparameters (one HP.json per trial)"),
    "select": Command("stacklm.experiments.transformations.commands", "choose the search trial with the lowest validation cross-entropy"),
    "aggregate": Command("stacklm.experiments.transformations.commands", "concatenate the final runs' metrics.parquet files"),
    "report": Command("stacklm.experiments.transformations.commands", "the tables (LaTeX, Markdown) and Figure 3 from the metrics"),
    "constructions": Command("stacklm.experiments.transformations.commands", "FA and PA of trained runs on each construction of the generalization set"),
    "curves": Command("stacklm.report.curves", "the generalization curves of a task's final runs (Parquet and a figure)"),
    "progress": Command("stacklm.experiments.transformations.commands", "where a pipeline run stands: every training run's checkpoints so far, read while it trains"),
    "html": Command("stacklm.report.pages", "a Markdown table of the report as an HTML page (for snakemake --report)"),
    "tracking": Command("stacklm.workflow.tracking", "the MLflow mirror of the runs"),
}
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    module: tuple(name for name, command in COMMANDS.items() if command.module == module)
    for module in dict.fromkeys(command.module for command in COMMANDS.values())
}

# One example per command and per action, keyed by its words after `stacklm`; tested to parse.
EXAMPLES: dict[str, str] = {
    "train": "stacklm train --task question-formation --architecture Tf+Nd --data-dir results/data/question-formation"
    " --learning-rate 0.0005 --tokens-per-batch 2048 --out runs/tf-nd",
    "evaluate": "stacklm evaluate --task question-formation --run runs/tf-nd --data-dir results/data/question-formation"
    " --settings results/settings/evaluate.json --out runs/tf-nd/metrics.parquet",
    "models": "stacklm models --task question-formation --budget 200000",
    "data": "stacklm data generate --task question-formation --seed 1 --out results/data/question-formation",
    "data generate": "stacklm data generate --task question-formation --seed 1 --train 1000 --out data/question-formation",
    "data transform": "echo 'my walrus does move quest' | stacklm data transform --task question-formation --rule linear",
    "data fetch": "stacklm data fetch --task question-formation --split validation --out upstream/question.dev",
    "data repair": "stacklm data repair --task german-passivization --input upstream/passiv.dev --out repaired/passiv.dev",
    "data summarize": "stacklm data summarize --task question-formation --data results/data/question-formation --out summary.parquet",
    "data report": "stacklm data report results/data/*/summary.parquet --out results/data/report.txt",
    "data estimate-weights": "stacklm data estimate-weights --task question-formation --mirror ../upstream",
    "data compare": "stacklm data compare --task question-formation results/data/question-formation/train.tsv ../shared/upstream/question-formation/question.train",
    "cfl": "stacklm cfl generate --language dyck-2 --split test --seed 0 --out dyck-2/test.tsv",
    "cfl generate": "stacklm cfl generate --language dyck-2 --split test --seed 0 --out dyck-2/test.tsv",
    "cfl train": "stacklm cfl train --language dyck-2 --architecture cfl/NS --learning-rate 0.005 --restart 1"
    " --settings results/settings/cfl_train.json --checkpoint ckpt/ns.pt --out runs/dyck-2/ns",
    "cfl select": "stacklm cfl select --curves runs/dyck-2/ns/*/train.parquet --out selected/dyck-2/ns.parquet",
    "cfl evaluate": "stacklm cfl evaluate --selection selected/dyck-2/ns.parquet --runs runs/dyck-2/ns --test dyck-2/test.tsv"
    " --settings results/settings/cfl_evaluate.json --out evaluation/dyck-2/ns.parquet",
    "cfl figures": "stacklm cfl figures --curves selected/*/*.parquet --metrics evaluation/*/*.parquet --out-curves curves.parquet"
    " --out-metrics metrics.parquet --validation-figures validation.png --test-figures test-by-length.png --summary summary.md",
    "cfl actions": "stacklm cfl actions --selections selected/marked-reversal/cfl-ns+s.parquet selected/marked-reversal/cfl-ns+s+u.parquet"
    " --runs runs/marked-reversal/cfl-ns+s runs/marked-reversal/cfl-ns+s+u --out actions.parquet --figures stack-actions.png",
    "cfl progress": "stacklm cfl progress --markdown docs/cfl-two-languages/progress.md runs/cfl-two-languages",
    "ptb": "stacklm ptb train --model rns-2-3 --restart 1 --data resources/ptb --checkpoint ckpt/rns-2-3/1.pt --out runs/rns-2-3/1",
    "ptb download": "stacklm ptb download --out resources/ptb",
    "ptb suites": "stacklm ptb suites --suites number_src center_embed --out resources/sg-test-suites",
    "ptb train": "stacklm ptb train --model rns-2-3 --restart 1 --data resources/ptb --lines 200 --max-epochs 2"
    " --checkpoint ckpt/rns-2-3/1.pt --out runs/rns-2-3/1",
    "ptb evaluate": "stacklm ptb evaluate --run runs/rns-2-3/1 --data resources/ptb --syntaxgym resources/sg-test-suites"
    " --suites number_src center_embed --out runs/rns-2-3/1/metrics.parquet",
    "ptb select": "stacklm ptb select --curves runs/rns-2-3/*/train.parquet --out selected/rns-2-3.json",
    "ptb report": "stacklm ptb report --metrics runs/*/*/metrics.parquet --selected selected/lstm.json selected/rns-2-3.json"
    " --figure-models lstm rns-2-3 --out-metrics metrics.parquet --tables ptb.tex circuits.tex --markdown ptb.md circuits.md"
    " --figures sg.png sg.pdf --scale 'the first 100 lines of each PTB split; 2 restarts'",
    "settings": "stacklm settings --json '{\"tasks\": [\"question-formation\"], ...}' --out settings.json",
    "hparams": "stacklm hparams --task question-formation --architecture Tf+Nd --settings results/settings/hparams.json"
    " --out trial1.json trial2.json",
    "select": "stacklm select --settings results/settings/select.json --hparams trial1.json trial2.json"
    " --curves runs/1/train.parquet runs/2/train.parquet --out best.json",
    "aggregate": "stacklm aggregate --out results/metrics.parquet results/runs/*/*/final/*/metrics.parquet",
    "report": "stacklm report --metrics results/metrics.parquet --settings results/settings/report.json --tables qf.tex"
    " --markdown qf.md --document report.tex --figures figure3.png figure3.pdf --scale '500 examples; 1 seed'",
    "constructions": "stacklm constructions --data-dir results/data/question-formation --markdown constructions.md"
    " --parquet constructions.parquet results/runs/question-formation/tf/final/*",
    "curves": "stacklm curves --out results/curves/question-formation.parquet --figures curves.png curves.pdf"
    " -- results/runs/question-formation/tf/final/*/train.parquet",
    "progress": "stacklm progress --markdown docs/table1/progress.md --figure docs/table1/progress-curves.png runs/table1",
    "html": "stacklm html --markdown results/report/tables/question-formation.md --title 'Question formation'"
    " --out question-formation.html",
    "tracking": "stacklm tracking init --settings results/settings/tracking.json",
    "tracking init": "stacklm tracking init --settings results/settings/tracking.json",
    "tracking sync": "stacklm tracking sync --settings results/settings/tracking.json --experiment question-formation"
    " --curves results/runs/question-formation/*/*/*/train.parquet --out results/tracking/question-formation.json",
}


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of the command ``argv`` names first, with that command's module imported;
    without a known command (``--help``, ``--version``, a typo), every command as a summary only."""
    command = next((argument for argument in argv if not argument.startswith("-")), None)
    parser = argparse.ArgumentParser(prog="stacklm", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"stacklm {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command].module).register(subparsers)
        document(subparsers, [])
    else:
        for name, listed in COMMANDS.items():
            subparsers.add_parser(name, help=listed.summary)
    return parser


def document(subparsers: argparse._SubParsersAction, words: list[str]) -> None:
    """Give each registered (sub)command its summary and its example; raw layout for both."""
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    for name, parser in subparsers.choices.items():
        path = [*words, name]
        summary = COMMANDS[name].summary if not words else helps.get(name)
        parser.description = "\n\n".join(part for part in (summary, parser.description) if part)
        parser.epilog = f"example:\n  {EXAMPLES[' '.join(path)]}"
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                document(action, path)


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; a ``StacklmError`` becomes a message and status
    1 (2 for a ``UsageError``)."""
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except StacklmError as error:
        print(f"stacklm: error: {error}", file=sys.stderr)
        return MISUSED if isinstance(error, UsageError) else FAILED


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(sys.argv[1:] if argv is None else argv), argv)


if __name__ == "__main__":
    sys.exit(main())
