"""Reading the settings file a command is given, and JSON files with errors naming their line.

In the workflow a job reads ``results/settings/<reader>.json``: only the sections of the
resolved config that this kind of job reads (``stacklm.workflow.settings.SETTINGS_READ``), listed under
``"sections"``. A change elsewhere in the config (the tracking URI, the report threshold) then
leaves that file, and the job, as they were. Asking such a file for a section it does not list
is an error naming the file and the section, never a silent default. A file without
``"sections"`` (a whole settings file, written by hand) answers every section it holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Mapping

from stacklm.errors import located

SECTIONS = "sections"


def read_json(path: str | Path) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except OSError as error:
        raise located(path, None, f"cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise located(path, error.lineno, f"not valid JSON: {error.msg}") from None


class Settings(Mapping[str, Any]):
    """The sections of one settings file; a section the file does not list is an error."""

    def __init__(self, path: str | Path, values: dict[str, Any]) -> None:
        self.path = path
        self.values = {key: value for key, value in values.items() if key != SECTIONS}
        self.sections: list[str] | None = values.get(SECTIONS)

    def __getitem__(self, section: str) -> Any:
        if section in self.values:
            return self.values[section]
        if self.sections is not None and section not in self.sections:
            raise located(self.path, None, f"holds the sections {', '.join(self.sections)} only, not {section!r}: "
                                           "list it among its reader's sections in stacklm.workflow.settings.SETTINGS_READ")
        raise KeyError(section)

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def read_settings(path: str | Path) -> Settings:
    values = read_json(path)
    if not isinstance(values, dict):
        raise located(path, None, "the settings must be a JSON object")
    return Settings(path, values)
