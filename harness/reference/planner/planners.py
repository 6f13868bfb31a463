"""The planner: enumerate options per table -> estimate their cost -> propose one per
table -> partition the shards over ranks and tiers -> balance -> a :class:`Plan`.

The first proposal takes each table's cheapest option in isolation, so a hot, large table
(dlrm_dcnv2's 40M-row table of 100 ids per sample) can sit whole on one rank and set the
step time. Balancing is a loop around propose -> partition, as Neo's and torchrec's planners
split such tables until the ranks balance. While the plan's max/mean rank cost is above
``PlannerConfig.imbalance_target``:

1. the :class:`~proposers.BalancingProposer` proposes switches of one table's option (one of
   the tables that load the slowest rank most goes column-wise at some width, row-wise,
   table-row-wise ...; best first), the partitioner places each whole proposal again, and the
   first that is faster is kept ("faster": rank costs, slowest first, lower at the first rank
   where they differ: a lower peak, or the same peak on fewer ranks);
2. when no switch is faster (every rank holds about one coarse shard, so any single table
   split finer lifts the ranks its pieces land on), the proposer splits all the coarsest
   shards finer at once, and that partition is kept even if it is not yet faster.

It stops when neither step has anything to offer, or after ``balance_max_steps`` partitions
(a count, not a time, so the same input gives the same plan), and returns the fastest plan it
saw. A plan already within the target is not touched.

When the cheapest options cannot be packed, it partitions the smallest (their shards and the
caches of cached tiers' shards), and splits a table finer while its shards or their caches
find no room. When the tables cannot fit, it raises one :class:`PlannerError` that names the
capacity that ran out (a table's shard, or the cache a shard on a cached tier needs in the
tier above), the shortfall, and possible solutions.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.hw_profiles.profiles import Profile, format_bytes
from harness.reference.planner.enumerators import ShardingOptionEnumerator
from harness.reference.planner.estimators import PlannerConfig, ShardEstimator, Topology
from harness.reference.planner.partitioners import GreedyLptPartitioner, Partition
from harness.reference.planner.proposers import BalancingProposer, CheapestFitProposer
from harness.reference.planner.types import (
    TIERS,
    Balancer,
    Enumerator,
    Partitioner,
    Plan,
    PlannerError,
    PlannerErrorType,
    Proposer,
    ShardingOption,
    TableSpec,
)

__all__ = ["CheapestFitProposer", "EmbeddingShardingPlanner", "plan_tables"]


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
        balancer: Balancer | None = None,
    ):
        self.profile = profile
        self.config = config or PlannerConfig()
        self.topology = Topology.from_profile(profile)
        self.estimator = ShardEstimator(self.topology, self.config)
        self.enumerator = enumerator or ShardingOptionEnumerator(self.estimator)
        self.proposer = proposer or CheapestFitProposer(self.estimator)
        self.partitioner = partitioner or GreedyLptPartitioner(self.estimator)
        self.balancer = balancer or BalancingProposer(self.estimator)

    def plan(self, tables: Sequence[TableSpec]) -> Plan:
        self._check(tables)
        options = [self.enumerator.enumerate(t) for t in tables]
        chosen, partition = self._partition(self._propose(tables, options), options)
        chosen, partition = self._balance(chosen, options, partition)
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

    def _partition(
        self, chosen: list[ShardingOption], options: list[list[ShardingOption]]
    ) -> tuple[list[ShardingOption], Partition]:
        """Partition the preferred options; when their shards cannot be packed, the smallest ones,
        and, while a table's shards (or their caches) find no room, that table's option split finer
        (each time to an option whose largest shard takes fewer bytes: deterministic, and finite)."""
        try:
            return chosen, self.partitioner.partition(chosen)
        except PlannerError as err:
            if err.planner_category is not PlannerErrorType.PARTITION:
                raise
        # every table has a smallest option: each has one that fits a rank (_propose chose one)
        smallest = self._smallest([o.table for o in chosen], options)
        index = {o.table.name: i for i, o in enumerate(chosen)}
        while True:  # ends: each pass makes one table's largest shard (with its cache) smaller, or raises
            try:
                return smallest, self.partitioner.partition(smallest)
            except PlannerError as err:
                packing_failed = err.planner_category is PlannerErrorType.PARTITION
                i = index.get(err.table) if packing_failed and err.table is not None else None
                finer = self.proposer.finer(options[i], smallest[i]) if i is not None else None
                if i is None or finer is None:
                    raise
                smallest[i] = finer

    def _balance(
        self, chosen: list[ShardingOption], options: list[list[ShardingOption]], partition: Partition
    ) -> tuple[list[ShardingOption], Partition]:
        """Switch one table's option at a time while that makes the partition faster; when none
        does, split the coarsest shards finer and go on (see the module). The fastest plan seen."""
        steps, limit = 0, self.config.balance_max_steps
        best = current = (chosen, partition)
        while current[1].imbalance > self.config.imbalance_target and steps < limit:
            tried, step = self._faster_switch(*current, options, limit - steps)
            steps += tried
            if step is None and steps < limit:
                steps += 1
                step = self._refined(*current, options)
            if step is None:
                break
            current = step
            if current[1].faster_than(best[1]):
                best = current
        return best

    def _faster_switch(
        self, chosen: list[ShardingOption], partition: Partition, options: list[list[ShardingOption]], budget: int
    ) -> tuple[int, tuple[list[ShardingOption], Partition] | None]:
        """The partitions tried, and the first of the balancer's switches whose partition is
        faster (None if none is within ``budget`` partitions)."""
        tried = 0
        for switch in self.balancer.switches(chosen, options, partition):
            if tried == budget:
                break
            tried += 1
            trial = [switch.option if i == switch.index else o for i, o in enumerate(chosen)]
            candidate = self._try(trial)
            if candidate is not None and candidate.faster_than(partition):
                return tried, (trial, candidate)
        return tried, None

    def _refined(
        self, chosen: list[ShardingOption], partition: Partition, options: list[list[ShardingOption]]
    ) -> tuple[list[ShardingOption], Partition] | None:
        """The balancer's proposal with the coarsest shards split finer, partitioned, faster or
        not (the switches that follow can use its finer shards); None when there is none."""
        refined = self.balancer.refinement(chosen, options, partition)
        finer = self._try(refined) if refined is not None else None
        return (refined, finer) if refined is not None and finer is not None else None

    def _try(self, chosen: list[ShardingOption]) -> Partition | None:
        """The partition of ``chosen``, or None when its shards cannot be packed."""
        try:
            return self.partitioner.partition(chosen)
        except PlannerError as err:
            if err.planner_category is not PlannerErrorType.PARTITION:
                raise
            return None

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
        self._check_knobs()
        if not (0 <= self.config.ssd_cache_fraction <= 1 and 0 <= self.config.ddr_cache_fraction <= 1):
            raise PlannerError(f"cache fractions must be in [0, 1], not {self.config.ssd_cache_fraction} (SSD) and "
                               f"{self.config.ddr_cache_fraction} (DDR)",
                               PlannerErrorType.BAD_INPUT)
        if self.topology.capacity.total == 0:
            raise self._insufficient(sum(self.estimator.table_bytes(t) for t in tables), f"the {len(tables)} tables",
                                     tables)

    def _check_knobs(self) -> None:
        c = self.config
        wrong = [
            *([f"the imbalance target must be >= 1, not {c.imbalance_target}"] if c.imbalance_target < 1 else []),
            *([f"balance_max_steps must be >= 0, not {c.balance_max_steps}"] if c.balance_max_steps < 0 else []),
            *([f"column_block must be >= 1, not {c.column_block}"] if c.column_block < 1 else []),
            *([f"column_min_cols must be >= 1, not {c.column_min_cols}"] if c.column_min_cols < 1 else []),
        ]
        if wrong:
            raise PlannerError("; ".join(wrong), PlannerErrorType.BAD_INPUT)

    def _propose(self, tables: Sequence[TableSpec], options: list[list[ShardingOption]]) -> list[ShardingOption]:
        for table, opts in zip(tables, options):
            if not opts:
                allowed = ", ".join(t.value for t in self.config.allowed_types(table.name) or ())
                raise PlannerError(
                    f"table {table.name!r} ({table.rows} x {table.dim}) can take none of the sharding types allowed for "
                    f"it ({allowed}) on this profile; possible solutions: allow another type, or (column-wise) a "
                    f"column_block below {table.dim}, or (row-wise) more rows than ranks", PlannerErrorType.BAD_INPUT)
        need = sum(min(o.storage_bytes for o in opts) for opts in options)
        if need > self._capacity_bytes():
            raise self._insufficient(need, f"the {len(tables)} tables", tables)
        chosen = [self.proposer.propose(t, o) for t, o in zip(tables, options)]
        proposed = [c for c in chosen if c is not None]
        if len(proposed) < len(chosen) or sum(c.storage_bytes for c in proposed) > self._capacity_bytes():
            return self._smallest(tables, options)
        return proposed

    def _smallest(self, tables: Sequence[TableSpec], options: list[list[ShardingOption]]) -> list[ShardingOption]:
        """Each table's option of the fewest bytes; when some table has none that fits one rank, the
        error of the largest such table."""
        smallest = [self.proposer.smallest(o) for o in options]
        missing = [(t, o) for t, o, c in zip(tables, options, smallest) if c is None]
        if missing:
            table, opts = max(missing, key=lambda m: self.estimator.table_bytes(m[0]))
            raise self._no_rank_fits(table, opts)
        return [c for c in smallest if c is not None]  # all of them: none is missing

    def _no_rank_fits(self, table: TableSpec, options: list[ShardingOption]) -> PlannerError:
        """One line on why no option of ``table`` fits one rank: the cache of its shards (when a
        shard fits a cached tier but its cache does not fit the tier above), else the shard."""
        cache = self._cache_too_large(options)
        if cache is not None:
            return cache
        shard_bytes = min(o.max_shard_bytes for o in options)
        cap = self.topology.capacity
        tier = max(TIERS, key=cap.get)
        return PlannerError(
            f"insufficient storage: table {table.name!r} needs a shard of at least {format_bytes(shard_bytes)} "
            f"however it is split, but the largest tier of one rank of profile {self.profile.name!r} is "
            f"{tier.value.upper()} {format_bytes(cap.get(tier))}, short by {format_bytes(shard_bytes - cap.get(tier))}. "
            "Possible solutions: a profile with more nodes (row-wise shards get smaller) or more memory per node; "
            + ("a lower table precision (int8 rows); " if self.config.inference else
               "a lower-precision optimizer state (row-wise Adagrad, or fp16 state); ") + "an SSD tier.",
            PlannerErrorType.INSUFFICIENT_STORAGE,
        )

    def _cache_too_large(self, options: list[ShardingOption]) -> PlannerError | None:
        """The error naming the smallest overflow of a cache, over the options' largest shards on
        the cached tiers they fit one rank of (None: no shard fits a cached tier)."""
        est, cap = self.estimator, self.topology.capacity
        short = []
        for option in options:
            load = max(option.shards, key=lambda s: s.storage_bytes)
            for tier in TIERS:
                fast = est.cache_tier(load, tier)
                if fast is not None and load.storage_bytes <= cap.get(tier):
                    short.append((est.cache_bytes(load, tier) - cap.get(fast), option, load, tier, fast))
        if not short:
            return None
        _, option, load, tier, fast = min(short, key=lambda s: s[0])
        nbytes, have = est.cache_bytes(load, tier), cap.get(fast)
        slow, up = tier.value.upper(), fast.value.upper()
        return PlannerError(
            f"insufficient storage: table {option.table.name!r} fits no rank of profile {self.profile.name!r} however "
            f"it is split: its shard of {format_bytes(load.storage_bytes)} ({option.sharding_type.value}) fits the "
            f"{slow}, but its cache ({self.config.cache_fraction(tier):g} of its rows, and at least those one step looks up) "
            f"needs {format_bytes(nbytes)} of {up}, and one rank has {format_bytes(have)} of {up}, short by "
            f"{format_bytes(nbytes - have)}. Possible solutions: a lower cache fraction (--cache-fraction); "
            f"a profile with more {up} per rank, or more nodes (row-wise shards and their caches get smaller).",
            PlannerErrorType.INSUFFICIENT_STORAGE,
        )

    def _capacity_bytes(self) -> int:
        return self.topology.capacity.total * self.topology.world_size

    def _insufficient(self, need: int, what: str, tables: Sequence[TableSpec]) -> PlannerError:
        topo, cap = self.topology, self.topology.capacity
        have = self._capacity_bytes()
        tiers = ", ".join(
            f"{t.value.upper()} {format_bytes(cap.get(t) * topo.world_size)}" for t in TIERS
        )
        return PlannerError(
            f"insufficient storage: {what} need {format_bytes(need)} "
            f"({'weights' if self.config.inference else 'weights and optimizer state'}) "
            f"but profile {self.profile.name!r} has {format_bytes(have)} over {topo.world_size} rank(s) "
            f"({tiers}): HBM, DDR and SSD all ran out, short by {format_bytes(max(need - have, 0))}. "
            f"Possible solutions: {'; '.join(self._solutions(need, tables))}.",
            PlannerErrorType.INSUFFICIENT_STORAGE,
        )

    def _solutions(self, need: int, tables: Sequence[TableSpec]) -> list[str]:
        """torchrec's "possible solutions", with what each would need on this profile."""
        topo, c = self.topology, self.config
        node_bytes = topo.capacity.total * topo.ranks_per_node
        nodes = -(-need // node_bytes) if node_bytes else 0
        more = f" (at least {nodes} of these nodes hold {format_bytes(need)})" if nodes else ""
        solutions = [f"a profile with more nodes{more} or more memory per node (e.g. zionex-16x8gpu)"]
        if not topo.capacity.ssd:
            solutions.append("an SSD tier in the profile")
        weights = sum(t.rows * t.dim for t in tables) * c.param_bytes_per_element
        if c.param_bytes_per_element > 2:
            half = need - weights // c.param_bytes_per_element * (c.param_bytes_per_element - 2)
            solutions.append(f"bf16 or fp16 embedding tables (harness run --precision bf16): {format_bytes(half)}")
        if c.inference:  # served tables hold weights alone
            solutions.append("a lower table precision (int8 rows halve fp16 ones)")
        elif any(t.optimizer_state_factor * t.dim > 1 + 1e-9 for t in tables):
            solutions.append("a smaller optimizer state (row-wise Adagrad keeps one value a row, or fp16 state)")
        else:
            solutions.append("the optimizer state is row-wise already (one value a row): fp16 state at most halves it")
        solutions.append("fewer rows per table (hashing to a smaller id space)")
        return solutions


def plan_tables(tables: Sequence[TableSpec], profile: Profile, config: PlannerConfig | None = None) -> Plan:
    """Plan ``tables`` on ``profile``: the one-call entry point."""
    return EmbeddingShardingPlanner(profile, config).plan(tables)
