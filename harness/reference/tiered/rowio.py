"""Row reads and writes at the device's queue depth: one batched submission per call through io_uring.

The reader is ``_rowio.c``, a small C library built at install (``setup.py``: an optional
extension; gcc and the kernel's headers are all it needs) and loaded here with ctypes, so a
call holds no GIL while its reads are in flight. Where it is missing (not built, another
platform) or the kernel refuses io_uring (``io_uring_setup`` fails: an old kernel, a seccomp
profile), :func:`compiled_reader` says why and the callers fall back to Python threads issuing
one ``pread`` (or ``pwrite``) each, and print that they did: :data:`FALLBACK` names it.

Two users of :func:`transfer`, one ring per thread: the inference row file (fixed-size row
slots, :class:`harness.inference.storage.PreadRows`) and the training SSD tier (spans of whole
blocks around the rows, read and written, :class:`harness.reference.tiered.SsdRows`). :func:`probe_direct` says whether a file takes
``O_DIRECT`` and at what alignment.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.reference.planner.types import RowReader

COMPILED = "io_uring (compiled reader)"
FALLBACK = "python threads (pread)"


class _Lib:
    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path), use_errno=True)
        lib.rowio_ring_new.restype = ctypes.c_void_p
        lib.rowio_ring_new.argtypes = [ctypes.c_uint]
        lib.rowio_ring_free.restype = None
        lib.rowio_ring_free.argtypes = [ctypes.c_void_p]
        lib.rowio_spans.restype = ctypes.c_int
        lib.rowio_spans.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint,
                                    ctypes.POINTER(ctypes.c_int64)]
        self.lib = lib


@functools.cache
def compiled_reader() -> tuple[_Lib | None, str]:
    """The compiled reader and ``""``, or None and why not (one phrase)."""
    here = Path(__file__).resolve().parent
    found = sorted(here.glob("_rowio*.so"))
    if not found:
        return None, "the compiled reader was not built at install (setup.py needs gcc)"
    try:
        lib = _Lib(found[0])
    except (OSError, AttributeError) as err:  # AttributeError: a library built before rowio_spans
        return None, f"the compiled reader does not load ({err})"
    ring = lib.lib.rowio_ring_new(8)
    if not ring:
        return None, f"io_uring is refused here ({os.strerror(ctypes.get_errno())})"
    lib.lib.rowio_ring_free(ring)
    return lib, ""


def uses_compiled(reader: RowReader) -> bool:
    """Whether ``reader`` moves rows through the compiled reader (``auto`` where it loads)."""
    return reader is RowReader.AUTO and compiled_reader()[0] is not None


def reader_name(reader: RowReader = RowReader.AUTO) -> str:
    """What reads the rows for ``reader``, as every report prints it."""
    if reader is RowReader.THREADS:
        return f"{FALLBACK}; chosen (row reader: threads)"
    lib, why = compiled_reader()
    return COMPILED if lib is not None else f"{FALLBACK}; {why}"


ALIGNMENTS = (512, 4096)  # the logical block sizes O_DIRECT may need


def probe_direct(path: Path) -> tuple[int | None, str]:
    """The alignment at which ``path`` reads with O_DIRECT, or None and why not (one phrase); a
    file shorter than the alignment tried cannot tell."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return None, "O_DIRECT is not available on this platform"
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError as err:
        return None, f"the file system refuses O_DIRECT ({err.strerror})"
    try:
        buf = mmap.mmap(-1, max(ALIGNMENTS))  # page-aligned
        last = "the file is shorter than one block"
        for align in ALIGNMENTS:
            try:
                if os.preadv(fd, [memoryview(buf)[:align]], 0) == align:
                    return align, ""
            except OSError as err:
                last = err.strerror or str(err)
        return None, f"O_DIRECT reads failed at {', '.join(map(str, ALIGNMENTS))}-byte alignment ({last})"
    finally:
        os.close(fd)


