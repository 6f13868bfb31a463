"""The HSTU ranker (``dlrmv4``) of a sharded run: its tables sharded as the plan says, its dense
part data-parallel.

The plan places the ranker's tables (:func:`~harness.reference.planner.models.tables_for_benchmark`:
``item``, ``artist``, ``album``, then the contextual ones: ``uid`` and dlrmv4's 7 hashed crosses) like a DLRM's, with every sharding type. They run through the
same executor as a DLRM's pooled tables (:class:`~harness.reference.distributed.sharded.ShardedEmbeddingCollection`),
as two collections sharing this rank's :class:`~harness.reference.tiered.TierLedger`:

* the **sequence tables** (item, artist, album: TorchRec's ``EmbeddingCollection``, one vector per
  event, not pooled) take one row of ids per *event*: a rank's ``N_r`` events of its users, so
  the "samples" of their all-to-alls are jagged, a different count on every rank;
* the **contextual tables** (uid, the crosses) take one row per *user* (sample).

Before a batch's ids travel, every rank learns every rank's event and user counts, labelled
candidates and longest history and candidate list (one small all-to-all on the input group: the
lengths of the jagged batch, as TorchRec's ``KeyedJaggedTensor`` all-to-all sends lengths
before values); then the ids go as a DLRM's do (lengths per user and shard's row range, then the
ids), and a row shard of a sequence table sends back the vectors of the ids it holds only (the
collection's ``sequence`` mode: nothing is summed, so no other shard's zeros need to travel), as
TorchRec's ``EmbeddingCollection`` does; over several nodes, a table-row-wise or
table-column-wise table's vectors go through the rank of their sample's local index on the
shard's node, as encoded by the shard (two stages, each vector once on each link).

So that a run at any world size trains what one process trains on the same global batch:

* the loss is each rank's sum over its labelled candidates divided by the *global* batch's count
  of them (one process's mean, split over the ranks), and the dense gradients are summed;
* the attention's divisor (the reference's ``max_seq_len``, the padded length of a batch) is the
  global batch's, not each rank's (the reference's ranks each use their own batch's, which makes
  its arithmetic depend on the world size; ours does not).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.event_batch import EventBatch
from harness.reference.distributed import session as distributed_session
from harness.reference.distributed.comm import INPUT, Comm
from harness.reference.distributed.comm_codecs import CommConfig
from harness.reference.distributed.session import DistributedSession, data_parallel
from harness.reference.distributed.shard_storage import (
    ShardFiles,
    TierPlacement,
    rank_ledger,
)
from harness.reference.distributed.sharded import ShardedEmbeddingCollection
from harness.reference.distributed.shardings import (
    ShardSpec,
    TableSharding,
    shardings_from_plan,
)
from harness.reference.distributed.two_stage import Hierarchy
from harness.reference.engine.build import eval_split_bytes
from harness.reference.engine.session import prefetch
from harness.reference.models.hstu import HSTURanker
from harness.reference.models.hstu_attention import batch_max_seq_len
from harness.reference.planner.types import Plan, Tier
from harness.reference.tiered import CacheStats

_SEQUENCE_TABLES = 3  # item, artist, album: the ranker's tables 0-2; the contextual ones from 3
_STATS = 5  # per rank and batch: events, users, labelled candidates, longest history, most candidates


def _batch_stats(batch: EventBatch) -> torch.Tensor:
    empty = batch.users == 0
    return torch.tensor([int(batch.lengths.sum()), batch.users, int(batch.label_mask.sum()),
                         0 if empty else int(batch.history_lengths.max()),
                         0 if empty else int(batch.candidate_lengths.max())], dtype=torch.int64)


class HSTUInput:
    """One batch's ids on their way to the ranks that hold their rows: every rank's counts first
    (synchronously: they size the id all-to-alls), then the sequence and contextual tables' input
    distributions (asynchronous, as :class:`~harness.reference.distributed.input_dist.InputDist`)."""

    def __init__(self, model: ShardedHSTU, batch: EventBatch):
        comm, world = model.sequence.input_comm, model.sequence.world_size
        stats = _batch_stats(batch)
        every = torch.stack(comm.all_to_all_start([stats] * world, [_STATS] * world, INPUT).wait())
        self.events, self.users = every[:, 0].tolist(), every[:, 1].tolist()
        self.labelled = int(every[:, 2].sum())
        ctx = model.ranker.config.num_contextual
        self.max_seq_len = (batch_max_seq_len(torch.zeros(0), torch.zeros(0), ctx) if sum(self.users) == 0
                            else int(every[:, 3].max()) + int(every[:, 4].max()) + ctx)
        self.sequence = model.sequence.distribute(HSTURanker.sequence_ids(batch), self.events,
                                                  segments=batch.lengths, samples=self.users)
        self.contextual = model.contextual.distribute(model.ranker.contextual_ids(batch), self.users, count=False)

    def start_ids(self) -> None:
        self.sequence.start_ids()
        self.contextual.start_ids()

    def wait(self) -> None:
        self.sequence.wait()
        self.contextual.wait()


class _DenseHSTU(nn.Module):
    """The ranker without its tables (data-parallel): :meth:`HSTURanker.dense_forward`."""

    def __init__(self, ranker: HSTURanker):
        super().__init__()
        self.ranker = ranker

    def forward(self, batch: EventBatch, events: torch.Tensor, contextual: torch.Tensor | None,
                max_seq_len: int) -> torch.Tensor:
        return self.ranker.dense_forward(batch, events, contextual, max_seq_len)


def _renumbered(sharding: TableSharding, table: int) -> TableSharding:
    return TableSharding(sharding.sharding_type, tuple(ShardSpec(table, s.placed) for s in sharding.shards))


class ShardedHSTU(nn.Module):
    """The HSTU ranker with its tables sharded and its dense part under DDP (see the module docstring).

    Args:
        ranker: the ranker as built from the seed on every rank, its tables on the ``meta``
            device (this rank makes its shards; the dense modules are reused, the tables dropped).
        plan: the sharding plan of its tables (three sequence tables, then the contextual ones).
        comms, codecs, device_ids, files, device, hierarchy, overlap, bucket_cap_mb, batched: as
            :class:`~harness.reference.distributed.session.ShardedDLRM` takes them.
    """

    def __init__(self, ranker: HSTURanker, plan: Plan, comms: tuple[Comm, Comm, Comm], codecs: CommConfig,
                 device_ids: list[int] | None = None, files: ShardFiles | None = None, *, device: Any = None,
                 hierarchy: Hierarchy | None = None, overlap: bool = False, bucket_cap_mb: float | None = None,
                 batched: bool = True):
        super().__init__()
        dense_comm, emb_comm, input_comm = comms
        sequence, contextual = ranker.embeddings, ranker.contextual_embeddings
        rows = [*sequence.table_rows, *contextual.table_rows]
        shardings = shardings_from_plan(plan, rows, ranker.config.embedding_dim, emb_comm.world_size)
        capacity = plan.rank_capacity
        self.ledger = rank_ledger(capacity, emb_comm.rank)

        def collection(full: Any, tables: list[TableSharding], name: str, ids_per_sample: int,
                       is_sequence: bool) -> ShardedEmbeddingCollection:
            # each collection's shard files apart (they number their shards from 0 alike), and its
            # caches sized for a global batch's ids: a sequence table takes up to max_sequence_length
            # a sample (what the planner counts as its pooling), where the collection sees one per event
            own = None if files is None else dataclasses.replace(
                files, path=f"{files.path}.{name}" if files.path else None, batch=files.batch * ids_per_sample)
            placement = TierPlacement.of(emb_comm.rank, own, capacity, plan.config, ledger=self.ledger)
            return ShardedEmbeddingCollection(full, tables, emb_comm, input_comm, codecs, placement=placement,
                                              device=device, hierarchy=hierarchy, sequence=is_sequence,
                                              overlap=overlap, batched=batched)

        self.sequence = collection(sequence, shardings[:_SEQUENCE_TABLES], "sequence",
                                   ranker.config.max_sequence_length, True)
        self.contextual = collection(contextual, [_renumbered(t, i) for i, t in enumerate(shardings[_SEQUENCE_TABLES:])],
                                     "contextual", 1, False)
        del ranker.embeddings, ranker.contextual_embeddings  # described only (meta); the shards replace them
        self.ranker = ranker
        self.overlap = overlap
        self.dense = data_parallel(_DenseHSTU(ranker), dense_comm, codecs, overlap, device_ids, bucket_cap_mb)

    def collections(self) -> tuple[ShardedEmbeddingCollection, ShardedEmbeddingCollection]:
        return self.sequence, self.contextual

    def dense_parameters(self) -> list[nn.Parameter]:
        return list(self.dense.module.parameters())

    # what the pipeline and the session ask of a sharded model
    def distribute_batch(self, batch: EventBatch) -> HSTUInput:
        return HSTUInput(self, batch)

    def queue_next(self, ids: HSTUInput) -> None:
        self.sequence.queue_next(ids.sequence)
        self.contextual.queue_next(ids.contextual)

    def forward(self, batch: EventBatch, ids: HSTUInput) -> torch.Tensor:
        """One logit per candidate of this rank's users."""
        events = self.sequence.start(ids.sequence).wait()
        contextual = self.contextual.start(ids.contextual).wait()
        return self.dense(batch, events, contextual if self.ranker.config.num_contextual else None, ids.max_seq_len)

    def finish_backward(self) -> None:
        for c in self.collections():
            c.finish_backward()

    def set_learning_rate(self, lr: float) -> None:
        for c in self.collections():
            c.set_learning_rate(lr)

    def set_step(self, step: int, grad_unscale: float | None = None) -> None:
        for c in self.collections():
            c.set_step(step, grad_unscale)


