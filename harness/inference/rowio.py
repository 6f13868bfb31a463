"""Row reads at the device's queue depth: one batched submission per call through io_uring.

The reader is ``_rowio.c``, a small C library built at install (``setup.py``: an optional
extension; gcc and the kernel's headers are all it needs) and loaded here with ctypes, so a
call holds no GIL while its reads are in flight. Where it is missing (not built, another
platform) or the kernel refuses io_uring (``io_uring_setup`` fails: an old kernel, a seccomp
profile), :func:`compiled_reader` says why and the callers fall back to Python threads issuing
one ``pread`` each, and print that they did: :data:`FALLBACK` names it.

:class:`DeviceProbe` is what :func:`harness.inference.storage.probe_device` measured of the
device itself: random reads of one row slot each, at a queue depth, through the same reader,
with nothing else in the loop, so a serving run can print its own reads/s as a fraction of it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

COMPILED = "io_uring (compiled reader)"
FALLBACK = "python threads (pread)"


class _Lib:
    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path), use_errno=True)
        lib.rowio_ring_new.restype = ctypes.c_void_p
        lib.rowio_ring_new.argtypes = [ctypes.c_uint]
        lib.rowio_ring_free.restype = None
        lib.rowio_ring_free.argtypes = [ctypes.c_void_p]
        lib.rowio_read.restype = ctypes.c_int
        lib.rowio_read.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                   ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_int64)]
        self.lib = lib


@functools.cache
def compiled_reader() -> tuple[_Lib | None, str]:
    """The compiled reader and ``""``, or None and why not (one phrase)."""
    if os.environ.get("HARNESS_ROWIO", "") == "python":
        return None, "HARNESS_ROWIO=python"
    here = Path(__file__).resolve().parent
    found = sorted(here.glob("_rowio*.so"))
    if not found:
        return None, "the compiled reader was not built at install (setup.py needs gcc)"
    try:
        lib = _Lib(found[0])
    except OSError as err:
        return None, f"the compiled reader does not load ({err})"
    ring = lib.lib.rowio_ring_new(8)
    if not ring:
        return None, f"io_uring is refused here ({os.strerror(ctypes.get_errno())})"
    lib.lib.rowio_ring_free(ring)
    return lib, ""


def reader_name() -> str:
    """What reads the rows, as every report prints it."""
    lib, why = compiled_reader()
    return COMPILED if lib is not None else f"{FALLBACK}; {why}"


def aligned_empty(nbytes: int, align: int = mmap.PAGESIZE) -> np.ndarray:
    """A zeroed byte array whose data starts on an ``align`` boundary (O_DIRECT's buffers)."""
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip : skip + nbytes]


class RingReader:
    """Reads of row slots through the compiled reader, one io_uring per thread that reads (a
    ring's submission queue is its thread's alone); ``depth`` reads in flight at most."""

    def __init__(self, depth: int):
        lib, why = compiled_reader()
        if lib is None:
            raise RuntimeError(f"no compiled reader: {why}")
        self._lib, self.depth = lib.lib, int(depth)
        self._local = threading.local()
        self._rings: list[int] = []
        self._lock = threading.Lock()

    def _ring(self) -> int:
        ring = getattr(self._local, "ring", None)
        if ring is None:
            ring = self._lib.rowio_ring_new(max(8, self.depth))
            if not ring:
                raise OSError(ctypes.get_errno(), f"io_uring_setup: {os.strerror(ctypes.get_errno())}")
            self._local.ring = ring
            with self._lock:
                self._rings.append(ring)
        return ring

    def read(self, fd: int, offsets: np.ndarray, slot: int, out: np.ndarray) -> None:
        """Slot ``i`` (``slot`` bytes at ``offsets[i]``) into ``out[i * slot:]``; ``out`` a byte
        array (aligned where the file is open with O_DIRECT). Raises OSError (the row's index in
        ``err.row``) on a failed or short read."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        n = len(offsets)
        if n == 0:
            return
        assert out.nbytes >= n * slot and out.flags.c_contiguous
        failed = ctypes.c_int64(-1)
        rc = self._lib.rowio_read(self._ring(), fd, offsets.ctypes.data, n, slot, out.ctypes.data, self.depth,
                                  ctypes.byref(failed))
        if rc != 0:
            err = OSError(-rc, "short read or I/O error" if rc == -errno.EIO else os.strerror(-rc))
            err.row = int(failed.value)  # type: ignore[attr-defined]
            raise err

    def close(self) -> None:
        with self._lock:
            rings, self._rings = self._rings, []
        for ring in rings:
            self._lib.rowio_ring_free(ring)


@dataclass(frozen=True)
class DeviceProbe:
    """What the device gave to random reads of one slot each at a queue depth."""

    reads: int
    seconds: float
    depth: int
    slot_bytes: int
    reader: str

    @property
    def reads_per_s(self) -> float:
        return self.reads / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        return (f"device probe: {self.reads_per_s:,.0f} random {self.slot_bytes}-byte reads/s at queue depth "
                f"{self.depth} ({self.reads:,} reads, {self.reader})")

