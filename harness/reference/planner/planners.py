"""The planner: enumerate options per table -> estimate their cost -> propose one per
table -> partition the shards over ranks and tiers -> a :class:`Plan`.

When the tables cannot fit, it raises one :class:`PlannerError` that names the capacity
that ran out, the shortfall, and possible solutions.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.hw_profiles.profiles import Profile, format_bytes
from harness.reference.planner.enumerators import ShardingOptionEnumerator
from harness.reference.planner.estimators import PlannerConfig, ShardEstimator, Topology
from harness.reference.planner.partitioners import GreedyLptPartitioner, Partition
from harness.reference.planner.types import (
    TIERS,
    Enumerator,
    Partitioner,
    Plan,
    PlannerError,
    PlannerErrorType,
    Proposer,
    ShardingOption,
    ShardingType,
    TableSpec,
)

_SPLIT_TYPES = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)


class CheapestFitProposer:
    """Per table, the cheapest option whose shards can fit a rank; tables larger than
    ``large_table_bytes`` take row-wise or table-row-wise. Ties go to fewer shards."""

    def __init__(self, estimator: ShardEstimator):
        self.estimator = estimator
        topo, config = estimator.topology, estimator.config
        self.large_table_bytes = config.large_table_bytes or topo.capacity.hbm or max(topo.capacity.ddr // 4, 1)

    def fitting(self, options: list[ShardingOption]) -> list[ShardingOption]:
        largest_tier = max(self.estimator.topology.capacity.to_dict().values())
        return [o for o in options if o.max_shard_bytes <= largest_tier]

    def propose(self, table: TableSpec, options: list[ShardingOption]) -> ShardingOption | None:
        candidates = self.fitting(options)
        if self.estimator.table_bytes(table) > self.large_table_bytes:
            candidates = [o for o in candidates if o.sharding_type in _SPLIT_TYPES] or candidates
        if not candidates:
            return None
        costs = {id(o): self._nominal_cost(o) for o in candidates}
        cheapest = min(costs.values())
        near = [o for o in candidates if costs[id(o)] <= cheapest * (1 + 1e-6)]
        return min(near, key=lambda o: (len(o.shards), costs[id(o)]))

    def smallest(self, options: list[ShardingOption]) -> ShardingOption | None:
        """The option that stores the fewest bytes (used when the cheapest do not fit together)."""
        candidates = self.fitting(options)
        return min(candidates, key=lambda o: (o.storage_bytes, self._nominal_cost(o))) if candidates else None

    def _nominal_cost(self, option: ShardingOption) -> float:
        """Seconds of all shards on the fastest tier each could live on."""
        cap = self.estimator.topology.capacity
        tier = next((t for t in TIERS if option.max_shard_bytes <= cap.get(t)), TIERS[-1])
        return self.estimator.option_cost(option, tier)


class EmbeddingShardingPlanner:
    """Plans the embedding tables of a model on a hardware profile."""

    def __init__(
        self,
        profile: Profile,
        config: PlannerConfig | None = None,
        *,
        enumerator: Enumerator | None = None,
        proposer: Proposer | None = None,
        partitioner: Partitioner | None = None,
    ):
        self.profile = profile
        self.config = config or PlannerConfig()
        self.topology = Topology.from_profile(profile)
        self.estimator = ShardEstimator(self.topology, self.config)
        self.enumerator = enumerator or ShardingOptionEnumerator(self.estimator)
        self.proposer = proposer or CheapestFitProposer(self.estimator)
        self.partitioner = partitioner or GreedyLptPartitioner(self.estimator)

    def plan(self, tables: Sequence[TableSpec]) -> Plan:
        self._check(tables)
        options = [self.enumerator.enumerate(t) for t in tables]
        chosen = self._propose(tables, options)
        partition = self._partition(chosen, options)
        return Plan(
            profile=self.profile.name,
            world_size=self.topology.world_size,
            batch_size=self.config.batch_size,
            comm_precision=self.config.comm_precision,
            tables=tuple(tables),
            sharding_types=tuple(o.sharding_type for o in chosen),
            shards=partition.shards,
            rank_storage=partition.rank_storage,
            rank_perf=partition.rank_perf,
            rank_capacity=self.topology.capacity,
            config=self.config.to_dict(),
        )

    def _partition(self, chosen: list[ShardingOption], options: list[list[ShardingOption]]) -> Partition:
        """Partition the preferred options; when their shards cannot be packed, the smallest ones."""
        try:
            return self.partitioner.partition(chosen)
        except PlannerError as err:
            smallest = [self.proposer.smallest(o) for o in options]
            if err.planner_category is not PlannerErrorType.PARTITION or smallest == chosen:
                raise
            return self.partitioner.partition(smallest)  # type: ignore[arg-type]

    def _check(self, tables: Sequence[TableSpec]) -> None:
        if not tables:
            raise PlannerError("no embedding tables to plan", PlannerErrorType.BAD_INPUT)
        if self.config.batch_size < 1:
            raise PlannerError(f"batch size must be >= 1, not {self.config.batch_size}", PlannerErrorType.BAD_INPUT)
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise PlannerError("embedding table names must be unique", PlannerErrorType.BAD_INPUT)
        unknown = sorted({name for name, _ in self.config.tiers} - set(names))
        if unknown:
            raise PlannerError(f"tier settings name tables the model does not have: {', '.join(unknown)}",
                               PlannerErrorType.BAD_INPUT)
        if not 0 <= self.config.ssd_cache_fraction <= 1:
            raise PlannerError(f"the SSD cache fraction must be in [0, 1], not {self.config.ssd_cache_fraction}",
                               PlannerErrorType.BAD_INPUT)
        if self.topology.capacity.total == 0:
            raise self._insufficient(sum(self.estimator.table_bytes(t) for t in tables), f"the {len(tables)} tables")

    def _propose(self, tables: Sequence[TableSpec], options: list[list[ShardingOption]]) -> list[ShardingOption]:
        need = sum(min(o.storage_bytes for o in opts) for opts in options)
        if need > self._capacity_bytes():
            raise self._insufficient(need, f"the {len(tables)} tables")
        chosen = [self.proposer.propose(t, o) for t, o in zip(tables, options)]
        if any(c is None for c in chosen) or sum(c.storage_bytes for c in chosen) > self._capacity_bytes():  # type: ignore[union-attr]
            chosen = [self.proposer.smallest(o) for o in options]
        missing = [(t, o) for t, o, c in zip(tables, options, chosen) if c is None]
        if missing:
            table, opts = max(missing, key=lambda m: self.estimator.table_bytes(m[0]))
            raise self._no_rank_fits(table, min(o.max_shard_bytes for o in opts))
        return chosen  # type: ignore[return-value]

    def _no_rank_fits(self, table: TableSpec, shard_bytes: int) -> PlannerError:
        cap = self.topology.capacity
        tier = max(TIERS, key=cap.get)
        return PlannerError(
            f"insufficient storage: table {table.name!r} needs a shard of at least {format_bytes(shard_bytes)} "
            f"however it is split, but the largest tier of one rank of profile {self.profile.name!r} is "
            f"{tier.value.upper()} {format_bytes(cap.get(tier))}, short by {format_bytes(shard_bytes - cap.get(tier))}. "
            "Possible solutions: a profile with more nodes (row-wise shards get smaller) or more memory per node; "
            "a lower-precision optimizer state (row-wise Adagrad, or fp16 state); an SSD tier.",
            PlannerErrorType.INSUFFICIENT_STORAGE,
        )

    def _capacity_bytes(self) -> int:
        return self.topology.capacity.total * self.topology.world_size

    def _insufficient(self, need: int, what: str) -> PlannerError:
        topo, cap = self.topology, self.topology.capacity
        have = self._capacity_bytes()
        tiers = ", ".join(
            f"{t.value.upper()} {format_bytes(cap.get(t) * topo.world_size)}" for t in TIERS
        )
        ssd_hint = "" if cap.ssd else " or add an SSD tier to the profile;"
        return PlannerError(
            f"insufficient storage: {what} need {format_bytes(need)} (weights and optimizer state) "
            f"but profile {self.profile.name!r} has {format_bytes(have)} over {topo.world_size} rank(s) "
            f"({tiers}): HBM, DDR and SSD all ran out, short by {format_bytes(max(need - have, 0))}. "
            "Possible solutions: a profile with more nodes or more memory per node (e.g. zionex-16x8gpu);"
            f"{ssd_hint} a lower-precision optimizer state (row-wise Adagrad, or fp16 state); "
            "fewer rows per table (hashing to a smaller id space).",
            PlannerErrorType.INSUFFICIENT_STORAGE,
        )


def plan_tables(tables: Sequence[TableSpec], profile: Profile, config: PlannerConfig | None = None) -> Plan:
    """Plan ``tables`` on ``profile``: the one-call entry point."""
    return EmbeddingShardingPlanner(profile, config).plan(tables)
