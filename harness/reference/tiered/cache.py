"""A software-managed cache of embedding rows in a fast tier over a slower one (LRU or LFU).

As FBGEMM's cached table-batched embeddings (and Neo's HBM cache over host memory): the
cache is a fixed set of *slots*, each holding one row (weights and optimizer state); the
training step looks rows up, and updates them, in the slots only. Before a batch, its
distinct rows are made resident (:meth:`RowCache.admit`): the missing ones are read from
the backing store into free slots or into the slots of victims, whose dirty rows are
written back. So no update is ever lost: a row is either resident (its slot holds the
latest values) or not (the store does, once the write-backs in flight are done), and
:meth:`RowCache.flush` writes every dirty slot back (at the end of a run and at a checkpoint).

Victims are never rows of the batch being admitted, nor pinned rows: the row ranges of
tables placed in the fast tier (slots on top of the capacity) and the rows
:meth:`RowCache.pin` holds in the capacity's own slots (inference's hottest rows, loaded at
start). LRU evicts the slot used longest ago; LFU the row looked up the fewest times since
the run began (every id counted, resident or not, as FBGEMM's LFU cache counts), the least
recently used first among equals. Ties go to the lowest slot, so eviction, like everything
here, is deterministic. The cache evicts ahead of need (:meth:`RowCache._victims`), from a
free list.

Reading the missing rows of the *next* batch can overlap the current step
(:meth:`RowCache.missing` then :meth:`RowStore.read` in a background thread, the same one
that writes victims back, in order): during a step no row enters or leaves the cache, so
the store's copy of a non-resident row cannot change while it is being read.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor, Future
from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.tiers import Tier
from harness.reference.planner.types import CachePolicy  # re-exported: torch-free, the planner counts it
from harness.reference.tiered.store import RowStore


@dataclass
class CacheStats:
    """Totals since the cache was made, as FBGEMM's cache counts them: every id looked up
    (``lookups``, ``hits``: the hit rate), the distinct rows of each batch (``unique_*``:
    what the store is read for), and the bytes moved between the tiers."""

    batches: int = 0
    lookups: int = 0  # every id looked up (a row repeated in a batch counts each time)
    hits: int = 0  # of those, the ids whose row was resident before the batch was admitted
    unique_lookups: int = 0  # distinct rows looked up, summed over batches
    unique_hits: int = 0
    bytes_read: int = 0  # from the backing store into the cache
    bytes_written: int = 0  # from the cache back to the store (evictions and flushes)

    @property
    def hit_rate(self) -> float:
        """Of all ids looked up, the share served by rows already resident: a cache's hit rate."""
        return self.hits / self.lookups if self.lookups else 1.0

    @property
    def unique_hit_rate(self) -> float:
        """Of the distinct rows of each batch, the share already resident: what the cache
        saves in reads from the store (popular rows repeat within a batch, so this is lower)."""
        return self.unique_hits / self.unique_lookups if self.unique_lookups else 1.0

    def __add__(self, other: CacheStats) -> CacheStats:
        return CacheStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(CacheStats)})

    def to_dict(self, tier: Tier) -> dict[str, str | float]:
        """The counters as JSON (the logs' ``harness_embedding_cache``), the bytes named by ``tier``."""
        per_batch = max(self.batches, 1)
        name = tier.value
        return {
            "tier": name,
            "batches": self.batches,
            "hit_rate": round(self.hit_rate, 6),
            "unique_hit_rate": round(self.unique_hit_rate, 6),
            "lookups": self.lookups,
            "hits": self.hits,
            "unique_lookups": self.unique_lookups,
            "unique_hits": self.unique_hits,
            f"{name}_bytes_read": self.bytes_read,
            f"{name}_bytes_written": self.bytes_written,
            f"{name}_bytes_read_per_step": round(self.bytes_read / per_batch, 1),
            f"{name}_bytes_written_per_step": round(self.bytes_written / per_batch, 1),
        }


