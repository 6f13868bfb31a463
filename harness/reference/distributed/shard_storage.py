"""This rank's shards of a collection: where each lives, what it holds, and where a batch finds its rows.

**Tiers, as planned.** Every shard is allocated in the tier the plan gives it, through this
rank's :class:`~harness.reference.tiered.TierLedger`, which enforces the tier's capacity and
records its peak: a shard in the rank's fastest tier is resident there; a DDR shard under an HBM
tier lives in host memory behind a cache in HBM (Neo's HBM cache over DDR, FBGEMM's UVM caching)
of the plan's ``ddr_cache_fraction`` of its rows, never fewer than one global batch can look up
(resident in DDR when the plan gives it no cache); an SSD shard lives in a file behind such a
cache (``ssd_cache_fraction``) (:class:`~harness.reference.tiered.CachedShard`).

**What a shard holds.** Its block of the single-process model's initial weights, made from the
seed without the rest of the table (:class:`InitialWeights`), and its fused optimizer's state,
in the tables' type. fp32 resident shards of one width (with the batched paths) live in one
weight and one state (a :class:`ShardGroup`), each shard a block of rows of them, so that a step
looks them up and updates them in one call each instead of one per shard.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.distributed.layout import TableShapes
from harness.reference.distributed.shardings import ShardSpec
from harness.reference.models.embeddings import (
    SparseOptimizerConfig,
    initial_state,
    initial_weights,
)
from harness.reference.models.hugepages import empty_table
from harness.reference.models.numerics import TableLayout
from harness.reference.planner.estimators import cache_rows
from harness.reference.planner.types import TIERS, RowReader, Storage, Tier
from harness.reference.tiered import CachedShard, CachePolicy, CacheStats
from harness.reference.tiered.ledger import TierLedger
from harness.reference.tiered.store import row_bytes


def rank_ledger(capacity: Storage | None, rank: int) -> TierLedger:
    """A rank's ledger of the bytes per tier it may hold (``capacity``: the plan's; None: unbounded)."""
    return TierLedger(capacity.by_tier() if capacity is not None else dict.fromkeys(TIERS, 1 << 62), rank=rank)


@dataclass(frozen=True)
class ShardFiles:
    """How a rank's cached shards keep their rows: ``path``, the prefix of its SSD shards' files
    (None: no shard may go there); ``policy``, the caches'; ``batch``, the global batch in ids a
    sample of the collection (a cache holds at least what one batch looks up); ``direct_io`` and
    ``reader``, as :class:`~harness.reference.tiered.SsdRows` takes them."""

    path: str | None = None
    policy: CachePolicy = CachePolicy.LRU
    batch: int = 1
    direct_io: bool = True
    reader: RowReader = RowReader.AUTO


@dataclass(frozen=True)
class TierPlacement:
    """Where a rank's shards live: its ledger (the plan's capacity per tier; shared by the
    collections of one model), the plan's cache fractions of the slower tiers, and ``files``
    (:class:`ShardFiles`)."""

    ledger: TierLedger
    ddr_cache_fraction: float = 0.0
    ssd_cache_fraction: float = 0.0
    files: ShardFiles = ShardFiles()

    @classmethod
    def of(cls, rank: int, files: ShardFiles | None = None, capacity: Storage | None = None,
           plan_config: dict[str, Any] | None = None, ledger: TierLedger | None = None) -> TierPlacement:
        """A placement from a plan's ``rank_capacity`` and ``config`` (None: unbounded, no caches),
        or into ``ledger`` where another collection of the model shares it."""
        config = plan_config or {}
        return cls(ledger if ledger is not None else rank_ledger(capacity, rank),
                   float(config.get("ddr_cache_fraction", 0.0)), float(config.get("ssd_cache_fraction", 0.0)),
                   files or ShardFiles())

    def cache_fraction(self, tier: Tier) -> float:
        """The fraction of a ``tier`` shard's rows its cache holds (0: none planned)."""
        return {Tier.DDR: self.ddr_cache_fraction, Tier.SSD: self.ssd_cache_fraction}.get(tier, 0.0)


