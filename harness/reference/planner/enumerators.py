"""Enumerator: every sharding option of each table that the topology allows."""

from __future__ import annotations

from harness.reference.planner.estimators import ShardEstimator
from harness.reference.planner.types import ShardingOption, ShardingType, TableSpec


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
    table-column-wise (dims of two blocks or more), row-wise, table-row-wise (several nodes)."""

    def __init__(self, estimator: ShardEstimator):
        self.estimator = estimator

    def enumerate(self, table: TableSpec) -> list[ShardingOption]:
        topo, config = self.estimator.topology, self.estimator.config
        w, a = topo.world_size, topo.ranks_per_node
        whole = [(0, table.rows, 0, table.dim)]
        extents: dict[ShardingType, list[tuple[int, int, int, int]]] = {ShardingType.TABLE_WISE: whole}
        if w > 1 and self.estimator.table_bytes(table) <= config.data_parallel_max_bytes:
            extents[ShardingType.DATA_PARALLEL] = whole * w
        blocks = table.dim // config.column_block
        if blocks >= 2:
            columns = [(0, table.rows, o, s) for o, s in _split(table.dim, blocks)]
            extents[ShardingType.COLUMN_WISE] = columns
            if a >= len(columns):
                extents[ShardingType.TABLE_COLUMN_WISE] = columns
        if w > 1 and table.rows >= w:
            extents[ShardingType.ROW_WISE] = [(o, s, 0, table.dim) for o, s in _split(table.rows, w)]
        allowed = config.allowed_types(table.name)
        # on one node table-row-wise is row-wise; offered there only when asked for by name
        trw_asked = allowed is not None and ShardingType.TABLE_ROW_WISE in allowed
        if (topo.nodes > 1 or trw_asked) and a > 1 and table.rows >= a:
            extents[ShardingType.TABLE_ROW_WISE] = [(o, s, 0, table.dim) for o, s in _split(table.rows, a)]
        if allowed is not None:
            extents = {st: ext for st, ext in extents.items() if st in allowed}
        return [
            ShardingOption(table, st, self.estimator.shard_loads(table, st, ext)) for st, ext in extents.items()
        ]
