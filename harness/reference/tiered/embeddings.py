"""Embedding tables whose rows live in a slower tier, trained through a row cache.

:class:`TieredEmbeddingCollection` is a :class:`~harness.reference.models.embeddings.FusedEmbeddingCollection`
whose ``weight`` is the cache's slots: a batch's ids are mapped to slots once their rows are
resident (:meth:`global_ids`), and the fused lookup, its backward and the fused optimizer
then run unchanged on the slots. The arithmetic is the in-memory collection's, row for
row and in the same order, so training through the cache gives the same losses and AUCs,
bit for bit (``tests/reference/tiered/test_embeddings.py``); only where the rows live changes.

The next batch's missing rows are read from the store in a background thread while the
current step computes (:meth:`queue_next`, called by :func:`lookahead` before each step).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.hw_profiles.tiers import Tier
from harness.reference.models.embeddings import (
    FusedEmbeddingCollection,
    SparseOptimizerConfig,
    SparseOptimizerKind,
    distinct,
    sparse_update,
    unscale,
    widened,
)
from harness.reference.planner.types import RowReader
from harness.reference.tiered.cache import CachePolicy, RowCache
from harness.reference.tiered.store import MemoryRows, RowStore, SsdRows


def state_columns(full: FusedEmbeddingCollection) -> int:
    """Optimizer-state values per row of ``full``'s optimizer."""
    opt = full.optimizer
    if opt is None or opt.kind is SparseOptimizerKind.SGD:
        return 0
    return full.dim if opt.kind is SparseOptimizerKind.ADAGRAD else 1


class TieredEmbeddingCollection(FusedEmbeddingCollection):
    """``full``'s tables moved into ``store``, trained through a cache of ``cache_rows`` rows.

    Args:
        full: the tables as built from the seed (their weights and optimizer state are
            written into ``store``; ``full`` can be dropped afterwards).
        store: where the rows live (e.g. :class:`~harness.reference.tiered.store.SsdRows`),
            ``sum(rows) x (dim + state_columns(full))``.
        cache_rows: slots of the cache (at least the distinct rows of one batch).
        policy: LRU or LFU.
        copy_rows: False when ``store`` already holds the rows (resuming from a checkpoint).
        memory_tables: tables placed in the fast tier (indices): their rows stay in memory
            for good (in slots of their own, besides ``cache_rows``); the others are on the
            store's tier behind the cache.
    """

    def __init__(self, full: FusedEmbeddingCollection, store: RowStore, cache_rows: int,
                 policy: CachePolicy = CachePolicy.LRU, *, copy_rows: bool = True,
                 memory_tables: tuple[int, ...] = ()):
        super().__init__(full.table_rows, full.dim, full.pooling, optimizer=full.optimizer, allocate=False,
                         dtype=full.weight.dtype, seed=full.seed, table_ids=full.table_ids)
        if (store.rows != sum(full.table_rows) or store.cols != full.dim or store.state_cols != state_columns(full)
                or store.dtype != full.weight.dtype):
            raise ValueError("the store's shape or type does not match the tables")
        if copy_rows:
            store.load(full.weight.detach(), full.optimizer_state.reshape(full.weight.shape[0], -1))
        self.store = store
        starts = (0, *itertools.accumulate(full.table_rows))
        # tables placed in the fast tier: their rows stay resident, the cache serves the others
        self.memory_tables = tuple(sorted(set(memory_tables)))
        pinned = tuple((starts[t], starts[t + 1]) for t in self.memory_tables)
        # one worker, in order: write-backs of evicted rows and reads ahead of the next batch's
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-row-io")
        self.cache = RowCache(store, cache_rows, policy, pinned, io=self._reader)
        self.weight = nn.Parameter(self.cache.weights)  # the slots, shared: admitting a row writes here
        self.optimizer_state = self.cache.state
        self._queued: torch.Tensor | None = None
        self._ahead: tuple[Future, torch.Tensor] | None = None  # (the reading ahead, its batch)
        self.read_ahead_batches = 0  # batches whose missing rows had been read ahead

    # ------------------------------------------------------------------ lookups
    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """Training lookups go through the cache. Inference lookups do too, unless a batch has
        more distinct rows than the cache holds (a large evaluation batch): those read the
        rows where they are (the cache's slot if resident, else the store) without admitting
        them, so an evaluation neither evicts the training's rows nor needs a larger cache."""
        if self.training and torch.is_grad_enabled() and self.optimizer is not None:
            return super().forward(sparse)
        rows = sparse + self.column_offsets
        unique, inverse, _ = distinct(rows)
        if self.cache.unpinned(unique).numel() <= self.cache.free_capacity:
            return super().forward(sparse)
        with torch.no_grad():
            return self._lookup(self.current_rows(unique), inverse)

    def current_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """The latest weights of the distinct ``rows``, wherever they are; nothing is admitted."""
        if self._ahead is not None:  # the store's rows are not written while a read is in flight, but
            self._ahead[0].result()  # wait anyway: the next admit will find the read done
        return self.cache.current_weights(rows)

    def global_ids(self, sparse: torch.Tensor) -> torch.Tensor:
        """Make the batch's rows resident; its ids as slots of the cache."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[1] is sparse:  # the batch read ahead is this one (the same tensor)
            unique, inverse, counts, missing, fetched = ahead[0].result()
            slots = self.cache.admit(unique, missing, fetched, counts)
            self.read_ahead_batches += 1
        else:
            if ahead is not None:  # read for another batch (e.g. before an evaluation): dropped
                ahead[0].result()
            unique, inverse, counts = self._distinct(sparse)
            slots = self.cache.admit(unique, counts=counts)
        if self.training and self._queued is not None:
            self._read_ahead(self._queued)
        self._queued = None
        return slots[inverse]

    def _distinct(self, sparse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch's distinct rows, each id's index among them, and each row's number of ids."""
        return distinct(sparse + self.column_offsets)

    def queue_next(self, sparse: torch.Tensor) -> None:
        """The batch after the one about to be looked up: its missing rows are read once the
        current batch is resident, while the step computes."""
        self._queued = sparse

    def _read_ahead(self, sparse: torch.Tensor) -> None:
        """In the background thread: the batch's distinct rows, which of them are missing, and
        their values in the store. No row enters or leaves the cache until the next
        :meth:`global_ids`, which waits for this first, so what is read stays true."""

        def prepare() -> tuple[torch.Tensor, ...]:
            unique, inverse, counts = self._distinct(sparse)
            missing = self.cache.missing(unique)
            return unique, inverse, counts, missing, self.store.read(missing)

        self._ahead = (self._reader.submit(prepare), sparse)

    def _update_from_pooled(self, ids: torch.Tensor, grad_pooled: torch.Tensor) -> None:
        """The update of the slots ``ids`` looked up; 16-bit tables round with the bits of the
        slots' rows (their place in the tables), as the tables in memory do."""
        slots, grad = self._coalesce_pooled(ids, widened(grad_pooled))
        sparse_update(self.weight.data, self.optimizer_state, slots, unscale(grad, self.grad_unscale), self.optimizer,
                      (self.layout, self.update_step), key_rows=self.cache.slot_row.index_select(0, slots))
        self.cache.mark_dirty(slots)

    # ------------------------------------------------------------------ durability
    def flush(self) -> None:
        """Every update written back to the store, durably (end of a run, a checkpoint)."""
        if self._ahead is not None:
            self._ahead[0].result()
            self._ahead = None
        self.cache.flush()

    def full_weight(self) -> torch.Tensor:
        """All rows' latest weights as one tensor (for tests and small tables)."""
        return self.current_rows(torch.arange(self.store.rows))

    def close(self) -> None:
        self._reader.shutdown(wait=True)
        self.cache.drain()  # done by now; raises if a write-back failed