@dataclass(frozen=True)
class InitialWeights:
    """The single-process model's initial weights and optimizer state of any block of a
    collection's tables (``table_ids``: each table's id in the model, its random streams'), in
    the tables' type ``dtype``: every plan and world size starts from them, bit for bit."""

    seed: int
    table_ids: tuple[int, ...]
    tables: TableShapes
    optimizer: SparseOptimizerConfig | None
    dtype: torch.dtype

    def block(self, s: ShardSpec, rows: tuple[int, int] | None = None, *,
              out: torch.Tensor | None = None) -> torch.Tensor:
        """Initial weights of shard ``s`` (of its local rows ``rows``, default all), ``rows x
        s.cols``: the single-process model's weights of that block, made without the rest of the
        table (into ``out`` when given)."""
        lo, hi = (0, s.rows) if rows is None else rows
        return initial_weights(self.seed, self.table_ids[s.table], self.tables.rows[s.table], self.tables.dims[s.table],
                               (s.row_offset + lo, s.row_offset + hi), (s.col_offset, s.col_offset + s.cols), out=out)

    def store_rows(self, s: ShardSpec) -> Callable[[int, int], torch.Tensor]:
        """Rows ``lo .. hi - 1`` of shard ``s`` as a store holds them: weights, then optimizer state."""
        def rows(lo: int, hi: int) -> torch.Tensor:
            state = initial_state(self.optimizer, hi - lo, s.cols).reshape(hi - lo, -1)
            return torch.cat([self.block(s, (lo, hi)), state], dim=1)

        return rows

    def state_cols(self, cols: int) -> int:
        """Optimizer state values per row of a table ``cols`` wide."""
        return int(initial_state(self.optimizer, 1, cols).numel())

    @property
    def value_bytes(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()

    def resident_bytes(self, rows: int, cols: int) -> int:
        """Bytes of ``rows x cols`` weights and their optimizer state (fp32)."""
        return rows * (cols * self.value_bytes + self.state_cols(cols) * 4)


@dataclass(frozen=True)
class ShardGroup:
    """Local fp32 shards of one width in one weight and one optimizer state: shard ``members[j]``
    holds rows ``bases[j]`` on. One update call per group and step, not one per shard (a rank of
    a 26-table model holds up to 26 row shards; of a 1,000-table one, hundreds)."""

    members: tuple[int, ...]
    bases: tuple[int, ...]
    weight: torch.Tensor  # sum(rows) x cols
    state: torch.Tensor  # as initial_state gives it for sum(rows) x cols
    base_ids: torch.Tensor  # ``bases`` as a tensor, to shift the members' ids in one operation


class LocalShards:
    """This rank's shards (local shard ``i`` is ``shards[i]``): resident (``weights[i]``,
    ``states[i]``: its own, or blocks of rows of its :class:`ShardGroup`'s) or behind a cache
    (``cached[i]``; its weight and state None); ``layouts[i]``: its rounding's random streams."""

    def __init__(self, shards: Sequence[ShardSpec], weights: list[torch.Tensor | None],
                 states: list[torch.Tensor | None], cached: dict[int, CachedShard], groups: list[ShardGroup],
                 layouts: list[TableLayout], io: ThreadPoolExecutor | None):
        self.shards, self.weights, self.states, self.cached = shards, weights, states, cached
        self.groups, self.layouts = groups, layouts
        self.grouped = {i for g in groups if len(g.members) > 1 for i in g.members}  # looked up and updated as one
        self._io = io  # reads ahead and write-backs of the cached shards, in order

    def rows(self, i: int, ids: torch.Tensor, *, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """A weight and indices into it that look up local shard ``i``'s rows ``ids``: the
        shard's own weight; or, behind a cache, its cache's slots once the rows are resident
        (or, for a batch larger than the cache, the rows read where they are)."""
        cached = self.cached.get(i)
        if cached is None:
            return self.weights[i], ids  # type: ignore[return-value]
        slots = cached.slots(ids, training=training)
        if slots is not None:
            return cached.weight, slots
        if training and torch.is_grad_enabled():
            raise HarnessError(f"a training batch looks up more distinct rows of a shard than its cache holds "
                               f"({cached.cache.free_capacity})", ErrorCategory.BAD_INPUT)
        return cached.current_rows(ids)

    def full_weight(self, i: int) -> torch.Tensor:
        """Local shard ``i``'s whole ``rows x cols`` weight (read from its store when cached)."""
        w = self.weights[i]
        return w if w is not None else self.cached[i].full_weight()

    def queue(self, ids_of: Callable[[int], torch.Tensor]) -> None:
        """The next batch's ids of each cached shard (``ids_of(i)``), read ahead."""
        for i, cached in self.cached.items():
            cached.queue(ids_of(i))

    def close(self) -> None:
        """Wait for the cached shards' reads and write-backs in flight, and stop their thread."""
        for cached in self.cached.values():
            cached.settle()
        if self._io is not None:
            self._io.shutdown(wait=True)
            self._io = None

    def cache_stats(self, tier: Tier) -> tuple[CacheStats, int, int]:
        """The shards in ``tier`` behind caches: their caches' statistics summed, their rows, and
        their slots."""
        caches = [c for c in self.cached.values() if c.store.tier is tier]
        return (sum((c.cache.stats for c in caches), CacheStats()), sum(c.store.rows for c in caches),
                sum(c.cache.free_capacity for c in caches))


def build_local_shards(shards: Sequence[ShardSpec], init: InitialWeights, placement: TierPlacement,
                       device: torch.device, *, grouped: bool) -> LocalShards:
    """This rank's ``shards``, each in its planned tier (``grouped``: the resident ones of one
    width in a :class:`ShardGroup`), their bytes held in the placement's ledger shard by shard."""
    maker = _ShardMaker(init, placement, device)
    weights: list[torch.Tensor | None] = []
    states: list[torch.Tensor | None] = []
    cached: dict[int, CachedShard] = {}
    resident: list[int] = []
    for i, s in enumerate(shards):
        behind_cache = maker.cached(i, s)
        weight = state = None
        if behind_cache is not None:
            cached[i] = behind_cache
        elif grouped:  # made below, with its group
            placement.ledger.allocate(s.tier, init.resident_bytes(s.rows, s.cols), f"shard {i} (table {s.table})")
            resident.append(i)
        else:
            weight, state = maker.resident(i, s)
        weights.append(weight)
        states.append(state)
    groups = _group_shards(shards, resident, init, device, weights, states)
    layouts = [TableLayout.of_shard(init.seed, init.table_ids[s.table], s.rows, s.row_offset, s.col_offset)
               for s in shards]
    return LocalShards(shards, weights, states, cached, groups, layouts, maker.io)


class _ShardMaker:
    """Makes one rank's shards in their tiers (during :func:`build_local_shards`); ``io``: the
    single-worker thread of the cached shards' reads and write-backs, made with the first."""

    def __init__(self, init: InitialWeights, placement: TierPlacement, device: torch.device):
        self.init, self.placement, self.device = init, placement, device
        self.io: ThreadPoolExecutor | None = None

    def resident(self, i: int, s: ShardSpec) -> tuple[torch.Tensor, torch.Tensor]:
        """Shard ``s``'s own weight and state, resident in its tier."""
        weight = self.init.block(s, out=empty_table((s.rows, s.cols), self.init.dtype, self.device))
        state = initial_state(self.init.optimizer, s.rows, s.cols, self.device)
        self.placement.ledger.allocate(s.tier, _nbytes(weight, state), f"shard {i} (table {s.table})")
        return weight, state

    def cached(self, i: int, s: ShardSpec) -> CachedShard | None:
        """Shard ``s`` in its planned tier behind a cache in a faster one, or None when it is
        resident: in its rank's fastest tier, or in DDR when the plan gives DDR shards no cache.
        The store's bytes count in the shard's tier, the cache's (slots, bookkeeping and the
        row -> slot map) in the fastest tier above it, as the planner counted them."""
        ledger, files = self.placement.ledger, self.placement.files
        fast = ledger.faster_than(s.tier)
        fraction = self.placement.cache_fraction(s.tier)
        if fast is None or (s.tier is Tier.DDR and fraction <= 0):
            return None
        if fraction <= 0:
            raise HarnessError(f"shard {i} (table {s.table}) is on the SSD tier without a cache: plan SSD shards "
                               "with an ssd_cache_fraction", ErrorCategory.NOT_IMPLEMENTED)
        if self.device.type != "cpu":
            raise HarnessError("caches of slower tiers on a GPU (in HBM) are not implemented: only the CPU path "
                               "caches DDR and SSD shards", ErrorCategory.NOT_IMPLEMENTED)
        state_cols = self.init.state_cols(s.cols)
        ledger.allocate(s.tier, s.rows * row_bytes(s.cols, state_cols, self.init.dtype), f"shard {i} (table {s.table})")
        slots = cache_rows(s.rows, fraction, files.batch * self.init.tables.pooling[s.table])
        cached = self._behind_cache(i, s, state_cols, slots)
        ledger.allocate(fast, cached.cache.nbytes, f"the cache of shard {i} (table {s.table})")
        return cached

    def _behind_cache(self, i: int, s: ShardSpec, state_cols: int, slots: int) -> CachedShard:
        """Local shard ``i`` in its store (a file on the SSD tier, host memory on DDR) behind a
        cache of ``slots`` rows, its rows written there from the seed."""
        init, files = self.init, self.placement.files
        policy = files.policy
        if self.io is None:
            self.io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-shard-io")
        if s.tier is not Tier.SSD:
            return CachedShard.in_ddr(s.rows, s.cols, state_cols, init.store_rows(s), slots, policy, self.io,
                                      dtype=init.dtype)
        if files.path is None:
            raise HarnessError("the plan puts shards on the SSD tier, but the run gave them no file path",
                               ErrorCategory.BAD_INPUT)
        path = Path(f"{files.path}.shard{i}.bin")
        return CachedShard.on_ssd(path, s.rows, s.cols, state_cols, init.store_rows(s), slots, policy, self.io,
                                  dtype=init.dtype, direct_io=files.direct_io, reader=files.reader)


def _group_shards(shards: Sequence[ShardSpec], resident: Sequence[int], init: InitialWeights, device: torch.device,
                  weights: list[torch.Tensor | None], states: list[torch.Tensor | None]) -> list[ShardGroup]:
    """The weights and states of the ``resident`` shards, one pair per width, made from the seed
    in place: each shard's (``weights[i]``, ``states[i]``, set here) a block of rows of its group's."""
    by_cols: dict[int, list[int]] = {}
    for i in resident:
        by_cols.setdefault(shards[i].cols, []).append(i)
    groups = []
    for cols, members in by_cols.items():
        rows = [shards[i].rows for i in members]
        weight = empty_table((sum(rows), cols), init.dtype, device)
        state = initial_state(init.optimizer, sum(rows), cols, device)
        bases = [0, *itertools.accumulate(rows)][:-1]
        for i, base, n in zip(members, bases, rows):
            weights[i] = init.block(shards[i], out=weight[base : base + n])
            states[i] = state[base : base + n] if state.numel() else state.new_empty(0)
        groups.append(ShardGroup(tuple(members), tuple(bases), weight, state,
                                 torch.tensor(bases, dtype=torch.int64, device=device)))
    return groups


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
