"""The traffic projection of a plan (harness.reference.planner.traffic)."""

from __future__ import annotations

import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import load_profile
from harness.reference.planner import (
    CommPrecision,
    Plan,
    PlannerConfig,
    ShardingType,
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


def _data_parallel_plan(bytes_per_value: int) -> Plan:
    """2 nodes x 8 ranks, every table data-parallel: dims 8 (pooling 2 and 1) and 16 (pooling 3)."""
    tables = [TableSpec("a", 100, 8, 2.0), TableSpec("b", 50, 8, 1.0), TableSpec("c", 40, 16, 3.0)]
    types = tuple((t.name, (ShardingType.DATA_PARALLEL,)) for t in tables)
    return plan_tables(tables, load_profile("zionex-2x8gpu"), PlannerConfig(
        batch_size=64, sharding_types=types, param_bytes_per_element=bytes_per_value))


def test_16_bit_replicas_are_projected_gathered_as_the_executor_moves_them():
    """Replicas of bf16/fp16 tables gather every rank's ids and pooled gradients (replicas.py),
    not an all-reduce of the tables: the projection counts those bytes; fp32 replicas stay an all-reduce."""
    from harness.reference.planner.codecs import CommConfig
    from harness.reference.planner.traffic import INTER, INTRA, REPLICA, project_traffic

    w, per_node = 16, 8
    b = 64 // w
    half, fp32 = _data_parallel_plan(2), _data_parallel_plan(4)
    codecs = CommConfig(backward=CommPrecision.BF16)
    # per row of each dimension's group: its ids (int64) and one bf16 vector per table
    message = b * ((2 + 1) * 8 + 2 * 8 * 2) + b * (3 * 8 + 16 * 2)
    got = project_traffic(half, ranks_per_node=per_node, codecs=codecs, dense_values=0)
    assert got["per_step"][REPLICA] == {f"{INTRA}_bytes": w * (per_node - 1) * message,
                                        f"{INTER}_bytes": w * (w - per_node) * message}
    assert got["exact_inter_node"][REPLICA]
    # the plan says its tables' bytes; a caller may say them instead
    assert project_traffic(fp32, ranks_per_node=per_node, codecs=codecs, dense_values=0, table_bytes=2) == got
    values = 100 * 8 + 50 * 8 + 40 * 16  # fp32: reduce-scatter and all-gather of every replica's values
    assert project_traffic(fp32, ranks_per_node=per_node, codecs=codecs, dense_values=0)["per_step"][REPLICA] == {
        f"{INTRA}_bytes": 2 * (per_node - 1) * values * 4, f"{INTER}_bytes": 2 * (w - per_node) * values * 4}


@pytest.mark.slow
def test_an_emulated_bf16_run_moves_the_bytes_the_planner_projects(tree):
    """The report tree's emulated 2 nodes x 2 GPUs run (bf16 tables, 16 of them data-parallel):
    every collective's measured bytes per step, on both link classes, are the projection's."""
    import json

    logged = {}
    for line in (tree.sharded / "result_0.txt").read_text().splitlines():
        if ":::MLLOG " in line:
            rec = json.loads(line.split(":::MLLOG ", 1)[1])
            logged.setdefault(rec["key"], rec["value"])
    assert logged["harness_embedding_precision"]["tables"] == "bf16"
    assert logged["harness_sharding_plan"]["sharding_types"]["data_parallel"] > 0
    measured, projected = logged["harness_comm_stats"]["per_step"], logged["harness_comm_projection"]["per_step"]
    assert set(measured) == set(projected)
    for kind, sent in measured.items():
        for link in ("intra_node_bytes", "inter_node_bytes"):
            assert sent[link] == projected[kind][link], (kind, link, sent[link], projected[kind][link])
    assert measured["replica_all_reduce"]["inter_node_bytes"] > 0
