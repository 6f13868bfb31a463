"""The planner's cost model (harness.reference.planner.estimators): comm, compute and storage."""

from __future__ import annotations

import pytest

from harness.hw_profiles.profiles import Profile
from harness.reference.planner import (
    CommPrecision,
    PlannerConfig,
    ShardEstimator,
    ShardingType,
    Storage,
    TableSpec,
    Tier,
    Topology,
)
from tests.reference.planner.test_planners import GB, make_profile

# -- cost model -------------------------------------------------------------------------


def _estimator(precision: CommPrecision, profile: Profile | None = None) -> ShardEstimator:
    topology = Topology.from_profile(profile or make_profile(nodes=2, accelerators=4))
    return ShardEstimator(topology, PlannerConfig(batch_size=1024, comm_precision=precision))


def test_fp16_comm_halves_the_comm_of_fp32_and_fp8_quarters_it():
    table = TableSpec("t", 10_000, 128, 3.0)
    comm = {}
    for precision in (CommPrecision.FP32, CommPrecision.FP16, CommPrecision.BF16, CommPrecision.FP8):
        estimator = _estimator(precision)
        (load,) = estimator.shard_loads(table, ShardingType.TABLE_WISE, [(0, 10_000, 0, 128)])
        ids = estimator.topology.all_to_all_s((1024 + 1024 * 3.0) * 8)  # the id all-to-all: int64, whatever the codec
        assert load.fwd_comm_s - load.bwd_comm_s == pytest.approx(ids)
        comm[precision] = load.fwd_comm_s + load.bwd_comm_s - ids
        assert load.lookup_bytes == 1024 * 3.0 * 128 * 4  # lookups stay at the parameters' precision
    assert comm[CommPrecision.FP16] == pytest.approx(comm[CommPrecision.FP32] / 2)
    assert comm[CommPrecision.BF16] == comm[CommPrecision.FP16]
    assert comm[CommPrecision.FP8] == pytest.approx(comm[CommPrecision.FP32] / 4)



def test_an_inference_plan_is_the_forward_pass_alone():
    """Served tables: the lookup and the forward all-to-alls as in training; no backward compute, no
    gradients sent, no replica all-reduced."""
    topology = Topology.from_profile(make_profile(nodes=2, accelerators=4))
    table = TableSpec("t", 10_000, 128, 3.0)
    costs = {}
    for inference in (False, True):
        estimator = ShardEstimator(topology, PlannerConfig(batch_size=1024, inference=inference))
        (load,) = estimator.shard_loads(table, ShardingType.TABLE_WISE, [(0, 10_000, 0, 128)])
        replica = estimator.shard_loads(table, ShardingType.DATA_PARALLEL, [(0, 10_000, 0, 128)])[0]
        costs[inference] = (estimator.perf(load, Tier.HBM), replica.bwd_comm_s)
    (trained, trained_all_reduce), (served, served_all_reduce) = costs[False], costs[True]
    assert (served.fwd_compute, served.fwd_comm) == (trained.fwd_compute, trained.fwd_comm)
    assert (served.bwd_compute, served.bwd_comm, served_all_reduce) == (0.0, 0.0, 0.0)
    assert trained.bwd_compute > 0 and trained.bwd_comm > 0 and trained_all_reduce > 0

def test_cost_model_arithmetic():
    estimator = _estimator(CommPrecision.FP32)
    topo = estimator.topology
    assert topo.world_size == 8 and topo.capacity == Storage(16 * GB, 64 * GB, 0)
    table = TableSpec("t", 1000, 64, 2.0, optimizer_state_factor=1.0)
    (load,) = estimator.shard_loads(table, ShardingType.TABLE_WISE, [(0, 1000, 0, 64)])
    assert load.storage_bytes == 1000 * 64 * 4 * 2  # weights plus one state element each
    perf = estimator.perf(load, Tier.HBM)
    assert perf.fwd_compute == pytest.approx(1024 * 2 * 64 * 4 / 2e12)
    assert perf.bwd_compute == pytest.approx(2 * perf.fwd_compute)
    # all-to-all of 1024 x 64 fp32: 3/8 over NVLink (300 GB/s one way), 4/8 over the NIC (25 GB/s)
    sent = 1024 * 64 * 4
    assert load.bwd_comm_s == pytest.approx(sent * 3 / 8 / 3e11 + sent * 4 / 8 / 2.5e10)
    # forward, the input all-to-all first: every rank's lengths and ids of the table (int64 each), likewise
    ids = (1024 + 1024 * 2.0) * 8
    assert load.fwd_comm_s == pytest.approx((sent + ids) * 3 / 8 / 3e11 + (sent + ids) * 4 / 8 / 2.5e10)
    assert estimator.perf(load, Tier.DDR).fwd_compute == pytest.approx(perf.fwd_compute * 2e12 / (2e11 / 4))
    dp = estimator.shard_loads(table, ShardingType.DATA_PARALLEL, [(0, 1000, 0, 64)] * 8)
    assert dp[0].fwd_comm_s == 0
    assert dp[0].bwd_comm_s == pytest.approx(2 * 7 / 8 * 1000 * 64 * 4 / 2.5e10)  # ring all-reduce over the NIC


def test_a_column_shard_keeps_a_row_wise_accumulator_per_row():
    # row-wise Adagrad: one state element per row, in every column shard of it (as the executor keeps it)
    estimator = _estimator(CommPrecision.FP32)
    rowwise = TableSpec("t", 1000, 128, 1.0, 1 / 128)
    assert estimator.storage_bytes(rowwise, 1000, 128) == 1000 * 128 * 4 + 1000 * 4
    assert estimator.storage_bytes(rowwise, 1000, 4) == 1000 * 4 * 4 + 1000 * 4
    adagrad = TableSpec("t", 1000, 128, 1.0, 1.0)
    assert estimator.storage_bytes(adagrad, 1000, 4) == 1000 * 4 * 4 * 2
