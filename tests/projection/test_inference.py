"""The Server QPS bound of an inference plan (harness.projection.inference), worked by hand on a small case."""

from __future__ import annotations

import pytest

from harness.hw_profiles.devices import Device, DeviceKind
from harness.hw_profiles.profiles import (
    CollectiveBackend,
    DeviceType,
    HostSpec,
    Interconnect,
    MemoryTier,
    Profile,
)
from harness.projection.inference import HSTUShape, Resource, inference_bound, stu_flops
from harness.projection.system import System
from harness.reference.planner import CommPrecision, PlannerConfig, ShardingType, TableSpec, Tier, plan_tables
from harness.reference.planner.models import InferenceRequest

# one layer of width 4, one head of q/k and u/v 2; a request of 1 contextual, 3 history, 2 candidates
SHAPE = HSTUShape(layers=1, width=4, heads=1, attention_dim=2, linear_dim=2)
REQUEST = InferenceRequest(contextual=1, history=3, candidates=2, source="by hand")
# per token: uvqk 2 x 4 x 1 x (2 x 2 + 2 x 2) = 64, output 2 x (3 x 1 x 2) x 4 = 48: 112, times 6 tokens = 672;
# pairs: the 4 contextual and history tokens causally, 4 x 5 / 2 = 10, each candidate to those 4 and
# itself, 2 x 5 = 10: 20 pairs x 1 head x 2 x (2 + 2) = 160
FLOPS = 672 + 160


def test_the_stu_flops_of_a_small_request_by_hand():
    assert stu_flops(SHAPE, contextual=1, history=3, candidates=2) == FLOPS
    assert stu_flops(HSTUShape(3, 4, 1, 2, 2), contextual=1, history=3, candidates=2) == 3 * FLOPS


def _system(peak_flops: float) -> System:
    """Two accelerators of ``peak_flops`` bf16, 200 kB of HBM at 1 TB/s each, 1 GB of DDR at 100 GB/s
    (50 GB/s a rank), NVLink 600 GB/s both ways (300 GB/s one way)."""
    profile = Profile(
        name="test-2", description="built by the test", nodes=1, accelerators_per_node=2, accelerator="test",
        hbm=MemoryTier(200_000, 1e12), ddr=MemoryTier(10**9, 1e11), ssd=MemoryTier(0, 0.0),
        host=HostSpec("test cpu", 1, 8), interconnect=Interconnect(6e11, 5e10),
        collective_backend=CollectiveBackend.NCCL, device_type=DeviceType.CUDA, sources={},
    )
    device = Device("test", DeviceKind.GPU, (("bf16", peak_flops),), 200_000, 1e12, 6e11, 5e10, ())
    return System(profile, device)


def _bound(peak_flops: float):
    # 20,000 rows of 64 fp16 (2.56 MB) fit no HBM: row-wise, 10,000 rows (1.28 MB) a rank in DDR behind
    # a cache of 10% of them in HBM: 1,000 slots x (128 + 26) B + 10,000 x 4 B = 194 kB of the 200 kB
    system = _system(peak_flops)
    config = PlannerConfig(batch_size=2, comm_precision=CommPrecision.FP16, param_bytes_per_element=2, inference=True,
                           ddr_cache_fraction=0.1, sharding_types=(("item", (ShardingType.ROW_WISE,)),))
    table = TableSpec("item", 20_000, 64, pooling=REQUEST.events, sequence=True)
    plan = plan_tables([table], system.profile, config)
    assert [(s.rank, s.tier, s.rows) for s in plan.shards] == [(0, Tier.DDR, 10_000), (1, Tier.DDR, 10_000)]
    return inference_bound(REQUEST, SHAPE, system, plan, config, precision="bf16", batch=3, latency_bound_s=0.08)


def test_the_bound_of_a_small_plan_by_hand():
    b = _bound(peak_flops=FLOPS * 1000.0)  # a rank answers 1,000 requests a second
    # each rank's shard: 5 ids x 10,000 / 20,000 rows = 2.5 rows of 128 B = 320 B a request; its cache
    # holds 1,000 of 10,000 rows: hits 10% read from HBM, misses 90% (288 B) from DDR and written to HBM
    assert b.flops_per_request == FLOPS
    assert b.of(Resource.COMPUTE).requests_per_s == pytest.approx(2 * 1000.0)
    assert b.of(Resource.DDR).requests_per_s == pytest.approx(5e10 / 288)
    assert b.of(Resource.HBM).requests_per_s == pytest.approx(1e12 / 320)
    # the ids (2 requests + 5 ids, int64) and the vectors (5 x 64 fp16) of a step of 2, half of each to
    # the other rank at 300 GB/s
    assert b.of(Resource.LINKS).requests_per_s == pytest.approx(2 / ((56 + 640) / 2 / 3e11))
    assert b.cached_hit_share == pytest.approx(0.1)
    assert dict(b.bytes_per_request) == pytest.approx({Tier.HBM: 640, Tier.DDR: 576})
    assert (b.binding.resource, b.requests_per_s) == (Resource.COMPUTE, pytest.approx(2000.0))
    assert b.binding.resource.label == "compute-bound"
    assert b.batch_seconds == pytest.approx(3 / 1000.0)  # a batch of 3 on one rank at 1,000 a second


def test_a_fast_device_makes_the_ddr_bind():
    b = _bound(peak_flops=FLOPS * 1e12)
    assert (b.binding.resource, b.binding.resource.label) == (Resource.DDR, "memory-bound (DDR)")
    assert b.requests_per_s == pytest.approx(5e10 / 288)
