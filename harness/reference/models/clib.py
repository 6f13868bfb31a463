"""The optional compiled libraries of the reference's models (``_rowupdate.c``, ``_dotinteraction.c``):
built at install by ``setup.py`` where a C compiler is present, loaded here with ctypes."""

from __future__ import annotations

import ctypes
from pathlib import Path


def load(stem: str) -> ctypes.CDLL | None:
    """The library ``stem`` (``_rowupdate``, ``_dotinteraction``) next to this file, or None where it
    was not built or does not load (the callers then run torch's operations)."""
    found = sorted(Path(__file__).resolve().parent.glob(f"{stem}*.so"))
    if not found:
        return None
    try:
        return ctypes.CDLL(str(found[0]))
    except OSError:
        return None
