"""Data-parallel tables: full replicas on every rank, looked up locally, their gradients summed over
the ranks (the all-reduce codec) and applied identically everywhere (torchrec's ``dp_sharding``).

The replicas are made on every rank from the same seed, so they start equal, one fused
collection per dimension, each resident (uncached) in its planned tier. Replicas of 16-bit tables
gather every rank's ids and gradients and sum them in the global batch's order, as one process
does, instead of all-reducing per-rank sums (whose other order of additions would round
differently).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from harness.errors import ErrorCategory, HarnessError
from harness.reference.distributed.comm import REPLICA, Comm
from harness.reference.distributed.comm_codecs import Codec, decode, encode, wire_bytes
from harness.reference.distributed.layout import ShardLayout
from harness.reference.distributed.lookup import SparseStep
from harness.reference.distributed.shard_storage import InitialWeights, TierPlacement
from harness.reference.distributed.shardings import TableSharding
from harness.reference.models.embeddings import (
    FusedEmbeddingCollection,
    coalesce,
    sparse_update,
    unscale,
)
from harness.reference.planner.types import Tier


class Replicas:
    """This rank's replicas of a collection's data-parallel tables.

    Args:
        modules: one fused collection per dimension (registered by the collection as its ``replicas``).
        tables: per module, its tables (indices in the collection).
        columns: per module, its tables' id columns of a batch and values of a pooled row (int64).
        comm: the collectives of their gradients.
        allreduce: the all-reduce codec (fp32 tables); ``wire``: the gathered gradients' (16-bit tables).
    """

    def __init__(self, modules: nn.ModuleList, tables: list[list[int]], columns: list[tuple[torch.Tensor, torch.Tensor]],
                 comm: Comm, allreduce: Codec, wire: Codec):
        self.modules, self.tables, self.columns = modules, tables, columns
        self._comm, self._allreduce, self._wire = comm, allreduce, wire

    def replicas(self) -> list[FusedEmbeddingCollection]:
        """``modules``, typed (an nn.ModuleList's items are typed nn.Module): one collection per dimension."""
        return [cast(FusedEmbeddingCollection, rep) for rep in self.modules]

    @classmethod
    def build(cls, shardings: Sequence[TableSharding], layout: ShardLayout, init: InitialWeights,
              placement: TierPlacement, comm: Comm, codecs: tuple[Codec, Codec], device: torch.device) -> Replicas:
        """The replicas of ``layout``'s data-parallel tables, made from the seed, their bytes held in
        their planned tiers (``codecs``: the all-reduce's and the gathered gradients')."""
        tables, modules, groups, columns = layout.tables, nn.ModuleList(), [], []
        for dim in sorted({tables.dims[t] for t in layout.dp_tables}):
            group = [t for t in layout.dp_tables if tables.dims[t] == dim]
            modules.append(FusedEmbeddingCollection(
                [tables.rows[t] for t in group], dim, [tables.pooling[t] for t in group],
                optimizer=init.optimizer, device=device, seed=init.seed, table_ids=[init.table_ids[t] for t in group],
                dtype=init.dtype,
            ))
            groups.append(group)
            for t in group:  # each replica in its planned tier (resident, uncached: see replica_tier)
                placement.ledger.allocate(replica_tier(shardings, t, layout.rank, placement),
                                          init.resident_bytes(tables.rows[t], dim), f"the replica of table {t}")
            columns.append((
                torch.cat([torch.arange(tables.col_start[t], tables.col_start[t + 1]) for t in group]).to(device),
                torch.cat([torch.arange(tables.out_start[t], tables.out_start[t + 1]) for t in group]).to(device),
            ))
        return cls(modules, groups, columns, comm, *codecs)

    def look_up(self, out: torch.Tensor, sparse: torch.Tensor) -> None:
        """The replicas' pooled vectors of this rank's samples (``sparse``: ``B x sum(pooling)``
        ids) into their values of the ``B x sum(dims)`` embeddings ``out``."""
        for rep, (columns, values) in zip(self.replicas(), self.columns):
            local = rep.global_ids(sparse.index_select(1, columns))
            out[:, values] = rep._lookup(rep.weight.detach(), local).flatten(1).float()

    def update(self, sparse: torch.Tensor, grad: torch.Tensor, sizes: Sequence[int], step: SparseStep,
               table_dtype: torch.dtype) -> None:
        """Apply the gradients (``grad``: ``B x sum(dims)`` fp32, of this rank's samples' ids
        ``sparse``) of every rank's samples to every replica, alike on every rank."""
        for rep, (columns, values) in zip(self.replicas(), self.columns):
            rep_grad = grad.index_select(1, values).view(grad.shape[0], -1, rep.dim)
            if table_dtype == torch.float32:
                self._all_reduced(rep, sparse.index_select(1, columns), rep_grad, step)
            else:
                self._gathered(rep, sparse.index_select(1, columns), rep_grad, sizes, step)

    def _all_reduced(self, rep: FusedEmbeddingCollection, sparse: torch.Tensor, grad: torch.Tensor,
                     step: SparseStep) -> None:
        """Sum a replica group's gradients (``B x F x D``) over the ranks and apply them on every
        rank alike."""
        ids = rep.global_ids(sparse)
        if rep._one_hot:
            rows, summed = coalesce(ids.reshape(-1), grad.reshape(-1, rep.dim))
        else:
            rows, summed = rep._coalesce_pooled(ids, grad)
        local = torch.zeros_like(rep.weight)
        local.index_add_(0, rows, summed)
        total = self._comm.all_reduce(local.reshape(-1), self._allreduce, REPLICA, average=False)
        total = total.view_as(local)
        touched = (total != 0).any(dim=1).nonzero().squeeze(1)
        sparse_update(rep.weight.data, rep.optimizer_state, touched, total.index_select(0, touched), step.optimizer)

    def _gathered(self, rep: FusedEmbeddingCollection, sparse: torch.Tensor, grad: torch.Tensor,
                  sizes: Sequence[int], step: SparseStep) -> None:
        """A replica group's update from every rank's ids and gradients (tables stored in bf16 or
        fp16): each rank sends its samples' ids and pooled gradients to every rank (an all-gather,
        counted as the replicas' traffic), and every rank sums them per row in the global batch's
        order, exactly as one process sums them. An all-reduce of per-rank sums would add them in
        another order, and a rounding of that other fp32 sum to 16 bits would set the replicas
        apart from one process's tables; this way every sharding type rounds as one process."""
        w, n, codec = self._comm.world_size, sparse.shape[0], self._wire
        ids = rep.global_ids(sparse).contiguous()
        width, values = ids.shape[1], grad.shape[1] * grad.shape[2]
        mine = torch.cat([ids.view(torch.uint8).reshape(-1), encode(grad.reshape(n, values), codec)])
        got = self._comm.all_to_all([mine] * w, [m * width * 8 + wire_bytes(codec, m, values) for m in sizes], REPLICA)
        all_ids = torch.cat([g[: m * width * 8].view(torch.int64).reshape(m, width) for g, m in zip(got, sizes)])
        all_grad = torch.cat([decode(g[m * width * 8:], codec, m, values) for g, m in zip(got, sizes)])
        if rep._one_hot:
            rows, summed = coalesce(all_ids.reshape(-1), all_grad.reshape(-1, rep.dim))
        else:
            rows, summed = rep._coalesce_pooled(all_ids, all_grad.view(all_ids.shape[0], -1, rep.dim))
        sparse_update(rep.weight.data, rep.optimizer_state, rows, unscale(summed, step.grad_unscale), step.optimizer,
                      (rep.layout, step.step))


def replica_tier(shardings: Sequence[TableSharding], table: int, rank: int, placement: TierPlacement) -> Tier:
    """The tier ``rank``'s replica of ``table`` lives in: the plan's (replicas are resident there,
    uncached: they are small, and every rank updates every row that any rank touched)."""
    tier = next((s.tier for s in shardings[table].shards if s.rank == rank), placement.ledger.fastest())
    if tier is Tier.SSD:
        raise HarnessError("a data-parallel table on the SSD tier: replicas are kept in memory; plan it "
                           "another way", ErrorCategory.NOT_IMPLEMENTED)
    return tier
