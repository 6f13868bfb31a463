"""Typed, categorised user-facing errors.

The library raises :class:`HarnessError`; only the CLI turns it into one line on stderr
and a non-zero exit code. The library never calls ``sys.exit``.
"""

from __future__ import annotations

import enum


class ErrorCategory(enum.Enum):
    """What went wrong, and so which exit code the CLI returns."""

    BAD_INPUT = "bad_input"  # a malformed file, a profile with a missing field, a bad option
    NOT_FOUND = "not_found"  # a profile, benchmark or file that does not exist
    HARDWARE = "hardware"  # the requested hardware is not present
    NOT_IMPLEMENTED = "not_implemented"
    RUN_FAILED = "run_failed"  # a training process failed
    INTERRUPTED = "interrupted"


EXIT_CODES: dict[ErrorCategory, int] = {
    ErrorCategory.RUN_FAILED: 1,
    ErrorCategory.BAD_INPUT: 2,
    ErrorCategory.NOT_FOUND: 2,
    ErrorCategory.HARDWARE: 3,
    ErrorCategory.NOT_IMPLEMENTED: 4,
    ErrorCategory.INTERRUPTED: 130,
}


class HarnessError(Exception):
    """A failure to report to the user as one line, with a category that fixes the exit code."""

    def __init__(self, message: str, category: ErrorCategory = ErrorCategory.BAD_INPUT):
        super().__init__(message)
        self.message = message
        self.category = category

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.category]

    def __str__(self) -> str:
        return self.message
