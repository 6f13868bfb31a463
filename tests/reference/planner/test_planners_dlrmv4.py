"""The official dlrmv4 model planned (``harness plan --benchmark dlrmv4``), and what the planner now
prices: sequence tables' jagged traffic and every table's id all-to-all."""

from __future__ import annotations

import dataclasses
import time

import pytest

from compliance.schemas import validate
from harness.cli import main
from harness.hw_profiles import load_profile
from harness.reference.planner import (
    CommPrecision,
    Perf,
    Plan,
    PlannerConfig,
    PlannerError,
    PlannerErrorType,
    ShardEstimator,
    ShardingType,
    Storage,
    TableSpec,
    Tier,
    Topology,
    plan_tables,
)
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.models import sequence_events, tables_for_benchmark
from harness.reference.planner.traffic import BACKWARD, FORWARD, INPUT, INTRA, project_traffic
from harness.reference.planner.types import Shard
from harness.rules.specs import load_benchmark
from tests.reference.planner.test_planners import make_profile

PROFILES = ["zionex-8gpu", "zionex-16x8gpu", "dgx-h100-8gpu", "mi350x-8gpu"]
CROSSES = ["user_x_artist", "user_x_album", "user_x_hour", "item_x_hour", "artist_x_hour", "user_x_is_organic",
           "user_x_artist_x_hour"]


@pytest.fixture(scope="module")
def official() -> tuple[list[TableSpec], int]:
    spec = load_benchmark("dlrmv4")
    return tables_for_benchmark(spec), int(spec.reference_hyperparameters["global_batch_size"])


def test_the_official_model_is_293m_rows_of_512_fp32_600_gb(official):
    tables, _ = official
    assert [t.name for t in tables] == ["item", "artist", "album", "uid", *CROSSES]
    assert [t.sequence for t in tables] == [True] * 3 + [False] * 8
    assert {t.dim for t in tables} == {512}
    assert sum(t.rows for t in tables) == 293_051_712  # configs.py, yambda-5b: 15.05M + 278M of crosses
    assert sum(t.rows * t.dim * 4 for t in tables) == pytest.approx(600.17e9, rel=1e-4)
    # no mean sequence length is published: the sequence tables are priced at the longest sequence, and say so
    events, source = sequence_events(load_benchmark("dlrmv4"))
    assert [t.pooling for t in tables] == [events] * 3 + [1.0] * 8 and events == 4096
    assert "max_sequence_length" in source
    # the synthetic twin the executor runs has the same tables, in the same order (its crosses smaller)
    twin = tables_for_benchmark(load_benchmark("dlrmv4_synthetic"))
    assert [t.name for t in twin] == ["item", "artist", "album", "uid", *CROSSES]
    assert [t.pooling for t in twin] == [32.0] * 3 + [1.0] * 8


@pytest.mark.parametrize("profile", PROFILES)
def test_the_official_model_plans_on_each_profile_within_capacity_and_balanced(official, profile):
    tables, batch = official
    start = time.perf_counter()
    plan = plan_tables(tables, load_profile(profile),
                       PlannerConfig(batch_size=batch, ddr_cache_fraction=0.05, ssd_cache_fraction=0.05))
    assert time.perf_counter() - start < 60
    assert plan.imbalance <= 1.05
    assert all(s.fits_in(plan.rank_capacity) for s in plan.rank_storage)
    for table, shards in zip(plan.tables, plan.table_shards()):  # every element of every table placed once
        assert sum(s.rows * s.cols for s in shards) == table.rows * table.dim
    assert plan.total_storage.total >= sum(t.rows * t.dim * 4 for t in tables)
    assert 0 < plan.step_time_s < 10
    # nothing of a sequence table is summed: split by rows it sends what it would whole, spread evenly
    assert plan.sharding_types[:3] == (ShardingType.ROW_WISE,) * 3


def test_cli_plans_dlrmv4_on_16_zionex_nodes_and_says_where_the_bytes_are(capsys):
    assert main(["plan", "--benchmark", "dlrmv4", "--profile", "zionex-16x8gpu"]) == 0
    out = capsys.readouterr().out
    assert "128 rank(s), batch 8192" in out and "11 tables" in out
    assert float(next(line for line in out.splitlines() if line.startswith("imbalance")).split(":")[1]) <= 1.05
    assert "total: HBM " in out and "tables: 11 wholly in HBM" in out and "projected step time" in out
    assert "priced at 4096 ids a sample: max_sequence_length" in out


