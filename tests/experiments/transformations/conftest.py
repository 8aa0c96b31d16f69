"""The report tests' fixture of written runs, for the ``stacklm report`` command's tests."""

from tests.report.conftest import write_run  # noqa: F401  (a fixture, found by name)
