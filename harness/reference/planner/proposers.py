"""Proposers: which sharding option each table takes.

Two roles, as torchrec's proposers (a first proposal, then more from the feedback of each
partition):

- :class:`CheapestFitProposer` gives the first proposal: per table, the cheapest option in
  isolation (or, when storage is tight, the smallest, counting the caches of shards on cached
  tiers); for a sequence table, of the options within 1% of the cheapest, a row split when its
  costliest shard costs less. An option is one only if its largest shard, and its cache when
  the tier is cached, fits one rank (a table whole on the SSD whose cache is larger than a
  rank's HBM is not).
- :class:`BalancingProposer` reads a partition and proposes switches of one table's option:
  it takes the most loaded rank, the tables that load it most (by seconds, so by pooling as
  well as by size), and, per table, the options that would take that rank below its cost
  without lifting another rank to it. Each switch is priced without partitioning: the table's
  shards leave their ranks and the new ones go where the partitioner would put them (the
  least loaded rank, or every rank, or the least loaded ranks of one node). The switch with
  the lowest projected peak comes first (the fewest shards among those within 1% of it): by
  the peak, not by max/mean, which a table spread thin meets by lifting the mean. The planner
  (``planners.py``) partitions each proposal and keeps it only if it is faster. When none is,
  :meth:`BalancingProposer.refinement` splits the coarsest shards of the plan finer at once.

Every cost here is the estimator's seconds, which count a table's ids per sample (pooling):
two tables of equal rows whose pooling differs are priced, switched and split differently.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass

from harness.reference.planner.estimators import ShardEstimator
from harness.reference.planner.partitioners import Partition
from harness.reference.planner.types import (
    TIERS,
    Placement,
    Shard,
    ShardingOption,
    ShardingType,
    TableSpec,
    Tier,
)

_SPLIT_TYPES = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)
_SAME = 1e-9  # relative: costs closer than this are equal
_NEAR = 0.01  # relative: projected peaks this close are worth the same; fewer shards win


class CheapestFitProposer:
    """Per table, the cheapest option whose shards can fit a rank, each priced on the fastest
    tier one rank has room for it in (so by its pooling as well as its size: a table too
    large for one HBM is split only where that is cheaper than reading it from DDR). Ties go to
    fewer shards. With ``PlannerConfig.large_table_bytes`` set, tables larger than that are
    proposed row-wise or table-row-wise whatever they cost (balancing may still switch them)."""

    def __init__(self, estimator: ShardEstimator):
        self.estimator = estimator
        self.large_table_bytes = estimator.config.large_table_bytes

    def fitting(self, options: list[ShardingOption]) -> list[ShardingOption]:
        return [o for o in options if self.estimator.option_tiers(o)]

    def propose(self, table: TableSpec, options: list[ShardingOption]) -> ShardingOption | None:
        candidates = self.fitting(options)
        if self.large_table_bytes is not None and self.estimator.table_bytes(table) > self.large_table_bytes:
            candidates = [o for o in candidates if o.sharding_type in _SPLIT_TYPES] or candidates
        if not candidates:
            return None
        costs = {id(o): self.nominal_cost(o) for o in candidates}
        cheapest = min(costs.values())
        near = [o for o in candidates if costs[id(o)] <= cheapest * (1 + 1e-6)]
        chosen = min(near, key=lambda o: (len(o.shards), costs[id(o)]))
        if table.sequence:
            # nothing is summed: a row split sends what the whole table does, only spread evenly (each
            # shard receives the lengths too): within 1% of the cheapest, it is taken if more even
            rows = [o for o in candidates if o.sharding_type in _SPLIT_TYPES and costs[id(o)] <= cheapest * (1 + _NEAR)]
            chosen = min([chosen, *rows], key=lambda o: (self.largest_shard_cost(o), costs[id(o)]))
        return chosen

    def smallest(self, options: list[ShardingOption]) -> ShardingOption | None:
        """The option that takes the fewest bytes (used when the cheapest do not fit together):
        its shards and, on the slowest tier it fits, their caches (a column split caches every
        row once per shard, a row split each row once)."""
        return self._least_bytes(self.fitting(options))

    def _least_bytes(self, candidates: list[ShardingOption]) -> ShardingOption | None:
        """The candidate of the smallest footprint, the cheapest of those (priced only on a tie)."""
        if not candidates:
            return None
        sizes = {id(o): self.footprint(o) for o in candidates}
        least = min(sizes.values())
        return min((o for o in candidates if sizes[id(o)] == least), key=self.nominal_cost)

    def finer(self, options: list[ShardingOption], current: ShardingOption) -> ShardingOption | None:
        """Of the options whose largest shard takes fewer bytes with its cache than ``current``'s,
        the one that takes the fewest in all (then the cheapest); None: none is finer."""
        largest = self.largest_footprint(current)
        return self._least_bytes([o for o in self.fitting(options) if self.largest_footprint(o) < largest])

    def largest_footprint(self, option: ShardingOption) -> int:
        """Bytes of the option's largest shard and its cache on the slowest tier it fits one rank of."""
        tier = self.estimator.option_tiers(option)[-1]
        return max(s.storage_bytes + self.estimator.cache_bytes(s, tier) for s in option.shards)

    def footprint(self, option: ShardingOption) -> int:
        """Bytes of the option's shards and of their caches on the slowest tier it fits one rank of."""
        tier = self.estimator.option_tiers(option)[-1]
        caches: dict[tuple[int, int], int] = {}  # shards of one size (an option's shards share their ids) alike
        for s in option.shards:
            if (s.rows, s.storage_bytes) not in caches:
                caches[s.rows, s.storage_bytes] = self.estimator.cache_bytes(s, tier)
        return option.storage_bytes + sum(caches[s.rows, s.storage_bytes] for s in option.shards)

    def largest_shard_cost(self, option: ShardingOption) -> float:
        """Seconds of the option's costliest shard on the fastest tier it could live on."""
        tier = self._nominal_tier(option)
        return max(self.estimator.perf(s, tier).total for s in option.shards)

    def _nominal_tier(self, option: ShardingOption) -> Tier:
        return next(iter(self.estimator.option_tiers(option)), TIERS[-1])

    def nominal_cost(self, option: ShardingOption) -> float:
        """Seconds of all shards on the fastest tier each could live on."""
        return self.estimator.option_cost(option, self._nominal_tier(option))


