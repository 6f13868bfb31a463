"""What a :class:`~harness.reference.engine.session.TrainingSession` builds besides the model: its
two optimizers from the run's hyperparameters (the tables' fused one, and torch's for the dense
parameters), and the tables moved to the SSD tier behind a cache when the run asks for it, with
what those tables report (their cache's counters, the bytes they hold)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.tiers import Tier
from harness.reference.data.datasets import Dataset, Samples
from harness.reference.data.events import EventStreams
from harness.reference.engine.run_config import EmbeddingTier
from harness.reference.models.dlrm import DLRM
from harness.reference.models.embeddings import FusedEmbeddingCollection, SparseOptimizerConfig, SparseOptimizerKind
from harness.reference.models.from_spec import sparse_optimizer_kind
from harness.reference.models.hstu import HSTURanker
from harness.reference.planner.estimators import cache_rows
from harness.reference.tiered import CachePolicy, SsdRows, TieredEmbeddingCollection, ssd_io, state_columns
from harness.rules.specs import BenchmarkSpec


def sparse_optimizer(hp: Mapping[str, Any], spec: BenchmarkSpec, lr: float) -> SparseOptimizerConfig:
    """The tables' fused optimizer at rate ``lr``: Adagrad with the run's epsilon and initial
    accumulator, the spec's row-wise Adagrad beside ``opt_name: adam``, else SGD."""
    if hp["opt_name"] == "adagrad":
        return SparseOptimizerConfig(
            kind=sparse_optimizer_kind(spec), learning_rate=lr,
            eps=float(hp.get("opt_adagrad_epsilon", 1e-8)),
            initial_accumulator_value=float(hp.get("opt_adagrad_initial_accumulator_value", 0.0)),
        )
    if hp["opt_name"] == "adam":  # the tables' optimizer is opt_sparse_name, the model's (checked at load)
        return SparseOptimizerConfig(kind=sparse_optimizer_kind(spec), learning_rate=lr)
    return SparseOptimizerConfig(kind=SparseOptimizerKind.SGD, learning_rate=lr)


def dense_optimizer(hp: Mapping[str, Any], params: list[torch.nn.Parameter], lr: float,
                    device: torch.device) -> torch.optim.Optimizer:
    """Torch's optimizer of the dense parameters at rate ``lr``, as ``opt_name`` and its
    hyperparameters say."""
    if hp["opt_name"] == "adagrad":
        return torch.optim.Adagrad(
            params, lr=lr, lr_decay=float(hp.get("opt_adagrad_learning_rate_decay", 0.0)),
            initial_accumulator_value=float(hp.get("opt_adagrad_initial_accumulator_value", 0.0)),
            eps=float(hp.get("opt_adagrad_epsilon", 1e-8)),
            # torch's fused kernel: one pass over each parameter where the loop over
            # tensors takes six, the same update up to the rounding of its multiply-adds
            fused=device.type in ("cpu", "cuda"),
        )
    if hp["opt_name"] == "adam":
        return torch.optim.Adam(
            params, lr=lr, betas=(float(hp.get("opt_adam_beta_1", 0.9)), float(hp.get("opt_adam_beta_2", 0.999))),
            eps=float(hp.get("opt_adam_epsilon", 1e-8)), weight_decay=0.0,
        )
    return torch.optim.SGD(params, lr=lr)


def tier_tables(full: FusedEmbeddingCollection, tier: EmbeddingTier, *, device: torch.device,
                global_batch_size: int) -> TieredEmbeddingCollection:
    """``full``'s tables moved to the SSD tier (a file), behind a cache of a fraction of their
    rows; tables not in ``tier.ssd_tables`` (when given) stay in memory."""
    if tier.tier != Tier.SSD.value or device.type != "cpu":
        raise HarnessError(
            f"embedding tier {tier.tier!r} on {device.type}: only the SSD tier behind a host-memory "
            "cache is implemented", ErrorCategory.NOT_IMPLEMENTED,
        )
    in_file = tier.rows_in_file  # resuming: the file already holds the rows
    store = SsdRows(Path(tier.path), sum(full.table_rows), full.dim, state_columns(full), create=not in_file,
                    dtype=full.weight.dtype, direct_io=tier.direct_io, reader=tier.row_reader)
    on_ssd = tier.ssd_tables  # table indices; None: all
    memory = tuple(t for t in range(len(full.table_rows)) if on_ssd is not None and t not in on_ssd)
    # each SSD table's share of the cache, as the planner counts it
    capacity = sum(cache_rows(r, tier.cache_fraction, global_batch_size * full.pooling[t])
                   for t, r in enumerate(full.table_rows) if t not in memory)
    return TieredEmbeddingCollection(full, store, capacity, CachePolicy(tier.policy),
                                     memory_tables=memory, copy_rows=not in_file)


def tier_file(tables: TieredEmbeddingCollection | None) -> Path | None:
    """The SSD tier's file of tables :func:`tier_tables` made (None: the tables are in memory)."""
    if tables is None:
        return None
    store = tables.store
    assert isinstance(store, SsdRows), type(store)  # tier_tables' store
    return Path(store.path)


def tier_cache_report(tables: TieredEmbeddingCollection, tier: EmbeddingTier) -> dict[str, Any]:
    """Hit rate and bytes moved per tier of the tables' cache (training lookups), with the
    planner's placement when it planned the tiers."""
    cache = tables.cache
    memory_rows = cache.capacity - cache.free_capacity
    return {**cache.stats.to_dict(tables.store.tier), "policy": cache.policy.value,
            "cache_rows": cache.free_capacity, "rows": tables.store.rows - memory_rows,
            "memory_tables": list(tables.memory_tables), "memory_rows": memory_rows,
            "read_ahead_batches": tables.read_ahead_batches, **tier.placement(), **ssd_io([tables.store])}


def rate_holder(model: DLRM | HSTURanker) -> Any:
    """What takes the tables' rate and step: a DLRM's fused collection, or the HSTU ranker (two
    collections, the sequence tables and the contextual one)."""
    return model if isinstance(model, HSTURanker) else model.sparse_arch.embeddings


def fused_tables(model: DLRM | HSTURanker) -> list[torch.nn.Module]:
    """The model's fused tables: a DLRM's collection, an HSTU ranker's two."""
    return list(model.tables()) if isinstance(model, HSTURanker) else [model.sparse_arch.embeddings]


def eval_split_bytes(dataset: Samples) -> int:
    """About what a session's eval split holds in memory, once read (whether it is kept)."""
    if isinstance(dataset, EventStreams):  # five int64 per event, at most max_sequence_length events
        return dataset.eval_samples * (8 * 5 * int(dataset.max_sequence_length) + 16)
    assert isinstance(dataset, Dataset), type(dataset)
    per_sample = 4 * 13 + 8 * sum(dataset.pooling) + 4
    return dataset.eval_samples * per_sample


def held_bytes(tables: list[torch.nn.Module], tiered: TieredEmbeddingCollection | None,
               device: torch.device) -> dict[str, int]:
    """The bytes a one-process session's tables hold, per tier: the cache in DDR and the store's
    rows on its tier; or the tables themselves in HBM (a GPU) or DDR."""
    if tiered is not None:
        return {Tier.DDR.value: tiered.cache.nbytes, tiered.store.tier.value: tiered.store.rows * tiered.store.row_bytes}
    nbytes = sum(t.numel() * t.element_size() for emb in tables for t in (*emb.parameters(), *emb.buffers()))
    return {(Tier.HBM if device.type == "cuda" else Tier.DDR).value: nbytes}
