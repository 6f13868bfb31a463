"""Who holds what in a sharded collection, and where its values go: the layout every part of the
executor reads (the input distribution, the shards' storage, the output distributions).

:class:`TableShapes` describes the collection's tables (their rows, ids per sample and
dimension; where each table's ids sit in a batch and its values in a pooled row);
:class:`ShardLayout` every rank's shards, the row ranges they need, and which of them go through
the flat all-to-all and which through the two-stage (intra-node, then inter-node) distribution.
Both are the same on every rank (the plan's), but for the ``rank`` they are seen from.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from harness.reference.distributed.shardings import RowRange, ShardSpec, TableSharding
from harness.reference.planner.types import ShardingType


@dataclass(frozen=True)
class TableShapes:
    """A collection's tables: rows, ids per sample (``pooling``) and dimension of each, with the
    offsets derived from them (``col_start[t]``: table ``t``'s first id column of a ``B x
    sum(pooling)`` batch; ``out_start[t]``: its first value of a ``B x sum(dims)`` pooled row;
    each with the total last)."""

    rows: tuple[int, ...]
    pooling: tuple[int, ...]
    dims: tuple[int, ...]
    col_start: tuple[int, ...] = field(init=False)
    out_start: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "col_start", (0, *itertools.accumulate(self.pooling)))
        object.__setattr__(self, "out_start", (0, *itertools.accumulate(self.dims)))

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def uniform_dims(self) -> bool:
        """Whether every table has one dimension (the pooled output is then ``B x F x D``)."""
        return len(set(self.dims)) <= 1


@dataclass(frozen=True)
class ShardLayout:
    """Every rank's shards of a collection, seen from ``rank``.

    ``shards_of[p]``: rank ``p``'s shards, by table, first row, first column; ``keys_of[p]``: the
    row ranges they need, each once, in that order (an input all-to-all's chunk to ``p``);
    ``flat_of[p]`` / ``two_stage_of[p]``: its shards of the flat and of the two-stage tables.
    ``key_index[i]``: local shard ``i``'s range in ``keys_of[rank]``; ``flat_index`` /
    ``two_stage_index``: the local shards of each kind; ``flat_columns[p]``: the values of a
    pooled row that rank ``p``'s flat shards fill, shard after shard (a ``sum(cols)`` int64 tensor).
    """

    rank: int
    world_size: int
    tables: TableShapes
    shards_of: tuple[tuple[ShardSpec, ...], ...]
    keys_of: tuple[tuple[RowRange, ...], ...]
    dp_tables: tuple[int, ...]
    flat_of: tuple[tuple[ShardSpec, ...], ...]
    two_stage_of: tuple[tuple[ShardSpec, ...], ...]
    key_index: tuple[int, ...]
    flat_index: tuple[int, ...]
    two_stage_index: tuple[int, ...]
    flat_columns: tuple[torch.Tensor, ...]

    @property
    def shards(self) -> tuple[ShardSpec, ...]:
        """This rank's shards (local shard ``i`` is ``shards[i]``)."""
        return self.shards_of[self.rank]

    def out_columns(self, s: ShardSpec) -> tuple[int, int]:
        """The values ``lo:hi`` of a pooled row that shard ``s`` fills."""
        lo = self.tables.out_start[s.table] + s.col_offset
        return lo, lo + s.cols


def shard_layout(shardings: Sequence[TableSharding], tables: TableShapes, rank: int, world_size: int,
                 two_stage: frozenset[int], device: torch.device) -> ShardLayout:
    """The layout of ``shardings`` seen from ``rank``; the tables in ``two_stage`` go through the
    two-stage distribution, the other shards through the flat all-to-all, data-parallel tables
    through neither (they are replicas)."""
    shards_of: list[list[ShardSpec]] = [[] for _ in range(world_size)]
    dp_tables = []
    for t, sh in enumerate(shardings):
        if sh.sharding_type is ShardingType.DATA_PARALLEL:
            dp_tables.append(t)
            continue
        for s in sh.shards:
            shards_of[s.rank].append(s)
    for shards in shards_of:
        shards.sort(key=lambda s: (s.table, s.row_offset, s.col_offset))
    keys_of = tuple(tuple(dict.fromkeys(s.key for s in shards)) for shards in shards_of)
    mine = shards_of[rank]
    flat_of = tuple(tuple(s for s in shards if s.table not in two_stage) for shards in shards_of)
    return ShardLayout(
        rank=rank, world_size=world_size, tables=tables, shards_of=tuple(tuple(s) for s in shards_of),
        keys_of=keys_of, dp_tables=tuple(dp_tables), flat_of=flat_of,
        two_stage_of=tuple(tuple(s for s in shards if s.table in two_stage) for shards in shards_of),
        key_index=tuple(keys_of[rank].index(s.key) for s in mine),
        flat_index=tuple(i for i, s in enumerate(mine) if s.table not in two_stage),
        two_stage_index=tuple(i for i, s in enumerate(mine) if s.table in two_stage),
        flat_columns=tuple(_columns(shards, tables, device) for shards in flat_of),
    )


def _columns(shards: Sequence[ShardSpec], tables: TableShapes, device: torch.device) -> torch.Tensor:
    """The values of a pooled row that ``shards`` fill, shard after shard."""
    return torch.tensor([c for s in shards for c in range(tables.out_start[s.table] + s.col_offset,
                                                          tables.out_start[s.table] + s.col_offset + s.cols)],
                        dtype=torch.int64, device=device)
