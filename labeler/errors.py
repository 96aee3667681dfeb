"""The one user-facing error type, and the refusal of an action a user may not take.

They sit on the application's ground floor, beside forms.py (which raises InputError for a bad `--set` value or
form field), so that nothing below labeler/services imports from it; the services import them from here."""
from __future__ import annotations


class InputError(ValueError):
    """Bad input from a user: says what is wrong and where (file, line, field).

    The CLI prints it as one line and exits 2; the UI shows it as a gr.Error.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None):
        self.message, self.file, self.line, self.field = message, file, line, field
        where = []
        if file is not None:
            where.append(str(file))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{': '.join([', '.join(where), message]) if where else message}")


class PermissionDenied(PermissionError):
    """The logged-in user may not do this (not logged in, or not an admin)."""
