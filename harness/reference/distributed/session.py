"""The training engine of one rank of a sharded run (launched by torchrun).

:class:`ShardedDLRM` is the DLRM with its tables sharded as the run's plan says
(:mod:`harness.reference.distributed.sharded`) and its dense part (bottom MLP, interaction,
top MLP) data-parallel under ``DistributedDataParallel``, whose gradient all-reduce goes
through :func:`harness.reference.distributed.comm.ddp_comm_hook` (codec and byte count).

:class:`DistributedSession` is :class:`~harness.reference.engine.session.TrainingSession` with three
things changed: each rank trains on its slice of every global batch (every dataset gives any
rank's slice, :mod:`harness.reference.data.datasets`), the next batch's ids are distributed while
the current step computes (:class:`Pipeline`), and evaluation gathers every rank's scores to
rank 0, which computes the AUC and broadcasts it, so every rank stops at the same step.

Three process groups keep unrelated collectives apart: the default group for DDP, one for
the forward and backward all-to-alls and the replicas' all-reduce, one for the input
distribution (its all-to-alls run in the background, asynchronously).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.profiles import DeviceType
from harness.reference.data.batches import NUM_DENSE, Batch
from harness.reference.data.datasets import Dataset, Samples
from harness.reference.distributed.comm import Comm, CommStats, ddp_comm_hook
from harness.reference.distributed.comm_codecs import CommConfig
from harness.reference.distributed.input_dist import InputDist
from harness.reference.distributed.shard_storage import ShardFiles, TierPlacement
from harness.reference.distributed.sharded import ShardedEmbeddingCollection
from harness.reference.distributed.shardings import shardings_from_plan
from harness.reference.distributed.two_stage import Hierarchy
from harness.reference.engine.build import eval_split_bytes
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import (
    EVAL_CACHE_BYTES,
    Feed,
    TrainingSession,
    prefetch,
    roc_auc,
)
from harness.reference.engine.trace import merge
from harness.reference.models.dlrm import DLRM
from harness.reference.models.embeddings import (
    FusedEmbeddingCollection,
    GroupedEmbeddingCollection,
)
from harness.reference.planner import traffic
from harness.reference.planner.types import CachePolicy, Plan, Tier
from harness.reference.tiered import CacheStats, ssd_io
from harness.reference.tiered.ledger import peak_rss_bytes, rss_now
from harness.reference.timing import phases

# the dense part's buffers are constants: no broadcast before each forward (torch >= 2.13 renamed the option)
_NO_BUFFER_SYNC: dict[str, Any] = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else {"broadcast_buffers": False}
)


def data_parallel(module: nn.Module, comm: Comm, codecs: CommConfig, overlap: bool, device_ids: list[int] | None,
                  bucket_cap_mb: float | None) -> DistributedDataParallel:
    """A sharded model's dense part under DDP, its gradients all-reduced through
    :func:`~harness.reference.distributed.comm.ddp_comm_hook` on ``comm`` (codec and byte count)."""
    bucket: dict[str, Any] = {"bucket_cap_mb": bucket_cap_mb} if bucket_cap_mb else {}
    dense = DistributedDataParallel(module, device_ids=device_ids, process_group=comm.group, **_NO_BUFFER_SYNC,
                                    **bucket)
    dense.register_comm_hook((comm, codecs.allreduce, overlap), ddp_comm_hook)
    return dense


class ShardedModel(Protocol):
    """What a distributed session needs of any sharded model: its DDP dense part, and the end of
    the embedding updates whose gradients were still travelling after backward."""

    dense: DistributedDataParallel

    def finish_backward(self) -> None: ...


class DenseTower(nn.Module):
    """The dense part of the DLRM: bottom MLP, interaction and top MLP (data-parallel).

    ``pooled`` is the embeddings, or a lookup in flight (``wait()`` gives them): it is waited for
    after the bottom MLP, so the output all-to-alls travel while the bottom MLP computes."""

    def __init__(self, model: DLRM):
        super().__init__()
        self.dense_arch, self.interaction, self.over_arch = model.dense_arch, model.interaction, model.over_arch

    def forward(self, dense: torch.Tensor, pooled: Any) -> torch.Tensor:
        bottom = self.dense_arch(dense)
        if not isinstance(pooled, torch.Tensor):
            pooled = pooled.wait()
        return self.over_arch(self.interaction(bottom, pooled))


class ShardedDLRM(nn.Module):
    """The DLRM with sharded tables and a DDP dense part.

    Args:
        model: the model as built from the seed on every rank, its tables on the ``meta``
            device (this rank makes its shards; the dense modules are reused).
        plan: the sharding plan (the planner's :class:`~harness.reference.planner.Plan`).
        comms: the dense (DDP), embedding and input collectives.
        codecs: the codec of each collective.
        device_ids: DDP's device ids (``None`` on the CPU).
        files: how the cached shards keep their rows
            (:class:`~harness.reference.distributed.shard_storage.ShardFiles`).
        batched: the sharded collection's batched paths (False: per shard, the same values).
    """

    def __init__(self, model: DLRM, plan: Plan, comms: tuple[Comm, Comm, Comm], codecs: CommConfig,
                 device_ids: list[int] | None = None, files: ShardFiles | None = None, *, device: Any = None,
                 hierarchy: Hierarchy | None = None, overlap: bool = False, bucket_cap_mb: float | None = None,
                 batched: bool = True):
        super().__init__()
        dense_comm, emb_comm, input_comm = comms
        emb = model.sparse_arch.embeddings  # described on the meta device, as built
        assert isinstance(emb, FusedEmbeddingCollection | GroupedEmbeddingCollection), type(emb)
        dims = emb.dims if isinstance(emb, GroupedEmbeddingCollection) else emb.dim
        shardings = shardings_from_plan(plan, emb.table_rows, dims, emb_comm.world_size)
        placement = TierPlacement.of(emb_comm.rank, files, plan.rank_capacity, plan.config)
        self.sparse_arch = ShardedEmbeddingCollection(emb, shardings, emb_comm, input_comm, codecs, placement=placement,
                                                      device=device, hierarchy=hierarchy, overlap=overlap,
                                                      batched=batched)
        self.overlap = overlap
        self.dense = data_parallel(DenseTower(model), dense_comm, codecs, overlap, device_ids, bucket_cap_mb)

    def distribute(self, sparse: torch.Tensor, sizes: list[int] | None = None) -> InputDist:
        return self.sparse_arch.distribute(sparse, sizes)

    def distribute_batch(self, batch: Batch) -> InputDist:
        """A training batch's ids on their way (what :class:`Pipeline` starts ahead of time)."""
        return self.distribute(batch.sparse)

    def queue_next(self, ids: InputDist) -> None:
        self.sparse_arch.queue_next(ids)

    def forward(self, dense: torch.Tensor, ids: InputDist) -> torch.Tensor:
        # with overlap the lookup's all-to-alls travel while the bottom MLP computes
        pooled = self.sparse_arch.start(ids)
        return self.dense(dense, pooled if self.overlap else pooled.wait())

    def finish_backward(self) -> None:
        self.sparse_arch.finish_backward()


class Pipeline:
    """Each batch with its ids distribution, started ahead of time.

    When batch ``n`` is handed out, the ids of ``n + 1`` are on their way and the lengths of
    ``n + 2`` have been sent: the all-to-alls of the input distribution run (asynchronously,
    on their own process group) while step ``n`` computes; and ``n + 1`` is queued with the
    model (``queue_next``), whose cached shards read its missing rows ahead. Every rank issues the same
    collectives in the same order, so stopping early at the same step on every rank is safe:
    :meth:`close` waits for what is in flight. After an error or an interrupt the ranks may
    have stopped at different steps, and waiting could block on a collective another rank
    never issues: :meth:`abandon` stops without waiting (the process then exits).
    """

    def __init__(self, model: Any, batches: Iterator[Batch]):
        self._owner, self._batches = model, batches
        self._window: deque[tuple[Batch, InputDist]] = deque()
        self._handed: list[tuple[Batch, InputDist]] = []  # the last item handed out

    def __iter__(self) -> Iterator[tuple[Batch, InputDist]]:
        window, handed = self._window, self._handed
        for batch in self._batches:
            window.append((batch, self._distribute(batch)))
            if len(window) >= 2:
                window[-2][1].start_ids()
            if len(window) == 3:
                handed[:] = [window.popleft()]
                self._queue_next()
                yield handed[0]
        while window:
            window[0][1].start_ids()
            handed[:] = [window.popleft()]
            self._queue_next()
            yield handed[0]

    def _distribute(self, batch: Any) -> Any:
        """The batch's ids on their way: a sharded model's ``distribute_batch`` (a DLRM's ids or
        an HSTU ranker's events), or a bare collection's ``distribute`` of the batch's ids."""
        distribute_batch = getattr(self._owner, "distribute_batch", None)
        return distribute_batch(batch) if distribute_batch is not None else self._owner.distribute(batch.sparse)

    def _queue_next(self) -> None:
        queue_next = getattr(self._owner, "queue_next", None)
        if queue_next is not None and self._window:
            queue_next(self._window[0][1])

    def close(self) -> None:
        for _, ids in [*self._handed, *self._window]:
            ids.start_ids()
            ids.wait()
        self.abandon()

    def abandon(self) -> None:
        self._handed.clear()
        self._window.clear()


def pipelined(model: Any, batches: Iterator[Batch]) -> Pipeline:
    """The batches with their ids distribution started ahead of time (see :class:`Pipeline`)."""
    return Pipeline(model, batches)


class DistributedSession(TrainingSession):
    """The session of one rank of a sharded run (see the module docstring); every rank makes one,
    inside the run's process group, and they take every step and evaluation together.
    ``batched``: the sharded collections' batched paths (False: per shard, the same values;
    ``bench/sharded_step.py`` compares them)."""

    sharded_model: Any = ShardedDLRM  # the model a rank trains (the HSTU session's: ShardedHSTU)

    def __init__(self, config: RunConfig, *, dataset: Samples | None = None, batched: bool = True):
        if config.sharding_plan is None:
            raise HarnessError("a distributed run needs a sharding plan in its run config", ErrorCategory.BAD_INPUT)
        self.codecs = config.comm
        self.comm_stats = CommStats()  # the training steps' collectives
        self.eval_comm_stats = CommStats()  # the evaluations'
        self.overlap = bool(config.overlap)
        self.batched = batched
        self._eval_plan: list[Any] | None = None  # the eval items kept (see _eval_items)
        super().__init__(config, dataset=dataset)

    def _placement(self) -> tuple[int, int]:
        return dist.get_rank(), dist.get_world_size()

    def _device(self) -> torch.device:
        if self.config.profile.device_type is DeviceType.CUDA and not self.config.emulated:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
            return device
        return torch.device("cpu")

    def _build(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        per_node = self.ranks_per_node()
        self.comms = (  # the dense all-reduce (its own group: it may run on its own thread), embeddings, input
            Comm(dist.new_group(backend=None), self.comm_stats, per_node),
            Comm(dist.new_group(backend=None), self.comm_stats, per_node),
            Comm(dist.new_group(backend=None), self.comm_stats, per_node),
        )
        self.hierarchy = self._hierarchy(per_node)
        full = self._unsharded(embedding_device="meta")  # the tables described, not made: each shard is made once
        dense_params = full.dense_parameters()
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        tier = self.config.embedding_tier
        files = ShardFiles(batch=self.global_batch_size) if tier is None else ShardFiles(
            path=f"{tier.path}.rank{self.rank}", policy=CachePolicy(tier.policy), batch=self.global_batch_size,
            direct_io=tier.direct_io, reader=tier.row_reader)
        plan = self.config.sharding_plan
        assert plan is not None  # checked in __init__
        model = self.sharded_model(full, plan, self.comms, self.codecs, device_ids, files, device=self.device,
                                   hierarchy=self.hierarchy, overlap=self.overlap, batched=self.batched)
        self._tiered = None  # the sharded collection keeps its shards' caches itself
        # from the plan, not from this rank's shards: every rank must agree (the report is a collective)
        self._ssd_shards = any(s.tier is Tier.SSD for s in plan.shards)
        return model, self._dense_optimizer(dense_params)

    def ranks_per_node(self) -> int:
        """The profile's ranks per node (every rank of the run when it has one node); checked
        against the launch when torchrun started this node's ranks itself."""
        per_node = self.config.profile.accelerators_per_node or self.world_size
        nodes = self.config.profile.nodes
        if per_node * nodes != self.world_size:
            per_node = self.world_size  # a profile that does not describe this world: one node
        local = os.environ.get("LOCAL_WORLD_SIZE")
        if local is not None and int(local) not in (per_node, self.world_size):
            raise HarnessError(f"torchrun started {local} ranks on this node; the profile has {per_node} per node",
                               ErrorCategory.BAD_INPUT)
        return per_node

    def _hierarchy(self, per_node: int) -> Hierarchy | None:
        """The node groups and the groups of one local index across nodes (every rank makes all
        of them, in the same order); None on one node."""
        nodes = self.world_size // per_node
        if nodes <= 1 or per_node <= 1:
            return None
        intra, _ = dist.new_subgroups_by_enumeration(
            [list(range(n * per_node, (n + 1) * per_node)) for n in range(nodes)], backend=None)
        cross, _ = dist.new_subgroups_by_enumeration(
            [[m * per_node + j for m in range(nodes)] for j in range(per_node)], backend=None)
        return Hierarchy(per_node, Comm(intra, self.comm_stats, per_node), Comm(cross, self.comm_stats, per_node))

    def _comms(self) -> list[Comm]:
        extra = [self.hierarchy.intra, self.hierarchy.cross] if self.hierarchy is not None else []
        return [*self.comms, *extra]

    def _after_backward(self) -> None:
        self._parts().finish_backward()

    def _sharded(self) -> ShardedDLRM:
        """The sharded DLRM this session trains (what :meth:`_build` made)."""
        return cast(ShardedDLRM, self.model)

    def _parts(self) -> ShardedModel:
        """What every sharded model has (the HSTU session's as well as this one's)."""
        return cast(ShardedModel, self.model)

    def _embeddings(self) -> Any:
        return self._sharded().sparse_arch

    @property
    def embeddings(self) -> ShardedEmbeddingCollection:
        """This rank's shards and the collectives that make them act as the whole tables."""
        return self._sharded().sparse_arch

    # ------------------------------------------------------------------ data and steps
    def batches(self, *, start: int | None = None, until: int | None = None) -> Feed:
        start = self.step_count if start is None else start
        until = self.step_limit() if until is None else until
        source = prefetch(self._train_batches(start, until))
        pipeline = pipelined(self.model, (self._on_device(b) for b in source))

        def close() -> None:
            pipeline.close()
            source.close()

        def abandon() -> None:
            pipeline.abandon()
            source.close()

        return Feed(pipeline, close=close, abandon=abandon)

    def _objective(self, loss: torch.Tensor) -> torch.Tensor:
        """This rank's share of the global batch's mean loss: its own mean over the world size
        (training batches are the same size on every rank). Each sample's gradient is then
        exactly one process's (``1 / global batch``, a power of two divided by powers of two),
        which a 16-bit model needs to compute what one process computes; the dense gradients
        are summed over the ranks and the tables' gradients applied as they arrive."""
        return loss / self.world_size

    def _loss(self, item: Any) -> torch.Tensor:
        if isinstance(item, Batch):  # not distributed ahead of time: its ids travel now
            item = (item, self._sharded().distribute(item.sparse))
        batch, ids = item
        return self._loss_fn(self._sharded()(batch.dense, ids), batch.labels)

    # ------------------------------------------------------------------ evaluation
    def _eval_sizes(self) -> tuple[int, list[list[int]]]:
        """The local eval batch size and, for every evaluation step, every rank's batch size
        (ranks with fewer samples get empty batches at the end, so that all take part in every
        step's collectives)."""
        per_rank = [len(a) for a in np.array_split(np.arange(self.dataset.eval_samples), self.world_size)]
        local = max(1, math.ceil(self.spec.eval_batch_size / self.world_size))
        steps = math.ceil(max(per_rank) / local)
        return local, [[min(max(n - j * local, 0), local) for n in per_rank] for j in range(steps)]

    def _eval_items(self) -> Iterable[Any]:
        """This rank's eval batches with every rank's batch size, read at the first evaluation
        and kept when this rank's part is small enough (see ``EVAL_CACHE_BYTES``)."""
        if self._eval_plan is not None:
            return self._eval_plan
        local, sizes = self._eval_sizes()
        mine = (self._on_device(b) for b in prefetch(self.dataset.eval_batches(local, rank=self.rank,
                                                                                world_size=self.world_size)))
        data = self.dataset
        assert isinstance(data, Dataset), type(data)  # a DLRM's (the HSTU session has its own)
        width = int(sum(data.pooling))

        def items() -> Iterator[tuple[Batch, list[int]]]:
            try:
                for step_sizes in sizes:
                    batch = next(mine, None)
                    if batch is None:
                        batch = Batch(torch.zeros(0, NUM_DENSE, device=self.device),
                                      torch.zeros(0, width, dtype=torch.int64, device=self.device),
                                      torch.zeros(0, device=self.device), tuple(data.pooling))
                    yield batch, step_sizes
            finally:
                mine.close()  # its reading thread ends with it

        if eval_split_bytes(self.dataset) > EVAL_CACHE_BYTES * self.world_size:
            return items()
        self._eval_plan = list(items())
        return self._eval_plan

    @torch.no_grad()
    def evaluate(self, batches: Iterable[Batch] | None = None) -> float:
        """AUC over the whole eval split: scores gathered to rank 0, its AUC broadcast (every
        rank calls it; a sharded evaluation of other batches is not implemented)."""
        if batches is not None:
            raise HarnessError("a sharded session evaluates its eval split only", ErrorCategory.NOT_IMPLEMENTED)
        self.model.eval()
        scores, labels = [], []
        comms = self._comms()
        for c in comms:  # the evaluation's traffic is not the training steps'
            c.stats = self.eval_comm_stats
        try:
            for score, label in self._eval_scores():
                scores.append(score.double().cpu())
                labels.append(label.cpu())
        finally:
            self.model.train()
            for c in comms:
                c.stats = self.comm_stats
        mine = (torch.cat(scores).numpy(), torch.cat(labels).numpy())
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        auc = torch.zeros(1, dtype=torch.float64)
        if self.rank == 0:
            assert gathered is not None
            auc[0] = roc_auc(np.concatenate([g[1] for g in gathered]), np.concatenate([g[0] for g in gathered]))
        dist.broadcast(auc, src=0)
        return float(auc[0])

    def _eval_scores(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Per evaluation step (every rank takes part in each), this rank's scores (probabilities)
        and labels."""
        for batch, sizes in self._eval_items():
            logits = self._sharded()(batch.dense, self._sharded().distribute(batch.sparse, sizes))
            yield torch.sigmoid(logits), batch.labels

    # ------------------------------------------------------------------ state and caches
    def close(self) -> None:
        """Settle the cached shards' reads and write-backs and stop their thread (and the dense
        all-reduce's)."""
        self.embeddings.close()
        self.comms[0].close()

    def destroy_groups(self) -> None:
        """Tear down the process groups this session made (its collectives' and the two-stage
        hierarchy's), after a clean end, where the process goes on to open another session in the
        same default group (the tests' drivers train many plans in one process). Left alone, each
        session's groups kept their gloo threads and sockets (about 15 threads and 30 descriptors
        a session on 4 ranks of 2 nodes), and every later step of the process slowed: a launch of
        40 plans spent 40% of its CPU in the kernel."""
        self.close()
        for comm in self._comms():
            dist.destroy_process_group(comm.group)
            comm.group = None

    def comm_projection(self) -> dict[str, Any]:
        """The planner's bytes per link class and kind of one training step of this run's plan,
        and their seconds at the profile's links (:func:`~harness.reference.planner.traffic.project_traffic`)."""
        links = self.config.profile.interconnect
        dense = sum(p.numel() for p in self._parts().dense.module.parameters())
        plan = self.config.sharding_plan
        assert plan is not None  # checked in __init__
        return traffic.project_traffic(
            plan, ranks_per_node=self.ranks_per_node(),
            # what the pooled vectors cross in: the tables' type where the codec is fp32
            codecs=dataclasses.replace(self.codecs, forward=self.embeddings.forward_codec,
                                       backward=self.embeddings.backward_codec),
            dense_values=dense, intra_bw_bytes_per_s=links.intra_node_bw_bytes_per_s / 2,
            scale_out_bw_bytes_per_s=links.scale_out_bw_bytes_per_s / 2)

    def measured_per_step(self, report: dict[str, Any]) -> dict[str, Any]:
        first = report["ranks"][0]
        batches = sum(r["input_batches"] for r in report["ranks"]) // self.world_size
        return traffic.measured_per_step(report["total"], first["steps"], batches, self.world_size)

    def step_phases_report(self) -> dict[str, Any] | None:
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, self.clock.summary(self.rank))
        return phases.record(gathered, self.clock.evals)

    def trace_report(self) -> dict[str, Any] | None:
        if self.tracer is None:
            return None
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, self._own_trace())
        return merge(gathered)

    def comm_report(self) -> dict[str, Any]:
        """Every rank's training traffic per kind and link class, and their sum (a collective)."""
        mine = {"rank": self.rank, "steps": self.step_count, "input_batches": self.comm_stats.input_batches,
                **self.comm_stats.to_dict()}
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, mine)
        total = {kind: {k: sum(r[kind][k] for r in gathered) for k in gathered[0][kind]}
                 for kind in gathered[0] if isinstance(gathered[0][kind], dict)}
        return {"ranks": gathered, "total": total}

    def full_weight(self) -> torch.Tensor:
        """The whole unsharded tables, on every rank (a collective: for tests and small tables)."""
        return self._sharded().sparse_arch.full_weight()

    def table_weights(self) -> list[torch.Tensor]:
        """Every whole table, on every rank (a collective: for tests and small tables)."""
        return self._sharded().sparse_arch.table_weights()

    def cache_report(self) -> dict[str, Any] | None:
        """The SSD shards' caches of every rank, summed (a collective: every rank calls it);
        None when no shard is on the SSD tier."""
        if not self._ssd_shards:
            return None
        collections = self._sharded_collections()
        stats, rows, slots = self.embeddings.cache_stats(Tier.SSD)
        fields = [f.name for f in dataclasses.fields(CacheStats)]
        ahead = sum(c.read_ahead_batches for tables in collections for c in tables.cached.values()
                    if c.store.tier is Tier.SSD)
        local = torch.tensor([getattr(stats, f) for f in fields] + [rows, slots, ahead], dtype=torch.float64)
        dist.all_reduce(local)
        total = CacheStats(**{f: int(v) for f, v in zip(fields, local.tolist())})
        ssd_rows, cache_rows, read_ahead = int(local[-3]), int(local[-2]), int(local[-1])
        steps = max(self.step_count, 1)
        tier = self.config.embedding_tier
        # tables numbered as the model numbers them, across its collections
        on_ssd: set[int] = set()
        table_rows: list[int] = []
        for tables in collections:
            on_ssd |= {len(table_rows) + s.table for shards in tables.shards_of for s in shards if s.tier is Tier.SSD}
            table_rows += list(tables.table_rows)
        memory = [t for t in range(len(table_rows)) if t not in on_ssd]
        return {
            **total.to_dict(Tier.SSD), "batches": self.step_count,
            "ssd_bytes_read_per_step": round(total.bytes_read / steps, 1),
            "ssd_bytes_written_per_step": round(total.bytes_written / steps, 1),
            # rows of the SSD shards of every rank (a column-sharded table's rows once per shard)
            "policy": tier.policy if tier is not None else CachePolicy.LRU.value, "cache_rows": cache_rows,
            "rows": ssd_rows,
            "memory_tables": memory, "memory_rows": sum(table_rows[t] for t in memory),
            "ranks": self.world_size, "read_ahead_shard_batches": read_ahead,
            **(tier.placement() if tier is not None else {}),
            **ssd_io([c.store for tables in collections for c in tables.cached.values() if c.store.tier is Tier.SSD]),
        }

    def memory_report(self) -> dict[str, Any]:
        """Per rank: the plan's bytes per tier, the ledger's held and peak bytes per tier, the
        tier capacities enforced, and the process's peak RSS (a collective)."""
        plan = self.config.sharding_plan
        planned = (plan.rank_storage[self.rank].to_dict()
                   if plan is not None and self.rank < len(plan.rank_storage) else None)
        caches = {}
        for tier in (Tier.DDR, Tier.SSD):
            stats, rows, slots = self.embeddings.cache_stats(tier)
            if rows:
                caches[tier.value] = {"rows": rows, "slots": slots, "hit_rate": round(stats.hit_rate, 6),
                                "lookups": stats.lookups, "bytes_read": stats.bytes_read}
        mine = {"rank": self.rank, "planned": planned, **self.embeddings.ledger.report(),
                "peak_rss_bytes": peak_rss_bytes(), **rss_now(), **({"caches": caches} if caches else {})}
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, mine)
        return {"ranks": gathered}

    def _sharded_collections(self) -> list[ShardedEmbeddingCollection]:
        """The model's sharded collections (a DLRM has one)."""
        return [self._sharded().sparse_arch]

    def cache_hit_rate(self) -> float | None:
        if not self._ssd_shards or not any(c.cached for c in self._sharded_collections()):
            return None
        return self.embeddings.cache_stats(Tier.SSD)[0].hit_rate  # this rank's

    def cache_stats(self) -> Any:
        return self.embeddings.cache_stats(Tier.SSD)[0] if self._ssd_shards else None
