"""Typed, categorised user-facing errors.

The library raises :class:`HarnessError`; only the CLI turns it into one line on stderr
and a non-zero exit code. How a process stops (signals) and ends (its exit code) is
:mod:`harness.process`.
"""

from __future__ import annotations

import difflib
import enum
import errno
from collections.abc import Iterable
from pathlib import Path


class ErrorCategory(enum.Enum):
    """What went wrong, and so which exit code the CLI returns."""

    BAD_INPUT = "bad_input"  # a malformed file, a profile with a missing field, a bad option
    NOT_FOUND = "not_found"  # a profile, benchmark or file that does not exist
    HARDWARE = "hardware"  # the requested hardware is not present
    NOT_IMPLEMENTED = "not_implemented"
    RUN_FAILED = "run_failed"  # a training process failed
    IO_FAULT = "io_fault"  # the machine's own: a full disk, a folder that cannot be written, an I/O error
    INTERRUPTED = "interrupted"  # SIGINT (Ctrl-C)
    TERMINATED = "terminated"  # SIGTERM (a batch scheduler, ``timeout``, a container stop)


EXIT_CODES: dict[ErrorCategory, int] = {
    ErrorCategory.RUN_FAILED: 1,
    ErrorCategory.BAD_INPUT: 2,
    ErrorCategory.NOT_FOUND: 2,
    ErrorCategory.HARDWARE: 3,
    ErrorCategory.NOT_IMPLEMENTED: 4,
    ErrorCategory.IO_FAULT: 5,
    ErrorCategory.INTERRUPTED: 130,
    ErrorCategory.TERMINATED: 143,
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


_IO_ADVICE = {
    errno.ENOSPC: "free space there",
    errno.EDQUOT: "free space there (the disk quota is full)",
    errno.EROFS: "the filesystem is read-only: give a writable folder",
    errno.EACCES: "make it writable, or give another folder",
    errno.EPERM: "make it writable, or give another folder",
}


def io_fault(err: OSError, path: str | Path | None = None, doing: str = "", then: str = "") -> HarnessError:
    """One line for an I/O fault of the machine (exit 5): the path, what failed and what to do
    (``then``: what to run once the cause is gone, e.g. the same command with ``--resume``)."""
    where = err.filename if err.filename is not None else path
    what = err.strerror or type(err).__name__
    advice = _IO_ADVICE.get(err.errno or 0, "check the device and the folder")
    text = f"{where}: {what}" + (f" while {doing}" if doing else "") + f"; {advice}" + (f", then {then}" if then else "")
    return HarnessError(text, ErrorCategory.IO_FAULT)


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (:func:`difflib.get_close_matches`), or None when none is close."""
    matches = difflib.get_close_matches(name, list(known), n=1)
    return matches[0] if matches else None


def unknown_name(what: str, name: str, known: Iterable[str], *, listed: str = "known", hint: str = "") -> HarnessError:
    """``unknown <what> 'nme' (did you mean 'name'?); <listed>: a, b, c<hint>``: one line (exit 2)
    naming the closest known name, where one is close, and every known name."""
    names = list(known)
    near = closest(name, names)
    guess = f" (did you mean {near!r}?)" if near is not None else ""
    return HarnessError(f"unknown {what} {name!r}{guess}; {listed}: {', '.join(names)}{hint}", ErrorCategory.NOT_FOUND)
