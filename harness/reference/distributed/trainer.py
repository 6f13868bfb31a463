"""Sharded training of the reference DLRM: one process per rank, launched by torchrun.

:class:`ShardedDLRM` is the DLRM with its tables sharded as the run's plan says
(:mod:`harness.reference.distributed.sharded`) and its dense part (bottom MLP, interaction,
top MLP) data-parallel under ``DistributedDataParallel``, whose gradient all-reduce goes
through :func:`harness.reference.distributed.comm.ddp_comm_hook` (codec and byte count).

:class:`DistributedTrainer` is the single-process :class:`~harness.reference.trainer.Trainer`
with three things changed: each rank trains on its slice of every global batch (the data
generator makes any rank's samples), the next batch's ids are distributed while the
current step computes (pipelining), and evaluation gathers every rank's scores to rank 0,
which computes the AUC and broadcasts it, so every rank stops at the same step. Only rank 0
writes the log.

Three process groups keep unrelated collectives apart: the default group for DDP, one for
the forward and backward all-to-alls and the replicas' all-reduce, one for the input
distribution (its all-to-alls run in the background, asynchronously).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import inspect
import math
import os
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from harness.errors import ErrorCategory, HarnessError
from harness.reference import synthetic
from harness.reference.batches import NUM_DENSE, Batch
from harness.reference.comm_codecs import Codec, CommConfig
from harness.reference.distributed.comm import Comm, CommStats, ddp_comm_hook
from harness.reference.distributed.sharded import InputDist, ShardedEmbeddingCollection, shardings_from_plan
from harness.reference.mlperf_log import MLPerfLog
from harness.reference.model import DLRM
from harness.reference.tiered import CacheStats
from harness.reference.trainer import RunConfig, Trainer, _prefetch, roc_auc

PROCESS_GROUP_TIMEOUT = datetime.timedelta(seconds=300)
# the dense part's buffers are constants: no broadcast before each forward (torch >= 2.13 renamed the option)
_NO_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else {"broadcast_buffers": False}
)


class DenseTower(nn.Module):
    """The dense part of the DLRM: bottom MLP, interaction and top MLP (data-parallel)."""

    def __init__(self, model: DLRM):
        super().__init__()
        self.dense_arch, self.interaction, self.over_arch = model.dense_arch, model.interaction, model.over_arch

    def forward(self, dense: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        return self.over_arch(self.interaction(self.dense_arch(dense), pooled))


class ShardedDLRM(nn.Module):
    """The DLRM with sharded tables and a DDP dense part.

    Args:
        model: the unsharded model as built from the seed on every rank (its tables are
            copied into this rank's shards; its dense modules are reused).
        plan: the sharding plan (``Plan.to_dict()``).
        comms: the dense (DDP), embedding and input collectives.
        codecs: the codec of each collective.
        device_ids: DDP's device ids (``None`` on the CPU).
    """

    def __init__(self, model: DLRM, plan: dict[str, Any], comms: tuple[Comm, Comm, Comm], codecs: CommConfig,
                 device_ids: list[int] | None = None, ssd: dict[str, Any] | None = None):
        super().__init__()
        dense_comm, emb_comm, input_comm = comms
        emb = model.sparse_arch.embeddings
        shardings = shardings_from_plan(plan, emb.table_rows, emb.dim, emb_comm.world_size)
        self.sparse_arch = ShardedEmbeddingCollection(emb, shardings, emb_comm, input_comm, codecs, ssd)
        self.dense = DistributedDataParallel(
            DenseTower(model), device_ids=device_ids, process_group=dense_comm.group, **_NO_BUFFER_SYNC
        )
        self.dense.register_comm_hook((dense_comm, codecs.allreduce), ddp_comm_hook)

    def distribute(self, sparse: torch.Tensor, sizes: list[int] | None = None) -> InputDist:
        return self.sparse_arch.distribute(sparse, sizes)

    def forward(self, dense: torch.Tensor, ids: InputDist) -> torch.Tensor:
        return self.dense(dense, self.sparse_arch(ids))


class Pipeline:
    """Each batch with its ids distribution, started ahead of time.

    When batch ``n`` is handed out, the ids of ``n + 1`` are on their way and the lengths of
    ``n + 2`` have been sent: the all-to-alls of the input distribution run (asynchronously,
    on their own process group) while step ``n`` computes. Every rank issues the same
    collectives in the same order, so stopping early at the same step on every rank is safe:
    :meth:`close` waits for what is in flight. After an error or an interrupt the ranks may
    have stopped at different steps, and waiting could block on a collective another rank
    never issues: :meth:`abandon` stops without waiting (the process then exits).
    """

    def __init__(self, model: Any, batches: Iterator[Batch]):
        self._model, self._batches = model, batches
        self._window: deque[tuple[Batch, InputDist]] = deque()
        self._handed: list[tuple[Batch, InputDist]] = []  # the last item handed out

    def __iter__(self) -> Iterator[tuple[Batch, InputDist]]:
        window, handed = self._window, self._handed
        for batch in self._batches:
            window.append((batch, self._model.distribute(batch.sparse)))
            if len(window) >= 2:
                window[-2][1].start_ids()
            if len(window) == 3:
                handed[:] = [window.popleft()]
                yield handed[0]
        while window:
            window[0][1].start_ids()
            handed[:] = [window.popleft()]
            yield handed[0]

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


class DistributedTrainer(Trainer):
    """The trainer of one rank of a sharded run (see the module docstring)."""

    def __init__(self, config: RunConfig, log: MLPerfLog | None = None, *,
                 progress: Callable[[dict], None] | None = None):
        super().__init__(config, log, progress=progress)
        if config.sharding_plan is None:
            raise HarnessError("a distributed run needs a sharding plan in its run config", ErrorCategory.BAD_INPUT)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.codecs = CommConfig.from_names(config.comm)
        self.stats = CommStats()
        if self.device.type == "cuda" and not config.emulated:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self.comms = (
            Comm(None, self.stats),
            Comm(dist.new_group(backend=None), self.stats),
            Comm(dist.new_group(backend=None), self.stats),
        )
        self._eval_plan: list[tuple[Batch, list[int]]] | None = None
        self._sharded_tables: ShardedEmbeddingCollection | None = None  # with the SSD tier
        self._steps = 0  # training steps taken, logged with the communication statistics

    # ------------------------------------------------------------------ hooks
    def _log_init_start(self) -> None:
        super()._log_init_start()
        plan = self.config.sharding_plan or {}
        types: dict[str, int] = {}
        for t in plan.get("tables", []):
            types[t["sharding_type"]] = types.get(t["sharding_type"], 0) + 1
        self.log.event("harness_sharding_plan", {"fingerprint": plan.get("fingerprint", ""), "sharding_types": types})
        self.log.event("harness_comm_codecs", self.codecs.to_names())

    def _log_run_stop(self, status: str, reason: str, epoch_num: float, throughput: float) -> None:
        super()._log_run_stop(status, reason, epoch_num, throughput)
        self.log.event("harness_comm_stats", {"rank": self.rank, "steps": self._steps, **self.stats.to_dict()})
        final = not (reason == "interrupted" or reason.startswith("error: "))
        if self._sharded_tables is not None and final:  # every rank is here: the caches' figures are summed
            self.log.event("harness_embedding_cache", self.cache_report())

    def cache_report(self) -> dict[str, Any]:
        """The SSD shards' caches of every rank, summed (a collective: every rank calls it)."""
        tables = self._sharded_tables
        assert tables is not None
        stats, rows, slots = tables.cache_stats()
        fields = [f.name for f in dataclasses.fields(CacheStats)]
        local = torch.tensor([getattr(stats, f) for f in fields] + [rows, slots], dtype=torch.float64)
        dist.all_reduce(local)
        total = CacheStats(**{f: int(v) for f, v in zip(fields, local.tolist())})
        ssd_rows, cache_rows = int(local[-2]), int(local[-1])
        steps = max(self._steps, 1)
        tier = self.config.embedding_tier or {}
        on_ssd = {s.table for shards in tables.shards_of for s in shards if s.tier == "ssd"}
        memory = [t for t in range(len(tables.table_rows)) if t not in on_ssd]
        return {
            **total.to_dict("ssd"), "batches": self._steps,
            "ssd_bytes_read_per_step": round(total.bytes_read / steps, 1),
            "ssd_bytes_written_per_step": round(total.bytes_written / steps, 1),
            # rows of the SSD shards of every rank (a column-sharded table's rows once per shard)
            "policy": tier.get("policy", "lru"), "cache_rows": cache_rows, "rows": ssd_rows,
            "memory_tables": memory, "memory_rows": sum(tables.table_rows[t] for t in memory),
            "ranks": self.world_size, **{k: tier[k] for k in ("table_tiers", "tier_plan") if k in tier},
        }

    def _cache_progress(self) -> dict[str, float]:
        if self._sharded_tables is None or not self._sharded_tables.cached:
            return {}
        return {"cache_hit_rate": self._sharded_tables.cache_stats()[0].hit_rate}  # this rank's

    # ------------------------------------------------------------------ pieces
    def _model(self) -> tuple[ShardedDLRM, torch.optim.Optimizer]:  # type: ignore[override]
        full, dense_opt = super()._model()
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        tier = self.config.embedding_tier
        ssd = None
        if tier:
            if tier.get("tier") != "ssd" or self.device.type != "cpu":
                raise HarnessError(f"embedding tier {tier.get('tier')!r} on {self.device.type}: only the SSD tier "
                                   "behind a host-memory cache is implemented", ErrorCategory.NOT_IMPLEMENTED)
            ssd = {"path": f"{tier['path']}.rank{self.rank}", "cache_fraction": tier["cache_fraction"],
                   "policy": tier.get("policy", "lru"), "batch": int(self.hp["global_batch_size"])}
        model = ShardedDLRM(full, self.config.sharding_plan or {}, self.comms, self.codecs, device_ids, ssd)
        self._sharded_tables = model.sparse_arch if ssd is not None else None
        return model, dense_opt

    def _train_items(self, data: synthetic.SyntheticCriteo, order: synthetic.EpochOrder, gbs: int,
                     model: Any) -> Iterator[Any]:
        batches = synthetic.train_batches(data, order, gbs, rank=self.rank, world_size=self.world_size)
        return pipelined(model, (self._on_device(b) for b in _prefetch(batches)))

    def _loss(self, model: Any, loss_fn: nn.Module, item: Any) -> torch.Tensor:
        batch, ids = item
        self._steps += 1
        return loss_fn(model(batch.dense, ids), batch.labels)

    def _eval_batches(self, data: synthetic.SyntheticCriteo) -> list[tuple[Batch, list[int]]]:
        """This rank's eval batches with every rank's batch size; ranks with fewer samples get
        empty batches at the end, so that all take part in every step's collectives."""
        per_rank = [len(a) for a in np.array_split(np.arange(self.spec.dataset["eval_samples"]), self.world_size)]
        local = max(1, math.ceil(self.spec.eval_batch_size / self.world_size))
        steps = math.ceil(max(per_rank) / local)
        mine = list(synthetic.eval_batches(data, local, rank=self.rank, world_size=self.world_size))
        out = []
        for j in range(steps):
            sizes = [min(max(n - j * local, 0), local) for n in per_rank]
            if j < len(mine):
                batch = self._on_device(mine[j])
            else:
                width = int(sum(self.spec.dataset["pooling"]))
                batch = Batch(torch.zeros(0, NUM_DENSE, device=self.device), torch.zeros(0, width, dtype=torch.int64,
                              device=self.device), torch.zeros(0, device=self.device), tuple(self.spec.dataset["pooling"]))
            out.append((batch, sizes))
        return out

    @torch.no_grad()
    def evaluate(self, model: Any, data: synthetic.SyntheticCriteo) -> float:
        """AUC over the whole eval split: scores gathered to rank 0, its AUC broadcast."""
        if self._eval_plan is None:
            self._eval_plan = self._eval_batches(data)
        model.eval()
        scores, labels = [], []
        for batch, sizes in self._eval_plan:
            logits = model(batch.dense, model.distribute(batch.sparse, sizes))
            scores.append(torch.sigmoid(logits).double().cpu())
            labels.append(batch.labels.cpu())
        model.train()
        mine = (torch.cat(scores).numpy(), torch.cat(labels).numpy())
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        auc = torch.zeros(1, dtype=torch.float64)
        if self.rank == 0:
            assert gathered is not None
            auc[0] = roc_auc(np.concatenate([g[1] for g in gathered]), np.concatenate([g[0] for g in gathered]))
        dist.broadcast(auc, src=0)
        return float(auc[0])


@contextlib.contextmanager
def process_group(config: RunConfig) -> Iterator[None]:
    """The default process group of a torchrun-launched rank (gloo on the CPU, NCCL on GPUs)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != config.world_size:
        raise HarnessError(
            f"the run config is for {config.world_size} rank(s) but {world} were launched", ErrorCategory.BAD_INPUT
        )
    backend = "nccl" if config.profile.get("device_type") == "cuda" and not config.emulated else "gloo"
    dist.init_process_group(backend=backend, timeout=PROCESS_GROUP_TIMEOUT)
    yield
    # only after a clean end: after an error or an interrupt, collectives of other ranks may
    # still be pending and tearing the group down could wait for them; the worker exits instead
    dist.destroy_process_group()
