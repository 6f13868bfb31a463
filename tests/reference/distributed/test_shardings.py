"""The plan's sharding of each table as the sharded executor reads it
(harness.reference.distributed.shardings), and the plans it refuses."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.reference.distributed.shardings import shardings_from_plan
from harness.reference.planner.types import Plan, ShardingType

# -- plans the sharded tables refuse --------------------------------------------------------


def plan_of(tables: list[dict], world: int = 2) -> dict:
    return {"world_size": world, "tables": tables}


def table(sharding: str, shards: list[tuple[int, int, int, int, int]], rows: int = 10, dim: int = 4,
          name: str = "t") -> dict:
    return {"name": name, "rows": rows, "dim": dim, "sharding_type": sharding,
            "shards": [dict(zip(("rank", "row_offset", "rows", "col_offset", "cols"), s)) for s in shards]}


def test_a_valid_plan_is_read_per_table():
    plan = plan_of([table("row_wise", [(0, 0, 5, 0, 4), (1, 5, 5, 0, 4)]),
                    table("data_parallel", [(0, 0, 10, 0, 4), (1, 0, 10, 0, 4)], name="u")])
    sh = shardings_from_plan(Plan.from_dict(plan), [10, 10], 4, 2)
    assert [s.sharding_type for s in sh] == [ShardingType.ROW_WISE, ShardingType.DATA_PARALLEL]
    assert [(s.rank, s.row_offset, s.rows) for s in sh[0].shards] == [(0, 0, 5), (1, 5, 5)]


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (plan_of([table("row_wise", [(0, 0, 5, 0, 4)])]), "do not cover every weight"),
        (plan_of([table("row_wise", [(0, 0, 5, 0, 4), (1, 5, 6, 0, 4)])]), "outside"),
        (plan_of([table("column_wise", [(0, 0, 10, 0, 2), (1, 0, 10, 1, 3)])]), "do not cover every weight exactly once"),
        (plan_of([table("data_parallel", [(0, 0, 10, 0, 4)])]), "one full replica on every rank"),
        (plan_of([table("table_wise", [(2, 0, 10, 0, 4)])]), "outside 0..1"),
        (plan_of([table("diagonal", [(0, 0, 10, 0, 4)])]), "unknown sharding type"),
        (plan_of([table("table_wise", [(0, 0, 10, 0, 4)])], world=4), "is for 4 ranks"),
        (plan_of([table("table_wise", [(0, 0, 10, 0, 4)], rows=11)]), "the model's is 10 x 4"),
        (plan_of([]), "has 0 tables"),
    ],
)
def test_plans_that_do_not_fit_the_model_or_the_world_are_refused(plan, message):
    with pytest.raises(HarnessError, match=message):
        shardings_from_plan(Plan.from_dict(plan), [10], 4, 2)
