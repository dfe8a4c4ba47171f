"""Errors that srifty shows to people: one paragraph that says what happened and what to do."""

from __future__ import annotations


class SriftyError(Exception):
    """An error with a message written for the user.

    The CLI prints ``message`` (and ``hint`` when given) as one paragraph and exits
    non-zero; the traceback is shown only with ``--debug``.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} {self.hint}"
        return self.message


class ProfileFormatError(SriftyError):
    """A profile file that is not valid JSON, not schema version 1, or breaks the schema."""


class ProfilingFailed(SriftyError):
    """A profiling run that did not complete; a partial profile may have been written."""

    def __init__(self, message: str, hint: str | None = None, partial_path: str | None = None) -> None:
        super().__init__(message, hint)
        self.partial_path = partial_path
