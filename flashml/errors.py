"""User-facing errors: the CLI prints them as one clear line and exits non-zero."""

from __future__ import annotations

import os


class UserError(Exception):
    """Something the user can fix (bad input, bad option, missing file)."""


class TraceError(UserError, ValueError):
    """A problem with a trace: names the file, and the line and field where known."""

    def __init__(self, path: str | os.PathLike[str], message: str, line: int | None = None,
                 field: str | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        where = self.path
        if line is not None:
            where += f":{line}"
        if field is not None:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")
