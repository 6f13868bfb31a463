"""Enumerator: every sharding option of each table that the topology allows.

Column-wise and table-column-wise splits are offered at several widths: shards
``column_block`` columns wide, then half, a quarter ... as long as a shard keeps at least
``column_min_cols`` columns (a dim-128 table: 2, 4, 8, 16 and 32 shards at the defaults).
Finer splits cost no more in the cost model (lookups and all-to-all bytes are linear in the
columns) but make more, smaller pieces, which the balancing of ``planners.py`` takes only when
a coarser one leaves a rank the slowest. Table-column-wise splits must fit one node: when every
width makes more shards than a node has ranks, the table is split into one shard per rank of
the node instead.
"""

from __future__ import annotations

from harness.reference.planner.estimators import ShardEstimator
from harness.reference.planner.types import ShardingOption, ShardingType, TableSpec

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
        return [ShardingOption(table, st, self.estimator.shard_loads(table, st, ext)) for st, ext in extents]
