"""The traffic projection of a plan (harness.reference.planner.traffic)."""

from __future__ import annotations

import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import load_profile
from harness.reference.planner import (
    CommPrecision,
    Plan,
    PlannerConfig,
    TableSpec,
    plan_tables,
)


def test_the_traffic_projection_takes_the_typed_plan_and_its_json_read_back_projects_the_same():
    from harness.reference.planner.codecs import CommConfig
    from harness.reference.planner.traffic import FORWARD, INTER, project_traffic

    profile = load_profile("zionex-2x8gpu")
    tables = [TableSpec(f"t{i}", 10_000 * (i + 1), 16, 2.0) for i in range(6)]
    plan = plan_tables(tables, profile, PlannerConfig(batch_size=1024))
    codecs = CommConfig(forward=CommPrecision.FP16, backward=CommPrecision.INT8)
    got = project_traffic(plan, ranks_per_node=8, codecs=codecs, dense_values=1000)
    assert got["nodes"] == 2 and got["per_step"][FORWARD][f"{INTER}_bytes"] > 0
    assert project_traffic(Plan.from_dict(plan.to_dict()), ranks_per_node=8, codecs=codecs, dense_values=1000) == got
    with pytest.raises(HarnessError, match="project_traffic takes the planner's Plan .*not dict") as info:
        project_traffic(plan.to_dict(), ranks_per_node=8, codecs=codecs, dense_values=1000)
    assert info.value.category is ErrorCategory.BAD_INPUT
