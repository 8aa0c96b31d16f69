"""The ``stacklm`` command line: one subcommand per workflow rule, each defined beside its user.

Every module in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds the
subcommands listed beside it and sets ``func`` on each; nothing else lives here. ``stacklm X``
imports only the module of X: the workflow runs hundreds of short jobs, and importing every
command's dependencies (torch, SymPy, matplotlib, the grammars) costs each of them a second.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable, Sequence

from stacklm.errors import StacklmError

COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "stacklm.workflow": ("settings", "hparams", "select"),
    "stacklm.report.commands": ("aggregate", "report"),
    "stacklm.models.cli": ("models",),
    "stacklm.cfl.cli": ("cfl",),  # cfl generate, train, select, evaluate, figures
    "stacklm.training.command": ("train",),
    "stacklm.evaluation.command": ("evaluate",),
    "stacklm.tracking.command": ("tracking",),
    "stacklm.data.cli": ("data",),  # data generate, transform, fetch, repair, summarize, report, estimate-weights
}


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of the command ``argv`` names first, or of every command (``--help``, a typo)."""
    command = next((argument for argument in argv if not argument.startswith("-")), None)
    modules = [name for name, commands in COMMAND_MODULES.items() if command in commands] or list(COMMAND_MODULES)
    return _parser("stacklm", __doc__.splitlines()[0], [importlib.import_module(name).register for name in modules])


def _parser(prog: str, description: str, registers: Sequence[Callable[[Any], None]]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in registers:
        register(subparsers)
    return parser


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; a ``StacklmError`` becomes a message and status 2."""
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except StacklmError as error:
        print(f"stacklm: error: {error}", file=sys.stderr)
        return 2


def run_light(prog: str, description: str, registers: Sequence[Callable[[Any], None]], argv: list[str] | None = None) -> int:
    """``python -m <module>``: only ``registers``' commands, without importing every other
    command's modules (torch, MLflow), for the DAG's many small jobs."""
    return run(_parser(prog, description, registers), argv)


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(sys.argv[1:] if argv is None else argv), argv)


if __name__ == "__main__":
    sys.exit(main())
