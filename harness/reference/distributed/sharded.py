"""The embedding tables of the DLRM sharded over ranks as a sharding plan says, and trained there.

A plan (the planner's :class:`~harness.reference.planner.Plan`, read from ``harness plan``'s
JSON by ``Plan.from_dict`` where it crosses into a worker process) gives every table a sharding
type and its shards: rows ``[row_offset, row_offset + rows)`` and columns
``[col_offset, col_offset + cols)`` on one rank. Every type but data-parallel runs through
one mechanism, as in torchrec's ``ShardedEmbeddingBagCollection``:

1. **Input distribution** (two all-to-alls, lengths then ids): each rank sends, for every
   shard's row range, its samples' ids that fall in that range (table-wise and column-wise
   shards hold every row, so they get every id; row-wise and table-row-wise shards get only
   theirs: row bucketing), shifted to the shard's first row.
2. **Lookup**: each rank pools its shards' rows for the samples of *every* rank.
3. **Output all-to-all** (forward codec): each rank sends each rank the pooled partial vectors
   of that rank's samples. The receiver places column shards side by side and *sums* the
   partial vectors of row shards (the reduction of row-wise sharding; for one-hot features
   only one shard's partial is non-zero, so the sum is exact).
4. **Backward all-to-all** (backward codec): the gradients of the pooled vectors go back to
   the shards, which sum them per row and apply the fused optimizer to exactly those rows
   (:func:`harness.reference.models.embeddings.sparse_update`, the single-process update).

Data-parallel tables are full replicas on every rank: looked up locally, their gradients
summed over ranks (the all-reduce codec) and applied identically everywhere.

**Two link classes** (a :class:`Hierarchy`: several nodes of ``L`` ranks; rank ``r`` on node
``r // L`` at local index ``r % L``). The shards of a table-row-wise or table-column-wise table
all live on the ranks of one node, and their outputs travel in two stages, as TorchRec's
TW-RW distribution and the planner's cost model have them: first inside the node (an
all-to-all on the node's group: local rank ``j`` receives every shard's partial vectors of the
samples of the ranks of local index ``j`` on every node, and sums the row shards' and places
the column shards' side by side), then across nodes (an all-to-all on the group of the ranks
of local index ``j``, one per node): only the node's finished vectors cross the slow links,
once per sample. The backward pass runs the same stages in reverse. Other types go through the
flat all-to-all. On one node there is no second stage, and every type is flat. A sequence
collection (one vector per event: nothing to sum) passes each vector on as its shard encoded it,
from the shard that holds its id only; its shards first tell the node's ranks how many ids each
holds of their samples (:meth:`ShardedEmbeddingCollection._start_two_stage_sequence`).

**Overlap** (``overlap=True``): the forward all-to-alls are started before the dense part's
bottom MLP and waited for after it (:meth:`ShardedEmbeddingCollection.start`); the backward
all-to-alls are started in the backward pass and waited for, and the shards updated, after it
(:meth:`ShardedEmbeddingCollection.finish_backward`), while the bottom MLP's backward and the
dense all-reduce run. The arithmetic is the same either way.

**The SSD tier.** With ``ssd`` given, each shard the plan put on the SSD tier lives in a file
behind a cache of its own (:class:`~harness.reference.tiered.CachedShard`): step 2 admits the
rows a batch needs and looks them up in the cache's slots, step 4 updates those slots, so the
arithmetic is unchanged (``tests/reference/test_distributed.py`` checks it bit for bit
against the same plan in memory). The planner counts each cache in its rank's fastest tier.

**Gradient scale.** Each rank differentiates its share of the global batch's mean loss (its
own mean over the world size), so every sample's gradient is exactly the one a single process
computes for it (``1 / global batch``, powers of two: also in fp16, whose subnormals would
round a gradient divided by the world size afterwards); the dense gradients are summed over
the ranks, and the embedding gradients applied as they arrive: training at any world size
follows single-process training with the same global batch (``tests/reference/
test_distributed.py`` checks it to 1e-5 on the loss, and, with 16-bit tables and the dense part
frozen, bit for bit). TorchRec leaves them summed over ranks, which makes the embedding
learning rate grow with the world size; we do not, so hyperparameters mean the same on every
profile.

**Precision.** Shards and replicas are stored in the tables' type (fp32, bf16 or fp16); an
update is computed in fp32 and rounded stochastically with bits of ``(seed, step, table, row,
column)`` (:mod:`harness.reference.models.numerics`), so every plan rounds as one process. Pooled
vectors and their gradients cross in the tables' type where the codec is fp32 (the codecs
fp8/int8 still apply on top). Data-parallel replicas of 16-bit tables gather every rank's ids
and gradients and sum them in the global batch's order, as one process does, instead of
all-reducing per-rank sums (whose other order of additions would round differently).

**Batched paths.** A rank holds many shards (a 26-table model's row-wise plan: 26 on each rank;
a 1,000-table one: hundreds), and an operation per shard and step costs more than the shard's
arithmetic. So a batch's ids are routed to every row range by one search of each id's row
(:class:`_Router`), not by a mask per range; a rank's pooled vectors and their gradients cross
as one matrix, the shards' columns side by side, where the codec encodes each value alone (fp32,
fp16, bf16: the same bytes as shard after shard; the scaled codecs keep a shard's row apart);
and fp32 shards of one width live in one weight and one optimizer state (:class:`_ShardGroup`),
looked up by one ``embedding_bag`` and updated by one call. Every value is the same, bit for bit
(each row's gradients are summed in the same order); ``HARNESS_SHARDED_PER_SHARD=1`` turns the
three off, and ``bench/sharded_step.py`` measures one against the other.

Known difference: with row-wise Adagrad, a column shard keeps its own accumulator per row
(the mean of the squared gradient over its columns only), as FBGEMM's sharded tables do;
unsharded training averages over the whole row. Elementwise Adagrad and SGD are unaffected.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.errors import ErrorCategory, HarnessError
from harness.reference.distributed.comm_codecs import Codec, CommConfig, decode, encode, is_scaled, wire_bytes
from harness.reference.distributed.comm import (
    BACKWARD,
    FORWARD,
    INPUT,
    REPLICA,
    Comm,
    CommStats,
    PendingAllToAll,
)
from harness.reference.engine import phases
from harness.reference.models.embeddings import (
    FusedEmbeddingCollection,
    coalesce,
    coalesce_bags,
    initial_state,
    initial_weights,
    set_learning_rate,
    sparse_update,
    unscale,
    update_from_bags,
)
from harness.reference.models.hugepages import empty_table
from harness.reference.models.numerics import TableLayout
from harness.reference.planner.estimators import cache_rows
from harness.reference.planner.types import Plan, Shard, ShardingType, Storage, Tier, TIERS
from harness.reference.tiered import CachedShard, CachePolicy, CacheStats
from harness.reference.tiered.ledger import TierLedger
from harness.reference.tiered.store import row_bytes


@dataclass(frozen=True)
class ShardSpec:
    """The planner's :class:`~harness.reference.planner.Shard` of table ``table`` (its index in
    the model, which the executor addresses its tables by)."""

    table: int
    placed: Shard

    @property
    def rank(self) -> int:
        return self.placed.rank

    @property
    def row_offset(self) -> int:
        return self.placed.row_offset

    @property
    def rows(self) -> int:
        return self.placed.rows

    @property
    def col_offset(self) -> int:
        return self.placed.col_offset

    @property
    def cols(self) -> int:
        return self.placed.cols

    @property
    def tier(self) -> Tier:
        return self.placed.tier

    @property
    def key(self) -> tuple[int, int, int]:
        """The ids a shard needs: those of ``table`` in its row range."""
        return (self.table, self.row_offset, self.rows)

    def __str__(self) -> str:  # as errors have always named a shard
        return (f"ShardSpec(table={self.table}, rank={self.rank}, row_offset={self.row_offset}, rows={self.rows}, "
                f"col_offset={self.col_offset}, cols={self.cols}, tier={self.tier.value!r})")


@dataclass(frozen=True)
class TableSharding:
    sharding_type: ShardingType
    shards: tuple[ShardSpec, ...]


def shardings_from_plan(
    plan: Plan, table_rows: Sequence[int], dim: int | Sequence[int], world_size: int
) -> list[TableSharding]:
    """The plan's sharding of each table, checked against the model and the world size.

    Every table of a non-data-parallel type must be tiled exactly by its shards; a
    data-parallel table needs one full replica per rank.
    """
    if len(plan.tables) != len(table_rows):
        raise HarnessError(
            f"the sharding plan has {len(plan.tables)} tables; the model has {len(table_rows)}",
            ErrorCategory.BAD_INPUT,
        )
    if plan.world_size != world_size:
        raise HarnessError(
            f"the sharding plan is for {plan.world_size} ranks; this run has {world_size}",
            ErrorCategory.BAD_INPUT,
        )
    dims = [dim] * len(table_rows) if isinstance(dim, int) else list(dim)
    out = []
    for t, (table, st, placed, rows, dim) in enumerate(
            zip(plan.tables, plan.sharding_types, plan.table_shards(), table_rows, dims)):
        name = table.name
        if table.rows != rows or table.dim != dim:
            raise HarnessError(
                f"plan table {name}: {table.rows} x {table.dim}, but the model's is {rows} x {dim}",
                ErrorCategory.BAD_INPUT,
            )
        shards = tuple(sorted((ShardSpec(t, s) for s in placed), key=lambda s: (s.rank, s.row_offset, s.col_offset)))
        if any(not 0 <= s.rank < world_size for s in shards):
            raise HarnessError(f"plan table {name}: a shard is on a rank outside 0..{world_size - 1}")
        if st is ShardingType.DATA_PARALLEL:
            full = all(s.row_offset == 0 and s.rows == rows and s.col_offset == 0 and s.cols == dim for s in shards)
            if not full or sorted(s.rank for s in shards) != list(range(world_size)):
                raise HarnessError(f"plan table {name}: a data-parallel table needs one full replica on every rank")
        else:
            _check_tiling(name, shards, rows, dim)
        out.append(TableSharding(st, shards))
    return out


def rank_ledger(capacity: Storage | None, rank: int) -> TierLedger:
    """A rank's ledger of the bytes per tier it may hold (``capacity``: the plan's; None: unbounded)."""
    return TierLedger(capacity.by_tier() if capacity is not None else dict.fromkeys(TIERS, 1 << 62), rank=rank)


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _check_tiling(name: Any, shards: Sequence[ShardSpec], rows: int, dim: int) -> None:
    """Every weight of the ``rows x dim`` table in exactly one shard. Counted on the grid of the
    shards' own boundaries (each cell a block of weights that every shard covers whole or not at
    all), not per weight: a table of 40M rows x 128 would otherwise need 20 GB to check, on every
    rank."""
    for s in shards:
        if s.rows < 1 or s.cols < 1 or s.row_offset < 0 or s.col_offset < 0 or \
                s.row_offset + s.rows > rows or s.col_offset + s.cols > dim:
            raise HarnessError(f"plan table {name}: shard {s} lies outside the {rows} x {dim} table")
    row_cuts = sorted({0, rows, *(s.row_offset for s in shards), *(s.row_offset + s.rows for s in shards)})
    col_cuts = sorted({0, dim, *(s.col_offset for s in shards), *(s.col_offset + s.cols for s in shards)})
    row_at, col_at = {r: i for i, r in enumerate(row_cuts)}, {c: i for i, c in enumerate(col_cuts)}
    covered = np.zeros((len(row_cuts) - 1, len(col_cuts) - 1), dtype=np.int32)
    for s in shards:
        covered[row_at[s.row_offset] : row_at[s.row_offset + s.rows], col_at[s.col_offset] : col_at[s.col_offset + s.cols]] += 1
    if not bool((covered == 1).all()):
        raise HarnessError(f"plan table {name}: its shards do not cover every weight exactly once")


@dataclass(frozen=True)
class Hierarchy:
    """The topology of a run over several nodes: ``ranks_per_node`` ranks per node, the collectives
    of this rank's node (``intra``) and of the ranks of its local index, one per node (``cross``)."""

    ranks_per_node: int
    intra: Comm
    cross: Comm

    @property
    def nodes(self) -> int:
        return self.cross.world_size