def test_a_profile_too_small_is_one_line_with_possible_solutions(official, capsys):
    assert main(["plan", "--benchmark", "dlrmv4", "--profile", "h200-1gpu"]) == 3  # HARDWARE
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("harness: error: insufficient storage: the 11 tables need 601.3 GB")
    assert "Possible solutions: a profile with more nodes (at least 2 of these nodes" in err
    assert "bf16 or fp16 embedding tables" in err and "row-wise already" in err
    with pytest.raises(PlannerError) as info:
        plan_tables(official[0], load_profile("h200-1gpu"))
    assert info.value.planner_category is PlannerErrorType.INSUFFICIENT_STORAGE


# -- what the cost model and the traffic projection price -------------------------------------


def _estimator(batch: int = 1024) -> ShardEstimator:
    return ShardEstimator(Topology.from_profile(make_profile(accelerators=4)), PlannerConfig(batch_size=batch))


def test_the_id_all_to_all_is_counted_once_per_shard_so_column_shards_pay_for_it():
    est, b = _estimator(), 1024
    topo = est.topology
    pooled = TableSpec("t", 1000, 64, pooling=10)
    (tw,) = est.shard_loads(pooled, ShardingType.TABLE_WISE, [(0, 1000, 0, 64)])
    ids_in = topo.all_to_all_s((b + b * 10) * 8)  # lengths (int64 a sample), then ids (int64 each)
    assert tw.bwd_comm_s == pytest.approx(topo.all_to_all_s(b * 64 * 4))
    assert tw.fwd_comm_s == pytest.approx(topo.all_to_all_s(b * 64 * 4) + ids_in)
    cw = est.shard_loads(pooled, ShardingType.COLUMN_WISE, [(0, 1000, c, 16) for c in range(0, 64, 16)])
    assert sum(s.fwd_comm_s for s in cw) == pytest.approx(tw.fwd_comm_s + 3 * ids_in)  # each receives every id
    rw = est.shard_loads(pooled, ShardingType.ROW_WISE, [(r, 250, 0, 64) for r in range(0, 1000, 250)])
    assert rw[0].fwd_comm_s - rw[0].bwd_comm_s == pytest.approx(topo.all_to_all_s((b + b * 10 / 4) * 8))
    (dp, *_) = est.shard_loads(TableSpec("s", 10, 64, pooling=10), ShardingType.DATA_PARALLEL, [(0, 10, 0, 64)] * 4)
    assert dp.fwd_comm_s == 0.0  # a replica looks its own samples' ids up


def test_a_sequence_table_sends_a_vector_per_id_and_returns_a_gradient_per_id():
    est, b = _estimator(), 1024
    topo = est.topology
    sequence = TableSpec("item", 1000, 64, pooling=10, sequence=True)
    (tw,) = est.shard_loads(sequence, ShardingType.TABLE_WISE, [(0, 1000, 0, 64)])
    assert tw.bwd_comm_s == pytest.approx(topo.all_to_all_s(b * 10 * 64 * 4))  # not b x 64: nothing is pooled
    assert tw.fwd_comm_s == pytest.approx(tw.bwd_comm_s + topo.all_to_all_s((b + b * 10) * 8))
    assert tw.lookup_bytes == b * 10 * 64 * 4  # a lookup per event
    rw = est.shard_loads(sequence, ShardingType.ROW_WISE, [(r, 250, 0, 64) for r in range(0, 1000, 250)])
    assert rw[0].bwd_comm_s == pytest.approx(topo.all_to_all_s(b * 10 / 4 * 64 * 4))  # only the ids in its rows


def _plan(world: int, tables: list[TableSpec], types: list[ShardingType], shards: list[tuple], batch: int) -> Plan:
    """A hand-made plan: ``shards`` are (table, rank, col_offset, cols) of whole-row shards."""
    rows = {t.name: t.rows for t in tables}
    placed = tuple(Shard(name, rank, Tier.HBM, 0, rows[name], col, cols, 0, Perf()) for name, rank, col, cols in shards)
    return Plan(profile="hand", world_size=world, batch_size=batch, comm_precision=CommPrecision.FP32,
                tables=tuple(tables), sharding_types=tuple(types), shards=placed,
                rank_storage=(Storage(),) * world, rank_perf=(Perf(),) * world, rank_capacity=Storage())


