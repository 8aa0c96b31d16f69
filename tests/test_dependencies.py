"""The dependencies: every requirement of pyproject.toml is pinned in constraints.txt at a
version it allows; constraints.txt pins what this environment runs (the versions the tests ran
with); the cluster's conda env lists pyproject's requirements with the extras it needs; an
installed package holds every file of the package's source tree."""

import subprocess
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins() -> dict[str, str]:
    lines = [line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()]
    pairs = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {canonicalize_name(name): pinned for name, pinned in pairs}


def requirements(*extras: str) -> list[Requirement]:
    """The base requirements and those of ``extras`` (stacklm's own extras unfolded)."""
    found = [Requirement(line) for line in PROJECT["dependencies"]]
    for extra in extras:
        for line in PROJECT["optional-dependencies"][extra]:
            requirement = Requirement(line)
            if requirement.name != "stacklm":
                found.append(requirement)
    return found


def test_every_requirement_is_pinned_at_a_version_it_allows() -> None:
    pinned = pins()
    for requirement in requirements(*PROJECT["optional-dependencies"]):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is not in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), f"{requirement} excludes the pin {pinned[name]}"
    assert pinned["torch"] == "2.13.0"  # no +cpu label: a GPU node installs the CUDA build of the same release


def test_the_pins_are_the_versions_installed_here() -> None:
    mismatched = {}
    for name, pinned in pins().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = None
        if installed is None or not SpecifierSet(f"=={pinned}").contains(installed, prereleases=True):
            mismatched[name] = (pinned, installed)
    assert mismatched == {}, "constraints.txt is not what the tests run with: (pinned, installed)"


def test_the_cluster_env_lists_the_requirements_with_tracking_and_slurm() -> None:
    environment = yaml.safe_load((ROOT / "envs" / "stacklm.yaml").read_text())
    pip = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    assert [Requirement(line) for line in pip] == requirements("tracking", "slurm")


def test_the_package_data_holds_every_file_of_the_package_that_is_not_python() -> None:
    """A non-editable install copies the Python modules and the package-data globs: any other
    file of the package's tree (a kernel's C++ source, a grammar, a template) would be missing."""
    tracked = subprocess.run(["git", "ls-files", "stacklm"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout: the package's files are not known")
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["stacklm"]
    others = [Path(path).relative_to("stacklm") for path in tracked if not path.endswith(".py")]
    assert others and [path for path in others if not any(path.match(pattern) for pattern in globs)] == []