class RowCache:
    """``capacity`` slots of rows of ``store``, managed by ``policy``."""

    def __init__(self, store: RowStore, capacity: int, policy: CachePolicy = CachePolicy.LRU,
                 pinned: tuple[tuple[int, int], ...] = (), io: Executor | None = None):
        """``pinned``: row ranges ``[lo, hi)`` kept resident for good, in slots of their own on
        top of ``capacity`` (tables placed in the fast tier): never evicted, written back
        only by :meth:`flush`, and left out of the statistics.

        ``io``: a single-worker executor that writes evicted rows back to the store, off the
        training thread. Its tasks run in order, so a read submitted to it after a write
        sees that write; reads on the calling thread wait for the pending writes first
        (:meth:`drain`)."""
        if capacity < 1:
            raise HarnessError(f"a row cache needs at least one slot, not {capacity}", ErrorCategory.BAD_INPUT)
        self.pinned_ranges = tuple(pinned)
        pinned_rows = sum(hi - lo for lo, hi in self.pinned_ranges)
        self.free_capacity = int(min(capacity, store.rows - pinned_rows)) or 1
        self.store, self.capacity, self.policy = store, self.free_capacity + pinned_rows, policy
        self.io = io
        self._writes: deque[Future] = deque()  # write-backs in flight on ``io``, oldest first
        self.weights = torch.zeros(self.capacity, store.cols, dtype=store.dtype)  # read and updated in place by the step
        self._state = torch.zeros(self.capacity, store.state_cols)
        self.slot_row = torch.full((self.capacity,), -1, dtype=torch.int64)
        # one int32 per row of the whole table: the only per-row cost of the cache in memory
        self.row_slot = torch.full((store.rows,), -1, dtype=torch.int32)
        self.dirty = torch.zeros(self.capacity, dtype=torch.bool)
        self.last_use = torch.zeros(self.capacity, dtype=torch.int64)
        self.row_uses = torch.zeros(store.rows, dtype=torch.int64) if policy is CachePolicy.LFU else None
        self.clock = 0
        self.stats = CacheStats()
        self.never_evict = torch.zeros(self.capacity, dtype=torch.bool)
        self.evict_ahead = max(1, self.free_capacity // 64)
        self.pinned_in_capacity = 0  # rows :meth:`pin` holds for good in the capacity's own slots
        self._free = torch.arange(self.capacity)  # free slots, ascending
        if self.pinned_ranges:
            rows = torch.cat([torch.arange(lo, hi) for lo, hi in self.pinned_ranges])
            self.admit(rows)
            self.never_evict[self.row_slot.index_select(0, rows).long()] = True
            self.stats = CacheStats()  # loading the pinned rows is not the cache's traffic

    @property
    def nbytes(self) -> int:
        """The cache's own memory: its slots (weights and state) and bookkeeping, and the
        row -> slot map (and LFU's use counts) over every row of its store."""
        tensors = (self.weights, self._state, self.slot_row, self.row_slot, self.dirty, self.last_use,
                   self.never_evict, self._free, *(() if self.row_uses is None else (self.row_uses,)))
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def state(self) -> torch.Tensor:
        """The slots' optimizer state (a view): ``capacity x cols`` (Adagrad), ``capacity``
        (row-wise Adagrad) or empty (SGD)."""
        if self.store.state_cols == 0:
            return self._state.new_empty(0)
        return self._state.squeeze(1) if self.store.state_cols == 1 else self._state

    @property
    def evictable_capacity(self) -> int:
        """The slots the policy manages: the capacity less the rows :meth:`pin` holds."""
        return self.free_capacity - self.pinned_in_capacity

    def pin(self, rows: torch.Tensor) -> None:
        """Make the distinct ``rows`` resident for good in slots of the cache's own capacity
        (inference's hottest rows, loaded at start): never evicted, so the slots the policy
        manages shrink by as many. Loading them is not the cache's traffic (not counted)."""
        rows = rows.to(torch.int64)
        if rows.numel() > self.evictable_capacity:
            raise HarnessError(f"{rows.numel()} rows to pin but the cache has {self.evictable_capacity} slots left",
                               ErrorCategory.BAD_INPUT)
        before = replace(self.stats)
        slots = self.admit(rows)
        self.stats = before
        fresh = ~self.never_evict.index_select(0, slots)
        self.never_evict[slots] = True
        self.pinned_in_capacity += int(fresh.sum())
        self.evict_ahead = max(1, self.evictable_capacity // 64)

    def missing(self, rows: torch.Tensor) -> torch.Tensor:
        """Those of the distinct ``rows`` that are not resident."""
        return rows[self.row_slot.index_select(0, rows) < 0]

    def admit(self, rows: torch.Tensor, missing: torch.Tensor | None = None,
              fetched: torch.Tensor | None = None, counts: torch.Tensor | None = None) -> torch.Tensor:
        """Make the distinct ``rows`` resident and return their slots (int64); ``fetched`` are
        the store's values of ``missing`` (read ahead), or they are read now; ``counts``: how
        many ids of the batch each row serves (for the hit rate; default one each)."""
        outside = self._outside_pinned(rows)
        cached = rows if outside is None else rows[outside]
        if cached.numel() > self.free_capacity:
            raise HarnessError(
                f"a batch looks up {cached.numel()} distinct rows of a table but its cache holds "
                f"{self.free_capacity}; give the cache more rows (a larger cache fraction)",
                ErrorCategory.BAD_INPUT,
            )
        resident = self.row_slot.index_select(0, rows) >= 0
        if missing is None:
            missing = rows[~resident]
        elif bool((self.row_slot.index_select(0, missing) >= 0).any()):
            raise RuntimeError("rows read ahead became resident before they were admitted")
        if fetched is None:
            self.drain()
            fetched = self.store.read(missing)
        self._count(rows, outside, resident, counts, missing.numel())
        if missing.numel():
            slots = self._victims(rows, missing.numel())
            self.weights.index_copy_(0, slots, self.store.weights_of(fetched))
            self._state.index_copy_(0, slots, self.store.state_of(fetched))
            self.slot_row[slots] = missing
            self.row_slot[missing] = slots.to(self.row_slot.dtype)
        self.clock += 1
        slots = self.row_slot.index_select(0, rows).long()
        self.last_use[slots] = self.clock
        if self.row_uses is not None:
            self.row_uses.index_add_(0, rows, torch.ones_like(rows) if counts is None else counts)
        return slots

    def _count(self, rows: torch.Tensor, outside: torch.Tensor | None, resident: torch.Tensor,
               counts: torch.Tensor | None, misses: int) -> None:
        s = self.stats
        s.batches += 1
        s.bytes_read += misses * self.store.row_bytes
        unique = rows.numel() if outside is None else int(outside.sum())
        s.unique_lookups += unique
        s.unique_hits += unique - misses
        if counts is None:
            s.lookups += unique
            s.hits += unique - misses
        else:
            mine = counts if outside is None else counts[outside]
            s.lookups += int(mine.sum())
            s.hits += int(mine.sum()) - int(counts[~resident].sum())  # pinned rows are never missing

    def _outside_pinned(self, rows: torch.Tensor) -> torch.Tensor | None:
        """Which of ``rows`` are the cache's (outside the pinned ranges); None: all of them."""
        if not self.pinned_ranges:
            return None
        inside = torch.zeros(rows.shape, dtype=torch.bool)
        for lo, hi in self.pinned_ranges:
            inside |= (rows >= lo) & (rows < hi)
        return ~inside

    def unpinned(self, rows: torch.Tensor) -> torch.Tensor:
        """Those of ``rows`` outside the pinned ranges."""
        outside = self._outside_pinned(rows)
        return rows if outside is None else rows[outside]

    def current_weights(self, rows: torch.Tensor) -> torch.Tensor:
        """The latest weights of ``rows``, wherever they are (a slot, or the store once the
        write-backs in flight are done); nothing is admitted."""
        self.drain()
        values = self.store.weights_of(self.store.read(rows)).clone()
        slots = self.row_slot.index_select(0, rows)
        resident = slots >= 0
        values[resident] = self.weights.index_select(0, slots[resident].long())
        return values

    def slots_of(self, rows: torch.Tensor) -> torch.Tensor:
        """The slots (int64) of resident rows (any shape)."""
        return self.row_slot[rows].long()

    def mark_dirty(self, slots: torch.Tensor) -> None:
        self.dirty[slots] = True

    def flush(self) -> None:
        """Write every dirty row back and make the store durable."""
        self._write_back(self.dirty.nonzero().squeeze(1))
        self.drain()
        self.store.flush()

    def drain(self) -> None:
        """Wait for the write-backs in flight (and raise the first that failed)."""
        while self._writes:
            self._writes.popleft().result()

    def _write_back(self, slots: torch.Tensor) -> None:
        slots = slots[self.dirty.index_select(0, slots)]
        if slots.numel():
            values = self.store.pack(self.weights.index_select(0, slots), self._state.index_select(0, slots))
            rows = self.slot_row.index_select(0, slots)
            if self.io is None:
                self.store.write(rows, values)
            else:  # copies of the rows and values: the slots are reused at once
                while self._writes and self._writes[0].done():
                    self._writes.popleft().result()
                self._writes.append(self.io.submit(self.store.write, rows, values))
            self.dirty[slots] = False
            self.stats.bytes_written += slots.numel() * self.store.row_bytes

    def _victims(self, rows: torch.Tensor, count: int) -> torch.Tensor:
        """``count`` free slots for new rows (lowest first): free ones first, then the
        policy's victims (written back and unmapped), never ``rows``.

        The victims are the slots of smallest key, LRU: last use; LFU: (uses of the row, last
        use), lowest slot first among equal keys; found with one selection (linear), not a
        sort of the whole cache. When it must evict, it evicts ahead: at least
        ``evict_ahead`` slots (1/64 of the cache), so that the pass over every slot runs
        once every few batches rather than at each, as a cache's background eviction does.
        The slots freed ahead are the next victims in the policy's order anyway.
        """
        free = self._free
        if free.numel() < count:
            free = torch.cat([free, self._evict(rows, count - free.numel())]).sort().values
        self._free = free[count:]
        return free[:count]

    def _evict(self, rows: torch.Tensor, need: int) -> torch.Tensor:
        """At least ``need`` (``evict_ahead`` if more) resident slots, the policy's victims,
        written back and unmapped."""
        if self.row_uses is None:
            key = self.last_use.clone()
        else:
            uses = self.row_uses.index_select(0, self.slot_row.clamp(min=0))
            key = uses * (self.clock + 1) + self.last_use
        never = torch.iinfo(torch.int64).max
        batch = self.row_slot.index_select(0, rows)
        key[batch[batch >= 0].long()] = never  # the batch's own rows stay
        key[self._free] = never  # free already
        if self.pinned_ranges or self.pinned_in_capacity:
            key[self.never_evict] = never
        k = key.numpy()  # NumPy's selection and scans are several times faster than torch's on CPU
        evictable = int(np.count_nonzero(k < never))
        count = min(max(need, self.evict_ahead), evictable)
        threshold = np.partition(k, count - 1)[count - 1]
        below = np.flatnonzero(k < threshold)
        tied = np.flatnonzero(k == threshold)[: count - below.size]
        victims = torch.from_numpy(np.concatenate([below, tied]))
        self._write_back(victims)
        self.row_slot[self.slot_row.index_select(0, victims)] = -1
        self.slot_row[victims] = -1
        return victims
