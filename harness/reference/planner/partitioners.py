"""Partitioner: place the chosen options' shards on ranks and tiers, balancing rank cost.

Tables are first given a target tier by heat (lookup bytes per stored byte: the hottest
fill HBM, then DDR, then SSD, within the tiers' total capacity). Shards are then placed
longest-processing-time first, each on the least-loaded rank with room in its target tier
(else a slower tier, else a faster one); options bound to the world or to a node place one
shard per rank. Last, single shards move or swap off the most loaded rank while that lowers
the maximum rank cost.

A table's tier setting (``PlannerConfig.tiers``) limits its shards to those tiers. A cached
tier's shard (on the SSD with ``PlannerConfig.ssd_cache_fraction``, in DDR under an HBM tier
with ``ddr_cache_fraction``) also takes its cache's bytes (exactly what the executor allocates:
``estimators.cache_nbytes``) in the fastest tier above it that its rank has: it is placed only
where both fit. Data-parallel replicas are never cached. The caches the targets imply are set
aside in the tier above before the targets are given (so fewer tables target HBM when the
caches of DDR and SSD tables need it), and each rank keeps its share of that room from the
shards themselves, so the hottest shards, placed first, leave room for the coldest ones' caches.
A shard that finds no room fails in one line that names what did not fit: the shard, or the
cache of a shard that fits (its bytes, its tier, and the most room left for it).

A :class:`Partition` is ordered by speed (:meth:`Partition.faster_than`: its rank costs,
slowest first, compared rank by rank), which is how the balancing of ``planners.py`` keeps
the better of two proposals.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.reference.planner.estimators import ShardEstimator
from harness.reference.planner.types import (
    TIERS,
    Perf,
    Placement,
    PlannerError,
    PlannerErrorType,
    Shard,
    ShardingOption,
    ShardingType,
    ShardLoad,
    Storage,
    Tier,
    imbalance,
)

_TARGET_FILL = 0.95  # of a tier's total capacity given to targets, leaving room to pack
_SAME = 1e-9  # relative: rank costs closer than this are equal
_CACHE_ROUNDS = 8  # of working out target tiers while the caches they imply outgrow the room set aside


@dataclass(frozen=True)
class Partition:
    """Placed shards and, per rank, bytes per tier and seconds per step."""

    shards: tuple[Shard, ...]
    rank_storage: tuple[Storage, ...]
    rank_perf: tuple[Perf, ...]

    @property
    def rank_costs(self) -> list[float]:
        return [p.total for p in self.rank_perf]

    @property
    def imbalance(self) -> float:
        """Max over mean rank cost (as :attr:`Plan.imbalance`)."""
        return imbalance(self.rank_costs)

    def faster_than(self, other: Partition) -> bool:
        """Whether its rank costs, slowest first, are below ``other``'s at the first rank where
        they differ: a lower peak, or the same peak on fewer ranks, and so on."""
        for mine, theirs in zip(sorted(self.rank_costs, reverse=True), sorted(other.rank_costs, reverse=True)):
            if mine < theirs * (1 - _SAME):
                return True
            if mine > theirs * (1 + _SAME):
                return False
        return False


@dataclass
class _Placed:
    table: str
    load: ShardLoad
    rank: int
    tier: Tier
    cost: float


class GreedyLptPartitioner:
    """Longest-processing-time-first greedy placement under per-rank tier capacities, then
    improving moves and swaps."""

    def __init__(self, estimator: ShardEstimator, *, max_improvements: int = 2000):
        self.estimator = estimator
        self.max_improvements = max_improvements  # a count, not a time limit: plans stay deterministic

    # -- the pipeline of this role ---------------------------------------------------------

    def partition(self, options: list[ShardingOption]) -> Partition:
        topo = self.estimator.topology
        self._capacity = [topo.capacity.get(t) for t in TIERS]
        self._allowed_memo: dict[tuple[str, ShardingType | None], list[int]] = {}
        self._cost_memo: dict[tuple[int, Tier], float] = {}  # keyed by the loads of ``options``, alive meanwhile
        self._used = [[0, 0, 0] for _ in range(topo.world_size)]
        self._cached = [[0, 0, 0] for _ in range(topo.world_size)]  # of _used: the caches' bytes
        self._load = [0.0] * topo.world_size
        self._singles: list[list[_Placed]] = [[] for _ in range(topo.world_size)]
        self._placed: list[_Placed] = []
        self._kept = [0] * len(TIERS)
        targets, reserve = self._target_tiers(options)
        # each rank keeps its share of the room set aside for caches from the shards themselves,
        # so the hottest shards, placed first, leave room for the caches of the coldest
        self._kept = [-(-r // topo.world_size) + (int(c * (1 - _TARGET_FILL)) if r else 0)
                      for r, c in zip(reserve, self._capacity)]
        for option in self._lpt_order(options, targets):
            self._place(option, targets[id(option)])
        self._improve()
        return self._result()

    def _allowed(self, table: str, sharding_type: ShardingType | None = None) -> list[int]:
        """The tiers (indices) that ``table``'s shards may live on: those with capacity, and
        of those the ones its tier setting names. With an SSD cache, data-parallel replicas
        are never on the SSD (as torchrec keeps them dense, uncached)."""
        key = (table, sharding_type)
        known = self._allowed_memo.get(key)
        if known is not None:  # the improvement passes ask for every pair of shards they try
            return known
        config = self.estimator.config
        tiers = config.allowed_tiers(table)
        no_ssd = config.ssd_cache_fraction > 0 and sharding_type is ShardingType.DATA_PARALLEL
        allowed = [i for i, c in enumerate(self._capacity)
                   if c > 0 and (tiers is None or TIERS[i] in tiers) and not (no_ssd and TIERS[i] is Tier.SSD)]
        self._allowed_memo[key] = allowed
        return allowed

    def _target_tiers(self, options: list[ShardingOption]) -> tuple[dict[int, Tier], list[int]]:
        """The fastest tier with room left in total, hottest options first. The caches of the
        options given a cached tier need room in the tier above: that room is set aside, and the
        targets worked out again, while the caches outgrow it (at most ``_CACHE_ROUNDS`` times: the
        room only grows, so the hottest tables go on taking the fastest tier that is left)."""
        reserve = [0] * len(TIERS)
        for _ in range(_CACHE_ROUNDS):
            targets, caches = self._targets_within(options, reserve)
            if all(c <= r for c, r in zip(caches, reserve)):
                break
            reserve = [max(c, r) for c, r in zip(caches, reserve)]
        return targets, reserve

    def _targets_within(self, options: list[ShardingOption], reserve: list[int]) -> tuple[dict[int, Tier], list[int]]:
        """Targets with ``reserve`` bytes of each tier set aside for caches, and the caches they need."""
        world = self.estimator.topology.world_size
        budget = [int(c * world * _TARGET_FILL) - r for c, r in zip(self._capacity, reserve)]
        caches = [0] * len(TIERS)
        targets = {}
        for option in sorted(options, key=lambda o: -sum(s.lookup_bytes for s in o.shards) / max(o.storage_bytes, 1)):
            usable = self._allowed(option.table.name, option.sharding_type)
            if not usable:
                raise self._no_tier(option)
            index = next((i for i in usable if budget[i] >= option.storage_bytes), usable[-1])
            cached = self._option_caches(option, index)
            above = {t for t, _ in cached}
            if len(above) == 1 and (up := above.pop()) in usable and sum(n for _, n in cached) >= option.storage_bytes:
                # its cache would take more of the tier above than the shards themselves (a small table
                # of which one step looks up every row): the shards go there, uncached
                index, cached = up, []
            budget[index] -= option.storage_bytes
            targets[id(option)] = TIERS[index]
            for tier, nbytes in cached:
                caches[tier] += nbytes
        return targets, caches

    def _option_caches(self, option: ShardingOption, tier: int) -> list[tuple[int, int]]:
        """(tier, bytes) of the caches of all of the option's shards on ``tier`` (none: uncached)."""
        return [c for load in option.shards for c in self._charges(tier, load)[1:]]

    def _lpt_order(self, options: list[ShardingOption], targets: dict[int, Tier]) -> list[ShardingOption]:
        def per_rank_cost(option: ShardingOption) -> float:
            return max(self._cost(s, targets[id(option)]) for s in option.shards)

        return sorted(options, key=lambda o: (-per_rank_cost(o), o.table.name))

    # -- placement --------------------------------------------------------------------------

    def _tier_order(self, target: Tier, option: ShardingOption) -> list[int]:
        i = TIERS.index(target)
        allowed = self._allowed(option.table.name, option.sharding_type)
        return [j for j in [*range(i, len(TIERS)), *range(i - 1, -1, -1)] if j in allowed]

    def _charges(self, tier: int, load: ShardLoad) -> list[tuple[int, int]]:
        """(tier, bytes) that a shard on ``tier`` takes: its storage, and the cache of a cached
        tier's shard (an SSD shard's, a DDR shard's under HBM) in the faster tier it lives in."""
        cache = self.estimator.cache_bytes(load, TIERS[tier])
        if not cache:
            return [(tier, load.storage_bytes)]
        fast = self.estimator.cache_tier(load, TIERS[tier])
        return [(tier, load.storage_bytes), (-1 if fast is None else TIERS.index(fast), cache)]

    def _fits(self, rank: int, tier: int, load: ShardLoad) -> bool:
        """Whether the shard fits the rank's ``tier`` outside the room kept for caches, and its cache
        (if any) fits the tier above."""
        (_, nbytes), *cache = self._charges(tier, load)
        used = self._used[rank]
        return nbytes <= self._room(rank, tier) and all(t >= 0 and used[t] + n <= self._capacity[t] for t, n in cache)

    def _charge(self, rank: int, tier: int, load: ShardLoad, sign: int) -> None:
        for i, (t, n) in enumerate(self._charges(tier, load)):
            self._used[rank][t] += sign * n
            if i:  # a cache: it takes the room kept for caches first
                self._cached[rank][t] += sign * n

    def _cost(self, load: ShardLoad, tier: Tier) -> float:
        # asked for the same shard and tier again and again by the improvement passes (every pair
        # of shards a swap tries): computed once per partition (the estimate depends on them only)
        key = (id(load), tier)
        cost = self._cost_memo.get(key)
        if cost is None:
            cost = self._cost_memo[key] = self.estimator.perf(load, tier).total
        return cost

    def _place(self, option: ShardingOption, target: Tier) -> None:
        order = self._tier_order(target, option)
        if option.placement is Placement.ANY:
            for load in option.shards:
                self._place_single(option, load, order)
        elif option.placement is Placement.WORLD:
            self._place_group(option, list(range(len(option.shards))), order)
        else:
            self._place_on_node(option, order)

    def _place_single(self, option: ShardingOption, load: ShardLoad, order: list[int]) -> None:
        best: tuple[float, int, int] | None = None
        for rank in sorted(range(len(self._load)), key=self._load.__getitem__):
            tier = next((t for t in order if self._fits(rank, t, load)), None)
            if tier is None:
                continue
            after = self._load[rank] + self._cost(load, TIERS[tier])
            if best is None or after < best[0]:
                best = (after, rank, tier)
            if tier == order[0]:
                break  # the least-loaded rank with room in the target tier
        if best is None:
            raise self._no_room(option, load)
        self._commit(option, load, best[1], best[2], single=True)

    def _group_tiers(self, option: ShardingOption, ranks: list[int], order: list[int]) -> list[int] | None:
        """One tier for all shards when possible (symmetric ranks), else the first that fits each."""
        for tier in order:
            if all(self._fits(r, tier, s) for r, s in zip(ranks, option.shards)):
                return [tier] * len(ranks)
        tiers: list[int] = []
        for r, s in zip(ranks, option.shards):
            fit = next((t for t in order if self._fits(r, t, s)), None)
            if fit is None:
                return None
            tiers.append(fit)
        return tiers

    def _place_group(self, option: ShardingOption, ranks: list[int], order: list[int]) -> None:
        tiers = self._group_tiers(option, ranks, order)
        if tiers is None:
            raise self._no_room(option, option.shards[0])
        for rank, tier, load in zip(ranks, tiers, option.shards):
            self._commit(option, load, rank, tier, single=False)

    def _place_on_node(self, option: ShardingOption, order: list[int]) -> None:
        topo = self.estimator.topology
        best: tuple[float, list[int], list[int]] | None = None
        for node in range(topo.nodes):
            node_ranks = range(node * topo.ranks_per_node, (node + 1) * topo.ranks_per_node)
            ranks = sorted(node_ranks, key=self._load.__getitem__)[: len(option.shards)]
            tiers = self._group_tiers(option, ranks, order)
            if tiers is None:
                continue
            after = max(
                self._load[r] + self._cost(s, TIERS[t]) for r, t, s in zip(ranks, tiers, option.shards)
            )
            if best is None or after < best[0]:
                best = (after, ranks, tiers)
        if best is None:
            raise self._no_room(option, option.shards[0])
        for rank, tier, load in zip(best[1], best[2], option.shards):
            self._commit(option, load, rank, tier, single=False)

    def _commit(self, option: ShardingOption, load: ShardLoad, rank: int, tier: int, *, single: bool) -> None:
        placed = _Placed(option.table.name, load, rank, TIERS[tier], self._cost(load, TIERS[tier]))
        self._charge(rank, tier, load, +1)
        self._load[rank] += placed.cost
        self._placed.append(placed)
        if single:
            self._singles[rank].append(placed)

    def _no_tier(self, option: ShardingOption) -> PlannerError:
        tiers = self.estimator.config.allowed_tiers(option.table.name) or ()
        return PlannerError(
            f"table {option.table.name!r} is set to the {' or '.join(t.value.upper() for t in tiers)} tier, which "
            "the profile does not have (no capacity there); set it to another tier or use a profile that has it",
            PlannerErrorType.INSUFFICIENT_STORAGE,
        )

    def _no_room(self, option: ShardingOption, load: ShardLoad) -> PlannerError:
        """One line: what did not fit (the shard, or the cache of a shard that fits) and the most
        room left for it, as the option's placement can use it."""
        what = f"{load.storage_bytes:,} B shard of table {option.table.name!r} ({option.sharding_type.value})"
        n = len(option.shards)
        where = {Placement.ANY: "no rank has", Placement.WORLD: "not every rank has",
                 Placement.NODE: f"no node has {n} ranks with"}[option.placement]
        cache = self._cache_short(option, load)
        if cache is not None:
            tier, fast, nbytes, free = cache
            fraction = self.estimator.config.cache_fraction(TIERS[tier])
            slow, up = TIERS[tier].value.upper(), TIERS[fast].value.upper()
            return PlannerError(
                f"{where} room for the cache of a {what} on the {slow}: the shard fits, but its cache ({fraction:g} "
                f"of its rows, and at least those one step looks up) needs {nbytes:,} B of {up}, and "
                f"{self._most(option, f'free {up}', 'with room for the shard ')} is {free:,} B. Possible solutions: a "
                f"lower cache fraction (--cache-fraction), a profile with more {up} per rank or more nodes (smaller "
                "shards and caches).",
                PlannerErrorType.PARTITION,
                option.table.name,
            )
        allowed = self._allowed(option.table.name, option.sharding_type)
        free = max((self._room_for(option, [self._room(r, t) for r in range(len(self._load))]) for t in allowed),
                   default=0)
        tiers = " or ".join(TIERS[t].value.upper() for t in allowed)
        return PlannerError(
            f"{where} room for a {what}; {self._most(option, f'free space in {tiers}')} is {max(free, 0):,} B. "
            "Possible solutions: a profile with more nodes or more memory per node, a lower-precision optimizer "
            "state, or an SSD tier.",
            PlannerErrorType.PARTITION,
            option.table.name,
        )

    def _most(self, option: ShardingOption, room: str, ranks: str = "") -> str:
        """How much ``room`` the option's placement found, in words (see :meth:`_room_for`)."""
        if option.placement is Placement.ANY:
            return f"the most {room} left on a rank {ranks}".rstrip()
        if option.placement is Placement.WORLD:
            return f"the least {room} left on a rank of the world (each takes a shard)"
        return f"the most {room} that {len(option.shards)} ranks of one node {ranks}each have left"

    def _room(self, rank: int, tier: int) -> int:
        """Bytes a shard may still take in the rank's tier: not the room kept for caches, less what
        the caches placed there have taken of it already."""
        kept = max(self._kept[tier] - self._cached[rank][tier], 0)
        return self._capacity[tier] - kept - self._used[rank][tier]

    def _cache_short(self, option: ShardingOption, load: ShardLoad) -> tuple[int, int, int, int] | None:
        """(tier, cache tier, cache bytes, most room for it) of the allowed cached tier where the
        shard fits the option's placement but its cache does not (the nearest to fitting), or None."""
        world = range(len(self._load))
        found = None
        for tier in self._allowed(option.table.name, option.sharding_type):
            charges = self._charges(tier, load)
            fits = [self._room(r, tier) >= load.storage_bytes for r in world]
            # 1 where the shard fits: the placement has ranks for its shards if its room is 1
            if len(charges) < 2 or charges[1][0] < 0 or self._room_for(option, [int(f) for f in fits]) < 1:
                continue
            fast, nbytes = charges[1]
            free = self._room_for(option, [self._capacity[fast] - self._used[r][fast] if f else -1
                                           for r, f in zip(world, fits)])
            if free < nbytes and (found is None or free - nbytes > found[3] - found[2]):
                found = (tier, fast, nbytes, free)
        return found

    def _room_for(self, option: ShardingOption, per_rank: list[int]) -> int:
        """Of a room per rank, what the option's placement can count on for each shard: the most of
        any rank (shards placed anywhere), the least of its ranks (one shard per rank of the world),
        the most that as many ranks of one node as it has shards each have (one node)."""
        if option.placement is Placement.ANY:
            return max(per_rank)
        n = len(option.shards)
        if option.placement is Placement.WORLD:
            return min(per_rank[:n])
        a = self.estimator.topology.ranks_per_node
        nodes = [sorted(per_rank[i : i + a], reverse=True) for i in range(0, len(per_rank), a)]
        return max((node[n - 1] for node in nodes if len(node) >= n), default=-1)

    # -- improvement ------------------------------------------------------------------------

    def _improve(self) -> None:
        for _ in range(self.max_improvements):
            if not (self._move() or self._swap()):
                return

    def _move(self) -> bool:
        src = max(range(len(self._load)), key=self._load.__getitem__)
        peak = self._load[src]
        for shard in sorted(self._singles[src], key=lambda p: -p.cost):
            for dst in sorted(range(len(self._load)), key=self._load.__getitem__):
                if dst == src or self._load[dst] >= peak:
                    break
                for tier in self._allowed(shard.table):
                    if not self._fits(dst, tier, shard.load):
                        continue
                    cost = self._cost(shard.load, TIERS[tier])
                    if max(peak - shard.cost, self._load[dst] + cost) < peak * (1 - 1e-9):
                        self._relocate(shard, dst, tier, cost)
                        return True
        return False

    def _swap(self) -> bool:
        src = max(range(len(self._load)), key=self._load.__getitem__)
        peak = self._load[src]
        # what a pair's checks ask of each shard, asked once per shard and tier, not once per pair
        # (a 1,000-table model puts hundreds of shards on each rank): the same swaps, in the same order
        cached: dict[int, tuple[bool, ...]] = {}

        def caches(load: ShardLoad) -> tuple[bool, ...]:  # per tier: would the shard have a cache there
            flags = cached.get(id(load))
            if flags is None:
                flags = cached[id(load)] = tuple(bool(self.estimator.cache_bytes(load, t)) for t in TIERS)
            return flags

        for dst in sorted(range(len(self._load)), key=self._load.__getitem__)[:16]:
            if dst == src:
                continue
            for a in self._singles[src]:
                ta, ca = TIERS.index(a.tier), caches(a.load)
                if ca[ta]:
                    continue  # a's cache would move too: left to moves, which account for them
                allowed_a = self._allowed(a.table)
                for b in self._singles[dst]:
                    if b.cost >= a.cost:
                        continue
                    tb = TIERS.index(b.tier)
                    if tb not in allowed_a or ta not in self._allowed(b.table):
                        continue
                    cb = caches(b.load)
                    if cb[tb] or ca[tb] or cb[ta]:
                        continue  # their caches would move too: left to moves, which account for them
                    delta_b_tier = b.load.storage_bytes - a.load.storage_bytes  # on src in a's tier
                    if self._used[src][ta] + delta_b_tier > self._capacity[ta]:
                        continue
                    if self._used[dst][tb] - b.load.storage_bytes + a.load.storage_bytes > self._capacity[tb]:
                        continue
                    cost_a, cost_b = self._cost(a.load, b.tier), self._cost(b.load, a.tier)
                    new_src = peak - a.cost + cost_b
                    new_dst = self._load[dst] - b.cost + cost_a
                    if max(new_src, new_dst) < peak * (1 - 1e-9):
                        self._relocate(a, dst, tb, cost_a)
                        self._relocate(b, src, ta, cost_b)
                        return True
        return False

    def _relocate(self, shard: _Placed, rank: int, tier: int, cost: float) -> None:
        self._charge(shard.rank, TIERS.index(shard.tier), shard.load, -1)
        self._load[shard.rank] -= shard.cost
        self._singles[shard.rank].remove(shard)
        shard.rank, shard.tier, shard.cost = rank, TIERS[tier], cost
        self._charge(rank, tier, shard.load, +1)
        self._load[rank] += cost
        self._singles[rank].append(shard)

    def _result(self) -> Partition:
        world = len(self._load)
        perf = [Perf()] * world
        shards = []
        for p in self._placed:
            shard_perf = self.estimator.perf(p.load, p.tier)
            perf[p.rank] = perf[p.rank] + shard_perf
            shards.append(
                Shard(p.table, p.rank, p.tier, p.load.row_offset, p.load.rows, p.load.col_offset, p.load.cols,
                      p.load.storage_bytes, shard_perf)
            )
        storage = tuple(Storage(*u) for u in self._used)
        return Partition(tuple(shards), storage, tuple(perf))