HIERARCHICAL_TYPES = (ShardingType.TABLE_ROW_WISE, ShardingType.TABLE_COLUMN_WISE)


@dataclass(frozen=True)
class KeyedIds:
    """The ids of one row range of one table, for the samples of every rank (jagged)."""

    values: torch.Tensor  # ids, shifted to the range's first row
    lengths: torch.Tensor  # ids per sample (global batch order: rank 0's samples first)
    offsets: torch.Tensor  # exclusive cumulative sum of lengths
    one_per_sample: bool


class InputDist:
    """The ids of one batch on their way to the ranks that hold their rows.

    Two all-to-alls on the input process group: the lengths (ids per sample and row range),
    started by the constructor, and the ids, started by :meth:`start_ids` once the lengths
    have arrived. Both are asynchronous, so a training loop can start the next batch's while
    the current step computes (:class:`harness.reference.distributed.trainer.DistributedTrainer`).
    """

    def __init__(self, coll: ShardedEmbeddingCollection, sparse: torch.Tensor, sizes: Sequence[int],
                 segments: torch.Tensor | None = None, samples: Sequence[int] | None = None, *, count: bool = True):
        self.coll, self.sparse, self.sizes = coll, sparse, list(sizes)
        # a sequence collection's rows are events, its samples (users) runs of them: the lengths
        # travel per sample and row range (a KeyedJaggedTensor's), the ids per event
        self.samples = list(samples) if coll.sequence and segments is not None and samples is not None else self.sizes
        user_of = (torch.repeat_interleave(torch.arange(segments.numel(), device=sparse.device), segments)
                   if coll.sequence and segments is not None else None)
        cache: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        lengths, ids = [], []
        router = coll._router if user_of is None else None
        if router is not None:  # every row range of every table in one pass (the same lengths and ids)
            lengths, ids = router.route(sparse)
        for keys in coll.keys_of if router is None else ():
            parts = [cache[k] if k in cache else cache.setdefault(k, coll.bucket(sparse, k)) for k in keys]
            per_sample = [p[0] if user_of is None else
                          p[0].new_zeros(segments.numel()).index_add_(0, user_of, p[0]) for p in parts]  # type: ignore[union-attr]
            lengths.append(torch.cat(per_sample) if parts else sparse.new_empty(0))
            ids.append(torch.cat([p[1] for p in parts]) if parts else sparse.new_empty(0))
        # a sequence collection's vectors travel for the ids a shard holds only: which of this
        # rank's rows (events) have their id in each row range
        self.present: dict[tuple[int, int, int], torch.Tensor] = (
            {k: torch.nonzero(v[0]).reshape(-1) for k, v in cache.items()} if coll.sequence else {})
        self._send_ids: list[torch.Tensor] | None = ids
        k = len(coll.keys_of[coll.rank])
        coll.input_comm.stats.input_batches += int(count)  # a batch whose ids travel in several collections: once
        self._lengths = coll.input_comm.all_to_all_start(lengths, [k * n for n in self.samples], INPUT)
        self._ids: PendingAllToAll | None = None
        self._received: list[torch.Tensor] = []
        self._keyed: list[KeyedIds] | None = None

    def start_ids(self) -> None:
        if self._ids is not None:
            return
        k = len(self.coll.keys_of[self.coll.rank])
        self._received = [chunk.view(k, n) for chunk, n in zip(self._lengths.wait(), self.samples)]
        assert self._send_ids is not None
        self._ids = self.coll.input_comm.all_to_all_start(
            self._send_ids, [int(r.sum()) for r in self._received], INPUT
        )
        self._send_ids = None

    def wait(self) -> list[KeyedIds]:
        """Per row range of this rank (``coll.keys_of[rank]``), the ids of the global batch (their
        lengths per sample: a sequence collection's per user, with ``segments``)."""
        if self._keyed is not None:
            return self._keyed
        self.start_ids()
        assert self._ids is not None
        if self.coll._router is not None and not self.coll.sequence:
            self._keyed = self._gather_keyed()
            return self._keyed
        per_source = [
            chunk.split(lengths.sum(1).tolist()) for chunk, lengths in zip(self._ids.wait(), self._received)
        ]
        keyed = []
        for k in range(len(self.coll.keys_of[self.coll.rank])):
            lengths = torch.cat([r[k] for r in self._received])
            values = torch.cat([p[k] for p in per_source])
            offsets = torch.zeros_like(lengths)
            if lengths.numel() > 1:
                offsets[1:] = lengths[:-1].cumsum(0)
            keyed.append(KeyedIds(values, lengths, offsets, values.numel() == lengths.numel()
                                  and bool((lengths == 1).all())))
        self._keyed = keyed
        return keyed


    def _gather_keyed(self) -> list[KeyedIds]:
        """:meth:`wait`'s ids of every row range of this rank at once: the sources' chunks (each
        range after range) put range after range (each source after source), by one stable sort
        of the range of every id; the same values, lengths and offsets."""
        assert self._ids is not None
        k = len(self.coll.keys_of[self.coll.rank])
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


