"""Enumerator: every sharding option of each table that the topology allows.

Column-wise and table-column-wise splits are offered at several widths: shards
``column_block`` columns wide, then half, a quarter ... as long as a shard keeps at least
``column_min_cols`` columns (a dim-128 table: 2, 4, 8, 16 and 32 shards at the defaults).
Finer splits cost no more in the cost model (lookups and all-to-all bytes are linear in the
columns) but make more, smaller pieces, which the balancing of ``planners.py`` takes only when
a coarser one leaves a rank the slowest. Table-column-wise splits must fit one node: when every
width makes more shards than a node has ranks, the table is split into one shard per rank of
the node instead.

Over several nodes a pooled table is also offered as **grids** (row-wise options whose shards
are ``k`` ranges of rows by ``m`` blocks of columns, placed anywhere, one option for each count
``k x m`` a multiple of a node's ranks from two nodes' worth to the world). A table-row-wise
table is bound to one node, so its shards cannot get smaller than a node's share of its
lookups; a column shard receives every id of the table and a row shard sends a partial vector
per sample, so neither splits a hot table (dlrm_dcnv2's table 20: 40M rows, 100 ids a sample)
cheaply across nodes. A grid shard receives ``1/k`` of the ids and sends ``1/m`` of each
vector: of the shapes of one count, the one whose shards spend the fewest seconds on the links
is offered, and only if no other option has both a cheaper costliest shard and a cheaper total
(priced on the fastest tier). The executor sums the row partials and places the column blocks
of any tiling, so a grid is an ordinary row-wise table to it. Sequence tables get none (a row
split of one already sends each vector once), nor do tables whose sharding types are set.
"""

from __future__ import annotations

from harness.reference.planner.estimators import ShardEstimator
from harness.reference.planner.types import (
    TIERS,
    ShardingOption,
    ShardingType,
    ShardLoad,
    TableSpec,
    Tier,
)

_Extents = list[tuple[int, int, int, int]]  # (row_offset, rows, col_offset, cols) of each shard


def column_counts(dim: int, column_block: int, column_min_cols: int) -> list[int]:
    """Shard counts of the column-wise splits of a ``dim``-wide table, coarsest first: ``dim //
    column_block`` shards (none when that is under two), doubled while every shard keeps
    ``column_min_cols`` columns."""
    counts, count = [], dim // column_block
    while count >= 2 and dim // count >= column_min_cols:
        counts.append(count)
        count *= 2
    return counts


