"""The planner's enumerator (harness.reference.planner.enumerators): the sharding options the
topology allows."""

from __future__ import annotations

import pytest

from harness.hw_profiles import load_profile
from harness.reference.planner import (
    PlannerConfig,
    ShardEstimator,
    ShardingType,
    TableSpec,
    Tier,
    Topology,
)
from harness.reference.planner.enumerators import ShardingOptionEnumerator
from harness.reference.planner.types import Placement, ShardingOption
from tests.reference.planner.test_planners import make_profile


def test_enumerator_offers_the_options_the_topology_allows():
    estimator = ShardEstimator(Topology.from_profile(make_profile(nodes=2, accelerators=4)), PlannerConfig())
    kinds = {o.sharding_type for o in ShardingOptionEnumerator(estimator).enumerate(TableSpec("t", 1000, 128))}
    assert kinds == set(ShardingType)
    single = ShardEstimator(Topology.from_profile(make_profile(nodes=1, accelerators=1)), PlannerConfig())
    kinds = {o.sharding_type for o in ShardingOptionEnumerator(single).enumerate(TableSpec("t", 1000, 64))}
    assert kinds == {ShardingType.TABLE_WISE}


def test_a_hot_pooled_table_over_several_nodes_is_offered_as_grids_of_rows_by_columns():
    # dlrm_dcnv2's table 20 (40M rows, 100 ids a sample) on 16 ZionEX nodes: table-row-wise, its shards
    # are one node's (1.34 ms each); column shards each receive all its ids, row shards each send a
    # partial vector per sample over the NICs. A grid's shards do neither in full
    hot = TableSpec("t20", 40_000_000, 128, 100.0, 1 / 128)
    estimator = ShardEstimator(Topology.from_profile(load_profile("zionex-16x8gpu")), PlannerConfig(batch_size=55296))
    options = ShardingOptionEnumerator(estimator).enumerate(hot)
    grids = [o for o in options if o.grid]
    assert grids and all(o.sharding_type is ShardingType.ROW_WISE and o.placement is Placement.ANY for o in grids)
    for option in grids:
        rows = {(s.row_offset, s.rows) for s in option.shards}
        cols = {(s.col_offset, s.cols) for s in option.shards}
        assert len(rows) >= 2 and len(cols) >= 2 and len(option.shards) == len(rows) * len(cols)
        assert len(option.shards) % 8 == 0 and 16 <= len(option.shards) <= 128  # node multiples, two nodes up
        assert all(s.ids_per_step == pytest.approx(55296 * 100 / len(rows)) for s in option.shards)  # its rows' ids
        check_coverage_of(option, hot)

    def costliest(option) -> float:
        return max(estimator.perf(s, Tier.HBM).total for s in option.shards)

    best = min(grids, key=costliest)
    assert costliest(best) < min(costliest(o) for o in options if not o.grid) / 3
    # none on one node, none for a sequence table (a row split of one sends each vector once)
    single = ShardEstimator(Topology.from_profile(load_profile("zionex-8gpu")), PlannerConfig(batch_size=55296))
    assert not any(o.grid for o in ShardingOptionEnumerator(single).enumerate(hot))
    sequence = TableSpec("seq", 40_000_000, 128, 100.0, 1 / 128, sequence=True)
    assert not any(o.grid for o in ShardingOptionEnumerator(estimator).enumerate(sequence))


def check_coverage_of(option: ShardingOption, table: TableSpec) -> None:
    """The option's shards are a grid: row ranges that tile the rows, column blocks that tile the
    columns, a shard for every pair of them, once."""
    for starts, total in (({(s.row_offset, s.rows) for s in option.shards}, table.rows),
                          ({(s.col_offset, s.cols) for s in option.shards}, table.dim)):
        ranges = sorted(starts)
        assert [o for o, _ in ranges] == [sum(n for _, n in ranges[:i]) for i in range(len(ranges))]
        assert sum(n for _, n in ranges) == total
    cells = sorted((s.row_offset, s.col_offset) for s in option.shards)
    rows, cols = sorted({r for r, _ in cells}), sorted({c for _, c in cells})
    assert cells == [(r, c) for r in rows for c in cols]
