"""The input distribution: a batch's ids on their way to the ranks whose shards hold their rows.

Each rank sends, for every shard's row range, its samples' ids that fall in that range (row
bucketing: table-wise and column-wise shards hold every row, so they get every id; row-wise and
table-row-wise shards get only theirs), shifted to the range's first row, in two all-to-alls on
the input process group: the lengths (ids per sample and range), then the ids (TorchRec's
``KJTAllToAll``). Each rank receives, per row range of its shards, the ids of the global batch
(:class:`KeyedIds`).

Two ways to bucket, the same lengths and ids: the batched :class:`IdRouter` finds every id's
range by one search in the tables' common row space; the per-range path (``batched=False``, and
a sequence collection's, which counts its lengths per user) masks each range on its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.reference.distributed.comm import INPUT, Comm, PendingAllToAll
from harness.reference.distributed.layout import ShardLayout
from harness.reference.distributed.shardings import RowRange


@dataclass(frozen=True)
class KeyedIds:
    """The ids of one row range of one table, for the samples of every rank (jagged)."""

    values: torch.Tensor  # ids, shifted to the range's first row
    lengths: torch.Tensor  # ids per sample (global batch order: rank 0's samples first)
    offsets: torch.Tensor  # exclusive cumulative sum of lengths
    one_per_sample: bool


class IdRouter:
    """Every row range (key) of a collection's tables at once: a batch's ids bucketed by one
    search of each id's row in the tables' common row space, not by a mask per range (which
    costs a few operations per range and rank every step: with row-wise shards of 26 tables on 4
    ranks, 104 ranges). Built only where each table's ranges tile its rows (every plan's: a
    table's row shards, or one range of all its rows per column shard)."""

    def __init__(self, columns: torch.Tensor | None, col_base: torch.Tensor, starts: torch.Tensor,
                 send: list[list[int]]):
        self.columns, self.col_base, self.starts = columns, col_base, starts
        self.send = send  # per rank, its keys' indices in ``starts``' order
        self._send_index = [torch.tensor(ks, dtype=torch.int64, device=starts.device) for ks in send]

    @classmethod
    def build(cls, layout: ShardLayout, device: torch.device) -> IdRouter | None:
        """The router of ``layout``'s row ranges, or None when there are none or a table's ranges
        do not tile its rows."""
        tables = layout.tables
        keys = sorted({k for ks in layout.keys_of for k in ks})
        by_table: dict[int, list[tuple[int, int]]] = {}
        for t, offset, rows in keys:
            by_table.setdefault(t, []).append((offset, rows))
        if not keys or not all(_tiles(ranges, tables.rows[t]) for t, ranges in by_table.items()):
            return None
        table_start = [0, *itertools.accumulate(tables.rows)]
        starts = torch.tensor([table_start[t] + offset for t, offset, _ in keys], dtype=torch.int64, device=device)
        index = {k: j for j, k in enumerate(keys)}
        routed = sorted(by_table)
        columns = [c for t in routed for c in range(tables.col_start[t], tables.col_start[t + 1])]
        col_base = torch.tensor([table_start[t] for t in routed for _ in range(tables.pooling[t])],
                                dtype=torch.int64, device=device).view(1, -1)
        every = columns == list(range(tables.col_start[-1]))
        return cls(None if every else torch.tensor(columns, dtype=torch.int64, device=device), col_base, starts,
                   [[index[k] for k in ks] for ks in layout.keys_of])

    def route(self, sparse: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per rank, ``(lengths, ids)`` of its row ranges as :func:`bucket` gives them range after
        range: the ids per sample of each range, and the ids (shifted to the range's first row)
        range after range, each in the batch's order. ``sparse``: ``B x sum(pooling)`` ids."""
        ids = sparse if self.columns is None else sparse.index_select(1, self.columns)
        batch, width = ids.shape
        row = (ids + self.col_base).reshape(-1)
        key = torch.bucketize(row, self.starts, right=True).sub_(1)
        values = row.sub_(self.starts.index_select(0, key))
        n = self.starts.numel()
        sample = torch.arange(batch, device=ids.device).repeat_interleave(width)
        per_sample = torch.bincount(key * batch + sample, minlength=n * batch).view(n, batch)
        parts = values.index_select(0, torch.argsort(key, stable=True)).split(
            torch.bincount(key, minlength=n).tolist())
        empty = sparse.new_empty(0)
        lengths = [per_sample.index_select(0, index).reshape(-1) if ks else empty
                   for ks, index in zip(self.send, self._send_index)]
        return lengths, [torch.cat([parts[j] for j in ks]) if ks else empty for ks in self.send]


def _tiles(ranges: Sequence[tuple[int, int]], rows: int) -> bool:
    """Whether the ``(offset, rows)`` ranges, in order, tile ``rows`` rows."""
    end = 0
    for offset, n in ranges:
        if offset != end:
            return False
        end = offset + n
    return end == rows


@dataclass(frozen=True)
class InputRoutes:
    """Where a collection's ids go: its layout's row ranges, the :class:`IdRouter` that buckets
    them at once (None: one range at a time), whether it is a sequence collection (its lengths
    count per user), and the input process group they travel on."""

    layout: ShardLayout
    router: IdRouter | None
    sequence: bool
    comm: Comm

    @property
    def local_keys(self) -> int:
        """The row ranges of this rank's shards."""
        return len(self.layout.keys_of[self.layout.rank])

    def bucket(self, sparse: torch.Tensor, key: RowRange) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lengths, ids)`` of this rank's samples for one row range of one table: ``B`` ids per
        sample, and the ids in the range (shifted to its first row), in the batch's order."""
        table, row_offset, rows = key
        tables = self.layout.tables
        ids = sparse[:, tables.col_start[table] : tables.col_start[table + 1]]
        if rows == tables.rows[table]:
            return torch.full((ids.shape[0],), ids.shape[1], dtype=ids.dtype, device=ids.device), ids.reshape(-1)
        inside = (ids >= row_offset) & (ids < row_offset + rows)
        return inside.sum(1), ids[inside] - row_offset


class InputDist:
    """The ids of one batch on their way to the ranks that hold their rows.

    Two all-to-alls on the input process group: the lengths (ids per sample and row range),
    started by the constructor, and the ids, started by :meth:`start_ids` once the lengths
    have arrived. Both are asynchronous, so a training loop can start the next batch's while
    the current step computes (:class:`harness.reference.distributed.trainer.DistributedTrainer`).

    Args:
        routes: the collection's (:class:`InputRoutes`).
        sparse: this rank's ``B x sum(pooling)`` ids.
        sizes: every rank's batch size, in rows of ``sparse``.
        segments, samples: a sequence collection's rows are events: this rank's events per
            sample (user), and every rank's samples; its lengths then travel per sample.
        count: the batch counts in the input statistics (``input_batches``).
    """

    def __init__(self, routes: InputRoutes, sparse: torch.Tensor, sizes: Sequence[int],
                 segments: torch.Tensor | None = None, samples: Sequence[int] | None = None, *, count: bool = True):
        self.routes, self.sparse, self.sizes = routes, sparse, list(sizes)
        # a sequence collection's rows are events, its samples (users) runs of them: the lengths
        # travel per sample and row range (a KeyedJaggedTensor's), the ids per event
        per_user = segments if routes.sequence else None
        self.samples = list(samples) if per_user is not None and samples is not None else self.sizes
        lengths, ids, self.present = _bucketed(routes, sparse, per_user)
        self._send_ids: list[torch.Tensor] | None = ids
        routes.comm.stats.input_batches += int(count)  # a batch whose ids travel in several collections: once
        self._lengths = routes.comm.all_to_all_start(lengths, [routes.local_keys * n for n in self.samples], INPUT)
        self._ids: PendingAllToAll | None = None
        self._received: list[torch.Tensor] = []
        self._keyed: list[KeyedIds] | None = None

    def start_ids(self) -> None:
        """Start sending the ids (once the lengths have arrived: they size the chunks)."""
        if self._ids is not None:
            return
        k = self.routes.local_keys
        self._received = [chunk.view(k, n) for chunk, n in zip(self._lengths.wait(), self.samples)]
        assert self._send_ids is not None
        self._ids = self.routes.comm.all_to_all_start(
            self._send_ids, [int(r.sum()) for r in self._received], INPUT
        )
        self._send_ids = None

    def wait(self) -> list[KeyedIds]:
        """Per row range of this rank (``layout.keys_of[rank]``), the ids of the global batch (their
        lengths per sample: a sequence collection's per user, with ``segments``)."""
        if self._keyed is None:
            self.start_ids()
            batched = self.routes.router is not None and not self.routes.sequence
            self._keyed = self._gather_keyed() if batched else self._keyed_each()
        return self._keyed

    def _keyed_each(self) -> list[KeyedIds]:
        """:meth:`wait`'s ids, range by range: each source's chunk cut by its lengths."""
        assert self._ids is not None
        per_source = [
            chunk.split(lengths.sum(1).tolist()) for chunk, lengths in zip(self._ids.wait(), self._received)
        ]
        keyed = []
        for k in range(self.routes.local_keys):
            lengths = torch.cat([r[k] for r in self._received])
            values = torch.cat([p[k] for p in per_source])
            offsets = torch.zeros_like(lengths)
            if lengths.numel() > 1:
                offsets[1:] = lengths[:-1].cumsum(0)
            keyed.append(KeyedIds(values, lengths, offsets, values.numel() == lengths.numel()
                                  and bool((lengths == 1).all())))
        return keyed

    def _gather_keyed(self) -> list[KeyedIds]:
        """:meth:`wait`'s ids of every row range of this rank at once: the sources' chunks (each
        range after range) put range after range (each source after source), by one stable sort
        of the range of every id; the same values, lengths and offsets."""
        assert self._ids is not None
        k = self.routes.local_keys
        lengths = torch.cat(self._received, dim=1)  # k x the global batch
        per_range = torch.stack([r.sum(1) for r in self._received])  # sources x k
        got = self._ids.wait()
        values = torch.cat(got) if len(got) > 1 else got[0]
        if values.numel():
            range_of = torch.repeat_interleave(torch.arange(k, device=values.device).repeat(len(got)),
                                               per_range.reshape(-1))
            values = values.index_select(0, torch.argsort(range_of, stable=True))
        totals = per_range.sum(0)
        parts = values.split(totals.tolist())
        offsets = lengths.cumsum(1) - lengths
        single = ((lengths == 1).all(1) & (totals == lengths.shape[1])).tolist()
        return [KeyedIds(parts[j], lengths[j], offsets[j], single[j]) for j in range(k)]


def _bucketed(routes: InputRoutes, sparse: torch.Tensor, segments: torch.Tensor | None
              ) -> tuple[list[torch.Tensor], list[torch.Tensor], dict[RowRange, torch.Tensor]]:
    """Per rank, the lengths and ids of its row ranges (range after range), and, in a sequence
    collection, which of this rank's rows (events) have their id in each range (its vectors
    travel for the ids a shard holds only)."""
    if segments is None and routes.router is not None:  # every range of every table in one pass
        lengths, ids = routes.router.route(sparse)
        return lengths, ids, {}
    user_of = (torch.repeat_interleave(torch.arange(segments.numel(), device=sparse.device), segments)
               if segments is not None else None)
    cache: dict[RowRange, tuple[torch.Tensor, torch.Tensor]] = {}
    lengths, ids = [], []
    for keys in routes.layout.keys_of:
        parts = [cache[k] if k in cache else cache.setdefault(k, routes.bucket(sparse, k)) for k in keys]
        per_sample = [p[0] if user_of is None else
                      p[0].new_zeros(segments.numel()).index_add_(0, user_of, p[0]) for p in parts]  # type: ignore[union-attr]
        lengths.append(torch.cat(per_sample) if parts else sparse.new_empty(0))
        ids.append(torch.cat([p[1] for p in parts]) if parts else sparse.new_empty(0))
    present = {k: torch.nonzero(v[0]).reshape(-1) for k, v in cache.items()} if routes.sequence else {}
    return lengths, ids, present
