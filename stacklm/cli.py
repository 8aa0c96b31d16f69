"""The ``stacklm`` command line: one subcommand per workflow rule, each defined beside its user.

Every module in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its
subcommands and sets ``func`` on each; nothing else lives here.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from stacklm.errors import StacklmError

COMMAND_MODULES: tuple[str, ...] = (
    "stacklm.workflow",  # settings, hparams, select
    "stacklm.report.commands",  # aggregate, report
    "stacklm.models.cli",  # models
    "stacklm.cfl.cli",  # cfl generate
    "stacklm.training.command",  # train
    "stacklm.evaluation.command",  # evaluate
    "stacklm.tracking.command",  # tracking init
    "stacklm.data.cli",  # data generate, transform, fetch, repair, summarize, report, estimate-weights
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stacklm", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except StacklmError as error:
        print(f"stacklm: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