def _split(total: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` (offset, size) pieces of ``total``, sizes differing by at most one."""
    base, extra = divmod(total, parts)
    pieces, offset = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        pieces.append((offset, size))
        offset += size
    return [(o, s) for o, s in pieces if s > 0]


class ShardingOptionEnumerator:
    """Options per table: data-parallel (small tables), table-wise, column-wise and
    table-column-wise (dims of two blocks or more, at each width of :func:`column_counts`),
    row-wise, table-row-wise (several nodes)."""

    def __init__(self, estimator: ShardEstimator):
        self.estimator = estimator

    def enumerate(self, table: TableSpec) -> list[ShardingOption]:
        topo, config = self.estimator.topology, self.estimator.config
        w, a = topo.world_size, topo.ranks_per_node
        whole = [(0, table.rows, 0, table.dim)]
        extents: list[tuple[ShardingType, _Extents]] = [(ShardingType.TABLE_WISE, whole)]
        if w > 1 and self.estimator.table_bytes(table) <= config.data_parallel_max_bytes:
            extents.append((ShardingType.DATA_PARALLEL, whole * w))
        counts = column_counts(table.dim, config.column_block, config.column_min_cols)
        splits = [[(0, table.rows, o, s) for o, s in _split(table.dim, n)] for n in counts]
        extents += [(ShardingType.COLUMN_WISE, columns) for columns in splits]
        node_splits = [columns for columns in splits if len(columns) <= a]
        if not node_splits and a >= 2 and table.dim // a >= config.column_min_cols:
            # the widths make more shards than a node has ranks: one shard per rank of the node
            node_splits = [[(0, table.rows, o, s) for o, s in _split(table.dim, a)]]
        extents += [(ShardingType.TABLE_COLUMN_WISE, columns) for columns in node_splits]
        if w > 1 and table.rows >= w:
            extents.append((ShardingType.ROW_WISE, [(o, s, 0, table.dim) for o, s in _split(table.rows, w)]))
        allowed = config.allowed_types(table.name)
        # on one node table-row-wise is row-wise; offered there only when asked for by name
        trw_asked = allowed is not None and ShardingType.TABLE_ROW_WISE in allowed
        if (topo.nodes > 1 or trw_asked) and a > 1 and table.rows >= a:
            extents.append((ShardingType.TABLE_ROW_WISE, [(o, s, 0, table.dim) for o, s in _split(table.rows, a)]))
        if allowed is not None:
            extents = [(st, ext) for st, ext in extents if st in allowed]
        options = [ShardingOption(table, st, self.estimator.shard_loads(table, st, ext)) for st, ext in extents]
        if allowed is not None:  # the types named, as torchrec's: a grid is not what it calls row-wise
            return options
        grids = self._grids(table, counts, options)
        rw = ShardingType.ROW_WISE
        return options + [ShardingOption(table, rw, self.estimator.shard_loads(table, rw, ext), grid=True) for ext in grids]

    def _grids(self, table: TableSpec, counts: list[int], others: list[ShardingOption]) -> list[_Extents]:
        """The extents of the grids of a pooled table over several nodes (see the module): for every
        ``n`` a multiple of a node's ranks from two nodes' worth to the world, the ``k`` row ranges
        by ``m`` column blocks (``m`` a count of :func:`column_counts`) whose shards spend the fewest
        seconds on the links; of those, the ones no other option (nor grid) beats on both its
        costliest shard and its total."""
        topo = self.estimator.topology
        w, a = topo.world_size, topo.ranks_per_node
        if topo.nodes < 2 or table.sequence:
            return []
        tier = next((t for t in TIERS if topo.capacity.get(t) > 0), TIERS[-1])
        known = [self._shard_and_total(o.shards[0], len(o.shards), tier) for o in others]
        shapes = []
        for n in range(2 * a, w + 1, a):
            fits = [(n // m, m) for m in counts if n % m == 0 and 2 <= n // m <= table.rows]
            if fits:
                k, m = min(fits, key=lambda km: (self._grid_comm_s(table, *km), km))
                load = self._grid_load(table, k, m)
                shapes.append((k, m, self._shard_and_total(load, n, tier)))
        costs = known + [c for _, _, c in shapes]
        return [[(ro, rs, co, cs) for ro, rs in _split(table.rows, k) for co, cs in _split(table.dim, m)]
                for k, m, cost in shapes if not any(_beats(other, cost) for other in costs)]

    def _grid_load(self, table: TableSpec, k: int, m: int) -> ShardLoad:
        """The largest shard of a ``k x m`` grid of ``table``."""
        return self.estimator.shard_load(table, ShardingType.ROW_WISE, (0, -(-table.rows // k), 0, -(-table.dim // m)), k)

    def _grid_comm_s(self, table: TableSpec, k: int, m: int) -> float:
        """Seconds of communication of the largest shard of a ``k x m`` grid of ``table``."""
        load = self._grid_load(table, k, m)
        return load.fwd_comm_s + load.bwd_comm_s

    def _shard_and_total(self, load: ShardLoad, shards: int, tier: Tier) -> tuple[float, float]:
        """Seconds of ``load`` on ``tier``, and of ``shards`` like it."""
        cost = self.estimator.perf(load, tier).total
        return cost, cost * shards


def _beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether (shard, total) costs ``a`` are no higher than ``b`` on both and lower on one."""
    return a[0] <= b[0] and a[1] <= b[1] and a != b