class _Router:
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
    def build(cls, coll: ShardedEmbeddingCollection, device: torch.device) -> _Router | None:
        keys = sorted({k for ks in coll.keys_of for k in ks})
        if not keys:
            return None
        table_start = [0, *itertools.accumulate(coll.table_rows)]
        by_table: dict[int, list[tuple[int, int]]] = {}
        for t, offset, rows in keys:
            by_table.setdefault(t, []).append((offset, rows))
        for t, ranges in by_table.items():  # each table's ranges tile its rows, or no router
            end = 0
            for offset, rows in ranges:
                if offset != end:
                    return None
                end = offset + rows
            if end != coll.table_rows[t]:
                return None
        starts = torch.tensor([table_start[t] + offset for t, offset, _ in keys], dtype=torch.int64, device=device)
        index = {k: j for j, k in enumerate(keys)}
        tables = sorted(by_table)
        columns = [c for t in tables for c in range(coll.col_start[t], coll.col_start[t + 1])]
        col_base = torch.tensor([table_start[t] for t in tables for _ in range(coll.pooling[t])],
                                dtype=torch.int64, device=device).view(1, -1)
        every = columns == list(range(coll.col_start[-1]))
        return cls(None if every else torch.tensor(columns, dtype=torch.int64, device=device), col_base, starts,
                   [[index[k] for k in ks] for ks in coll.keys_of])

    def route(self, sparse: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per rank, ``(lengths, ids)`` of its row ranges as :meth:`ShardedEmbeddingCollection.bucket`
        gives them range after range: the ids per sample of each range, and the ids (shifted to
        the range's first row) range after range, each in the batch's order."""
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


@dataclass(frozen=True)
class _ShardGroup:
    """Local fp32 shards of one width in one weight and one optimizer state: shard ``members[j]``
    holds rows ``bases[j]`` on. One update call per group and step, not one per shard (a rank of
    a 26-table model holds up to 26 row shards; of a 1,000-table one, hundreds)."""

    members: list[int]
    bases: list[int]
    weight: torch.Tensor
    state: torch.Tensor
    base_ids: torch.Tensor  # ``bases`` as a tensor, to shift the members' ids in one operation


class _ShardedLookup(torch.autograd.Function):
    """The pooled embeddings of a started lookup (:class:`PendingPooled`); its backward sends
    the gradients to the shards and updates them (now, or in ``finish_backward`` with overlap)."""

    @staticmethod
    def forward(ctx, dummy: torch.Tensor, pending: PendingPooled) -> torch.Tensor:
        ctx.pending = pending
        return pending.finish()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # the pending lookup holds this function's output (``_out``), whose autograd node holds
        # ``ctx``: a cycle through the autograd graph that Python's collector cannot see. Kept, it
        # held every step's graph, ids and buffers (and with them the collection and its process
        # groups) for the life of the process: about 1 MB a step on 4 ranks of the default model
        p, ctx.pending = ctx.pending, None
        p._out = None
        with phases.CLOCK.phase(phases.EMBEDDING_BACKWARD):
            p.coll._backward(p.keyed, p.ids, grad, p.stage)
        return None, None


class PendingPooled:
    """A lookup whose output all-to-alls are on their way; :meth:`wait` gives the pooled
    embeddings (through the autograd function when training, so that backward reaches the shards)."""

    def __init__(self, coll: ShardedEmbeddingCollection, keyed: list[KeyedIds], ids: InputDist,
                 finish: Callable[[], torch.Tensor], train: bool, stage: dict[str, Any]):
        self.coll, self.keyed, self.ids = coll, keyed, ids
        self.stage = stage  # what the forward's two-stage sequence path learnt, for the backward's
        self._finish, self._train, self._out = finish, train, None

    def finish(self) -> torch.Tensor:
        return self._finish()

    def wait(self) -> torch.Tensor:
        with phases.CLOCK.phase(phases.EMBEDDING_FORWARD):
            return self._wait()

    def _wait(self) -> torch.Tensor:
        if self._out is None:
            if self._train:
                out = _ShardedLookup.apply(self.coll._dummy, self)
            else:
                with torch.no_grad():
                    out = self.finish()
            c = self.coll
            self._out = out.view(out.shape[0], c.num_tables, c.dim) if c.uniform_dims else out
        return self._out


class ShardedEmbeddingCollection(nn.Module):
    """The shards of this rank, and the collectives that make them act as the whole tables.

    Args:
        full: the unsharded tables' description (rows, dim, pooling, optimizer, seed; built on
            the ``meta`` device: no rank allocates them). Each rank makes only its own shards and
            replicas, from the seed (:func:`~harness.reference.models.embeddings.initial_weights`), so
            every plan and world size starts from the single-process model's weights, bit for bit.
        shardings: per table, from :func:`shardings_from_plan`.
        comm: the collectives of the forward and backward passes.
        input_comm: the collectives of the input distribution (another process group, so
            that a batch's ids can travel while the previous step computes).
        codecs: the codec of each collective.
        tiers: ``{"path": prefix of this rank's shard files, "policy", "batch": the global
            batch}``.
        capacity: this rank's bytes per tier (the plan's ``rank_capacity``); None: unbounded.
        plan_config: the plan's ``config`` (its cache fractions).

    **Tiers, as planned.** Every shard is allocated in the tier the plan gives it, through this
    rank's :class:`~harness.reference.tiered.TierLedger` (:attr:`ledger`), which enforces the
    tier's capacity and records its peak: a shard in the rank's fastest tier is resident there;
    a DDR shard under an HBM tier lives in host memory behind a cache in HBM (Neo's HBM cache
    over DDR, FBGEMM's UVM caching) of the plan's ``ddr_cache_fraction`` of its rows, never
    fewer than one global batch can look up (resident in DDR when the plan gives it no cache);
    an SSD shard lives in a file behind such a cache (``ssd_cache_fraction``)
    (:class:`~harness.reference.tiered.CachedShard`). Data-parallel replicas are resident in
    their planned tier.
    """

    def __init__(self, full: FusedEmbeddingCollection, shardings: Sequence[TableSharding], comm: Comm,
                 input_comm: Comm, codecs: CommConfig, tiers: dict[str, Any] | None = None, *, device: Any = None,
                 capacity: Storage | None = None, plan_config: dict[str, Any] | None = None,
                 hierarchy: Hierarchy | None = None, overlap: bool = False, ledger: TierLedger | None = None,
                 sequence: bool = False):
        super().__init__()
        self.sequence = sequence
        self.hier = hierarchy if hierarchy is not None and hierarchy.nodes > 1 else None
        self.overlap = overlap
        self._pending_backward: list[Callable[[], None]] = []
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self.comm, self.input_comm, self.codecs = comm, input_comm, codecs
        self.rank, self.world_size = comm.rank, comm.world_size
        self.table_rows, self.pooling = full.table_rows, full.pooling
        self.dims: tuple[int, ...] = tuple(getattr(full, "dims", None) or (full.dim,) * len(full.table_rows))
        self.uniform_dims = len(set(self.dims)) <= 1
        self.dim = self.dims[0]  # with uniform dims, the output is B x F x dim
        self._out_start = (0, *itertools.accumulate(self.dims))  # each table's first value of a pooled row
        self.optimizer = full.optimizer
        # the tables' storage type: shards and replicas are stored in it, updates rounded
        # stochastically into it (harness.reference.models.numerics), pooled vectors and their gradients
        # cross the wire in it unless a codec says otherwise (see _codec)
        self.table_dtype = next(full.parameters()).dtype
        self.update_step, self.grad_unscale = 0, None
        self.num_tables = len(self.table_rows)
        self.col_start = (0, *itertools.accumulate(self.pooling))  # each table's first id column
        self.shards_of: list[list[ShardSpec]] = [[] for _ in range(self.world_size)]
        self.dp_tables: list[int] = []
        for t, sh in enumerate(shardings):
            if sh.sharding_type is ShardingType.DATA_PARALLEL:
                self.dp_tables.append(t)
                continue
            for s in sh.shards:
                self.shards_of[s.rank].append(s)
        for shards in self.shards_of:
            shards.sort(key=lambda s: (s.table, s.row_offset, s.col_offset))
        self.keys_of = [list(dict.fromkeys(s.key for s in shards)) for shards in self.shards_of]
        mine = self.shards_of[self.rank]
        self._key_index = [self.keys_of[self.rank].index(s.key) for s in mine]
        self.shards: list[ShardSpec] = mine
        self._init_hierarchy(shardings)
        # per rank, the columns of the pooled output its flat shards fill, shard after shard
        self._flat_columns = [torch.tensor([c for s in shards for c in range(self._out_start[s.table] + s.col_offset,
                                                                            self._out_start[s.table] + s.col_offset + s.cols)],
                                           dtype=torch.int64, device=self._device) for shards in self.flat_of]
        # HARNESS_SHARDED_PER_SHARD=1: every shard's ids, vectors and update one by one, as before
        # the batched paths (the same values: bench/sharded_step.py measures one against the other)
        self._batched = os.environ.get("HARNESS_SHARDED_PER_SHARD", "0") != "1"
        self._router = None if sequence or not self._batched else _Router.build(self, self._device)

        self.seed = full.seed
        # each table's id in the model (its initial weights' and its rounding's random streams): the
        # index of a table in this collection, unless ``full`` names them (an HSTU ranker's
        # contextual table is table 3 of the model, alone in its collection)
        self.table_ids: tuple[int, ...] = tuple(getattr(full, "table_ids", None) or range(len(self.table_rows)))
        device = torch.device(device) if device is not None else torch.device("cpu")
        config = plan_config or {}
        self.ledger = ledger if ledger is not None else rank_ledger(capacity, self.rank)
        self.tiers = dict(tiers or {})
        self._cache_fraction = {Tier.DDR: float(config.get("ddr_cache_fraction", 0.0)),
                                Tier.SSD: float(config.get("ssd_cache_fraction", 0.0))}
        self._weights: list[torch.Tensor | None] = []
        self._states: list[torch.Tensor | None] = []
        self.cached: dict[int, CachedShard] = {}  # local shard index -> its rows in a slower tier, behind a cache
        self._io: ThreadPoolExecutor | None = None  # reads ahead and write-backs of the cached shards, in order
        # fp32 shards of one width share one weight and one state (each shard a block of rows of
        # them), so that a step updates them in one call instead of one per shard (see _ShardGroup)
        grouped = self.table_dtype == torch.float32 and not sequence and self._batched
        resident: list[int] = []
        for i, s in enumerate(mine):
            cached = self._cached_shard(i, s)
            if cached is not None or grouped:
                if cached is not None:
                    self.cached[i] = cached
                else:
                    self.ledger.allocate(s.tier, s.rows * (s.cols * self._value_bytes + self._state_cols(s.cols) * 4),
                                         f"shard {i} (table {s.table})")
                    resident.append(i)
                self._weights.append(None)
                self._states.append(None)
                continue
            weight = self._initial_block(s, out=empty_table((s.rows, s.cols), self.table_dtype, device))
            state = initial_state(self.optimizer, s.rows, s.cols, device)
            self.ledger.allocate(s.tier, _nbytes(weight, state), f"shard {i} (table {s.table})")
            self.register_buffer(f"shard{i}_weight", weight)
            self.register_buffer(f"shard{i}_state", state)
            self._weights.append(getattr(self, f"shard{i}_weight"))
            self._states.append(getattr(self, f"shard{i}_state"))
        self._groups = self._group_shards(resident, device)
        self._grouped = {i for g in self._groups if len(g.members) > 1 for i in g.members}

        # data-parallel tables: full replicas, made on every rank from the same seed (so they start
        # equal), one fused collection per dimension
        self.replicas = nn.ModuleList()
        self.replica_tables: list[list[int]] = []
        for dim in sorted({self.dims[t] for t in self.dp_tables}):
            tables = [t for t in self.dp_tables if self.dims[t] == dim]
            g = len(self.replicas)
            self.replicas.append(FusedEmbeddingCollection(
                [self.table_rows[t] for t in tables], dim, [self.pooling[t] for t in tables],
                optimizer=self.optimizer, device=device, seed=self.seed, table_ids=[self.table_ids[t] for t in tables],
                dtype=self.table_dtype,
            ))
            self.replica_tables.append(tables)
            state_cols = self._state_cols(dim)
            for t in tables:  # each replica in its planned tier (resident, uncached: see _replica_tier)
                self.ledger.allocate(self._replica_tier(shardings, t),
                                     self.table_rows[t] * (dim * self._value_bytes + state_cols * 4),
                                     f"the replica of table {t}")
            self.register_buffer(f"_dp_columns{g}", torch.cat(
                [torch.arange(self.col_start[t], self.col_start[t + 1]) for t in tables]).to(device), persistent=False)
            self.register_buffer(f"_dp_out{g}", torch.cat(
                [torch.arange(self._out_start[t], self._out_start[t + 1]) for t in tables]).to(device), persistent=False)
        self._dummy = torch.zeros(0, requires_grad=True, device=device)
        self._layouts = [TableLayout.of_shard(self.seed, self.table_ids[s.table], s.rows, s.row_offset, s.col_offset)
                         for s in mine]

    def _group_shards(self, resident: Sequence[int], device: Any) -> list[_ShardGroup]:
        """The weights and states of the ``resident`` shards, one pair per width: each shard's are
        a block of rows of its group's (its buffers, as before, are those blocks), made from the
        seed in place."""
        by_cols: dict[int, list[int]] = {}
        for i in resident:
            by_cols.setdefault(self.shards[i].cols, []).append(i)
        groups = []
        for cols, members in by_cols.items():
            rows = [self.shards[i].rows for i in members]
            weight = empty_table((sum(rows), cols), self.table_dtype, device)
            state = initial_state(self.optimizer, sum(rows), cols, device)
            bases = [0, *itertools.accumulate(rows)][:-1]
            for i, base, n in zip(members, bases, rows):
                self._weights[i] = self._initial_block(self.shards[i], out=weight[base : base + n])
                self._states[i] = state[base : base + n] if state.numel() else state.new_empty(0)
            groups.append(_ShardGroup(members, bases, weight, state, torch.tensor(bases, dtype=torch.int64, device=device)))
        for i in resident:  # registered in the shards' order, as ever
            self.register_buffer(f"shard{i}_weight", self._weights[i])
            self.register_buffer(f"shard{i}_state", self._states[i])
        return groups

    def _init_hierarchy(self, shardings: Sequence[TableSharding]) -> None:
        """Which shards go through the two-stage (intra-node, then inter-node) distribution."""
        hier: set[int] = set()
        if self.hier is not None:
            per_node = self.hier.ranks_per_node
            for t, sh in enumerate(shardings):
                if sh.sharding_type in HIERARCHICAL_TYPES:
                    if len({s.rank // per_node for s in sh.shards}) != 1:
                        raise HarnessError(f"plan table {t}: a {sh.sharding_type.value} table must have all its "
                                           f"shards on the ranks of one node of {per_node}", ErrorCategory.BAD_INPUT)
                    hier.add(t)
        self.flat_of = [[s for s in shards if s.table not in hier] for shards in self.shards_of]
        self.hier_of = [[s for s in shards if s.table in hier] for shards in self.shards_of]
        self._flat_index = [i for i, s in enumerate(self.shards) if s.table not in hier]
        self._row_bytes_of: dict[tuple[str, int], int] = {}
        self._hier_index = [i for i, s in enumerate(self.shards) if s.table in hier]
        self._two_stage = False
        if self.hier is None:
            return
        per_node, nodes = self.hier.ranks_per_node, self.hier.nodes
        self.node, self.local = divmod(self.rank, per_node)
        # the two-stage tables of each node, in table order: the cross-node chunk's layout
        self.node_tables = [sorted({s.table for p in range(n * per_node, (n + 1) * per_node) for s in self.hier_of[p]})
                            for n in range(nodes)]
        self._rows_of_local: dict[tuple[int, ...], list[torch.Tensor]] = {}
        self._two_stage = any(self.node_tables)  # the same on every rank: the plan's

    def _local_rows(self, sizes: Sequence[int]) -> list[torch.Tensor]:
        """Per local index ``j``: the global batch's rows of the samples of the ranks of local
        index ``j`` (node by node), the rows a stage-one chunk to local rank ``j`` carries."""
        key = tuple(sizes)
        if key not in self._rows_of_local:
            assert self.hier is not None
            per_node, nodes = self.hier.ranks_per_node, self.hier.nodes
            bounds = [0, *itertools.accumulate(sizes)]
            self._rows_of_local[key] = [
                torch.cat([torch.arange(bounds[m * per_node + j], bounds[m * per_node + j + 1])
                           for m in range(nodes)]).to(self._dummy.device)
                for j in range(per_node)
            ]
        return self._rows_of_local[key]

    def _replica_tier(self, shardings: Sequence[TableSharding], table: int) -> Tier:
        """The tier this rank's replica of ``table`` lives in: the plan's (replicas are resident
        there, uncached: they are small, and every rank updates every row that any rank touched)."""
        tier = next((s.tier for s in shardings[table].shards if s.rank == self.rank), self.ledger.fastest())
        if tier is Tier.SSD:
            raise HarnessError("a data-parallel table on the SSD tier: replicas are kept in memory; plan it "
                               "another way", ErrorCategory.NOT_IMPLEMENTED)
        return tier

    def _cached_shard(self, i: int, s: ShardSpec) -> CachedShard | None:
        """Shard ``s`` in its planned tier behind a cache in a faster one, or None when it is
        resident: in its rank's fastest tier, or in DDR when the plan gives DDR shards no cache.
        The store's bytes count in the shard's tier, the cache's (slots, bookkeeping and the
        row -> slot map) in the fastest tier above it, as the planner counted them."""
        fast = self.ledger.faster_than(s.tier)
        fraction = self._cache_fraction.get(s.tier, 0.0)
        if fast is None or (s.tier is Tier.DDR and fraction <= 0):
            return None
        if fraction <= 0:
            raise HarnessError(f"shard {i} (table {s.table}) is on the SSD tier without a cache: plan SSD shards "
                               "with an ssd_cache_fraction", ErrorCategory.NOT_IMPLEMENTED)
        if self._device.type != "cpu":
            raise HarnessError("caches of slower tiers on a GPU (in HBM) are not implemented: only the CPU path "
                               "caches DDR and SSD shards", ErrorCategory.NOT_IMPLEMENTED)
        state_cols = self._state_cols(s.cols)
        self.ledger.allocate(s.tier, s.rows * row_bytes(s.cols, state_cols, self.table_dtype), f"shard {i} (table {s.table})")
        slots = cache_rows(s.rows, fraction, int(self.tiers.get("batch", 1)) * self.pooling[s.table])
        policy = CachePolicy(self.tiers.get("policy", "lru"))
        if self._io is None:
            self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-shard-io")
        if s.tier is Tier.SSD:
            if "path" not in self.tiers:
                raise HarnessError("the plan puts shards on the SSD tier, but the run gave them no file path",
                                   ErrorCategory.BAD_INPUT)
            path = Path(f"{self.tiers['path']}.shard{i}.bin")
            cached = CachedShard.on_ssd(path, s.rows, s.cols, state_cols, self._initial_rows(s), slots, policy, self._io,
                                        dtype=self.table_dtype)
        else:
            cached = CachedShard.in_ddr(s.rows, s.cols, state_cols, self._initial_rows(s), slots, policy, self._io,
                                        dtype=self.table_dtype)
        self.ledger.allocate(fast, cached.cache.nbytes, f"the cache of shard {i} (table {s.table})")
        return cached

    def _replica_columns(self, g: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Replica group ``g``'s id columns of a batch and its values of a pooled row."""
        return getattr(self, f"_dp_columns{g}"), getattr(self, f"_dp_out{g}")

    def _initial_block(self, s: ShardSpec, rows: tuple[int, int] | None = None, *,
                       out: torch.Tensor | None = None) -> torch.Tensor:
        """Initial weights of shard ``s`` (of its local rows ``rows``, default all): the
        single-process model's weights of that block, made without the rest of the table (into
        ``out`` when given)."""
        lo, hi = (0, s.rows) if rows is None else rows
        return initial_weights(self.seed, self.table_ids[s.table], self.table_rows[s.table], self.dims[s.table],
                               (s.row_offset + lo, s.row_offset + hi), (s.col_offset, s.col_offset + s.cols), out=out)

    def _state_cols(self, cols: int) -> int:
        state = initial_state(self.optimizer, 1, cols)
        return int(state.numel())

    def _initial_rows(self, s: ShardSpec) -> Callable[[int, int], torch.Tensor]:
        """Rows ``lo .. hi - 1`` of shard ``s`` as a store holds them: weights, then optimizer state."""
        def rows(lo: int, hi: int) -> torch.Tensor:
            state = initial_state(self.optimizer, hi - lo, s.cols).reshape(hi - lo, -1)
            return torch.cat([self._initial_block(s, (lo, hi)), state], dim=1)

        return rows

    def set_learning_rate(self, lr: float) -> None:
        """The fused optimizer's rate (of every shard and the replicas) from the next update on."""
        set_learning_rate(self, lr)

    def set_step(self, step: int, grad_unscale: float | None = None) -> None:
        """The optimizer step whose update comes next (its rounding bits; see
        :mod:`harness.reference.models.numerics`), and 1 / the loss scale (None: not scaled)."""
        self.update_step, self.grad_unscale = int(step), grad_unscale

    @property
    def _value_bytes(self) -> int:
        return torch.empty(0, dtype=self.table_dtype).element_size()

    def _codec(self, codec: Codec) -> Codec:
        """What a pooled vector or its gradient crosses the wire in: the collective's codec, or,
        where that is fp32, the tables' own type (a bf16 table's vectors are bf16 values, and
        their gradients come from bf16 layers: sending them in fp32 would only double the bytes)."""
        if codec is Codec.FP32 and self.table_dtype != torch.float32:
            return Codec.BF16 if self.table_dtype == torch.bfloat16 else Codec.FP16
        return codec

    @property
    def forward_codec(self) -> Codec:
        return self._codec(self.codecs.forward)

    @property
    def backward_codec(self) -> Codec:
        return self._codec(self.codecs.backward)

    # ------------------------------------------------------------------ input
    def bucket(self, sparse: torch.Tensor, key: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lengths, ids)`` of this rank's samples for one row range of one table."""
        table, row_offset, rows = key
        ids = sparse[:, self.col_start[table] : self.col_start[table + 1]]
        if rows == self.table_rows[table]:
            return torch.full((ids.shape[0],), ids.shape[1], dtype=ids.dtype, device=ids.device), ids.reshape(-1)
        inside = (ids >= row_offset) & (ids < row_offset + rows)
        return inside.sum(1), ids[inside] - row_offset

    def distribute(self, sparse: torch.Tensor, sizes: Sequence[int] | None = None, *,
                   segments: torch.Tensor | None = None, samples: Sequence[int] | None = None,
                   count: bool = True) -> InputDist:
        """Start sending a batch's ids (``sizes``: every rank's batch size, in rows of ``sparse``;
        default all equal). A sequence collection's rows are events: ``segments``, this rank's
        events per sample (user), and ``samples``, every rank's samples, make its lengths travel
        per sample (default: every event a sample of its own). ``count``: the batch counts in the
        input statistics (``input_batches``); False for the other collections of a model's batch."""
        return InputDist(self, sparse, sizes if sizes is not None else [sparse.shape[0]] * self.world_size,
                         segments, samples, count=count)

    def queue_next(self, ids: InputDist) -> None:
        """The next training batch, its ids on their way: the cached shards read its missing rows
        ahead once the current batch is resident (nothing to do without cached shards)."""
        if not self.cached:
            return
        keyed = ids.wait()
        for i, cached in self.cached.items():
            cached.queue(keyed[self._key_index[i]].values)

    def close(self) -> None:
        """Wait for the cached shards' reads and write-backs in flight, and stop their thread."""
        for cached in self.cached.values():
            cached.settle()
        if self._io is not None:
            self._io.shutdown(wait=True)
            self._io = None

    # ------------------------------------------------------------------ forward
    def forward(self, ids: InputDist) -> torch.Tensor:
        """The pooled embeddings of this rank's samples, as the unsharded tables give them: ``B x
        F x D`` (tables of one dimension) or ``B x sum(dims)`` (several)."""
        return self.start(ids).wait()

    def start(self, ids: InputDist) -> PendingPooled:
        """Look up this rank's shards for the global batch and start sending the pooled vectors
        to their samples' ranks; the result's ``wait()`` gives this rank's pooled embeddings."""
        with phases.CLOCK.phase(phases.EMBEDDING_FORWARD):
            keyed = ids.wait()
            train = self.training and self.optimizer is not None and torch.is_grad_enabled()
            stage: dict[str, Any] = {}
            with torch.no_grad():
                finish = self._start_pooled(keyed, ids, stage)
        return PendingPooled(self, keyed, ids, finish, train, stage)

    def _start_pooled(self, keyed: list[KeyedIds], ids: InputDist, stage: dict[str, Any]) -> Callable[[], torch.Tensor]:
        me, sparse, sizes, present = self.rank, ids.sparse, ids.sizes, ids.present
        # where each rank's samples start: in rows of the partials (pooled), or, in a sequence
        # collection, in the lengths (per sample) that cut each shard's ids (_bounds)
        bounds = [0, *itertools.accumulate(ids.samples if self.sequence else sizes)]
        partials: list[torch.Tensor | None] = [None] * len(self.shards)
        if not self.sequence:
            for g in self._groups:
                if len(g.members) > 1:
                    self._lookup_group(g, keyed, partials)
        for i in range(len(self.shards)):
            if partials[i] is not None:
                continue
            k = keyed[self._key_index[i]]
            weight, rows = self._lookup_rows(i, k.values)
            if k.one_per_sample or self.sequence:  # a vector per id it holds
                partials[i] = weight.index_select(0, rows)
            else:
                partials[i] = torch.nn.functional.embedding_bag(rows, weight, k.offsets, mode="sum")
        flat_keyed = [keyed[self._key_index[i]] for i in self._flat_index]
        flat = self.comm.all_to_all_start(
            self.encode_pooled([partials[i] for i in self._flat_index], bounds, flat_keyed),
            self.pooled_sizes(sizes[me], present), FORWARD)
        cross = None
        if self._two_stage and self.sequence:
            cuts = {i: self._bounds(keyed[self._key_index[i]], bounds) for i in self._hier_index}
            cross = self._start_two_stage_sequence({i: partials[i] for i in self._hier_index}, cuts, present, stage)
        elif self._two_stage:
            cross = self._start_two_stage([partials[i] for i in self._hier_index], sizes)

        def finish() -> torch.Tensor:
            out = self.decode_pooled(flat.wait(), sizes[me], present)
            if cross is not None and self.sequence:
                self._place_two_stage_sequence(out, cross.wait(), present)
            elif cross is not None:
                self._place_two_stage(out, cross.wait(), sizes[me])
            for g, rep in enumerate(self.replicas):
                columns, values = self._replica_columns(g)
                local = rep.global_ids(sparse.index_select(1, columns))
                out[:, values] = rep._lookup(rep.weight.detach(), local).flatten(1).float()
            return out.to(self.table_dtype)  # summed in fp32, given in the tables' type as one process's

        return finish

    def _lookup_group(self, g: _ShardGroup, keyed: list[KeyedIds], partials: list[torch.Tensor | None]) -> None:
        """The pooled vectors of a group's shards (:class:`_ShardGroup`) in one ``embedding_bag``
        over the group's weight: each shard's ids shifted to its rows, its bags numbered on; each
        bag's rows summed in the same order as the shard's own lookup sums them (a one-id bag: its
        row)."""
        ids, offsets, counts, at = [], [], [], 0
        for i, base in zip(g.members, g.bases):
            k = keyed[self._key_index[i]]
            ids.append(k.values + base)
            offsets.append(k.offsets + at)
            counts.append(k.offsets.numel())
            at += k.values.numel()
        pooled = torch.nn.functional.embedding_bag(torch.cat(ids), g.weight, torch.cat(offsets), mode="sum")
        for i, part in zip(g.members, pooled.split(counts)):
            partials[i] = part

    def _start_two_stage(self, partials: Sequence[torch.Tensor], sizes: Sequence[int]) -> PendingAllToAll:
        """Stage one (inside the node, done when this returns) and the start of stage two (across
        nodes) of the two-stage tables' pooled vectors (see the module docstring)."""
        assert self.hier is not None
        codec, per_node, nodes = self.forward_codec, self.hier.ranks_per_node, self.hier.nodes
        rows = self._local_rows(sizes)
        chunks = [torch.cat([encode(p.index_select(0, rows[j]).float(), codec) for p in partials]) if partials
                  else self._empty_bytes() for j in range(per_node)]
        n_me = rows[self.local].numel()
        node_ranks = self._node_ranks(self.node)
        got = self.hier.intra.all_to_all(chunks, [sum(wire_bytes(codec, n_me, s.cols) for s in self.hier_of[p])
                                                  for p in node_ranks], FORWARD)
        tables = self.node_tables[self.node]
        summed = {t: torch.zeros(n_me, self.dims[t], device=self._dummy.device) for t in tables}
        for p, chunk in zip(node_ranks, got):
            at = 0
            for s in self.hier_of[p]:
                n = wire_bytes(codec, n_me, s.cols)
                summed[s.table][:, s.col_offset : s.col_offset + s.cols] += decode(chunk[at : at + n], codec,
                                                                                   n_me, s.cols)
                at += n
        # stage two: to the rank of my local index on node m, the vectors of its samples
        seg = [sizes[m * per_node + self.local] for m in range(nodes)]
        parts = {t: summed[t].split(seg) for t in tables}
        send = [torch.cat([encode(parts[t][m], codec) for t in tables]) if tables else self._empty_bytes()
                for m in range(nodes)]
        recv = [sum(wire_bytes(codec, sizes[self.rank], self.dims[t]) for t in self.node_tables[m]) for m in range(nodes)]
        return self.hier.cross.all_to_all_start(send, recv, FORWARD)

    def _place_two_stage(self, out: torch.Tensor, got: Sequence[torch.Tensor], batch: int) -> None:
        codec = self.forward_codec
        for m, chunk in enumerate(got):
            at = 0
            for t in self.node_tables[m]:
                n = wire_bytes(codec, batch, self.dims[t])
                lo = self._out_start[t]
                out[:, lo : lo + self.dims[t]] = decode(chunk[at : at + n], codec, batch, self.dims[t])
                at += n

    def _node_ranks(self, node: int) -> range:
        assert self.hier is not None
        return range(node * self.hier.ranks_per_node, (node + 1) * self.hier.ranks_per_node)

    def _start_two_stage_sequence(self, partials: dict[int, torch.Tensor], cuts: dict[int, list[int]],
                                  present: dict[tuple[int, int, int], torch.Tensor],
                                  stage: dict[str, Any]) -> PendingAllToAll:
        """The two-stage tables of a sequence collection: nothing is summed, so a vector travels
        from the shard that holds its id only, through the rank of its sample's local index on
        the shard's node (stage one, inside the node) to its sample's rank (stage two, across
        nodes, as it came: encoded once, by its shard). First, inside the node, how many ids each
        shard holds of the samples of each local index and node (``stage["counts"]``: they size
        both stages, forward and backward)."""
        assert self.hier is not None
        codec, per_node, nodes = self.forward_codec, self.hier.ranks_per_node, self.hier.nodes
        node_ranks = self._node_ranks(self.node)

        def block(i: int, j: int, m: int) -> tuple[int, int]:  # shard i's ids of the samples of rank (m, j)
            q = m * per_node + j
            return cuts[i][q], cuts[i][q + 1]

        send = [torch.tensor([hi - lo for i in self._hier_index for m in range(nodes) for lo, hi in [block(i, j, m)]],
                             dtype=torch.int64, device=self._dummy.device) for j in range(per_node)]
        got = self.hier.intra.all_to_all(send, [len(self.hier_of[p]) * nodes for p in node_ranks], INPUT)
        counts = [c.view(len(self.hier_of[p]), nodes).tolist() for p, c in zip(node_ranks, got)]
        stage["counts"], stage["cuts"] = counts, cuts
        chunks = [torch.cat([encode(partials[i][lo:hi].float(), codec) for i in self._hier_index for m in range(nodes)
                             for lo, hi in [block(i, j, m)]]) if self._hier_index else self._empty_bytes()
                  for j in range(per_node)]
        got = self.hier.intra.all_to_all(chunks, [
            sum(wire_bytes(codec, counts[a][b][m], s.cols) for b, s in enumerate(self.hier_of[p]) for m in range(nodes))
            for a, p in enumerate(node_ranks)], FORWARD)
        # stage two: to the rank of my local index on node m, its samples' blocks, shard after shard
        send = self._regroup(got, counts, codec, by_node=True)
        recv = [sum(wire_bytes(codec, int(present[s.key].numel()), s.cols)
                    for p in self._node_ranks(m) for s in self.hier_of[p]) for m in range(nodes)]
        return self.hier.cross.all_to_all_start(send, recv, FORWARD)

    def _regroup(self, got: Sequence[torch.Tensor], counts: list[list[list[int]]], codec: Codec, *,
                 by_node: bool) -> list[torch.Tensor]:
        """Stage one's encoded blocks, as a sequence collection's two stages pass them on: from
        the node's ranks (``got[a]``: each of its shards' blocks, node by node) to each node
        (``by_node``: the forward's stage two), or from the nodes (``got[m]``: each rank's shards'
        blocks, rank after rank) to each rank of the node (the backward's stage one)."""
        assert self.hier is not None
        nodes, per_node = self.hier.nodes, self.hier.ranks_per_node
        node_ranks = self._node_ranks(self.node)
        out: list[list[torch.Tensor]] = [[] for _ in range(nodes if by_node else per_node)]
        at = [0] * len(got)
        order = [(a, b, m) for a, p in enumerate(node_ranks) for b in range(len(self.hier_of[p])) for m in range(nodes)]
        if not by_node:  # the backward's chunks come node by node, each rank's shards in order
            order.sort(key=lambda abm: abm[2])
        for a, b, m in order:
            src = m if not by_node else a
            n = wire_bytes(codec, counts[a][b][m], self.hier_of[node_ranks[a]][b].cols)
            out[m if by_node else a].append(got[src][at[src] : at[src] + n])
            at[src] += n
        return [torch.cat(parts) if parts else self._empty_bytes() for parts in out]

    def _place_two_stage_sequence(self, out: torch.Tensor, got: Sequence[torch.Tensor],
                                  present: dict[tuple[int, int, int], torch.Tensor]) -> None:
        codec = self.forward_codec
        for m, chunk in enumerate(got):
            at = 0
            for p in self._node_ranks(m):
                for s in self.hier_of[p]:
                    rows = present[s.key]
                    n = wire_bytes(codec, rows.numel(), s.cols)
                    lo = self._out_start[s.table] + s.col_offset
                    out[:, lo : lo + s.cols].index_copy_(0, rows, decode(chunk[at : at + n], codec, rows.numel(), s.cols))
                    at += n

    def _empty_bytes(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8, device=self._dummy.device)

    def _lookup_rows(self, i: int, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A weight and indices into it that look up local shard ``i``'s rows ``ids``: the
        shard's own weight; or, on the SSD tier, its cache's slots once the rows are resident
        (or, for a batch larger than the cache, the rows read where they are)."""
        cached = self.cached.get(i)
        if cached is None:
            return self._weights[i], ids  # type: ignore[return-value]
        slots = cached.slots(ids, training=self.training)
        if slots is not None:
            return cached.weight, slots
        if self.training and torch.is_grad_enabled():
            raise HarnessError(f"a training batch looks up more distinct rows of a shard than its cache holds "
                               f"({cached.cache.free_capacity})", ErrorCategory.BAD_INPUT)
        return cached.current_rows(ids)

    def cache_stats(self, tier: Tier = Tier.SSD) -> tuple[CacheStats, int, int]:
        """This rank's shards in ``tier`` behind caches: their caches' statistics summed, their
        rows, and their slots."""
        caches = [c for c in self.cached.values() if c.store.tier is tier]
        return (sum((c.cache.stats for c in caches), CacheStats()), sum(c.store.rows for c in caches),
                sum(c.cache.free_capacity for c in caches))

    def _bounds(self, k: KeyedIds, bounds: Sequence[int]) -> list[int]:
        """Where each rank's samples' rows start in a flat shard's partial vectors: every sample's
        (``bounds``), or, in a sequence collection, only those of the ids the shard holds."""
        if not self.sequence:
            return list(bounds)
        ends = torch.cumsum(k.lengths, 0)
        return [0, *(int(ends[b - 1]) if b > 0 else 0 for b in bounds[1:])]

    def encode_pooled(self, partials: Sequence[torch.Tensor], bounds: Sequence[int],
                      keyed: Sequence[KeyedIds] | None = None) -> list[torch.Tensor]:
        """Per destination rank ``q``, this rank's shards' pooled vectors of ``q``'s samples
        (rows ``bounds[q]:bounds[q + 1]``; a sequence collection's, of its ids in the shard, with
        ``keyed``), encoded with the forward codec, shard after shard."""
        codec = self.forward_codec
        empty = torch.empty(0, dtype=torch.uint8, device=self._dummy.device)
        if self._side_by_side(codec):  # every shard's columns of a sample in one row: one encode
            if not partials:
                return [empty] * self.world_size
            block = torch.cat([p.float() for p in partials], dim=1) if len(partials) > 1 else partials[0].float()
            row = wire_bytes(codec, 1, block.shape[1])
            return list(encode(block, codec).split([(bounds[q + 1] - bounds[q]) * row for q in range(self.world_size)]))
        cuts = [self._bounds(k, bounds) for k in keyed] if keyed is not None else [list(bounds)] * len(partials)
        return [
            torch.cat([encode(p[c[q] : c[q + 1]].float(), codec) for p, c in zip(partials, cuts)]) if partials else empty
            for q in range(self.world_size)
        ]

    def _side_by_side(self, codec: Codec) -> bool:
        """Whether the flat all-to-all's chunk of pooled vectors (or their gradients) is one matrix
        whose rows are samples, the shards' columns side by side (encoded at once, placed by one
        ``index_add_`` per rank), rather than shard after shard. Only for codecs that encode each
        value alone (fp32, fp16, bf16: the same bytes either way); the scaled codecs (fp8, int8)
        scale each shard's row of a sample on its own, and a sequence collection's shards send the
        vectors of different rows."""
        return not self.sequence and not is_scaled(codec) and self._batched

    def _rows_of(self, s: ShardSpec, batch: int, present: dict[tuple[int, int, int], torch.Tensor]) -> int:
        """This rank's rows whose vectors shard ``s`` sends: every sample's, or, in a sequence
        collection, those whose id it holds."""
        return int(present[s.key].numel()) if self.sequence else batch

    def pooled_sizes(self, batch: int, present: dict[tuple[int, int, int], torch.Tensor] | None = None) -> list[int]:
        """Bytes this rank receives from each rank for its ``batch`` samples (flat all-to-all)."""
        codec = self.forward_codec
        if not self.sequence:  # every shard sends one row per sample
            return [batch * self._row_bytes(codec, p) for p in range(self.world_size)]
        return [sum(wire_bytes(codec, self._rows_of(s, batch, present or {}), s.cols) for s in shards)
                for shards in self.flat_of]

    def _row_bytes(self, codec: Codec, p: int) -> int:
        """Bytes on the wire of one sample's row of rank ``p``'s flat shards' vectors (or their
        gradients), shard after shard: a pooled collection's chunk is the batch's rows times this
        (``wire_bytes`` is linear in the rows), asked once per step and collective, summed once."""
        key = (codec.value, p)
        got = self._row_bytes_of.get(key)
        if got is None:
            got = self._row_bytes_of[key] = sum(int(wire_bytes(codec, 1, s.cols)) for s in self.flat_of[p])
        return got

    def decode_pooled(self, got: Sequence[torch.Tensor], batch: int,
                      present: dict[tuple[int, int, int], torch.Tensor] | None = None) -> torch.Tensor:
        """The ``batch x sum(dims)`` embeddings from every rank's chunk of the flat all-to-all:
        column shards side by side, row shards summed (a sequence collection's placed at the rows
        of their ids; data-parallel and two-stage tables are left zero)."""
        codec = self.forward_codec
        if self._side_by_side(codec):
            # transposed, so that each shard's column lands on a contiguous row; index_add_ adds the
            # ranks' chunks in rank order and each chunk's columns in its shards' order, as below
            out_t = torch.zeros(self._out_start[-1], batch, device=self._dummy.device)
            for p, chunk in enumerate(got):
                columns = self._flat_columns[p]
                if columns.numel():
                    out_t.index_add_(0, columns, decode(chunk, codec, batch, columns.numel()).t())
            return out_t.t().contiguous()
        out = torch.zeros(batch, self._out_start[-1], device=self._dummy.device)
        for p, chunk in enumerate(got):
            at = 0
            for s in self.flat_of[p]:
                rows = self._rows_of(s, batch, present or {})
                n = wire_bytes(codec, rows, s.cols)
                lo = self._out_start[s.table] + s.col_offset
                vectors = decode(chunk[at : at + n], codec, rows, s.cols)
                if self.sequence:
                    out[:, lo : lo + s.cols].index_copy_(0, present[s.key], vectors)  # type: ignore[index]
                else:
                    out[:, lo : lo + s.cols] += vectors
                at += n
        return out

    # ------------------------------------------------------------------ backward
    @torch.no_grad()
    def _backward(self, keyed: list[KeyedIds], ids: InputDist, grad: torch.Tensor, stage: dict[str, Any]) -> None:
        """Send the pooled gradients to the shards and update them: now, or with ``overlap`` when
        :meth:`finish_backward` is called (the all-to-alls travel meanwhile)."""
        codec, w = self.backward_codec, self.world_size
        sparse, sizes, present = ids.sparse, ids.sizes, ids.present
        # one row per sample, the gradient of the global batch's mean (see the module's docstring),
        # in fp32 (a bf16 model's gradients are bf16 values: exactly so, and they cross in bf16
        # losslessly)
        grad = grad.reshape(grad.shape[0], -1).float()

        def block(s: ShardSpec) -> torch.Tensor:
            lo = self._out_start[s.table] + s.col_offset
            if self.sequence:  # the gradients of the vectors the shard sent: of the ids it holds
                return grad[:, lo : lo + s.cols].index_select(0, present[s.key])
            return grad[:, lo : lo + s.cols].contiguous()

        # rows of each rank's samples each flat shard of mine gets gradients for
        bounds = [0, *itertools.accumulate(ids.samples if self.sequence else sizes)]
        cuts = {i: self._bounds(keyed[self._key_index[i]], bounds) for i in self._flat_index}
        rows = {i: [c[q + 1] - c[q] for q in range(w)] for i, c in cuts.items()}
        side_by_side = self._side_by_side(codec)
        if side_by_side:  # each rank's shards' columns of a sample in one row, as they came
            chunks = [encode(grad.index_select(1, self._flat_columns[p]), codec) if self.flat_of[p]
                      else self._empty_bytes() for p in range(w)]
        else:
            chunks = [torch.cat([encode(block(s), codec) for s in self.flat_of[p]]) if self.flat_of[p]
                      else self._empty_bytes() for p in range(w)]
        if self.sequence:
            recv = [sum(wire_bytes(codec, rows[i][q], self.shards[i].cols) for i in self._flat_index) for q in range(w)]
        else:  # each of my flat shards gets one row per sample of rank q
            recv = [sizes[q] * self._row_bytes(codec, self.rank) for q in range(w)]
        flat = self.comm.all_to_all_start(chunks, recv, BACKWARD)
        cross = None
        if self._two_stage:
            cross = (self._start_two_stage_sequence_backward(grad, present, stage) if self.sequence
                     else self._start_two_stage_backward(grad, sizes))

        def finish() -> None:
            got = flat.wait()
            at = [0] * w
            pooled: dict[int, torch.Tensor] = {}
            width = sum(self.shards[i].cols for i in self._flat_index)
            if side_by_side and width:  # the global batch's rows, each my flat shards' columns side by side
                full = torch.cat([decode(chunk, codec, sizes[q], width) for q, chunk in enumerate(got)])
                lo = 0
                for i in self._flat_index:
                    cols = self.shards[i].cols
                    # a group's members are concatenated for its update (_update_group): views will do
                    pooled[i] = full[:, lo : lo + cols] if cols == width or i in self._grouped else \
                        full[:, lo : lo + cols].contiguous()
                    lo += cols
            for i in self._flat_index if not side_by_side else ():
                cols, blocks = self.shards[i].cols, []
                for q, n in enumerate(rows[i]):
                    size = wire_bytes(codec, n, cols)
                    blocks.append(decode(got[q][at[q] : at[q] + size], codec, n, cols))
                    at[q] += size
                pooled[i] = torch.cat(blocks)
            if cross is not None:
                pooled.update(self._finish_two_stage_sequence_backward(cross.wait(), stage) if self.sequence
                              else self._finish_two_stage_backward(cross.wait(), sizes))
            self._update_shards(keyed, pooled)
            for g, rep in enumerate(self.replicas):
                columns, values = self._replica_columns(g)
                rep_grad = grad.index_select(1, values).view(grad.shape[0], -1, rep.dim)
                if self.table_dtype == torch.float32:
                    self._replica_backward(rep, sparse.index_select(1, columns), rep_grad)
                else:
                    self._replica_backward_gathered(rep, sparse.index_select(1, columns), rep_grad, sizes)

        if self.overlap:
            self._pending_backward.append(finish)
        else:
            finish()

    @torch.no_grad()
    def finish_backward(self) -> None:
        """Wait for the backward all-to-alls started in the backward pass and update the shards
        and replicas (with ``overlap``; nothing to do without)."""
        pending, self._pending_backward = self._pending_backward, []
        for finish in pending:
            finish()

    def _update_shards(self, keyed: list[KeyedIds], pooled: dict[int, torch.Tensor]) -> None:
        """Apply every local shard's pooled gradients: a group's shards (:class:`_ShardGroup`) in
        one update of the group's weight, the others one by one."""
        done: set[int] = set()
        for g in self._groups:
            if len(g.members) > 1:
                self._update_group(g, keyed, pooled)
                done.update(g.members)
        for i in range(len(self.shards)):
            if i not in done:
                self._update_shard(i, keyed[self._key_index[i]], pooled[i], per_id=self.sequence)

    def _update_group(self, g: _ShardGroup, keyed: list[KeyedIds], pooled: dict[int, torch.Tensor]) -> None:
        """:meth:`_update_shard` of a group's shards at once: their ids shifted to their rows of the
        group's weight, their bags numbered on. Each row's gradients are summed in the same order
        and updated alike (fp32, no rounding): the same values, bit for bit."""
        members = [keyed[self._key_index[i]] for i in g.members]
        grads = torch.cat([pooled[i] for i in g.members])  # the members' bags one after the other
        device = grads.device
        values = torch.cat([k.values for k in members])
        counts = torch.tensor([k.values.numel() for k in members], device=device)
        ids = values + torch.repeat_interleave(g.base_ids, counts)  # each id at its shard's rows
        if all(k.one_per_sample for k in members):
            bags = torch.arange(grads.shape[0], device=device)
        else:  # each id's bag, numbered on over the members (a member of one id per sample: lengths of ones)
            lengths = torch.cat([k.lengths for k in members])
            bags = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths)
        update_from_bags(g.weight, g.state, ids, bags, grads, self.optimizer, None, self.grad_unscale)

    def _update_shard(self, i: int, k: KeyedIds, pooled_grad: torch.Tensor, *, per_id: bool = False) -> None:
        """Apply local shard ``i``'s pooled gradients (the global batch's; ``per_id``: one per id it
        holds, a sequence collection's) to the rows it looked up."""
        # each id's bag: a segment sum of the bags' gradients, no copy per id
        bag = None if k.one_per_sample or per_id else torch.repeat_interleave(
            torch.arange(k.lengths.numel(), device=pooled_grad.device), k.lengths)
        rounding = (self._layouts[i], self.update_step)
        if i not in self.cached:
            update_from_bags(self._weights[i], self._states[i], k.values, bag, pooled_grad,  # type: ignore[arg-type]
                             self.optimizer, rounding, self.grad_unscale)
            return
        rows, summed = coalesce_bags(k.values, bag, pooled_grad, reuse=True)
        self.cached[i].update(rows, unscale(summed, self.grad_unscale), self.optimizer, rounding)

    def _start_two_stage_backward(self, grad: torch.Tensor, sizes: Sequence[int]) -> PendingAllToAll:
        """Stage two in reverse: to the rank of my local index on node ``m``, the gradients of my
        samples' vectors of node ``m``'s two-stage tables."""
        assert self.hier is not None
        codec, per_node, nodes = self.backward_codec, self.hier.ranks_per_node, self.hier.nodes

        def cols(t: int) -> torch.Tensor:
            return grad[:, self._out_start[t] : self._out_start[t] + self.dims[t]].contiguous()

        send = [torch.cat([encode(cols(t), codec) for t in self.node_tables[m]]) if self.node_tables[m]
                else self._empty_bytes() for m in range(nodes)]
        tables = self.node_tables[self.node]
        recv = [sum(wire_bytes(codec, sizes[m * per_node + self.local], self.dims[t]) for t in tables)
                for m in range(nodes)]
        return self.hier.cross.all_to_all_start(send, recv, BACKWARD)

    def _start_two_stage_sequence_backward(self, grad: torch.Tensor, present: dict[tuple[int, int, int], torch.Tensor],
                                           stage: dict[str, Any]) -> PendingAllToAll:
        """A sequence collection's stage two in reverse: to the rank of my local index on node
        ``m``, the gradients of my vectors that its node's shards sent, shard after shard."""
        assert self.hier is not None
        codec, nodes = self.backward_codec, self.hier.nodes

        def block(s: ShardSpec) -> torch.Tensor:
            lo = self._out_start[s.table] + s.col_offset
            return grad[:, lo : lo + s.cols].index_select(0, present[s.key])

        send = [torch.cat([encode(block(s), codec) for p in self._node_ranks(m) for s in self.hier_of[p]])
                if any(self.hier_of[p] for p in self._node_ranks(m)) else self._empty_bytes() for m in range(nodes)]
        counts, node_ranks = stage["counts"], self._node_ranks(self.node)
        recv = [sum(wire_bytes(codec, counts[a][b][m], s.cols) for a, p in enumerate(node_ranks)
                    for b, s in enumerate(self.hier_of[p])) for m in range(nodes)]
        return self.hier.cross.all_to_all_start(send, recv, BACKWARD)

    def _finish_two_stage_sequence_backward(self, got: Sequence[torch.Tensor], stage: dict[str, Any]) -> dict[int, torch.Tensor]:
        """Stage one in reverse: each block on to the shard that sent its vectors, which gets the
        gradients of its ids in the order of its ids (rank by rank of the samples)."""
        assert self.hier is not None
        codec, per_node, nodes = self.backward_codec, self.hier.ranks_per_node, self.hier.nodes
        cuts = stage["cuts"]
        send = self._regroup(got, stage["counts"], codec, by_node=False)
        recv = [sum(wire_bytes(codec, cuts[i][m * per_node + j + 1] - cuts[i][m * per_node + j], self.shards[i].cols)
                    for m in range(nodes) for i in self._hier_index) for j in range(per_node)]
        got = self.hier.intra.all_to_all(send, recv, BACKWARD)
        out = {i: torch.empty(cuts[i][-1], self.shards[i].cols, device=self._dummy.device) for i in self._hier_index}
        for j, chunk in enumerate(got):
            at = 0
            for m in range(nodes):
                q = m * per_node + j
                for i in self._hier_index:
                    c, (lo, hi) = self.shards[i].cols, (cuts[i][q], cuts[i][q + 1])
                    n = wire_bytes(codec, hi - lo, c)
                    out[i][lo:hi] = decode(chunk[at : at + n], codec, hi - lo, c)
                    at += n
        return out

    def _finish_two_stage_backward(self, got: Sequence[torch.Tensor], sizes: Sequence[int]) -> dict[int, torch.Tensor]:
        """Stage one in reverse (inside the node): every two-stage shard of this rank gets its
        columns' gradients of the whole global batch, in its order."""
        assert self.hier is not None
        codec, per_node = self.backward_codec, self.hier.ranks_per_node
        tables = self.node_tables[self.node]
        parts: dict[int, list[torch.Tensor]] = {t: [] for t in tables}
        for m, chunk in enumerate(got):
            n, at = sizes[m * per_node + self.local], 0
            for t in tables:
                size = wire_bytes(codec, n, self.dims[t])
                parts[t].append(decode(chunk[at : at + size], codec, n, self.dims[t]))
                at += size
        node_grad = {t: torch.cat(parts[t]) for t in tables}  # the samples of my local index, node by node
        node_ranks = self._node_ranks(self.node)
        send = [torch.cat([encode(node_grad[s.table][:, s.col_offset : s.col_offset + s.cols].contiguous(), codec)
                           for s in self.hier_of[p]]) if self.hier_of[p] else self._empty_bytes() for p in node_ranks]
        rows = self._local_rows(sizes)
        recv = [sum(wire_bytes(codec, rows[j].numel(), self.shards[i].cols) for i in self._hier_index)
                for j in range(per_node)]
        got = self.hier.intra.all_to_all(send, recv, BACKWARD)
        total, at, out = sum(sizes), [0] * per_node, {}
        for i in self._hier_index:
            c = self.shards[i].cols
            full = torch.empty(total, c, device=self._dummy.device)
            for j in range(per_node):
                n = rows[j].numel()
                size = wire_bytes(codec, n, c)
                full.index_copy_(0, rows[j], decode(got[j][at[j] : at[j] + size], codec, n, c))
                at[j] += size
            out[i] = full
        return out

    def _replica_backward(self, rep: FusedEmbeddingCollection, sparse: torch.Tensor, grad: torch.Tensor) -> None:
        """Sum a replica group's gradients over the ranks and apply them on every rank alike."""
        ids = rep.global_ids(sparse)
        if rep._one_hot:
            rows, summed = coalesce(ids.reshape(-1), grad.reshape(-1, rep.dim))
        else:
            rows, summed = rep._coalesce_pooled(ids, grad)
        local = torch.zeros_like(rep.weight)
        local.index_add_(0, rows, summed)
        total = self.comm.all_reduce(local.reshape(-1), self.codecs.allreduce, REPLICA, average=False)
        total = total.view_as(local)
        touched = (total != 0).any(dim=1).nonzero().squeeze(1)
        sparse_update(rep.weight.data, rep.optimizer_state, touched, total.index_select(0, touched), self.optimizer)

    def _replica_backward_gathered(self, rep: FusedEmbeddingCollection, sparse: torch.Tensor, grad: torch.Tensor,
                                   sizes: Sequence[int]) -> None:
        """A replica group's update from every rank's ids and gradients (tables stored in bf16 or
        fp16): each rank sends its samples' ids and pooled gradients to every rank (an all-gather,
        counted as the replicas' traffic), and every rank sums them per row in the global batch's
        order, exactly as one process sums them. An all-reduce of per-rank sums would add them in
        another order, and a rounding of that other fp32 sum to 16 bits would set the replicas
        apart from one process's tables; this way every sharding type rounds as one process."""
        w, n, codec = self.world_size, sparse.shape[0], self.backward_codec
        ids = rep.global_ids(sparse).contiguous()
        width, values = ids.shape[1], grad.shape[1] * grad.shape[2]
        mine = torch.cat([ids.view(torch.uint8).reshape(-1), encode(grad.reshape(n, values), codec)])
        got = self.comm.all_to_all([mine] * w, [m * width * 8 + wire_bytes(codec, m, values) for m in sizes], REPLICA)
        all_ids = torch.cat([g[: m * width * 8].view(torch.int64).reshape(m, width) for g, m in zip(got, sizes)])
        all_grad = torch.cat([decode(g[m * width * 8:], codec, m, values) for g, m in zip(got, sizes)])
        if rep._one_hot:
            rows, summed = coalesce(all_ids.reshape(-1), all_grad.reshape(-1, rep.dim))
        else:
            rows, summed = rep._coalesce_pooled(all_ids, all_grad.view(all_ids.shape[0], -1, rep.dim))
        sparse_update(rep.weight.data, rep.optimizer_state, rows, unscale(summed, self.grad_unscale), self.optimizer,
                      (rep.layout, self.update_step))

    # ------------------------------------------------------------------ whole tables
    @torch.no_grad()
    def table_weights(self) -> list[torch.Tensor]:
        """Every whole table, on every rank: for tests and small models only (a run never gathers
        a whole table; the tables are one all-reduce of a mostly-zero tensor, each weight being
        non-zero on one rank only, so the sum is exact; one, not one per table: a model of 1,000
        tables would wait for 1,000 collectives)."""
        uncounted = Comm(self.comm.group, CommStats())  # not the training's traffic
        tables = [torch.zeros(r, d, device=self._dummy.device) for r, d in zip(self.table_rows, self.dims)]
        for i, (s, w) in enumerate(zip(self.shards, self._weights)):
            block = w if w is not None else self.cached[i].full_weight()
            tables[s.table][s.row_offset : s.row_offset + s.rows, s.col_offset : s.col_offset + s.cols] = block
        if self.rank == 0:
            for rep, dp in zip(self.replicas, self.replica_tables):
                for t, weight in zip(dp, rep.table_weights()):
                    tables[t] = weight.float()  # exactly: every 16-bit value is an fp32 one
        total = uncounted.all_reduce(torch.cat([t.reshape(-1) for t in tables]), Codec.FP32, REPLICA, average=False)
        return [part.view_as(t) for part, t in zip(total.split([t.numel() for t in tables]), tables)]

    def full_weight(self) -> torch.Tensor:
        """The unsharded ``sum(rows) x D`` weight of tables of one dimension (see :meth:`table_weights`)."""
        if not self.uniform_dims:
            raise HarnessError("tables of several dimensions have no one fused weight; use table_weights()",
                               ErrorCategory.BAD_INPUT)
        return torch.cat(self.table_weights())
