"""Cost model: per-step seconds and bytes of each shard, from a hardware profile.

Lookups read ``batch x pooling x cols x param_bytes`` from the shard's tier at that tier's
per-rank bandwidth (``pooling``: ids per sample; a sequence table's are its events). The
embedding all-to-all / reduce-scatter sends, per rank, each shard's output over the links
(NVLink within a node, the scale-out NIC across nodes, each at half the profile's
both-directions figure): a pooled table's ``batch x cols x comm_bytes`` (one vector a sample,
a row shard's partial sums), a sequence table's ``batch x pooling x cols x comm_bytes`` (one vector
per id, nothing summed; a row shard's only for the ids in its rows, its share of them);
backward sends the same as gradients. Every shard but a replica also receives its ids in the
input all-to-all: the lengths of its table (one int64 a sample of the batch), then the ids in
its rows (``batch x pooling`` int64 over the shards of a row split), so a column-wise table, each of whose
shards receives all of the table's ids, pays for them once per shard. Backward compute is a
multiple of forward; a data-parallel table costs a replica per rank and an all-reduce of its
gradient. An inference plan (``PlannerConfig.inference``) is the forward half alone: no backward
compute, no gradients sent, no replica all-reduced (and its tables carry no optimizer state:
``TableSpec.optimizer_state_factor`` 0). Pooling enters every lookup and every sequence table's
vectors, so it sets a table's cost and, through it, its heat (lookup bytes per stored byte: which
tier it gets), its option and its placement. Not modelled: a fixed cost per shard or per kernel, ids repeated within a
batch (each is looked up and sent), overlap of stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.hw_profiles.profiles import Profile
from harness.reference.planner.traffic import ID_BYTES
from harness.reference.planner.types import (
    TIERS,
    CachePolicy,
    CommPrecision,
    Perf,
    Shard,
    ShardingOption,
    ShardingType,
    ShardLoad,
    Storage,
    TableSpec,
    Tier,
)


@dataclass(frozen=True)
class PlannerConfig:
    """The knobs of the cost model, the enumerator, the proposers and the balancing (defaults
    match torchrec's habits)."""

    batch_size: int = 65536
    comm_precision: CommPrecision = CommPrecision.FP32
    param_bytes_per_element: int = 4
    optimizer_state_bytes_per_element: int = 4
    backward_compute_factor: float = 2.0  # gradient read-modify-write plus optimizer update
    data_parallel_max_bytes: int = 64 * 2**20  # largest table offered data-parallel
    column_block: int = 64  # the widest column-wise shards are this many columns wide
    column_min_cols: int = 4  # column-wise splits halve the shards' width down to this many columns
    large_table_bytes: int | None = None  # tables larger than this are proposed split by rows; None: by cost
    # per table name, the sharding types it may take (torchrec's ParameterConstraints); others: any
    sharding_types: tuple[tuple[str, tuple[ShardingType, ...]], ...] = ()
    # per table name, the tiers its shards may live on (a per-table tier setting); others: any
    tiers: tuple[tuple[str, tuple[Tier, ...]], ...] = ()
    # a shard on the SSD tier is trained through a cache of this share of its rows, held in
    # the fastest tier of its rank that has room (as torchrec's cache_load_factor for
    # UVM-cached tables); 0: SSD shards are read where they are
    ssd_cache_fraction: float = 0.0
    # a shard in DDR under a rank's HBM is trained through a cache of this share of its rows in
    # HBM (Neo's HBM cache over host memory, FBGEMM's UVM caching); 0: DDR shards are read where
    # they are. Data-parallel replicas are never cached
    ddr_cache_fraction: float = 0.0
    cache_policy: CachePolicy = CachePolicy.LRU  # LFU keeps a use count per row too (cache_nbytes)
    # balancing (planners.py): while the max/mean rank cost is above ``imbalance_target``, switch
    # the options of the tables that load the slowest rank most (or split the coarsest shards
    # finer), trying at most ``balance_max_steps`` partitions (a count, not a time: plans stay
    # deterministic); 0: the first proposal's plan
    imbalance_target: float = 1.05
    balance_max_steps: int = 128
    # an inference plan: the forward pass alone (lookups, the ids' and the vectors' all-to-alls); no
    # backward, no gradients, no replica all-reduce
    inference: bool = False

    def allowed_types(self, table: str) -> tuple[ShardingType, ...] | None:
        return dict(self.sharding_types).get(table)

    def allowed_tiers(self, table: str) -> tuple[Tier, ...] | None:
        return dict(self.tiers).get(table)

    def to_dict(self) -> dict[str, object]:
        return {
            "param_bytes_per_element": self.param_bytes_per_element,
            "optimizer_state_bytes_per_element": self.optimizer_state_bytes_per_element,
            "backward_compute_factor": self.backward_compute_factor,
            "data_parallel_max_bytes": self.data_parallel_max_bytes,
            "column_block": self.column_block,
            "column_min_cols": self.column_min_cols,
            "imbalance_target": self.imbalance_target,
            "balance_max_steps": self.balance_max_steps,
            **({"sharding_types": {name: [t.value for t in types] for name, types in self.sharding_types}}
               if self.sharding_types else {}),
            **({"tiers": {name: [t.value for t in tiers] for name, tiers in self.tiers}} if self.tiers else {}),
            **({"ssd_cache_fraction": self.ssd_cache_fraction} if self.ssd_cache_fraction else {}),
            **({"ddr_cache_fraction": self.ddr_cache_fraction} if self.ddr_cache_fraction else {}),
            **({"cache_policy": self.cache_policy.value} if self.cache_policy is not CachePolicy.LRU else {}),
            **({"inference": True} if self.inference else {}),
        }

    def cache_fraction(self, tier: Tier) -> float:
        """The share of a shard's rows its cache holds when the shard lives on ``tier`` (0: none)."""
        # compared by identity, not looked up in a dict: the partitioner asks millions of times for a
        # large model, and hashing an Enum member runs Python code
        if tier is Tier.SSD:
            return self.ssd_cache_fraction
        if tier is Tier.DDR:
            return self.ddr_cache_fraction
        return 0.0


@dataclass(frozen=True)
class Topology:
    """A profile seen per rank: capacities and bandwidths of each tier, link bandwidths one way."""

    nodes: int
    ranks_per_node: int
    capacity: Storage
    tier_bw_bytes_per_s: tuple[float, float, float]  # hbm, ddr, ssd per rank
    intra_bw_bytes_per_s: float  # one direction
    scale_out_bw_bytes_per_s: float  # one direction

    @classmethod
    def from_profile(cls, profile: Profile) -> Topology:
        """Per rank: HBM of one device; DDR and SSD of a node shared evenly by its ranks."""
        per_node = max(profile.accelerators_per_node, 1)

        def share(tier: Tier) -> tuple[int, float]:
            t = profile.tiers[tier]
            if t.capacity_bytes <= 0 or t.bandwidth_bytes_per_s <= 0:
                return 0, 0.0
            if tier is Tier.HBM:
                return (t.capacity_bytes, t.bandwidth_bytes_per_s) if profile.accelerators_per_node else (0, 0.0)
            return t.capacity_bytes // per_node, t.bandwidth_bytes_per_s / per_node

        shares = [share(t) for t in TIERS]
        return cls(
            nodes=profile.nodes,
            ranks_per_node=per_node,
            capacity=Storage(*(c for c, _ in shares)),
            tier_bw_bytes_per_s=tuple(bw for _, bw in shares),  # type: ignore[arg-type]
            intra_bw_bytes_per_s=profile.interconnect.intra_node_bw_bytes_per_s / 2,
            scale_out_bw_bytes_per_s=profile.interconnect.scale_out_bw_bytes_per_s / 2,
        )

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def bandwidth(self, tier: Tier) -> float:
        return self.tier_bw_bytes_per_s[TIERS.index(tier)]

    def all_to_all_s(self, nbytes: float) -> float:
        """Seconds for one rank to spread ``nbytes`` evenly over every rank (its own share stays)."""
        w, a = self.world_size, self.ranks_per_node
        if w <= 1:
            return 0.0
        within = nbytes * (a - 1) / w / self.intra_bw_bytes_per_s if a > 1 else 0.0
        across = nbytes * (w - a) / w / self.scale_out_bw_bytes_per_s if w > a else 0.0
        return within + across

    def node_reduce_scatter_s(self, nbytes: float) -> float:
        a = self.ranks_per_node
        return nbytes * (a - 1) / a / self.intra_bw_bytes_per_s if a > 1 else 0.0

    def all_reduce_s(self, nbytes: float) -> float:
        """A ring all-reduce over the world, limited by its slowest link."""
        w = self.world_size
        if w <= 1:
            return 0.0
        link = self.scale_out_bw_bytes_per_s if self.nodes > 1 else self.intra_bw_bytes_per_s
        return 2 * (w - 1) / w * nbytes / link


CACHE_SLOT_BOOKKEEPING_BYTES = 26  # per slot: its row and last use (int64), a free-list entry (int64), two flags
CACHE_ROW_MAP_BYTES = 4  # per row of the cached shard: its slot (int32)
CACHE_LFU_BYTES_PER_ROW = 8  # LFU's use count of every row (int64)


def cache_nbytes(rows: int, slots: int, row_bytes: int, *, lfu: bool = False) -> int:
    """The bytes a row cache allocates in its fast tier (``harness.reference.tiered.RowCache``):
    ``slots`` rows of ``row_bytes`` (weights and optimizer state) and their bookkeeping, and the
    row -> slot map (and LFU's use counts) over the ``rows`` rows it caches. The planner counts
    exactly what the executor allocates (``tests/reference/tiered/test_cache.py`` checks the two agree)."""
    per_row = CACHE_ROW_MAP_BYTES + (CACHE_LFU_BYTES_PER_ROW if lfu else 0)
    return slots * (row_bytes + CACHE_SLOT_BOOKKEEPING_BYTES) + rows * per_row


def cache_rows(rows: int, fraction: float, ids_per_step: float) -> int:
    """The cache slots of a table (or shard) of ``rows`` rows on the SSD tier: ``fraction`` of
    its rows, and never fewer than one step can look up (``min(rows, ids per step)``: a batch's
    rows must be resident together). The planner counts these; the trainers make these."""
    return max(1, math.ceil(rows * fraction), min(rows, math.ceil(ids_per_step)))


@dataclass(frozen=True)
class PlacedCache:
    """The cache in front of a placed shard: the tier it lives in, its slots (rows) and its bytes there."""

    tier: Tier
    slots: int
    nbytes: int


class ShardEstimator:
    """Bytes and seconds of shards, and of a shard placed on a tier."""

    def __init__(self, topology: Topology, config: PlannerConfig):
        self.topology = topology
        self.config = config
        # where the cache of a shard on each tier lives (see cache_tier), worked out once
        self._cache_tiers = tuple(self._fastest_above(t) if config.cache_fraction(t) > 0 else None for t in TIERS)

    def _fastest_above(self, tier: Tier) -> Tier | None:
        return next((t for t in TIERS[: TIERS.index(tier)] if self.topology.capacity.get(t) > 0), None)

    def storage_bytes(self, table: TableSpec, rows: int, cols: int) -> int:
        """Weights and optimizer state of ``rows x cols`` of ``table``. The state is
        ``ceil(cols x factor)`` elements per row: ``cols`` for Adagrad, one for row-wise Adagrad
        however narrow the shard (a column shard keeps its own accumulator per row, as the
        executor and FBGEMM's sharded tables do)."""
        c = self.config
        weights = rows * cols * c.param_bytes_per_element
        state = rows * math.ceil(cols * table.optimizer_state_factor - 1e-9) * c.optimizer_state_bytes_per_element
        return weights + state

    def table_bytes(self, table: TableSpec) -> int:
        return self.storage_bytes(table, table.rows, table.dim)

    def shard_loads(
        self, table: TableSpec, sharding_type: ShardingType, extents: list[tuple[int, int, int, int]]
    ) -> tuple[ShardLoad, ...]:
        """Loads of shards ``(row_offset, rows, col_offset, cols)`` of ``table`` under ``sharding_type``.
        The ids of a sample spread evenly over the extents' distinct row ranges (one for table-wise and
        column-wise shards, every rank's for row-wise, a node's for table-row-wise, ``k`` for a grid)."""
        row_ranges = len({(o, n) for o, n, _, _ in extents})
        sizes: dict[tuple[int, int], ShardLoad] = {}  # shards of one size load alike: priced once
        loads = []
        for row_offset, rows, col_offset, cols in extents:
            same = sizes.get((rows, cols))
            if same is None:
                same = sizes[rows, cols] = self.shard_load(table, sharding_type, (0, rows, 0, cols), row_ranges)
            loads.append(ShardLoad(row_offset, rows, col_offset, cols, same.storage_bytes, same.lookup_bytes,
                                   same.fwd_comm_s, same.bwd_comm_s, same.ids_per_step, same.replica))
        return tuple(loads)

    def shard_load(self, table: TableSpec, sharding_type: ShardingType, extent: tuple[int, int, int, int],
                   row_ranges: int = 1) -> ShardLoad:
        """The load of one shard ``(row_offset, rows, col_offset, cols)`` of ``table`` split into
        ``row_ranges`` ranges of rows (the shard receives its share of the ids)."""
        topo, c = self.topology, self.config
        b, p = c.batch_size, table.pooling
        cb, pb = c.comm_precision.bytes_per_element, c.param_bytes_per_element
        w, a = topo.world_size, topo.ranks_per_node
        row_offset, rows, col_offset, cols = extent
        if sharding_type is ShardingType.DATA_PARALLEL:
            ids = b / w * p
            fwd, bwd = 0.0, 0.0 if c.inference else topo.all_reduce_s(rows * cols * cb)
        else:
            ids = b * p / row_ranges
            # a sequence shard sends a vector per id in its rows; a pooled one a vector (or a row
            # shard's partial sum) per sample
            out = (ids if table.sequence else b) * cols * cb
            if sharding_type is ShardingType.TABLE_ROW_WISE:  # gathered in the node, then across nodes
                per_sample = p if table.sequence else 1.0  # vectors a sample's output holds
                fwd = topo.node_reduce_scatter_s(out) + topo.all_to_all_s(b * per_sample * cols * cb / a)
            else:
                fwd = topo.all_to_all_s(out)
            bwd = 0.0 if c.inference else fwd
            fwd += topo.all_to_all_s((b + ids) * ID_BYTES)  # the input all-to-all: its lengths, then its ids
        return ShardLoad(row_offset, rows, col_offset, cols, self.storage_bytes(table, rows, cols), ids * cols * pb,
                         fwd, bwd, ids, replica=sharding_type is ShardingType.DATA_PARALLEL)

    def cache_tier(self, load: ShardLoad, tier: Tier) -> Tier | None:
        """Where the cache of a shard on ``tier`` lives: the fastest tier above ``tier`` that the
        rank has, when the plan caches that tier (and the shard is not a replica); else None."""
        if load.replica:
            return None
        return self._cache_tiers[TIERS.index(tier)]

    def cache_bytes(self, load: ShardLoad, tier: Tier = Tier.SSD) -> int:
        """Bytes in a faster tier of the cache of a shard on ``tier`` (0: it has none): slots for
        the tier's cache fraction of its rows, never fewer than one step can look up (the rows of
        a batch must be resident together), with their bookkeeping and the row -> slot map
        (:func:`cache_nbytes`)."""
        if self.cache_tier(load, tier) is None:
            return 0
        slots = cache_rows(load.rows, self.config.cache_fraction(tier), load.ids_per_step)
        row_bytes = math.ceil(load.storage_bytes / load.rows)
        return cache_nbytes(load.rows, slots, row_bytes, lfu=self.config.cache_policy is CachePolicy.LFU)

    def placed_cache(self, table: TableSpec, shard: Shard, *, replica: bool = False) -> PlacedCache | None:
        """The cache of a shard of ``table`` as a plan placed it (``replica``: a data-parallel copy,
        never cached), as :meth:`cache_bytes` counts it: None when its tier is not cached."""
        fast = None if replica else self._cache_tiers[TIERS.index(shard.tier)]
        if fast is None:
            return None
        ids = self.config.batch_size * table.pooling * shard.rows / table.rows
        slots = cache_rows(shard.rows, self.config.cache_fraction(shard.tier), ids)
        row_bytes = math.ceil(shard.storage_bytes / shard.rows)
        return PlacedCache(fast, slots, cache_nbytes(shard.rows, slots, row_bytes,
                                                     lfu=self.config.cache_policy is CachePolicy.LFU))

    def fits_alone(self, load: ShardLoad, tier: Tier) -> bool:
        """Whether the shard fits one empty rank on ``tier``: its bytes there, and its cache's (if
        ``tier`` is cached) in the tier above."""
        capacity = self.topology.capacity
        if load.storage_bytes > capacity.get(tier):
            return False
        fast = self.cache_tier(load, tier)
        return fast is None or self.cache_bytes(load, tier) <= capacity.get(fast)

    def option_tiers(self, option: ShardingOption) -> list[Tier]:
        """The tiers, fastest first, on which the option's largest shard (and its cache) fits one rank."""
        largest = max(option.shards, key=lambda s: s.storage_bytes)
        return [t for t in TIERS if self.fits_alone(largest, t)]

    def perf(self, load: ShardLoad, tier: Tier) -> Perf:
        """The shard's seconds per step when it lives on ``tier``. A cached shard reads at the
        blend of its cache's tier and its own by the cache's share of rows (torchrec's estimate
        for cached tables: pessimistic when lookups are skewed)."""
        bw = self.topology.bandwidth(tier)
        fast = self.cache_tier(load, tier)
        if fast is not None:
            f = self.config.cache_fraction(tier)
            bw = f * self.topology.bandwidth(fast) + (1 - f) * bw
        compute = load.lookup_bytes / bw if bw > 0 else math.inf
        backward = 0.0 if self.config.inference else self.config.backward_compute_factor
        return Perf(compute, load.fwd_comm_s, compute * backward, load.bwd_comm_s)

    def option_cost(self, option: ShardingOption, tier: Tier) -> float:
        """Total seconds of all of an option's shards when they live on ``tier``."""
        return sum(self.perf(s, tier).total for s in option.shards)
