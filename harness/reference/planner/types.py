"""Value types of the sharding planner: tables, options, shards, storage, cost and plans.

Values are frozen dataclasses with arithmetic (``Storage + Storage``, ``Storage.fits_in``,
``Perf + Perf``, ``Perf.total``), so the planning stages read like algebra.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.tiers import TIERS, Tier  # re-exported: the planner's tiers are the profiles'
from harness.rules.fingerprint import fingerprint as content_fingerprint


class ShardingType(enum.Enum):
    """How one embedding table is split over ranks (torchrec's names)."""

    DATA_PARALLEL = "data_parallel"  # a full replica on every rank, gradients all-reduced
    TABLE_WISE = "table_wise"  # the whole table on one rank
    ROW_WISE = "row_wise"  # rows split evenly over every rank (or a grid: row ranges by column blocks, anywhere)
    COLUMN_WISE = "column_wise"  # columns split into shards placed anywhere
    TABLE_ROW_WISE = "table_row_wise"  # rows split over the ranks of one node
    TABLE_COLUMN_WISE = "table_column_wise"  # columns split over ranks of one node


class Placement(enum.Enum):
    """Where an option's shards may go: each anywhere, one per rank of the world, or one node."""

    ANY = "any"
    WORLD = "world"
    NODE = "node"


PLACEMENT: dict[ShardingType, Placement] = {
    ShardingType.DATA_PARALLEL: Placement.WORLD,
    ShardingType.TABLE_WISE: Placement.ANY,
    ShardingType.ROW_WISE: Placement.WORLD,
    ShardingType.COLUMN_WISE: Placement.ANY,
    ShardingType.TABLE_ROW_WISE: Placement.NODE,
    ShardingType.TABLE_COLUMN_WISE: Placement.NODE,
}


_BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


class CommPrecision(enum.Enum):
    """Element precision of the embedding all-to-all / reduce-scatter on the wire."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"

    @property
    def bytes_per_element(self) -> int:
        return _BYTES_PER_ELEMENT[self._value_]  # asked per shard and step: no dict built, no enum descriptor


class CachePolicy(enum.Enum):
    """Which row a software-managed cache evicts (:mod:`harness.reference.tiered.cache`): the one
    used longest ago, or the one looked up the fewest times. Here, torch-free, because the planner
    counts an LFU cache's use counts in its bytes and the run set names the policy."""

    LRU = "lru"
    LFU = "lfu"


class RowReader(enum.Enum):
    """What moves the SSD tier's rows (:mod:`harness.reference.tiered.rowio`): the compiled io_uring
    reader where it loads and the kernel allows it (``auto``), or Python threads calling
    ``pread``/``pwrite`` (``threads``). Here, torch-free, because a run's config names it."""

    AUTO = "auto"
    THREADS = "threads"


class PlannerErrorType(enum.Enum):
    """Why the planner found no plan."""

    INSUFFICIENT_STORAGE = "insufficient_storage"  # the tables do not fit the profile's tiers
    PARTITION = "partition"  # they fit in total, but the shards could not be packed
    BAD_INPUT = "bad_input"  # an empty model, a non-positive size


class PlannerError(HarnessError):
    """The one error of the planner; ``planner_category`` says why, the message how to fix it;
    ``table``: the table whose shards found no room, when a partition failed on one."""

    def __init__(self, message: str, planner_category: PlannerErrorType, table: str | None = None):
        category = ErrorCategory.BAD_INPUT if planner_category is PlannerErrorType.BAD_INPUT else ErrorCategory.HARDWARE
        super().__init__(message, category)
        self.planner_category = planner_category
        self.table = table


@dataclass(frozen=True)
class TableSpec:
    """One embedding table: ``rows x dim`` weights, ``pooling`` ids per sample.

    ``optimizer_state_factor`` is optimizer-state elements per weight element
    (SGD 0, row-wise Adagrad ``1/dim``, Adagrad 1, Adam 2). ``sequence``: a sequence table
    (TorchRec's ``EmbeddingCollection``: one vector per id, an HSTU ranker's per-event tables),
    whose ``pooling`` ids of a sample are not summed, so each returns a vector; otherwise a
    pooled table (``EmbeddingBagCollection``: one vector per sample).
    """

    name: str
    rows: int
    dim: int
    pooling: float = 1.0
    optimizer_state_factor: float = 0.0
    sequence: bool = False

    def __post_init__(self) -> None:
        if self.rows < 1 or self.dim < 1 or self.pooling < 0 or self.optimizer_state_factor < 0:
            raise PlannerError(
                f"table {self.name!r}: rows and dim must be >= 1, pooling and optimizer_state_factor >= 0",
                PlannerErrorType.BAD_INPUT,
            )

    @property
    def parameters(self) -> int:
        return self.rows * self.dim


@dataclass(frozen=True)
class Storage:
    """Bytes per tier."""

    hbm: int = 0
    ddr: int = 0
    ssd: int = 0

    @classmethod
    def of(cls, tier: Tier, nbytes: int) -> Storage:
        return cls(**{tier.value: nbytes})

    def __add__(self, other: Storage) -> Storage:
        return Storage(self.hbm + other.hbm, self.ddr + other.ddr, self.ssd + other.ssd)

    def __sub__(self, other: Storage) -> Storage:
        return Storage(self.hbm - other.hbm, self.ddr - other.ddr, self.ssd - other.ssd)

    def fits_in(self, capacity: Storage) -> bool:
        return self.hbm <= capacity.hbm and self.ddr <= capacity.ddr and self.ssd <= capacity.ssd

    def get(self, tier: Tier) -> int:
        return getattr(self, tier.value)

    @property
    def total(self) -> int:
        return self.hbm + self.ddr + self.ssd

    def __mul__(self, n: int) -> Storage:
        return Storage(self.hbm * n, self.ddr * n, self.ssd * n)

    def by_tier(self) -> dict[Tier, int]:
        return {t: self.get(t) for t in TIERS}

    def to_dict(self) -> dict[str, int]:
        return {t.value: n for t, n in self.by_tier().items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Storage:
        """The inverse of :meth:`to_dict` (a tier it does not name holds nothing)."""
        return cls(**{t.value: data.get(t.value, 0) for t in TIERS})


@dataclass(frozen=True)
class Perf:
    """Seconds per training step spent by one rank on its share of the embeddings."""

    fwd_compute: float = 0.0
    fwd_comm: float = 0.0
    bwd_compute: float = 0.0
    bwd_comm: float = 0.0

    def __add__(self, other: Perf) -> Perf:
        return Perf(
            self.fwd_compute + other.fwd_compute,
            self.fwd_comm + other.fwd_comm,
            self.bwd_compute + other.bwd_compute,
            self.bwd_comm + other.bwd_comm,
        )

    @property
    def total(self) -> float:
        return self.fwd_compute + self.fwd_comm + self.bwd_compute + self.bwd_comm

    def to_dict(self) -> dict[str, float]:
        return {
            "fwd_compute_s": self.fwd_compute,
            "fwd_comm_s": self.fwd_comm,
            "bwd_compute_s": self.bwd_compute,
            "bwd_comm_s": self.bwd_comm,
            "total_s": self.total,
        }


@dataclass(frozen=True)
class ShardLoad:
    """One shard of an option before placement: its extent, its bytes and its traffic per step."""

    row_offset: int
    rows: int
    col_offset: int
    cols: int
    storage_bytes: int
    lookup_bytes: float  # forward bytes read from the shard's tier
    fwd_comm_s: float
    bwd_comm_s: float
    ids_per_step: float = 0.0  # ids looked up in the shard per step (at most this many distinct rows)
    replica: bool = False  # a data-parallel replica: resident in its tier, never behind a cache


@dataclass(frozen=True)
class ShardingOption:
    """One way to shard one table; its shards are placed by the partitioner."""

    table: TableSpec
    sharding_type: ShardingType
    shards: tuple[ShardLoad, ...]
    grid: bool = False  # a row-wise split whose row ranges are split by columns too: placed anywhere

    @property
    def placement(self) -> Placement:
        return Placement.ANY if self.grid else PLACEMENT[self.sharding_type]

    @property
    def storage_bytes(self) -> int:
        return sum(s.storage_bytes for s in self.shards)

    @property
    def max_shard_bytes(self) -> int:
        return max(s.storage_bytes for s in self.shards)


@dataclass(frozen=True)
class Shard:
    """A placed shard: rows ``[row_offset, row_offset + rows)`` and columns likewise, on one rank and tier."""

    table: str
    rank: int
    tier: Tier
    row_offset: int
    rows: int
    col_offset: int
    cols: int
    storage_bytes: int
    perf: Perf

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "tier": self.tier.value,
            "row_offset": self.row_offset,
            "rows": self.rows,
            "col_offset": self.col_offset,
            "cols": self.cols,
            "storage_bytes": self.storage_bytes,
            "cost_s": self.perf.total,
        }


@dataclass(frozen=True)
class TierSummary:
    """Where a plan's tables live: how many wholly in each tier and how many split over several,
    and the bytes used and available per tier over all ranks (:meth:`Plan.tier_summary`)."""

    tables: int
    whole: dict[Tier, int]  # tables whose shards are all in one tier (tiers with none left out)
    split: int  # tables whose shards are in several tiers
    ranks: int
    used: Storage  # over all ranks
    capacity: Storage  # over all ranks


def imbalance(costs: list[float]) -> float:
    """Max over mean of per-rank costs: 1.0 is perfect balance (and so is no cost at all)."""
    mean = sum(costs) / len(costs)
    return max(costs) / mean if mean > 0 else 1.0


@dataclass(frozen=True)
class Plan:
    """Where every shard of every table lives, and what it costs per rank and per step."""

    profile: str
    world_size: int
    batch_size: int
    comm_precision: CommPrecision
    tables: tuple[TableSpec, ...]
    sharding_types: tuple[ShardingType, ...]  # one per table, same order
    shards: tuple[Shard, ...]
    rank_storage: tuple[Storage, ...]
    rank_perf: tuple[Perf, ...]
    rank_capacity: Storage
    config: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def rank_costs(self) -> list[float]:
        return [p.total for p in self.rank_perf]

    @property
    def imbalance(self) -> float:
        """Max over mean rank cost: 1.0 is perfect balance."""
        return imbalance(self.rank_costs)

    @property
    def step_time_s(self) -> float:
        """Projected embedding time per step: the slowest rank."""
        return max(self.rank_costs)

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.step_time_s if self.step_time_s > 0 else float("inf")

    @property
    def total_storage(self) -> Storage:
        total = Storage()
        for s in self.rank_storage:
            total = total + s
        return total

    def table_shards(self) -> list[tuple[Shard, ...]]:
        """Each table's shards, in the tables' order (and, within a table, the plan's)."""
        by_table: dict[str, list[Shard]] = {t.name: [] for t in self.tables}
        for shard in self.shards:
            by_table[shard.table].append(shard)
        return [tuple(by_table[t.name]) for t in self.tables]

    def table_tiers(self) -> list[tuple[Tier, ...]]:
        """The tiers of each table's shards, fastest first, in the tables' order (several when
        its shards are split across tiers)."""
        return [tuple(t for t in TIERS if any(s.tier is t for s in shards)) for shards in self.table_shards()]

    def sharding_type_counts(self) -> dict[ShardingType, int]:
        """How many tables of each sharding type (in the order they first appear)."""
        counts: dict[ShardingType, int] = {}
        for st in self.sharding_types:
            counts[st] = counts.get(st, 0) + 1
        return counts

    def tier_summary(self) -> TierSummary:
        """How the plan's tables are spread over the tiers, and the bytes per tier it uses over all ranks."""
        tiers = self.table_tiers()
        whole = {t: n for t in TIERS if (n := tiers.count((t,)))}
        ranks = len(self.rank_storage)
        return TierSummary(tables=len(tiers), whole=whole, split=sum(len(t) > 1 for t in tiers), ranks=ranks,
                           used=self.total_storage, capacity=self.rank_capacity * ranks)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (validates against ``sharding_plan.schema.json``), with its fingerprint."""
        body = self._body()
        return {**body, "fingerprint": content_fingerprint(body)}

    @property
    def fingerprint(self) -> str:
        return content_fingerprint(self._body())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """The plan of :meth:`to_dict`'s JSON (read where it crosses a process boundary):
        ``Plan.from_dict(plan.to_dict()).to_dict() == plan.to_dict()``. The derived figures
        (``summary``, ``fingerprint``) are computed again, not read; a shard keeps its total cost
        (``cost_s``, all the JSON has of its breakdown). A hand-written plan may leave out what
        only describes it (profile, batch size, precision, config, capacities, per-rank figures,
        a shard's bytes and cost, a table's pooling); a shard without a tier is in HBM. A plan
        that is not one is refused in one line (BAD_INPUT)."""
        return _plan_from_dict(data)

    def _body(self) -> dict[str, Any]:
        by_table: dict[str, list[dict[str, Any]]] = {t.name: [] for t in self.tables}
        for shard in self.shards:
            by_table[shard.table].append(shard.to_dict())
        samples = self.samples_per_s
        return {
            "profile": self.profile,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "comm_precision": self.comm_precision.value,
            "config": dict(self.config),
            "rank_capacity_bytes": self.rank_capacity.to_dict(),
            "tables": [
                {
                    "name": t.name,
                    "rows": t.rows,
                    "dim": t.dim,
                    "pooling": t.pooling,
                    "optimizer_state_factor": t.optimizer_state_factor,
                    **({"sequence": True} if t.sequence else {}),
                    "sharding_type": st.value,
                    "shards": by_table[t.name],
                }
                for t, st in zip(self.tables, self.sharding_types)
            ],
            "ranks": [
                {"rank": r, "storage_bytes": s.to_dict(), "perf": p.to_dict()}
                for r, (s, p) in enumerate(zip(self.rank_storage, self.rank_perf))
            ],
            "summary": {
                "storage_bytes": self.total_storage.to_dict(),
                "imbalance": self.imbalance,
                "step_time_s": self.step_time_s,
                "samples_per_s": samples if samples != float("inf") else None,
            },
        }


def _bad_plan(message: str) -> HarnessError:
    return HarnessError(message, ErrorCategory.BAD_INPUT)


def _plan_from_dict(data: dict[str, Any]) -> Plan:
    if not isinstance(data, dict):
        raise _bad_plan(f"the sharding plan must be a JSON object, not {type(data).__name__}")
    tables_in = data.get("tables")
    if not isinstance(tables_in, list):
        raise _bad_plan("the sharding plan has no tables")
    if "world_size" not in data:
        raise _bad_plan("the sharding plan has no world_size")
    world_size = data["world_size"]
    tables: list[TableSpec] = []
    types: list[ShardingType] = []
    shards: list[Shard] = []
    for t, entry in enumerate(tables_in):
        name = entry.get("name", t)
        try:
            st = ShardingType(entry["sharding_type"])
        except (KeyError, ValueError):
            raise _bad_plan(f"plan table {name}: unknown sharding type {entry.get('sharding_type')!r}") from None
        try:
            table = TableSpec(str(name), int(entry["rows"]), int(entry["dim"]), entry.get("pooling", 1.0),
                              entry.get("optimizer_state_factor", 0.0), bool(entry.get("sequence", False)))
        except (KeyError, TypeError, ValueError, PlannerError) as err:
            raise _bad_plan(f"plan table {name}: rows and dim must be given as positive integers ({err})") from None
        if any(table.name == other.name for other in tables):
            raise _bad_plan(f"plan table {name}: two tables have that name")
        for s in entry.get("shards", []):
            try:
                shards.append(Shard(table.name, int(s["rank"]), Tier(s.get("tier", Tier.HBM.value)),
                                    int(s["row_offset"]), int(s["rows"]), int(s["col_offset"]), int(s["cols"]),
                                    s.get("storage_bytes", 0), Perf(fwd_compute=s.get("cost_s", 0.0))))
            except (KeyError, TypeError, ValueError) as err:
                raise _bad_plan(f"plan table {name}: a shard needs rank, row_offset, rows, col_offset, cols "
                                f"and a tier of {', '.join(t.value for t in TIERS)} ({err!r})") from None
        tables.append(table)
        types.append(st)
    ranks = data.get("ranks") or [{}] * (world_size if isinstance(world_size, int) else 0)
    try:
        precision = CommPrecision(data.get("comm_precision", CommPrecision.FP32.value))
    except ValueError:
        raise _bad_plan(f"the sharding plan has an unknown comm_precision {data.get('comm_precision')!r}") from None
    return Plan(
        profile=data.get("profile", ""),
        world_size=world_size,
        batch_size=data.get("batch_size", 0),
        comm_precision=precision,
        tables=tuple(tables),
        sharding_types=tuple(types),
        shards=tuple(shards),
        rank_storage=tuple(Storage.from_dict(r.get("storage_bytes", {})) for r in ranks),
        rank_perf=tuple(_perf_from_dict(r.get("perf", {})) for r in ranks),
        rank_capacity=Storage.from_dict(data.get("rank_capacity_bytes", {})),
        config=dict(data.get("config", {})),
    )


def _perf_from_dict(data: dict[str, float]) -> Perf:
    return Perf(data.get("fwd_compute_s", 0.0), data.get("fwd_comm_s", 0.0), data.get("bwd_compute_s", 0.0),
                data.get("bwd_comm_s", 0.0))


# -- the roles of the pipeline (one module each: enumerators, proposers, partitioners) -----------


class Enumerator(Protocol):
    """Every sharding option of one table."""

    def enumerate(self, table: TableSpec) -> list[ShardingOption]: ...


class Proposer(Protocol):
    """One option per table: the preferred one, or the smallest when storage is tight, or one
    whose largest shard is smaller than ``current``'s when its shards found no room."""

    def propose(self, table: TableSpec, options: list[ShardingOption]) -> ShardingOption | None: ...

    def smallest(self, options: list[ShardingOption]) -> ShardingOption | None: ...

    def finer(self, options: list[ShardingOption], current: ShardingOption) -> ShardingOption | None: ...


class Partitioner(Protocol):
    """Places the chosen options' shards on ranks and tiers (returns a ``partitioners.Partition``)."""

    def partition(self, options: list[ShardingOption]) -> Any: ...


class Balancer(Protocol):
    """Proposals after a partition (``proposers.BalancingProposer``): switches of one table's
    option (each with ``index`` and ``option``) that should relieve its slowest rank, best
    first; and, when none helps, the proposal with its coarsest shards split finer."""

    def switches(self, chosen: list[ShardingOption], options: list[list[ShardingOption]],
                 partition: Any) -> list[Any]: ...

    def refinement(self, chosen: list[ShardingOption], options: list[list[ShardingOption]],
                   partition: Any) -> list[ShardingOption] | None: ...
