"""The ``stacklm`` entry point: each command imports only its own module."""

import subprocess
import sys

import pytest

from stacklm import cli

PROBE = """
import sys
from stacklm.cli import COMMAND_MODULES, build_parser
build_parser(sys.argv[1:])
print(" ".join(name for name in COMMAND_MODULES if name in sys.modules))
"""


def loaded_command_modules(*argv: str) -> set[str]:
    """The command modules imported after building the parser for ``argv`` in a fresh interpreter."""
    probe = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    return set(probe.stdout.split())


@pytest.mark.parametrize("module", sorted(cli.COMMAND_MODULES))
def test_a_command_imports_its_own_module_only(module: str) -> None:
    command = cli.COMMAND_MODULES[module][0]
    loaded = loaded_command_modules(command, "--help-is-not-parsed-here")
    assert module in loaded
    # a command module may import another one it builds on, never all of them
    assert loaded < set(cli.COMMAND_MODULES), loaded


def test_no_command_or_an_unknown_one_builds_every_command() -> None:
    assert loaded_command_modules() == set(cli.COMMAND_MODULES)
    assert loaded_command_modules("--help") == set(cli.COMMAND_MODULES)
    assert loaded_command_modules("trian") == set(cli.COMMAND_MODULES)


def test_every_listed_command_is_registered_by_its_module() -> None:
    parser = cli.build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    assert set(subparsers.choices) == {command for commands in cli.COMMAND_MODULES.values() for command in commands}


def test_an_unknown_command_is_refused_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["trian"])
    assert stop.value.code == 2
    assert "invalid choice: 'trian'" in capsys.readouterr().err
