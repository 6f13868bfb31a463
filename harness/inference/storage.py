"""Inference rows on the SSD tier, read row by row with ``pread``, each read counted.

:class:`PreadRows` keeps the trained tables' rows (weights only: inference has no optimizer
state) in a file and reads exactly the rows asked for, one ``pread`` per row, never a page
or a map around it. Where the file system takes ``O_DIRECT`` (probed on the file itself:
an aligned read of 512, then 4096 bytes), each row sits in a slot of the alignment (a row
of 64 bytes in a 512-byte slot) and is read with ``os.preadv`` into an aligned buffer,
bypassing the page cache: every read is a device read. Where it does not, the file is
packed (one row after another) and read with buffered ``os.pread``; :attr:`PreadRows.mode`
says which, and why (``direct``, or ``buffered (<reason>)``), and every report prints it.

Reads are issued at a *queue depth*: a batch's rows go to the device in one submission through
io_uring, ``queue_depth`` in flight at once (:mod:`harness.reference.tiered.rowio`: a small C reader
built at install, no GIL held while the reads are in flight). Where that reader is missing or
io_uring refused, a batch's rows are split over ``queue_depth`` threads, each issuing its share
one ``pread`` after another (the call releases the GIL, so up to ``queue_depth`` reads are in
flight; at 1, one after another); :attr:`PreadRows.reader` says which, and why.
``latency_us`` adds a device latency to every read: reads in flight together wait together,
so a batch of ``n`` reads waits ``ceil(n / queue_depth)`` times the latency, a busy-wait after
its reads (calibrated at start: the median of repeated waits of one latency is
:attr:`PreadRows.added_latency_us`). At queue depth 1 that is the latency after every read.

:class:`SdmEmbeddings` serves a model's tables from such a file through a
:class:`~harness.reference.tiered.RowCache`: a batch whose distinct rows fit the cache
is admitted (its missing rows read and cached, evicting others); of a larger batch the cache
admits what it holds (the rows resident already, then the hottest missing ones: the most ids of
the batch, with LFU the most so far) and reads the others without admitting them. Either way the rows read are exactly the batch's
distinct rows that were not resident, its *misses*, which it counts (with the lookups and
hits of each table) independently of the store's count of reads. Several threads may look up
at once (Server's lookup threads): the cache's bookkeeping is under a lock, the device reads of
each call's misses outside it, each thread through its own io_uring. The training path's
classes (:class:`~harness.reference.tiered.SsdRows`, :class:`~harness.reference.tiered.TieredEmbeddingCollection`)
are not used or changed.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.tiers import Tier
from harness.reference.models.embeddings import FusedEmbeddingCollection, distinct
from harness.reference.planner.types import RowReader
from harness.reference.tiered import CachePolicy, RowCache, RowStore, rowio
from harness.reference.tiered.rowio import ALIGNMENTS, probe_direct


@dataclass(frozen=True)
class RowLayout:
    """Where rows are in the file: row ``r`` at ``r * stride``, ``cols`` float32 values."""

    rows: int
    cols: int
    stride: int  # bytes from one row to the next (the row itself, or its aligned slot)
    direct: bool  # read with O_DIRECT
    reason: str = ""  # why not direct

    @property
    def row_bytes(self) -> int:
        return 4 * self.cols

    @property
    def mode(self) -> str:
        return f"direct (O_DIRECT, {self.stride}-byte aligned slots)" if self.direct else f"buffered ({self.reason})"

    def to_dict(self) -> dict:
        return {"rows": self.rows, "cols": self.cols, "stride": self.stride, "direct": self.direct,
                "reason": self.reason}


def write_rows(path: Path, weight: torch.Tensor, *, direct: bool = True) -> RowLayout:
    """Write ``weight`` (``rows x cols`` float32) to ``path``, one slot per row: aligned slots
    if O_DIRECT works there (and ``direct``), else packed. The file is made durable (fsync)
    and, for direct reads, dropped from the page cache."""
    rows, cols = weight.shape
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(max(ALIGNMENTS) * 2)
    align, reason = probe_direct(path) if direct else (None, "O_DIRECT not asked for")
    row_bytes = 4 * cols
    stride = row_bytes if align is None else -(-row_bytes // align) * align
    data = np.zeros((rows, stride // 4), dtype=np.float32)
    data[:, :cols] = weight.detach().numpy()
    with open(path, "wb") as f:
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())
    if align is not None and hasattr(os, "posix_fadvise"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return RowLayout(rows=int(rows), cols=int(cols), stride=int(stride), direct=align is not None, reason=reason)


def busy_wait_ns(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class PreadRows(RowStore):
    """The rows of ``path`` (written by :func:`write_rows` as ``layout``), read one ``pread``
    per row, up to ``queue_depth`` at once; read-only. Counts :attr:`reads` and
    :attr:`bytes_read` (the bytes the reads transfer: the aligned slot when direct, the row
    when buffered)."""

    tier = Tier.SSD

    def __init__(self, path: Path, layout: RowLayout, *, latency_us: float = 0.0, queue_depth: int = 1,
                 reader: RowReader = RowReader.AUTO):
        super().__init__(layout.rows, layout.cols, 0)
        self.path, self.layout = Path(path), layout
        expected = layout.rows * layout.stride
        if not self.path.is_file() or self.path.stat().st_size != expected:
            raise HarnessError(f"{self.path}: not a row file of {layout.rows} rows x {layout.stride} bytes",
                               ErrorCategory.BAD_INPUT)
        if queue_depth < 1:
            raise HarnessError(f"storage queue depth {queue_depth}: give at least 1", ErrorCategory.BAD_INPUT)
        flags = os.O_RDONLY | (os.O_DIRECT if layout.direct else 0)
        self._fd = os.open(self.path, flags)
        self.queue_depth = int(queue_depth)
        # one aligned buffer per read in flight
        self._bufs = [mmap.mmap(-1, max(layout.stride, mmap.PAGESIZE)) for _ in range(queue_depth)] \
            if layout.direct else []
        self._compiled = rowio.uses_compiled(reader)
        self._fallback_lock = threading.Lock()
        self.reader = rowio.reader_name(reader)
        self._pool = ThreadPoolExecutor(queue_depth, thread_name_prefix="pread") \
            if queue_depth > 1 and not self._compiled else None
        self.latency_ns = round(latency_us * 1000)
        self.added_latency_us = self._calibrate() if self.latency_ns else 0.0
        self.reads = 0
        self.bytes_read = 0
        self.read_s = 0.0  # time spent in read(), waits included
        self.latency_waits = 0  # device latencies paid (reads in flight together pay one)
        # read() may be called from several threads at once (Server's lookup threads, each with
        # its own io_uring): the totals are updated under a lock, and each thread keeps its own
        # (:meth:`thread_totals`)
        self._count_lock = threading.Lock()
        self._mine = threading.local()

    def _calibrate(self, n: int = 200) -> float:
        """The median of ``n`` timed waits, in microseconds (the median: one preemption of the
        process during 200 waits of 20 us moved their mean to 74 us on a busy machine)."""
        waits = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            busy_wait_ns(self.latency_ns)
            waits.append(time.perf_counter_ns() - t0)
        return float(np.median(waits)) / 1000

    @property
    def transfer_bytes(self) -> int:
        """Bytes one read transfers."""
        return self.layout.stride if self.layout.direct else self.layout.row_bytes

    def _read_into(self, ids: list[int], out: np.ndarray, slot: int) -> None:
        """Read rows ``ids`` into ``out``, one after another, through buffer ``slot``."""
        fd, stride = self._fd, self.layout.stride
        if self.layout.direct:
            buf, cols = self._bufs[slot], self.cols
            view = memoryview(buf)[:stride]
            for i, r in enumerate(ids):
                if os.preadv(fd, [view], r * stride) != stride:
                    raise HarnessError(f"{self.path}: short read of row {r}", ErrorCategory.RUN_FAILED)
                out[i] = np.frombuffer(buf, dtype=np.float32, count=cols)
        else:
            size = self.layout.row_bytes
            for i, r in enumerate(ids):
                data = os.pread(fd, size, r * stride)
                if len(data) != size:
                    raise HarnessError(f"{self.path}: short read of row {r}", ErrorCategory.RUN_FAILED)
                out[i] = np.frombuffer(data, dtype=np.float32)

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        """The rows' values; safe to call from several threads at once with the compiled reader
        (a ring per thread). The Python threads' fallback reads through buffers of its own and
        takes one caller at a time."""
        ids = rows.reshape(-1).tolist()
        n = len(ids)
        out = np.empty((n, self.cols), dtype=np.float32)
        t0 = time.perf_counter()
        depth = min(self.queue_depth, n)
        waits = 0
        if self._compiled:
            self._ring_read(ids, out)
            waits = self._wait_waves(n)
        else:
            with self._fallback_lock:  # its aligned buffers are shared
                if depth <= 1 or self._pool is None:
                    if self.latency_ns and self.queue_depth == 1:  # the latency after every read
                        for i in range(n):
                            self._read_into(ids[i : i + 1], out[i : i + 1], 0)
                            busy_wait_ns(self.latency_ns)
                        waits = n
                    else:
                        self._read_into(ids, out, 0)
                        if self.latency_ns and n:
                            busy_wait_ns(self.latency_ns)
                            waits = 1
                else:
                    cuts = np.linspace(0, n, depth + 1).astype(int).tolist()
                    jobs = [self._pool.submit(self._read_into, ids[a:b], out[a:b], k)
                            for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
                    for job in jobs:
                        job.result()
                    waits = self._wait_waves(n)
        took = time.perf_counter() - t0
        with self._count_lock:
            self.read_s += took
            self.reads += n
            self.bytes_read += n * self.transfer_bytes
            self.latency_waits += waits
        mine = self._mine
        mine.reads, mine.waits = getattr(mine, "reads", 0) + n, getattr(mine, "waits", 0) + waits
        return torch.from_numpy(out)

    def thread_totals(self) -> tuple[int, int]:
        """The rows the calling thread has read, and the device latencies its reads waited, so far."""
        return getattr(self._mine, "reads", 0), getattr(self._mine, "waits", 0)

    def _wait_waves(self, n: int) -> int:
        """The added latency of ``n`` reads (reads in flight together wait together): the waits paid."""
        if self.latency_ns and n:
            waves = -(-n // self.queue_depth)
            busy_wait_ns(self.latency_ns * waves)
            return waves
        return 0

    def _ring_read(self, ids: list[int], out: np.ndarray) -> None:
        """Every row of ``ids`` in one submission through the compiled reader."""
        n, slot = len(ids), self.transfer_bytes
        buf = rowio.aligned_empty(n * slot)
        try:
            rowio.transfer(self._fd, write=False, offsets=np.asarray(ids, dtype=np.int64) * self.layout.stride,
                           lens=np.full(n, slot, dtype=np.int64), bufoffs=np.arange(n, dtype=np.int64) * slot,
                           buf=buf, depth=self.queue_depth)
        except OSError as err:
            row = getattr(err, "span", -1)
            what = f"row {ids[row]}" if 0 <= row < n else "rows"
            raise HarnessError(f"{self.path}: reading {what} failed: {err.strerror}", ErrorCategory.RUN_FAILED) from None
        out[:] = buf.view(np.float32).reshape(n, slot // 4)[:, : self.cols]

    def write(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        raise HarnessError("the inference row file is read-only", ErrorCategory.RUN_FAILED)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SdmEmbeddings(FusedEmbeddingCollection):
    """``table_rows`` tables (``dim`` wide, ``pooling`` ids per feature) served from ``store``
    through a cache of ``cache_rows`` rows, inference only; counts, per table, the ids looked
    up and those whose row was resident, and, per batch, the misses (distinct rows not
    resident: the rows read)."""

    column_offsets: torch.Tensor  # FusedEmbeddingCollection's buffer (torch types a buffer Tensor | Module)

    def __init__(self, table_rows: tuple[int, ...], dim: int, pooling: tuple[int, ...], store: PreadRows,
                 cache_rows: int, policy: CachePolicy = CachePolicy.LRU):
        super().__init__(table_rows, dim, pooling, optimizer=None, allocate=False)
        if store.rows != sum(self.table_rows) or store.cols != dim:
            raise ValueError("the store's shape does not match the tables")
        self.store = store
        self.cache = RowCache(store, cache_rows, policy)
        self.weight = nn.Parameter(self.cache.weights, requires_grad=False)
        self.table_starts = torch.tensor((0, *np.cumsum(self.table_rows)[:-1].tolist()), dtype=torch.int64)
        self.table_lookups = torch.zeros(len(self.table_rows), dtype=torch.int64)
        self.table_hits = torch.zeros(len(self.table_rows), dtype=torch.int64)
        self.misses = 0
        self.batches = 0
        self.bypass_batches = 0
        self._lock = threading.Lock()  # the cache and the counts; reads happen outside it
        self._mine = threading.local()

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """The pooled vectors of ``sparse``. Several threads may call it at once (Server's lookup
        threads): the cache's bookkeeping is done under a lock, the device reads of a call's misses
        outside it, so one call's reads do not hold up another's hits, and reads of several calls
        are in flight together (each thread its own io_uring). A call's misses are the rows not
        resident when it looked (two calls missing the same row both read it); a row a call found
        resident and another call evicted before the first admitted its misses is read then, and
        counted a miss too, so the reads always equal the misses. The values are those of one
        call alone: the file is read-only, a row's value is the same whoever reads it."""
        with torch.no_grad():
            rows = sparse + self.column_offsets
            unique, inverse, counts = distinct(rows)
            table = torch.searchsorted(self.table_starts, unique, right=True) - 1
            reads0, waits0 = self.store.thread_totals()
            with self._lock:
                resident = self.cache.row_slot.index_select(0, unique) >= 0
                self.table_lookups.index_add_(0, table, counts)
                self.table_hits.index_add_(0, table[resident], counts[resident])
                self.batches += 1
            values = torch.empty(unique.numel(), self.dim)
            read = ~resident
            misses = int(read.sum())
            if misses:
                values[read] = self.store.read(unique[read])
            with self._lock:
                now = self.cache.row_slot.index_select(0, unique) >= 0
                lost = resident & ~now  # resident when looked at, evicted by another call since
                if bool(lost.any()):
                    values[lost] = self.store.read(unique[lost])
                    self.table_hits.index_add_(0, table[lost], -counts[lost])  # a miss after all
                    misses += int(lost.sum())
                self.misses += misses
                reads1, waits1 = self.store.thread_totals()
                self._mine.call = (reads1 - reads0, misses, waits1 - waits0)
                if unique.numel() <= self.cache.free_capacity:
                    slots = self.cache.admit(unique, missing=unique[~now], fetched=values[~now], counts=counts)
                    values = self.cache.weights.index_select(0, slots)
                else:
                    # more distinct rows than the cache holds: it admits what it can (the resident
                    # rows, then the batch's hottest missing ones), the others are used as read
                    self.bypass_batches += 1
                    admitted = self._admitted(unique, now, counts)
                    fresh = admitted & ~now
                    slots = self.cache.admit(unique[admitted], missing=unique[fresh], fetched=values[fresh],
                                             counts=counts[admitted])
                    values[admitted] = self.cache.weights.index_select(0, slots)
            return self._lookup(values, inverse)

    @property
    def last_call(self) -> tuple[int, int, int]:
        """The calling thread's last :meth:`forward`: the rows the store read for it, its misses
        (counted here, apart from the store) and the device latencies its reads waited."""
        return getattr(self._mine, "call", (0, 0, 0))

    def warm(self, rows: torch.Tensor) -> None:
        """The cache filled with ``rows`` (distinct, hottest first: as many as it holds) before any
        lookup, as a deployment loads its hot rows at start; what it reads is not counted."""
        with torch.no_grad():
            self.cache.admit(rows[: self.cache.free_capacity].to(torch.int64))
        self.cache.stats = type(self.cache.stats)()
        store = self.store
        store.reads = store.bytes_read = store.latency_waits = 0
        store.read_s = 0.0

    def _admitted(self, unique: torch.Tensor, resident: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Which of a batch's distinct rows a full cache admits: every resident row (it stays),
        then the missing rows that serve the most ids of the batch (LFU: the most ids so far, the
        batch's included), as many as the cache has slots; ties in row order."""
        heat = counts if self.cache.row_uses is None else counts + self.cache.row_uses.index_select(0, unique)
        room = self.cache.free_capacity - int(resident.sum())
        missing = torch.nonzero(~resident).reshape(-1)
        hottest = missing[torch.argsort(heat[missing], descending=True, stable=True)[:room]]
        admitted = resident.clone()
        admitted[hottest] = True
        return admitted

    def resident_bytes(self) -> int:
        """The cache's memory: its slots, its bookkeeping and its row -> slot map (int32 per row)."""
        return self.cache.nbytes + self.table_starts.numel() * 8


def probe_device(path: Path, layout: RowLayout, *, depth: int, reads: int = 20000, seed: int = 0,
                 seconds: float = 1.0, reader: RowReader = RowReader.AUTO) -> rowio.DeviceProbe:
    """The device's own limit: random reads of one slot each over the rows of ``path`` (as
    ``layout``), ``depth`` in flight, through :class:`PreadRows` (the compiled reader, or the
    Python threads, named) with nothing else in the loop; stops after ``reads`` reads or about
    ``seconds``, whichever comes first."""
    rng = np.random.default_rng(seed)
    store = PreadRows(path, layout, queue_depth=depth, reader=reader)
    chunk = max(depth * 32, 256)
    try:
        t0 = time.perf_counter()
        while store.reads < reads and time.perf_counter() - t0 < seconds:
            store.read(torch.from_numpy(rng.integers(0, layout.rows, size=chunk, dtype=np.int64)))
        return rowio.DeviceProbe(reads=store.reads, seconds=time.perf_counter() - t0, depth=depth,
                                 slot_bytes=store.transfer_bytes, reader=store.reader)
    finally:
        store.close()
