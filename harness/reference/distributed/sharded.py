"""The embedding tables of the DLRM sharded over ranks as a sharding plan says, and trained there.

A plan (the planner's :class:`~harness.reference.planner.Plan`, read from ``harness plan``'s
JSON by ``Plan.from_dict`` where it crosses into a worker process) gives every table a sharding
type and its shards: rows ``[row_offset, row_offset + rows)`` and columns
``[col_offset, col_offset + cols)`` on one rank. Every type but data-parallel runs through
one mechanism, as in torchrec's ``ShardedEmbeddingBagCollection``; each step has its module:

1. **Input distribution** (:mod:`~harness.reference.distributed.input_dist`; two all-to-alls,
   lengths then ids): each rank sends, for every shard's row range, its samples' ids that fall
   in that range (table-wise and column-wise shards hold every row, so they get every id;
   row-wise and table-row-wise shards get only theirs: row bucketing), shifted to the shard's
   first row.
2. **Lookup** (:mod:`~harness.reference.distributed.lookup`): each rank pools its shards' rows
   (:mod:`~harness.reference.distributed.shard_storage`) for the samples of *every* rank.
3. **Output all-to-all** (:mod:`~harness.reference.distributed.output_dist`, forward codec):
   each rank sends each rank the pooled partial vectors of that rank's samples. The receiver
   places column shards side by side and *sums* the partial vectors of row shards (the
   reduction of row-wise sharding; for one-hot features only one shard's partial is non-zero,
   so the sum is exact).
4. **Backward all-to-all** (backward codec): the gradients of the pooled vectors go back to
   the shards, which sum them per row and apply the fused optimizer to exactly those rows
   (:func:`~harness.reference.distributed.lookup.update_shards`, the single-process update).

Data-parallel tables are full replicas on every rank (:mod:`~harness.reference.distributed.replicas`):
looked up locally, their gradients summed over ranks (the all-reduce codec) and applied
identically everywhere.

**Two link classes.** Over several nodes, a table-row-wise or table-column-wise table's vectors
travel in two stages, inside the node then across nodes, as TorchRec's TW-RW distribution and
the planner's cost model have them (:mod:`~harness.reference.distributed.two_stage`; a sequence
collection's, one vector per event, :mod:`~harness.reference.distributed.two_stage_sequence`).
Other types go through the flat all-to-all. On one node every type is flat.

**Overlap** (``overlap=True``): the forward all-to-alls are started before the dense part's
bottom MLP and waited for after it (:meth:`ShardedEmbeddingCollection.start`); the backward
all-to-alls are started in the backward pass and waited for, and the shards updated, after it
(:meth:`ShardedEmbeddingCollection.finish_backward`), while the bottom MLP's backward and the
dense all-reduce run. The arithmetic is the same either way.

**The SSD tier.** Each shard the plan put on the SSD tier lives in a file behind a cache of its
own (:class:`~harness.reference.tiered.CachedShard`; see
:mod:`~harness.reference.distributed.shard_storage`): step 2 admits the rows a batch needs and
looks them up in the cache's slots, step 4 updates those slots, so the arithmetic is unchanged
(``tests/reference/distributed/test_sharded.py`` checks it bit for bit against the same plan in memory).
The planner counts each cache in its rank's fastest tier.

**Gradient scale.** Each rank differentiates its share of the global batch's mean loss (its
own mean over the world size), so every sample's gradient is exactly the one a single process
computes for it (``1 / global batch``, powers of two: also in fp16, whose subnormals would
round a gradient divided by the world size afterwards); the dense gradients are summed over
the ranks, and the embedding gradients applied as they arrive: training at any world size
follows single-process training with the same global batch (``tests/reference/
distributed/test_sharded.py`` checks it to 1e-5 on the loss, and, with 16-bit tables and the dense part
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

**Batched paths** (``batched=True``, the default). A rank holds many shards (a 26-table model's
row-wise plan: 26 on each rank; a 1,000-table one: hundreds), and an operation per shard and
step costs more than the shard's arithmetic. So a batch's ids are routed to every row range by
one search of each id's row (:class:`~harness.reference.distributed.input_dist.IdRouter`), not by
a mask per range; a rank's pooled vectors and their gradients cross as one matrix, the shards'
columns side by side, where the codec encodes each value alone (fp32, fp16, bf16: the same bytes
as shard after shard; the scaled codecs keep a shard's row apart); and fp32 shards of one width
live in one weight and one optimizer state
(:class:`~harness.reference.distributed.shard_storage.ShardGroup`), looked up by one
``embedding_bag`` and updated by one call. Every value is the same, bit for bit (each row's
gradients are summed in the same order); ``batched=False`` turns the three off, and
``bench/sharded_step.py`` measures one against the other.

Known difference: with row-wise Adagrad, a column shard keeps its own accumulator per row
(the mean of the squared gradient over its columns only), as FBGEMM's sharded tables do;
unsharded training averages over the whole row. Elementwise Adagrad and SGD are unaffected.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from harness.errors import ErrorCategory, HarnessError
from harness.reference.distributed.comm import REPLICA, Comm, CommStats, PendingAllToAll
from harness.reference.distributed.comm_codecs import Codec, CommConfig
from harness.reference.distributed.input_dist import (
    IdRouter,
    InputDist,
    InputRoutes,
    KeyedIds,
)
from harness.reference.distributed.layout import TableShapes, shard_layout
from harness.reference.distributed.lookup import (
    PendingPooled,
    SparseStep,
    pool_shards,
    update_shards,
)
from harness.reference.distributed.output_dist import PooledOutputDist, WireCodecs
from harness.reference.distributed.replicas import Replicas
from harness.reference.distributed.shard_storage import (
    InitialWeights,
    TierPlacement,
    build_local_shards,
)
from harness.reference.distributed.shardings import RowRange, ShardSpec, TableSharding
from harness.reference.distributed.two_stage import (
    Hierarchy,
    NodeLayout,
    TwoStagePooled,
    two_stage_tables,
)
from harness.reference.distributed.two_stage_sequence import (
    StageCounts,
    TwoStageSequence,
)
from harness.reference.models.embeddings import FusedEmbeddingCollection, GroupedEmbeddingCollection, set_learning_rate
from harness.reference.planner.types import Tier
from harness.reference.tiered import CachedShard, CacheStats
from harness.reference.tiered.ledger import TierLedger
from harness.reference.timing import phases


class ShardedEmbeddingCollection(nn.Module):
    """The shards of this rank, and the collectives that make them act as the whole tables.

    Args:
        full: the unsharded tables' description (rows, dim, pooling, optimizer, seed; built on
            the ``meta`` device: no rank allocates them). Each rank makes only its own shards and
            replicas, from the seed (:func:`~harness.reference.models.embeddings.initial_weights`), so
            every plan and world size starts from the single-process model's weights, bit for bit.
        shardings: per table, from :func:`~harness.reference.distributed.shardings.shardings_from_plan`.
        comm: the collectives of the forward and backward passes.
        input_comm: the collectives of the input distribution (another process group, so
            that a batch's ids can travel while the previous step computes).
        codecs: the codec of each collective.
        placement: the tiers this rank's shards live in (the plan's capacity and cache fractions,
            the caches' policy and files; see :mod:`~harness.reference.distributed.shard_storage`);
            None: unbounded, every shard resident.
        device: where the shards live (default the CPU).
        hierarchy: the run's nodes (None or one node: every sharding type is flat).
        sequence: one vector per id (TorchRec's ``EmbeddingCollection``, an HSTU ranker's event
            tables), not pooled per sample.
        overlap: the backward all-to-alls finish, and the shards update, in :meth:`finish_backward`.
        batched: the batched paths (see the module docstring); False: every shard's ids, vectors
            and update one by one (the same values: ``bench/sharded_step.py`` compares them).
    """

    def __init__(self, full: FusedEmbeddingCollection | GroupedEmbeddingCollection, shardings: Sequence[TableSharding], comm: Comm,
                 input_comm: Comm, codecs: CommConfig, *, placement: TierPlacement | None = None, device: Any = None,
                 hierarchy: Hierarchy | None = None, sequence: bool = False, overlap: bool = False,
                 batched: bool = True):
        super().__init__()
        self.sequence, self.overlap, self.batched = sequence, overlap, batched
        self.hier = hierarchy if hierarchy is not None and hierarchy.nodes > 1 else None
        self.comm, self.input_comm, self.codecs = comm, input_comm, codecs
        self.rank, self.world_size = comm.rank, comm.world_size
        self.table_rows, self.pooling, self.optimizer = full.table_rows, full.pooling, full.optimizer
        self.update_step = 0
        self.grad_unscale: float | None = None
        self._pending_backward: list[Callable[[], None]] = []
        device = torch.device(device) if device is not None else torch.device("cpu")
        self._init = _initial_weights(full)
        self.layout = shard_layout(shardings, self._init.tables, self.rank, self.world_size,
                                   two_stage_tables(shardings, self.hier), device)
        placement = placement if placement is not None else TierPlacement.of(self.rank)
        self.ledger: TierLedger = placement.ledger
        # fp32 shards of one width share one weight and one state (see shard_storage.ShardGroup)
        grouped = self.table_dtype == torch.float32 and not sequence and batched
        self._storage = build_local_shards(self.layout.shards, self._init, placement, device, grouped=grouped)
        self._register_shards()
        self._wire = WireCodecs.of(codecs, self.table_dtype)
        self._replicas = Replicas.build(shardings, self.layout, self._init, placement, comm,
                                        (codecs.allreduce, self._wire.backward), device)
        self.replicas = self._replicas.modules
        self._register_replica_columns()
        self._dummy = torch.zeros(0, requires_grad=True, device=device)
        self._build_distributions(device)

    def _build_distributions(self, device: torch.device) -> None:
        """The input distribution's routes, the flat output distribution and the two stages (if any)."""
        router = None if self.sequence or not self.batched else IdRouter.build(self.layout, device)
        self._routes = InputRoutes(self.layout, router, self.sequence, self.input_comm)
        self._output = PooledOutputDist(self.layout, self._wire, self.comm, device, sequence=self.sequence,
                                        batched=self.batched)
        self._pooled_stages: TwoStagePooled | None = None
        self._sequence_stages: TwoStageSequence | None = None
        nodes = NodeLayout.of(self.hier, self.layout) if self.hier is not None else None
        if self.hier is None or nodes is None or not nodes.any:  # the same on every rank: the plan's
            return
        if self.sequence:
            self._sequence_stages = TwoStageSequence(self.layout, self.hier, nodes, self._wire, device)
        else:
            self._pooled_stages = TwoStagePooled(self.layout, self.hier, nodes, self._wire, device)

    def _register_shards(self) -> None:
        """The resident shards' weights and states as buffers ``shard{i}_weight`` and
        ``shard{i}_state`` (the state dict's names), in the shards' order."""
        for i, (weight, state) in enumerate(zip(self._storage.weights, self._storage.states)):
            if i not in self._storage.cached:
                self.register_buffer(f"shard{i}_weight", weight)
                self.register_buffer(f"shard{i}_state", state)

    def _register_replica_columns(self) -> None:
        """Replica group ``g``'s id columns of a batch and values of a pooled row, as buffers
        ``_dp_columns{g}`` and ``_dp_out{g}`` (not saved)."""
        for g, (columns, values) in enumerate(self._replicas.columns):
            self.register_buffer(f"_dp_columns{g}", columns, persistent=False)
            self.register_buffer(f"_dp_out{g}", values, persistent=False)

    # ------------------------------------------------------------------ what the collection is
    @property
    def dims(self) -> tuple[int, ...]:
        return self.layout.tables.dims

    @property
    def uniform_dims(self) -> bool:
        return self.layout.tables.uniform_dims

    @property
    def dim(self) -> int:
        """With uniform dims, the output is ``B x F x dim``."""
        return self.dims[0]

    @property
    def num_tables(self) -> int:
        return self.layout.tables.count

    @property
    def table_dtype(self) -> torch.dtype:
        """The tables' storage type: shards and replicas are stored in it, updates rounded
        stochastically into it (:mod:`harness.reference.models.numerics`), pooled vectors and their
        gradients cross the wire in it unless a codec says otherwise (:attr:`forward_codec`)."""
        return self._init.dtype

    @property
    def seed(self) -> int:
        return self._init.seed

    @property
    def table_ids(self) -> tuple[int, ...]:
        """Each table's id in the model (its initial weights' and its rounding's random streams)."""
        return self._init.table_ids

    @property
    def shards_of(self) -> tuple[tuple[ShardSpec, ...], ...]:
        return self.layout.shards_of

    @property
    def keys_of(self) -> tuple[tuple[RowRange, ...], ...]:
        return self.layout.keys_of

    @property
    def shards(self) -> tuple[ShardSpec, ...]:
        return self.layout.shards

    @property
    def cached(self) -> dict[int, CachedShard]:
        """Local shard index -> its rows in a slower tier, behind a cache."""
        return self._storage.cached

    @property
    def replica_tables(self) -> list[list[int]]:
        return self._replicas.tables

    @property
    def forward_codec(self) -> Codec:
        """What a pooled vector crosses the wire in (:func:`~harness.reference.distributed.output_dist.wire_codec`)."""
        return self._wire.forward

    @property
    def backward_codec(self) -> Codec:
        return self._wire.backward

    def set_learning_rate(self, lr: float) -> None:
        """The fused optimizer's rate (of every shard and the replicas) from the next update on."""
        set_learning_rate(self, lr)

    def set_step(self, step: int, grad_unscale: float | None = None) -> None:
        """The optimizer step whose update comes next (its rounding bits; see
        :mod:`harness.reference.models.numerics`), and 1 / the loss scale (None: not scaled)."""
        self.update_step, self.grad_unscale = int(step), grad_unscale

    def _sparse_step(self) -> SparseStep:
        return SparseStep(self.optimizer, self.update_step, self.grad_unscale)

    # ------------------------------------------------------------------ input
    def bucket(self, sparse: torch.Tensor, key: RowRange) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lengths, ids)`` of this rank's samples for one row range of one table."""
        return self._routes.bucket(sparse, key)

    def distribute(self, sparse: torch.Tensor, sizes: Sequence[int] | None = None, *,
                   segments: torch.Tensor | None = None, samples: Sequence[int] | None = None,
                   count: bool = True) -> InputDist:
        """Start sending a batch's ids (``sparse``: ``B x sum(pooling)``; ``sizes``: every rank's
        batch size, in rows of ``sparse``; default all equal). A sequence collection's rows are
        events: ``segments``, this rank's events per sample (user), and ``samples``, every rank's
        samples, make its lengths travel per sample (default: every event a sample of its own).
        ``count``: the batch counts in the input statistics (``input_batches``); False for the
        other collections of a model's batch."""
        return InputDist(self._routes, sparse, sizes if sizes is not None else [sparse.shape[0]] * self.world_size,
                         segments, samples, count=count)

    def queue_next(self, ids: InputDist) -> None:
        """The next training batch, its ids on their way: the cached shards read its missing rows
        ahead once the current batch is resident (nothing to do without cached shards)."""
        if not self.cached:
            return
        keyed = ids.wait()
        self._storage.queue(lambda i: keyed[self.layout.key_index[i]].values)

    def close(self) -> None:
        """Wait for the cached shards' reads and write-backs in flight, and stop their thread."""
        self._storage.close()

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
            with torch.no_grad():
                finish, stage = self._start_pooled(keyed, ids)
        backward = functools.partial(self._backward, keyed, ids, stage=stage) if train else None
        return PendingPooled(finish, backward, self._dummy, (self.num_tables, self.dim) if self.uniform_dims else None)

    def _start_pooled(self, keyed: list[KeyedIds], ids: InputDist
                      ) -> tuple[Callable[[], torch.Tensor], StageCounts | None]:
        """Look up the shards and start their vectors' all-to-alls; the function that waits for
        them and gives the ``B x sum(dims)`` embeddings, and what the two stages learnt."""
        batch, present = ids.sizes[self.rank], ids.present
        partials = pool_shards(self._storage, keyed, self.layout.key_index, sequence=self.sequence,
                               training=self.training)
        bounds = self._sample_bounds(ids)
        flat = self._output.start(partials, keyed, bounds, batch, present)
        cross, stage = self._start_two_stage(partials, keyed, bounds, ids)

        def finish() -> torch.Tensor:
            out = self._output.decode_pooled(flat.wait(), batch, present)
            if cross is not None and self._sequence_stages is not None:
                self._sequence_stages.place(out, cross.wait(), present)
            elif cross is not None and self._pooled_stages is not None:
                self._pooled_stages.place(out, cross.wait(), batch)
            self._replicas.look_up(out, ids.sparse)
            return out.to(self.table_dtype)  # summed in fp32, given in the tables' type as one process's

        return finish, stage

    def _sample_bounds(self, ids: InputDist) -> list[int]:
        """Where each rank's samples start: in rows of the partials (pooled), or, in a sequence
        collection, in the lengths (per sample) that cut each shard's ids."""
        return [0, *itertools.accumulate(ids.samples if self.sequence else ids.sizes)]

    def _start_two_stage(self, partials: list[torch.Tensor], keyed: list[KeyedIds], bounds: list[int],
                         ids: InputDist) -> tuple[PendingAllToAll | None, StageCounts | None]:
        """The two stages' start, if any (stage one done, stage two on its way)."""
        if self._sequence_stages is not None:
            return self._sequence_stages.start(partials, keyed, bounds, ids.present)
        if self._pooled_stages is not None:
            index = self.layout.two_stage_index
            return self._pooled_stages.start([partials[i] for i in index], ids.sizes), None
        return None, None

    # ------------------------------------------------------------------ backward
    @torch.no_grad()
    def _backward(self, keyed: list[KeyedIds], ids: InputDist, grad: torch.Tensor,
                  stage: StageCounts | None = None) -> None:
        """Send the pooled gradients to the shards and update them: now, or with ``overlap`` when
        :meth:`finish_backward` is called (the all-to-alls travel meanwhile)."""
        sizes, present = ids.sizes, ids.present
        # one row per sample, the gradient of the global batch's mean (see the module's docstring),
        # in fp32 (a bf16 model's gradients are bf16 values: exactly so, and they cross in bf16
        # losslessly)
        grad = grad.reshape(grad.shape[0], -1).float()
        rows = self._output.grad_rows(keyed, self._sample_bounds(ids))
        flat = self._output.start_backward(grad, sizes, rows, present)
        cross = self._start_two_stage_backward(grad, ids, stage)

        def finish() -> None:
            pooled = self._output.finish_backward(flat.wait(), sizes, rows, self._storage.grouped)
            if cross is not None:
                pooled.update(self._finish_two_stage_backward(cross.wait(), sizes, stage))
            step = self._sparse_step()
            update_shards(self._storage, keyed, self.layout.key_index, pooled, step, per_id=self.sequence)
            self._replicas.update(ids.sparse, grad, sizes, step, self.table_dtype)

        if self.overlap:
            self._pending_backward.append(finish)
        else:
            finish()

    def _start_two_stage_backward(self, grad: torch.Tensor, ids: InputDist,
                                  stage: StageCounts | None) -> PendingAllToAll | None:
        if self._sequence_stages is not None:
            assert stage is not None  # the forward's stage one learnt it
            return self._sequence_stages.start_backward(grad, ids.present, stage)
        if self._pooled_stages is not None:
            return self._pooled_stages.start_backward(grad, ids.sizes)
        return None

    def _finish_two_stage_backward(self, got: list[torch.Tensor], sizes: list[int],
                                   stage: StageCounts | None) -> dict[int, torch.Tensor]:
        if self._sequence_stages is not None:
            assert stage is not None
            return self._sequence_stages.finish_backward(got, stage)
        assert self._pooled_stages is not None
        return self._pooled_stages.finish_backward(got, sizes)

    @torch.no_grad()
    def finish_backward(self) -> None:
        """Wait for the backward all-to-alls started in the backward pass and update the shards
        and replicas (with ``overlap``; nothing to do without)."""
        pending, self._pending_backward = self._pending_backward, []
        for finish in pending:
            finish()

    # ------------------------------------------------------------------ the flat all-to-all, alone
    def encode_pooled(self, partials: Sequence[torch.Tensor], bounds: Sequence[int],
                      keyed: Sequence[KeyedIds] | None = None) -> list[torch.Tensor]:
        """:meth:`PooledOutputDist.encode_pooled <harness.reference.distributed.output_dist.PooledOutputDist.encode_pooled>`."""
        return self._output.encode_pooled(partials, bounds, keyed)

    def decode_pooled(self, got: Sequence[torch.Tensor], batch: int,
                      present: dict[RowRange, torch.Tensor] | None = None) -> torch.Tensor:
        """:meth:`PooledOutputDist.decode_pooled <harness.reference.distributed.output_dist.PooledOutputDist.decode_pooled>`."""
        return self._output.decode_pooled(got, batch, present)

    def pooled_sizes(self, batch: int, present: dict[RowRange, torch.Tensor] | None = None) -> list[int]:
        """Bytes this rank receives from each rank for its ``batch`` samples (flat all-to-all)."""
        return self._output.pooled_sizes(batch, present)

    # ------------------------------------------------------------------ whole tables
    @torch.no_grad()
    def table_weights(self) -> list[torch.Tensor]:
        """Every whole table, on every rank: for tests and small models only (a run never gathers
        a whole table; the tables are one all-reduce of a mostly-zero tensor, each weight being
        non-zero on one rank only, so the sum is exact; one, not one per table: a model of 1,000
        tables would wait for 1,000 collectives)."""
        uncounted = Comm(self.comm.group, CommStats())  # not the training's traffic
        tables = [torch.zeros(r, d, device=self._dummy.device) for r, d in zip(self.table_rows, self.dims)]
        for i, s in enumerate(self.shards):
            tables[s.table][s.row_offset : s.row_offset + s.rows, s.col_offset : s.col_offset + s.cols] = \
                self._storage.full_weight(i)
        if self.rank == 0:
            for rep, dp in zip(self._replicas.replicas(), self.replica_tables):
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

    def cache_stats(self, tier: Tier = Tier.SSD) -> tuple[CacheStats, int, int]:
        """This rank's shards in ``tier`` behind caches: their caches' statistics summed, their
        rows, and their slots."""
        return self._storage.cache_stats(tier)


def _initial_weights(full: FusedEmbeddingCollection | GroupedEmbeddingCollection) -> InitialWeights:
    """What makes the shards of ``full``'s tables: its seed, its tables' ids in the model (an HSTU
    ranker's contextual table is table 3 of the model, alone in its collection) and shapes, its
    optimizer, its tables' type."""
    rows = tuple(full.table_rows)
    dims = tuple(getattr(full, "dims", None) or (full.dim,) * len(rows))
    return InitialWeights(
        seed=full.seed, table_ids=tuple(getattr(full, "table_ids", None) or range(len(rows))),
        tables=TableShapes(rows, tuple(full.pooling), dims), optimizer=full.optimizer,
        dtype=next(full.parameters()).dtype,
    )

