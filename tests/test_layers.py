"""The import contract of pyproject.toml (``[tool.importlinter]``; README, Layout), checked with
import-linter: each layer imports only the layers below it, so the library never imports an
experiment, the workflow or the command line, and the experiments never import each other. Every
part of the package lies in a layer, so a new one cannot escape the contract."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def lint_imports() -> subprocess.CompletedProcess[str]:
    """``lint-imports`` of this environment, without its cache (it would write one into the checkout)."""
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"]
    wide = {**os.environ, "COLUMNS": "1000", "NO_COLOR": "1"}  # a contract's name on one line
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=wide)


def test_every_import_contract_is_kept() -> None:
    lint = lint_imports()
    broken = [contract["name"] for contract in CONTRACTS if f"{contract['name']} BROKEN" in lint.stdout]
    details = lint.stdout[lint.stdout.find("Broken contracts") :] if broken else lint.stdout + lint.stderr
    assert broken == [] and lint.returncode == 0, f"broken import contracts: {broken}\n{details}"
    assert all(f"{contract['name']} KEPT" in lint.stdout for contract in CONTRACTS)


def parts(package: Path) -> set[str]:
    """The modules and subpackages directly in ``package``."""
    modules = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    return modules | {path.name for path in package.iterdir() if (path / "__init__.py").is_file()}


def layered(contract: dict) -> set[str]:
    return {name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")}


def test_every_part_of_the_package_lies_in_a_layer() -> None:
    package, experiments = CONTRACTS
    assert layered(package) == {f"stacklm.{part}" for part in parts(ROOT / "stacklm")}
    assert experiments["containers"] == ["stacklm.experiments"]
    assert layered(experiments) == parts(ROOT / "stacklm" / "experiments")