def lookahead(batches: Iterator, collection: TieredEmbeddingCollection) -> Iterator:
    """The batches, each handed out after the next one is queued for reading ahead."""
    it = iter(batches)
    current = next(it, None)
    for nxt in it:
        collection.queue_next(nxt.sparse)
        yield current
        current = nxt
    if current is not None:
        yield current


class CachedShard:
    """One shard of a sharded table in a slower tier (host memory under an HBM cache, or an SSD
    file), behind its own cache in the rank's fastest tier.

    The shard's rows (weights, then optimizer state) live in ``store`` (a :class:`MemoryRows`
    in DDR, or an :class:`SsdRows` file); the lookups and the fused update of the sharded
    collection then work on the cache's slots, as :class:`TieredEmbeddingCollection` does for
    whole tables: a batch's distinct rows are admitted before its lookup (:meth:`slots`), and
    its update goes to the same slots (:meth:`update`), so the arithmetic is the resident
    shard's, row for row. A batch with more distinct rows than the cache holds (a large
    evaluation batch) reads them where they are instead (:meth:`current_rows`), admitting nothing.

    **Read-ahead.** With an ``io`` thread (one per rank, shared by its shards and their
    write-backs, in order), the next batch's ids given by :meth:`queue` are looked at as soon as
    this batch is resident: their missing rows are read from the store in the background while
    the step computes, and the next :meth:`slots` admits them without reading. No row enters or
    leaves the cache in between (the next admission waits for the read), so what was read stays
    true, and the arithmetic is unchanged.

    Args:
        store: where the rows live (empty: the shard's initial rows are written into it here).
        initial: ``initial(lo, hi)`` gives the shard's initial rows ``lo .. hi - 1`` (weights then
            state): the store is filled a chunk at a time, so no shard is ever whole in memory.
        cache_rows: slots of the cache (the caller makes it at least one batch's rows).
        io: the rank's single-worker executor of reads ahead and write-backs (None: none).
    """

    CHUNK_ROWS = 1 << 16

    def __init__(self, store: RowStore, initial: Callable[[int, int], torch.Tensor], cache_rows: int,
                 policy: CachePolicy = CachePolicy.LRU, io: ThreadPoolExecutor | None = None):
        self.store = store
        for lo in range(0, store.rows, self.CHUNK_ROWS):
            rows = initial(lo, min(lo + self.CHUNK_ROWS, store.rows))
            self.store.write_rows(lo, store.pack(rows[:, : store.cols], rows[:, store.cols :]))
        self._io = io
        self.cache = RowCache(self.store, cache_rows, policy, io=io)
        self._queued: torch.Tensor | None = None
        self._ahead: tuple[Future, torch.Tensor] | None = None  # (the reading ahead, its ids)
        self.read_ahead_batches = 0

    @classmethod
    def on_ssd(cls, path: Path, rows: int, cols: int, state_cols: int, initial: Callable[[int, int], torch.Tensor],
               cache_rows: int, policy: CachePolicy = CachePolicy.LRU,
               io: ThreadPoolExecutor | None = None, dtype: torch.dtype = torch.float32, *, direct_io: bool = True,
               reader: RowReader = RowReader.AUTO) -> CachedShard:
        store = SsdRows(path, rows, cols, state_cols, create=True, dtype=dtype, direct_io=direct_io, reader=reader)
        return cls(store, initial, cache_rows, policy, io)

    @classmethod
    def in_ddr(cls, rows: int, cols: int, state_cols: int, initial: Callable[[int, int], torch.Tensor],
               cache_rows: int, policy: CachePolicy = CachePolicy.LRU,
               io: ThreadPoolExecutor | None = None, dtype: torch.dtype = torch.float32) -> CachedShard:
        return cls(MemoryRows(rows, cols, state_cols, tier=Tier.DDR, dtype=dtype), initial, cache_rows, policy, io)

    @property
    def store_bytes(self) -> int:
        return self.store.rows * self.store.row_bytes

    @property
    def weight(self) -> torch.Tensor:
        return self.cache.weights

    def queue(self, ids: torch.Tensor) -> None:
        """The next batch's ids of this shard: read its missing rows once this batch is resident."""
        self._queued = ids

    def slots(self, ids: torch.Tensor, *, training: bool = False) -> torch.Tensor | None:
        """The slots of ``ids`` (local rows, any shape) once their rows are resident; None when
        they have more distinct rows than the cache holds. In ``training``, the queued next
        batch's rows are then read ahead."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[1] is ids:  # read ahead for this very batch
            unique, inverse, counts, missing, fetched = ahead[0].result()
            if unique.numel() > self.cache.free_capacity:
                return None
            slots = self.cache.admit(unique, missing, fetched, counts)
            self.read_ahead_batches += 1
        else:
            if ahead is not None:  # read for another batch (an evaluation came between): dropped
                ahead[0].result()
            unique, inverse, counts = distinct(ids)
            if unique.numel() > self.cache.free_capacity:
                return None
            slots = self.cache.admit(unique, counts=counts)
        queued, self._queued = self._queued, None
        if queued is not None and self._io is not None and training:
            self._read_ahead(queued)
        return slots[inverse]

    def _read_ahead(self, ids: torch.Tensor) -> None:
        def prepare() -> tuple[torch.Tensor, ...]:
            unique, inverse, counts = distinct(ids)
            missing = self.cache.missing(unique) if unique.numel() <= self.cache.free_capacity else unique[:0]
            return unique, inverse, counts, missing, self.store.read(missing)

        assert self._io is not None
        self._ahead = (self._io.submit(prepare), ids)

    def current_rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weights of the distinct rows of ids, each id's index among them)``, wherever the
        rows are; nothing is admitted."""
        if self._ahead is not None:  # nothing is written while a read is in flight, but wait anyway
            self._ahead[0].result()
        unique, inverse, _ = distinct(ids)
        return self.cache.current_weights(unique), inverse

    def update(self, rows: torch.Tensor, grad: torch.Tensor, opt: SparseOptimizerConfig | None,
               rounding: Any = None) -> None:
        """The fused optimizer on the distinct local ``rows`` (resident since their lookup), in
        their slots; a 16-bit shard rounds with the bits of ``rows`` (``rounding``: the shard's
        layout and the step), as the shard in memory does."""
        slots = self.cache.row_slot.index_select(0, rows).long()
        sparse_update(self.cache.weights, self.cache.state, slots, grad, opt, rounding, key_rows=rows)
        self.cache.mark_dirty(slots)

    def full_weight(self) -> torch.Tensor:
        if self._ahead is not None:
            self._ahead[0].result()
        return self.cache.current_weights(torch.arange(self.store.rows))

    def settle(self) -> None:
        """Wait for any read ahead and write-back in flight (before the store is flushed or closed)."""
        if self._ahead is not None:
            self._ahead[0].result()
            self._ahead = None
        self.cache.drain()