@pytest.mark.parametrize("codec", [CommPrecision.FP32, CommPrecision.INT8])
def test_a_sequence_tables_projected_bytes_are_what_the_jagged_all_to_all_of_a_known_batch_sends(codec):
    """Two ranks, two samples each; the events per sample of the known batch: rank 0's [2, 4], rank 1's
    [1, 5] (a mean of 3, the tables' pooling). ``item`` (dim 8) is table-wise on rank 0, ``album``
    (dim 8) column-wise (4 columns on each rank), ``uid`` (pooled, dim 8) table-wise on rank 1."""
    lengths = {0: [2, 4], 1: [1, 5]}
    item, album = TableSpec("item", 10, 8, 3.0, sequence=True), TableSpec("album", 6, 8, 3.0, sequence=True)
    uid = TableSpec("uid", 5, 8, 1.0)
    plan = _plan(2, [item, album, uid], [ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_WISE],
                 [("item", 0, 0, 8), ("album", 0, 0, 4), ("album", 1, 4, 4), ("uid", 1, 0, 8)], batch=4)
    got = project_traffic(plan, ranks_per_node=2, codecs=CommConfig(forward=codec, backward=codec),
                          dense_values=0)["per_step"]

    def row(cols: int) -> int:  # one vector on the wire: its values, and an int8 row's scale and bias
        return cols * codec.bytes_per_element + (8 if codec is CommPrecision.INT8 else 0)

    # by hand, message by message: a shard on src sends one vector per event of dst's samples
    events = {r: sum(v) for r, v in lengths.items()}  # 6 and 6
    forward = (events[1] * row(8)  # item: rank 0 -> rank 1
               + events[1] * row(4) + events[0] * row(4)  # album: each rank's columns to the other
               + len(lengths[0]) * row(8))  # uid, pooled: rank 1 -> rank 0, one vector a sample
    assert got[FORWARD][f"{INTRA}_bytes"] == forward
    assert got[BACKWARD][f"{INTRA}_bytes"] == forward  # a gradient per vector, back the same way
    # the ids: each rank sends every other rank that holds a table's rows the lengths of its
    # samples (int64 each), then their ids (int64 each)
    ids = (len(lengths[1]) + events[1]) * 8  # item: rank 1 -> rank 0
    ids += (len(lengths[1]) + events[1]) * 8 + (len(lengths[0]) + events[0]) * 8  # album: both ways
    ids += (len(lengths[0]) + len(lengths[0])) * 8  # uid: rank 0 -> rank 1, one id a sample
    assert got[INPUT][f"{INTRA}_bytes"] == ids


def test_a_table_row_wise_sequence_table_over_two_nodes_is_gathered_in_its_node_then_sent_whole():
    """2 nodes x 2 ranks, two samples a rank; ``item`` (10 rows, dim 4, 3 events a sample on average)
    table-row-wise on node 0: rows 0-4 on rank 0, 5-9 on rank 1. The known batch's events per sample
    (rank: [..]) and each sample's ids half in each shard's rows. Stage one: each shard sends, inside
    its node, its vectors of the samples of the other rank's local index on every node; stage two:
    each rank of node 0 sends its local index's whole sequences to the same local index of node 1."""
    lengths = {0: [2, 4], 1: [4, 2], 2: [6, 0], 3: [2, 4]}
    item = TableSpec("item", 10, 4, 3.0, sequence=True)
    plan = _plan(4, [item], [ShardingType.TABLE_ROW_WISE], [], batch=8)
    plan = dataclasses.replace(plan, shards=(Shard("item", 0, Tier.HBM, 0, 5, 0, 4, 0, Perf()),
                                             Shard("item", 1, Tier.HBM, 5, 5, 0, 4, 0, Perf())))
    got = project_traffic(plan, ranks_per_node=2, codecs=CommConfig(), dense_values=0)["per_step"]
    vector = 4 * 4
    # stage one: rank 0's rows for the samples of local index 1 (ranks 1 and 3), rank 1's for local index 0
    stage_one = (sum(lengths[1]) + sum(lengths[3])) // 2 * vector + (sum(lengths[0]) + sum(lengths[2])) // 2 * vector
    stage_two = sum(lengths[2]) * vector + sum(lengths[3]) * vector  # ranks 0 -> 2 and 1 -> 3, whole sequences
    for kind in (FORWARD, BACKWARD):
        assert got[kind] == {f"{INTRA}_bytes": stage_one, "inter_node_bytes": stage_two}


def test_the_plans_json_validates_with_its_sequence_tables_and_reads_back(official):
    tables, batch = official
    plan = plan_tables(tables, load_profile("zionex-8gpu"), PlannerConfig(batch_size=batch, ddr_cache_fraction=0.05))
    data = plan.to_dict()
    validate(data, "sharding_plan", what="dlrmv4 plan")
    assert [t.get("sequence", False) for t in data["tables"]] == [True] * 3 + [False] * 8
    assert Plan.from_dict(data).to_dict() == data