def aligned_empty(nbytes: int, align: int = mmap.PAGESIZE) -> np.ndarray:
    """A zeroed byte array whose data starts on an ``align`` boundary (O_DIRECT's buffers)."""
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip : skip + nbytes]


_THREAD = threading.local()  # this thread's ring for transfer() (a ring is one thread's alone)
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
RING_ENTRIES = 4096  # the most transfers in flight through transfer()'s rings (a queue depth above is capped)


class _OwnedRing:
    """A thread's ring, freed when the thread ends (its thread-local attributes are dropped)."""

    def __init__(self, lib: _Lib):
        self.lib, self.ring = lib.lib, lib.lib.rowio_ring_new(RING_ENTRIES)
        if not self.ring:
            raise OSError(ctypes.get_errno(), f"io_uring_setup: {os.strerror(ctypes.get_errno())}")

    def __del__(self) -> None:
        if getattr(self, "ring", None):
            self.lib.rowio_ring_free(self.ring)
            self.ring = None


def _thread_ring(lib: _Lib) -> int:
    owned = getattr(_THREAD, "ring", None)
    if owned is None:
        owned = _THREAD.ring = _OwnedRing(lib)
    return owned.ring


def _pool(depth: int) -> ThreadPoolExecutor:
    with _POOLS_LOCK:
        if depth not in _POOLS:
            _POOLS[depth] = ThreadPoolExecutor(depth, thread_name_prefix="rowio")
        return _POOLS[depth]


def transfer(fd: int, *, write: bool, offsets: np.ndarray, lens: np.ndarray, bufoffs: np.ndarray, buf: np.ndarray,
             depth: int, compiled: bool = True) -> None:
    """Read (or write) spans: span ``i`` is ``lens[i]`` bytes at offset ``offsets[i]`` of ``fd``,
    at ``buf[bufoffs[i]:]`` (a byte array; offsets, lengths and the buffer's addresses aligned
    where ``fd`` is open with O_DIRECT), up to ``depth`` in flight: through this thread's io_uring
    (``compiled``, where it loads), or :data:`FALLBACK`'s threads. Raises OSError (the span's index in ``err.span``) on a failed
    or short transfer."""
    n = len(offsets)
    if n == 0:
        return
    offsets, lens, bufoffs = (np.ascontiguousarray(a, dtype=np.int64) for a in (offsets, lens, bufoffs))
    assert buf.flags.c_contiguous and int((bufoffs + lens).max()) <= buf.nbytes
    lib = compiled_reader()[0] if compiled else None
    if lib is not None:
        failed = ctypes.c_int64(-1)
        rc = lib.lib.rowio_spans(_thread_ring(lib), fd, int(write), offsets.ctypes.data, lens.ctypes.data,
                                 bufoffs.ctypes.data, n, buf.ctypes.data, min(int(depth), RING_ENTRIES),
                                 ctypes.byref(failed))
        if rc != 0:
            err = OSError(-rc, "short transfer or I/O error" if rc == -errno.EIO else os.strerror(-rc))
            err.span = int(failed.value)  # type: ignore[attr-defined]
            raise err
        return
    view = buf.data.cast("B")

    def some(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            part, at = view[bufoffs[i] : bufoffs[i] + lens[i]], int(offsets[i])
            try:
                done = os.pwritev(fd, [part], at) if write else os.preadv(fd, [part], at)
            except OSError as err:
                err.span = i  # type: ignore[attr-defined]
                raise
            if done != lens[i]:
                short = OSError(errno.EIO, "short transfer or I/O error")
                short.span = i  # type: ignore[attr-defined]
                raise short

    depth = max(1, min(int(depth), n))
    if depth == 1:
        some(0, n)
        return
    cuts = np.linspace(0, n, depth + 1).astype(int).tolist()
    for job in [_pool(depth).submit(some, a, b) for a, b in zip(cuts[:-1], cuts[1:])]:
        job.result()


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

