"""The plan's sharding of each table, as the sharded executor reads it, checked against the model.

The planner's :class:`~harness.reference.planner.Plan` gives every table a sharding type and its
shards (rows ``[row_offset, row_offset + rows)`` and columns ``[col_offset, col_offset + cols)`` on
one rank); :func:`shardings_from_plan` turns it into one :class:`TableSharding` per table of the
model, refusing a plan that does not fit the model or the world size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import ErrorCategory, HarnessError
from harness.reference.planner.types import Plan, Shard, ShardingType, Tier

RowRange = tuple[int, int, int]
"""``(table, row_offset, rows)``: the ids a shard needs (those of ``table`` in its row range)."""


@dataclass(frozen=True)
class ShardSpec:
    """The planner's :class:`~harness.reference.planner.Shard` of table ``table`` (its index in
    the model, which the executor addresses its tables by)."""

    table: int
    placed: Shard

    @property
    def rank(self) -> int:
        return self.placed.rank

    @property
    def row_offset(self) -> int:
        return self.placed.row_offset

    @property
    def rows(self) -> int:
        return self.placed.rows

    @property
    def col_offset(self) -> int:
        return self.placed.col_offset

    @property
    def cols(self) -> int:
        return self.placed.cols

    @property
    def tier(self) -> Tier:
        return self.placed.tier

    @property
    def key(self) -> RowRange:
        """The ids a shard needs: those of ``table`` in its row range."""
        return (self.table, self.row_offset, self.rows)

    def __str__(self) -> str:  # as errors have always named a shard
        return (f"ShardSpec(table={self.table}, rank={self.rank}, row_offset={self.row_offset}, rows={self.rows}, "
                f"col_offset={self.col_offset}, cols={self.cols}, tier={self.tier.value!r})")


@dataclass(frozen=True)
class TableSharding:
    """One table's sharding type and its shards (ordered by rank, first row, first column)."""

    sharding_type: ShardingType
    shards: tuple[ShardSpec, ...]


def shardings_from_plan(
    plan: Plan, table_rows: Sequence[int], dim: int | Sequence[int], world_size: int
) -> list[TableSharding]:
    """The plan's sharding of each table, checked against the model and the world size.

    Every table of a non-data-parallel type must be tiled exactly by its shards; a
    data-parallel table needs one full replica per rank.
    """
    if len(plan.tables) != len(table_rows):
        raise HarnessError(
            f"the sharding plan has {len(plan.tables)} tables; the model has {len(table_rows)}",
            ErrorCategory.BAD_INPUT,
        )
    if plan.world_size != world_size:
        raise HarnessError(
            f"the sharding plan is for {plan.world_size} ranks; this run has {world_size}",
            ErrorCategory.BAD_INPUT,
        )
    dims = [dim] * len(table_rows) if isinstance(dim, int) else list(dim)
    return [_table_sharding(t, table.name, st, placed, (table.rows, table.dim), (rows, table_dim), world_size)
            for t, (table, st, placed, rows, table_dim) in enumerate(
                zip(plan.tables, plan.sharding_types, plan.table_shards(), table_rows, dims))]


def _table_sharding(t: int, name: Any, st: ShardingType, placed: Sequence[Shard], planned: tuple[int, int],
                    model: tuple[int, int], world_size: int) -> TableSharding:
    """Table ``t``'s sharding: its ``planned`` shape (rows, dim) must be the ``model``'s, its shards
    on the run's ranks, tiling the table (or, data-parallel, one full replica on every rank)."""
    (rows, dim) = model
    if planned != model:
        raise HarnessError(
            f"plan table {name}: {planned[0]} x {planned[1]}, but the model's is {rows} x {dim}",
            ErrorCategory.BAD_INPUT,
        )
    shards = tuple(sorted((ShardSpec(t, s) for s in placed), key=lambda s: (s.rank, s.row_offset, s.col_offset)))
    if any(not 0 <= s.rank < world_size for s in shards):
        raise HarnessError(f"plan table {name}: a shard is on a rank outside 0..{world_size - 1}")
    if st is ShardingType.DATA_PARALLEL:
        full = all(s.row_offset == 0 and s.rows == rows and s.col_offset == 0 and s.cols == dim for s in shards)
        if not full or sorted(s.rank for s in shards) != list(range(world_size)):
            raise HarnessError(f"plan table {name}: a data-parallel table needs one full replica on every rank")
    else:
        _check_tiling(name, shards, rows, dim)
    return TableSharding(st, shards)


def _check_tiling(name: Any, shards: Sequence[ShardSpec], rows: int, dim: int) -> None:
    """Every weight of the ``rows x dim`` table in exactly one shard. Counted on the grid of the
    shards' own boundaries (each cell a block of weights that every shard covers whole or not at
    all), not per weight: a table of 40M rows x 128 would otherwise need 20 GB to check, on every
    rank."""
    for s in shards:
        if s.rows < 1 or s.cols < 1 or s.row_offset < 0 or s.col_offset < 0 or \
                s.row_offset + s.rows > rows or s.col_offset + s.cols > dim:
            raise HarnessError(f"plan table {name}: shard {s} lies outside the {rows} x {dim} table")
    row_cuts = sorted({0, rows, *(s.row_offset for s in shards), *(s.row_offset + s.rows for s in shards)})
    col_cuts = sorted({0, dim, *(s.col_offset for s in shards), *(s.col_offset + s.cols for s in shards)})
    row_at, col_at = {r: i for i, r in enumerate(row_cuts)}, {c: i for i, c in enumerate(col_cuts)}
    covered = np.zeros((len(row_cuts) - 1, len(col_cuts) - 1), dtype=np.int32)
    for s in shards:
        covered[row_at[s.row_offset] : row_at[s.row_offset + s.rows], col_at[s.col_offset] : col_at[s.col_offset + s.cols]] += 1
    if not bool((covered == 1).all()):
        raise HarnessError(f"plan table {name}: its shards do not cover every weight exactly once")