class HSTUTables:
    """The two sharded collections seen as one, for what a session reports of its tables."""

    def __init__(self, model: ShardedHSTU):
        self.model = model
        self.ledger = model.ledger

    @property
    def forward_codec(self) -> Any:
        return self.model.sequence.forward_codec

    @property
    def backward_codec(self) -> Any:
        return self.model.sequence.backward_codec

    def table_weights(self) -> list[torch.Tensor]:
        """The whole tables (item, artist, album, then the contextual ones), on every rank (a collective)."""
        return [*self.model.sequence.table_weights(), *self.model.contextual.table_weights()]

    def cache_stats(self, tier: Tier = Tier.SSD) -> tuple[CacheStats, int, int]:
        """This rank's shards in ``tier`` behind caches, of both collections: as
        :meth:`ShardedEmbeddingCollection.cache_stats`."""
        stats, rows, slots = CacheStats(), 0, 0
        for c in self.model.collections():
            s, r, n = c.cache_stats(tier)
            stats, rows, slots = stats + s, rows + r, slots + n
        return stats, rows, slots

    def close(self) -> None:
        for c in self.model.collections():
            c.close()


class DistributedHSTUSession(DistributedSession):
    """:class:`DistributedSession` for the HSTU ranker: the same steps, pipeline, reports and
    evaluation protocol, over :class:`ShardedHSTU`."""

    sharded_model = ShardedHSTU

    def _ranker_shards(self) -> ShardedHSTU:
        """The sharded HSTU ranker this session trains (what :meth:`_build` made)."""
        return cast(ShardedHSTU, self.model)

    def _embeddings(self) -> Any:
        return self.model

    def _tables(self) -> list[torch.nn.Module]:
        return list(self._ranker_shards().collections())

    def _sharded_collections(self) -> list[ShardedEmbeddingCollection]:
        return list(self._ranker_shards().collections())

    @property
    def embeddings(self) -> HSTUTables:  # type: ignore[override]
        return HSTUTables(self._ranker_shards())

    def table_weights(self) -> list[torch.Tensor]:
        return self.embeddings.table_weights()

    def full_weight(self) -> torch.Tensor:
        raise HarnessError("an HSTU ranker's tables have no one fused weight; use table_weights()",
                           ErrorCategory.BAD_INPUT)

    def _loss(self, item: Any) -> torch.Tensor:
        """This rank's share of the global batch's loss, times the world size (the engine
        divides by it, :meth:`_objective`): its labelled candidates' summed BCE over the
        global batch's count of them."""
        if isinstance(item, EventBatch):  # not distributed ahead of time: its ids travel now
            item = (item, self._ranker_shards().distribute_batch(item))
        batch, ids = item
        logits = self._ranker_shards()(batch, ids).float()
        mask = batch.label_mask
        total = F.binary_cross_entropy_with_logits(logits[mask], batch.labels.float()[mask], reduction="sum")
        return total * (self.world_size / max(ids.labelled, 1))

    def _eval_items(self) -> Iterable[EventBatch]:
        """This rank's eval batches, one per evaluation step (empty ones where this rank has run
        out, so that every rank takes part in every step's collectives); kept in memory when small."""
        if self._eval_plan is not None:
            return self._eval_plan
        local, sizes = self._eval_sizes()
        mine = (self._on_device(b) for b in prefetch(self.dataset.eval_batches(local, rank=self.rank,
                                                                                world_size=self.world_size)))

        def items() -> Iterator[EventBatch]:
            try:
                for _ in sizes:
                    batch = next(mine, None)
                    crosses = len(self._ranker_shards().ranker.config.cross_features)
                    yield batch if batch is not None else _empty_batch(self.device, crosses)
            finally:
                mine.close()

        if eval_split_bytes(self.dataset) > distributed_session.EVAL_CACHE_BYTES * self.world_size:
            return items()
        self._eval_plan = list(items())
        return self._eval_plan

    def _eval_scores(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Per evaluation step, this rank's scores and labels of its labelled candidates."""
        for batch in self._eval_items():
            model = self._ranker_shards()
            ids = model.distribute_batch(batch)
            with self.autocast():
                logits = model(batch, ids)
            mask = batch.label_mask
            yield torch.sigmoid(logits.float()[mask]), batch.labels[mask]


def _empty_batch(device: torch.device, crosses: int) -> EventBatch:
    none = torch.zeros(0, dtype=torch.int64, device=device)
    return EventBatch(uid=none, history_lengths=none, candidate_lengths=none, item=none, artist=none, album=none,
                      action=none, timestamp=none, labels=torch.zeros(0, device=device),
                      label_mask=torch.zeros(0, dtype=torch.bool, device=device),
                      cross=torch.zeros((0, crosses), dtype=torch.int64, device=device))


