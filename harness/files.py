"""Writing files so that a fault of the machine loses nothing: through a temporary sibling renamed
over the target (readers see the old file or the new one), the temporary file removed on failure,
and the failure one line (:func:`harness.errors.io_fault`, exit 5)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from harness.errors import io_fault


def write_atomic(path: Path, text: str, *, then: str = "") -> None:
    """``text`` (UTF-8) into ``path``, atomically; ``then``: what to run once the cause of a
    fault is gone (e.g. the same command with ``--resume``)."""
    replace_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), then=then)


def replace_atomic(path: Path, write: Callable[[Path], object], *, doing: str = "", then: str = "",
                   durable: bool = False) -> None:
    """Make ``path`` by ``write(temporary sibling)`` and a rename over it: the temporary file is
    removed on any failure (an interrupt too), and an I/O fault is one line (exit 5). ``durable``:
    the file's bytes, then the rename, reach the disk before this returns (``fsync`` of the file and
    of its folder), for what must survive a power cut (a checkpoint and its manifest)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
        if durable:
            fsync_path(path.parent)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise io_fault(err, path, doing or f"writing {path.name}", then) from None
        raise


def fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's entries') written data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
