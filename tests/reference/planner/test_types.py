"""The planner's value types (harness.reference.planner.types): their arithmetic, and a plan's JSON
read back."""

from __future__ import annotations

import json

import pytest

from harness.errors import HarnessError
from harness.reference.planner import (
    CommPrecision,
    Perf,
    Plan,
    PlannerConfig,
    PlannerError,
    PlannerErrorType,
    Storage,
    TableSpec,
    Tier,
    plan_tables,
)
from tests.reference.planner.test_planners import GB, make_profile


def test_value_arithmetic():
    a, b = Storage(1, 2, 3), Storage(10, 20, 30)
    assert a + b == Storage(11, 22, 33) and b - a == Storage(9, 18, 27)
    assert a.fits_in(b) and not b.fits_in(a) and (a + b).total == 66
    assert (Perf(1, 2, 3, 4) + Perf(1, 1, 1, 1)).total == 14
    with pytest.raises(PlannerError) as info:
        TableSpec("bad", 0, 8)
    assert info.value.planner_category is PlannerErrorType.BAD_INPUT


@pytest.mark.parametrize("config", [PlannerConfig(), PlannerConfig(comm_precision=CommPrecision.FP16),
                                    PlannerConfig(tiers=(("t2", (Tier.SSD,)),), ssd_cache_fraction=0.1)])
def test_a_plan_read_back_from_its_json_is_the_same_plan(config):
    """``Plan.from_dict`` at a process boundary: the JSON, and so the fingerprint, survive the
    round trip bit for bit, through a JSON text too."""
    tables = [TableSpec(f"t{i}", rows, 64, pooling=2.5, optimizer_state_factor=1 / 64)
              for i, rows in enumerate((10, 50_000, 3_000_000, 200))]
    plan = plan_tables(tables, make_profile(nodes=2, accelerators=2, ssd=1000 * GB), config)
    if config.tiers:
        assert (Tier.SSD,) in plan.table_tiers()
    data = plan.to_dict()
    again = Plan.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data and again.fingerprint == plan.fingerprint
    assert (again.tables, again.sharding_types, again.rank_storage, again.rank_perf, again.rank_capacity) == (
        plan.tables, plan.sharding_types, plan.rank_storage, plan.rank_perf, plan.rank_capacity)
    place = [[(s.rank, s.tier, s.row_offset, s.rows, s.col_offset, s.cols, s.storage_bytes, s.perf.total)
              for s in shards] for shards in plan.table_shards()]
    assert [[(s.rank, s.tier, s.row_offset, s.rows, s.col_offset, s.cols, s.storage_bytes, s.perf.total)
             for s in shards] for shards in again.table_shards()] == place
    assert again.table_tiers() == plan.table_tiers()


@pytest.mark.parametrize(("data", "message"), [
    ([], "must be a JSON object"),
    ({"world_size": 1}, "has no tables"),
    ({"world_size": 1, "tables": [{"name": "t", "rows": 4, "dim": 2, "sharding_type": "spiral"}]},
     "unknown sharding type 'spiral'"),
    ({"world_size": 1, "tables": [{"name": "t", "rows": 4, "dim": 2, "sharding_type": "table_wise",
                                   "shards": [{"rank": 0, "row_offset": 0, "rows": 4, "col_offset": 0, "cols": 2,
                                               "tier": "tape"}]}]}, "a tier of hbm, ddr, ssd"),
    ({"world_size": 1, "tables": [{"name": "t", "rows": 4, "dim": 2, "sharding_type": "table_wise"}] * 2},
     "two tables have that name"),
])
def test_a_plan_that_is_not_one_is_refused_in_one_line(data, message):
    with pytest.raises(HarnessError, match=message):
        Plan.from_dict(data)
