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
each call's misses outside it, each thread through its own io_uring; a row missing in one call
while another call is reading it is not read again (the call waits for that read and shares it,
counted as *coalesced*). A share of the cache may hold the hottest rows for good
(:meth:`SdmEmbeddings.pin`: the Software Defined Memory paper's pinned hot rows), the rest
managed by the policy. The training path's
classes (:class:`~harness.reference.tiered.SsdRows`, :class:`~harness.reference.tiered.TieredEmbeddingCollection`)
are not used or changed.
"""

from __future__ import annotations

import itertools
import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
                            for k, (a, b) in enumerate(itertools.pairwise(cuts))]
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


@dataclass(eq=False)
class _InFlight:
    """One lookup call's read of its misses while it is in flight: another call missing some of
    the same rows waits for it and shares its values instead of reading them again."""

    rows: torch.Tensor  # distinct, ascending
    done: threading.Event = field(default_factory=threading.Event)
    values: torch.Tensor | None = None  # the rows' values, set before ``done`` (left None if the read failed)

    def wait(self) -> torch.Tensor:
        self.done.wait()
        if self.values is None:
            raise HarnessError("a storage read that this lookup shared failed (the call that made it raised)",
                               ErrorCategory.RUN_FAILED)
        return self.values


class SdmEmbeddings(FusedEmbeddingCollection):
    """``table_rows`` tables (``dim`` wide, ``pooling`` ids per feature) served from ``store``
    through a cache of ``cache_rows`` rows, inference only; counts, per table, the ids looked
    up and those whose row was resident, and, per batch, the misses (distinct rows not
    resident that the call read itself) and the rows it shared from another call's read in
    flight (:attr:`coalesced`). A share of the cache may hold rows for good (:meth:`pin`: the
    hottest rows, loaded at start), the rest is managed by ``policy``."""

    column_offsets: torch.Tensor  # FusedEmbeddingCollection's buffer (torch types a buffer Tensor | Module)

    def __init__(self, table_rows: tuple[int, ...], dim: int, pooling: tuple[int, ...], store: PreadRows,
                 cache_rows: int, policy: CachePolicy = CachePolicy.LRU, *, coalesce: bool = True):
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
        self.coalesced = 0  # distinct rows of a call read by another call in flight, shared, not read again
        self.batches = 0
        self.bypass_batches = 0
        self.coalesce = coalesce
        self._in_flight: list[_InFlight] = []  # the calls' reads in flight (their rows disjoint), under the lock
        self._lock = threading.Lock()  # the cache, the reads in flight and the counts; reads happen outside it
        self._mine = threading.local()

    @property
    def pinned(self) -> int:
        """The rows the cache holds for good (:meth:`pin`)."""
        return self.cache.pinned_in_capacity

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """The pooled vectors of ``sparse``. Several threads may call it at once (Server's lookup
        threads): the cache's bookkeeping is done under a lock, the device reads of a call's misses
        outside it, so one call's reads do not hold up another's hits, and reads of several calls
        are in flight together (each thread its own io_uring). Misses are coalesced: a row not
        resident that another call is reading already is not read again; this call waits for that
        read and shares its values (counted in :attr:`coalesced`, not in the misses). So a call's
        misses are the rows it reads itself; a row it found resident and another call evicted
        before it admitted its misses is read then, and counted a miss too, so the reads always
        equal the misses. The values are those of one call alone: the file is read-only, a row's
        value is the same whoever reads it."""
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
                mine, shared, flight = self._claim(unique, ~resident)
            values = torch.empty(unique.numel(), self.dim)
            self._read_own(unique, mine, values, flight)
            try:
                for other, where, at in shared:  # published before their owners wait on anything: no cycle
                    values[where] = other.wait().index_select(0, at)
                with self._lock:
                    misses = int(mine.numel())
                    now = self.cache.row_slot.index_select(0, unique) >= 0
                    lost = resident & ~now  # resident when looked at, evicted by another call since
                    if bool(lost.any()):
                        values[lost] = self.store.read(unique[lost])
                        self.table_hits.index_add_(0, table[lost], -counts[lost])  # a miss after all
                        misses += int(lost.sum())
                    self.misses += misses
                    self.coalesced += sum(int(where.numel()) for _, where, _ in shared)
                    reads1, waits1 = self.store.thread_totals()
                    self._mine.call = (reads1 - reads0, misses, waits1 - waits0)
                    values = self._admit(unique, now, values, counts)
            finally:
                if flight is not None:
                    with self._lock:
                        self._in_flight.remove(flight)
            return self._lookup(values, inverse)

    def _claim(self, unique: torch.Tensor, missing: torch.Tensor) -> tuple[
            torch.Tensor, list[tuple[_InFlight, torch.Tensor, torch.Tensor]], _InFlight | None]:
        """Of a call's missing rows (``missing``: a mask over ``unique``), those it reads itself
        (positions in ``unique``), registered as its read in flight (coalescing: None if it reads
        none); and, per read in flight of another call, the positions it shares and where they
        are in that read's rows. Called under the lock, so that no two calls claim a row."""
        positions = torch.nonzero(missing).reshape(-1)
        shared: list[tuple[_InFlight, torch.Tensor, torch.Tensor]] = []
        if self.coalesce and self._in_flight and positions.numel():
            wanted = unique.index_select(0, positions)
            free = torch.ones(positions.numel(), dtype=torch.bool)
            for other in self._in_flight:
                hit = torch.isin(wanted, other.rows)
                if bool(hit.any()):
                    shared.append((other, positions[hit], torch.searchsorted(other.rows, wanted[hit])))
                    free &= ~hit
            positions = positions[free]
        flight = None
        if self.coalesce and positions.numel():
            flight = _InFlight(unique.index_select(0, positions))
            self._in_flight.append(flight)
        return positions, shared, flight

    def _read_own(self, unique: torch.Tensor, mine: torch.Tensor, values: torch.Tensor,
                  flight: _InFlight | None) -> None:
        """Read the rows at positions ``mine`` of ``unique`` into ``values``, and publish them to
        the calls that share ``flight`` (this read, claimed in flight)."""
        if mine.numel() == 0:
            return
        rows = unique.index_select(0, mine)
        try:
            got = self.store.read(rows)
        except BaseException:
            if flight is not None:
                flight.done.set()  # values None: whoever shares it raises too
                with self._lock:
                    self._in_flight.remove(flight)
            raise
        values[mine] = got
        if flight is not None:
            flight.values = got
            flight.done.set()

    def _admit(self, unique: torch.Tensor, resident: torch.Tensor, values: torch.Tensor,
               counts: torch.Tensor) -> torch.Tensor:
        """Admit a call's rows (``resident``: those resident now; ``values``: every row's) and
        return the values to pool: all of them when its rows other than the pinned ones fit the
        slots the policy manages; else the rows resident stay, its hottest missing rows take the
        slots left, and the others are used as read, not kept. Called under the lock."""
        cache = self.cache
        if cache.evictable_capacity == 0:  # the whole cache pinned: nothing enters or leaves it
            if bool(resident.any()):
                slots = cache.row_slot.index_select(0, unique[resident]).long()
                values[resident] = cache.weights.index_select(0, slots)
            self.bypass_batches += int(not bool(resident.all()))
            return values
        pinned = 0
        if self.pinned:
            slots = cache.row_slot.index_select(0, unique)
            pinned = int(cache.never_evict.index_select(0, slots[slots >= 0].long()).sum())
        if unique.numel() - pinned <= cache.evictable_capacity:
            slots = cache.admit(unique, missing=unique[~resident], fetched=values[~resident], counts=counts)
            return cache.weights.index_select(0, slots)
        self.bypass_batches += 1
        admitted = self._admitted(unique, resident, counts, pinned)
        fresh = admitted & ~resident
        slots = cache.admit(unique[admitted], missing=unique[fresh], fetched=values[fresh], counts=counts[admitted])
        values[admitted] = cache.weights.index_select(0, slots)
        return values

    @property
    def last_call(self) -> tuple[int, int, int]:
        """The calling thread's last :meth:`forward`: the rows the store read for it, its misses
        (counted here, apart from the store) and the device latencies its reads waited."""
        return getattr(self._mine, "call", (0, 0, 0))

    def pin(self, rows: torch.Tensor) -> None:
        """Hold ``rows`` (distinct, hottest first: as many as the cache holds) in the cache for good,
        before any lookup: never evicted, the policy manages the slots left. What it reads is not
        counted."""
        with torch.no_grad():
            self.cache.pin(rows[: self.cache.evictable_capacity].to(torch.int64))
        self._forget_reads()

    def warm(self, rows: torch.Tensor) -> None:
        """The cache filled with ``rows`` (distinct, hottest first: as many as it holds) before any
        lookup, as a deployment loads its hot rows at start; what it reads is not counted."""
        with torch.no_grad():
            self.cache.admit(rows[: self.cache.evictable_capacity].to(torch.int64))
        self._forget_reads()

    def _forget_reads(self) -> None:
        self.cache.stats = type(self.cache.stats)()
        store = self.store
        store.reads = store.bytes_read = store.latency_waits = 0
        store.read_s = 0.0

    def _admitted(self, unique: torch.Tensor, resident: torch.Tensor, counts: torch.Tensor,
                  pinned: int = 0) -> torch.Tensor:
        """Which of a batch's distinct rows a full cache admits: every resident row (it stays),
        then the missing rows that serve the most ids of the batch (LFU: the most ids so far, the
        batch's included), as many as the policy's slots have left (``pinned``: the batch's rows
        held for good, in no policy slot); ties in row order."""
        heat = counts if self.cache.row_uses is None else counts + self.cache.row_uses.index_select(0, unique)
        room = max(0, self.cache.evictable_capacity - (int(resident.sum()) - pinned))
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