@dataclass(frozen=True)
class Switch:
    """Table ``index`` to take ``option``, with the slowest rank cost projected after the switch."""

    index: int
    option: ShardingOption
    peak_s: float  # the projected slowest rank


def _best_first(switches: list[Switch]) -> list[Switch]:
    """Those within 1% of the lowest projected peak, fewest shards first; then the rest, lowest
    peak first. By the peak alone, not by max/mean: a switch that spreads a table thin lifts the
    mean as much as it lowers the peak, so it would pass the imbalance target while a coarser
    one is faster."""
    if not switches:
        return []
    lowest = min(s.peak_s for s in switches)

    def preference(s: Switch) -> tuple[int, float, float]:
        shards = len(s.option.shards)
        return (0, shards, s.peak_s) if s.peak_s <= lowest * (1 + _NEAR) else (1, s.peak_s, shards)

    return sorted(switches, key=preference)


class BalancingProposer:
    """Switches of one table's option that relieve the most loaded rank of a partition."""

    def __init__(self, estimator: ShardEstimator, *, tables_per_step: int = 4):
        self.estimator = estimator
        self.tables_per_step = tables_per_step  # the tables of the slowest rank considered, most loading first

    def switches(
        self, chosen: list[ShardingOption], options: list[list[ShardingOption]], partition: Partition
    ) -> list[Switch]:
        """The switches worth a partition, best first (an empty list: balancing is done)."""
        loads = partition.rank_costs
        peak_rank = max(range(len(loads)), key=lambda r: (loads[r], -r))
        peak = loads[peak_rank]
        by_table: dict[str, list[Shard]] = defaultdict(list)
        for shard in partition.shards:
            by_table[shard.table].append(shard)
        index = {o.table.name: i for i, o in enumerate(chosen)}
        on_peak: dict[str, float] = defaultdict(float)
        for shard in partition.shards:
            if shard.rank == peak_rank:
                on_peak[shard.table] += shard.perf.total
        hottest = sorted(on_peak, key=lambda name: (-on_peak[name], name))[: self.tables_per_step]
        found = []
        for name in hottest:
            i = index[name]
            base = list(loads)
            for shard in by_table[name]:
                base[shard.rank] -= shard.perf.total
            tier = _usual_tier(by_table[name])
            switches = [
                s for s in (self._switch(i, option, base, tier, peak, peak_rank) for option in options[i]
                            if option is not chosen[i])
                if s is not None
            ]
            found += _best_first(switches)
        return found

    def refinement(
        self, chosen: list[ShardingOption], options: list[list[ShardingOption]], partition: Partition
    ) -> list[ShardingOption] | None:
        """When no single switch helps (every rank holds about one coarse shard, so any table split
        finer lifts the ranks its new shards land on): the proposal with the coarsest shards split
        finer, all at once. The tables whose largest shard costs at least half the largest of any
        table that can split further (data-parallel tables aside) each take their cheapest option
        whose shards all cost less (then the one with fewest shards). None: nothing splits further."""
        largest: dict[str, float] = defaultdict(float)
        tiers: dict[str, list[Shard]] = defaultdict(list)
        for shard in partition.shards:
            largest[shard.table] = max(largest[shard.table], shard.perf.total)
            tiers[shard.table].append(shard)
        finer: dict[int, ShardingOption] = {}
        for i, current in enumerate(chosen):
            name = current.table.name
            if current.sharding_type is ShardingType.DATA_PARALLEL:
                continue
            tier = _usual_tier(tiers[name])
            priced = []
            for option in options[i]:
                costs = [self.estimator.perf(load, self._tier_for(option, tier)).total for load in option.shards]
                if option is not current and max(costs) < largest[name] * (1 - _SAME):
                    priced.append((sum(costs), len(option.shards), option))
            if priced:
                cheapest = min(total for total, _, _ in priced)
                finer[i] = min((p for p in priced if p[0] <= cheapest * (1 + 1e-6)), key=lambda p: p[1])[2]
        if not finer:
            return None
        top = max(largest[chosen[i].table.name] for i in finer)
        return [finer[i] if i in finer and largest[o.table.name] >= top / 2 else o for i, o in enumerate(chosen)]

    def _switch(self, index: int, option: ShardingOption, base: list[float], tier: Tier, peak: float,
                peak_rank: int) -> Switch | None:
        """The switch to ``option`` if it takes the peak rank below ``peak`` and lifts no rank to it."""
        costs = [self.estimator.perf(load, self._tier_for(option, tier)).total for load in option.shards]
        placed = self._place(option, costs, base)
        if placed is None:
            return None
        after = list(base)
        for rank, cost in placed:
            after[rank] += cost
        touched = {rank for rank, _ in placed} | {peak_rank}
        if max(after[r] for r in touched) >= peak * (1 - _SAME):
            return None
        return Switch(index, option, max(after))

    def _tier_for(self, option: ShardingOption, tier: Tier) -> Tier:
        """The table's tier now, or a slower one when the option's largest shard does not fit one rank of it."""
        at = TIERS.index(tier)
        return next((t for t in self.estimator.option_tiers(option) if TIERS.index(t) >= at), tier)

    def _place(self, option: ShardingOption, costs: list[float], base: list[float]) -> list[tuple[int, float]] | None:
        """(rank, cost) of each shard, as the partitioner would place them on ranks loaded ``base``."""
        topo = self.estimator.topology
        if option.placement is Placement.WORLD:
            return list(enumerate(costs))
        if option.placement is Placement.NODE:
            best: tuple[float, list[tuple[int, float]]] | None = None
            order = sorted(costs, reverse=True)
            for node in range(topo.nodes):
                first = node * topo.ranks_per_node
                ranks = sorted(range(first, first + topo.ranks_per_node), key=lambda r: (base[r], r))[: len(costs)]
                if len(ranks) < len(costs):
                    return None
                pairs = list(zip(ranks, order))
                peak = max(base[r] + c for r, c in pairs)
                if best is None or peak < best[0]:
                    best = (peak, pairs)
            return best[1] if best else None
        heap = [(load, rank) for rank, load in enumerate(base)]
        heapq.heapify(heap)
        pairs = []
        for cost in sorted(costs, reverse=True):
            load, rank = heapq.heappop(heap)
            pairs.append((rank, cost))
            heapq.heappush(heap, (load + cost, rank))
        return pairs


def _usual_tier(shards: list[Shard]) -> Tier:
    """The tier most of a table's shards are on (the faster on a tie)."""
    counts = {t: sum(s.tier is t for s in shards) for t in TIERS}
    return max(TIERS, key=lambda t: (counts[t], -TIERS.index(t)))
