"""A projected step and time to train: the phases, what overlaps, the RCP's samples, the evaluations."""

from __future__ import annotations

import dataclasses

import pytest

from harness.errors import HarnessError
from harness.hw_profiles import load_profile
from harness.projection.constants import DeviceClass, load_constants
from harness.projection.step import all_reduce_seconds
from harness.projection.system import MEASURED_COPY_FRACTION, system_for_profile
from harness.projection.train_time import eval_interval, project, samples_to_target
from harness.projection.workload import benchmark_workload
from harness.rules.rcp import convergence_point
from harness.rules.specs import load_benchmark


@pytest.fixture(scope="module")
def h100():
    return project(load_benchmark("dlrm_dcnv2"), system_for_profile(load_profile("dgx-h100-8gpu")))


def test_the_step_is_its_phases_and_only_what_overlap_leaves_out(h100):
    step = h100.step
    assert step.seconds == pytest.approx(sum(p.exposed for p in step.phases))
    dense = sum(step.phase(n).seconds
                for n in ("dense forward GEMMs", "dense backward GEMMs", "activations (elementwise)"))
    ids = step.phase("id all-to-all (under the dense work)")
    assert ids.exposed == pytest.approx(max(0.0, ids.seconds - dense))
    reduce = step.phase("dense all-reduce (under the backward GEMMs)")
    assert reduce.exposed == pytest.approx(max(0.0, reduce.seconds - step.phase("dense backward GEMMs").seconds))
    assert step.phase("dense backward GEMMs").seconds == pytest.approx(2 * step.phase("dense forward GEMMs").seconds)
    assert step.samples_per_s == pytest.approx(55296 / step.seconds)
    assert h100.plan.step_time_s < step.seconds  # the embeddings-only step is a part of it


def test_an_efficiency_scales_the_phases_it_prices(h100):
    base = load_constants()
    slower = base.with_class(DeviceClass.ACCELERATOR, base.of(DeviceClass.ACCELERATOR).scaled(memory_efficiency=0.5))
    again = project(load_benchmark("dlrm_dcnv2"), h100.system, constants=slower, plan=h100.plan)
    assert again.step.phase("activations (elementwise)").seconds == pytest.approx(
        2 * h100.step.phase("activations (elementwise)").seconds)
    lookup = "embedding lookup, HBM"
    assert again.step.phase(lookup).seconds == pytest.approx(h100.step.phase(lookup).seconds)
    assert again.minutes > h100.minutes


def test_samples_and_evaluations_to_the_target_follow_the_rcps(h100):
    spec = load_benchmark("dlrm_dcnv2")
    point = convergence_point("dlrm_dcnv2", 55296)
    assert h100.samples_to_target == pytest.approx(point.mean * 4195197692)
    assert h100.evaluations == pytest.approx(point.mean / 0.05)
    assert h100.eval_seconds_each == pytest.approx(89137319 / 65536 * h100.eval_step.seconds)
    assert h100.minutes == pytest.approx((h100.samples_to_target / 55296 * h100.step.seconds
                                          + h100.evaluations * h100.eval_seconds_each) / 60)
    low, high = h100.band_minutes
    assert low < h100.minutes < high and high / h100.minutes == pytest.approx(h100.band)
    # dlrm's logs count epochs from one: its RCP's 1.90 epochs are 0.90 of an epoch of training
    dlrm = load_benchmark("dlrm")
    assert samples_to_target(dlrm, convergence_point("dlrm", 55296)) == pytest.approx(
        (convergence_point("dlrm", 55296).mean - 1) * 4195197692)
    assert eval_interval(spec, 55296) == pytest.approx(0.05 * 4195197692)


def test_the_all_reduce_crosses_nodes_one_rail_per_rank():
    system = system_for_profile(load_profile("zionex-16x8gpu"))
    nbytes = 64e6
    inside = 2 * 7 / 8 * nbytes / 300e9  # NVLink 600 GB/s both ways
    across = 2 * 15 / 16 * nbytes / 8 / 25e9  # each rank's eighth over its own 200 Gb/s NIC
    assert all_reduce_seconds(nbytes, system) == pytest.approx(inside + across)


def test_precision_is_what_the_device_computes():
    v100 = project(load_benchmark("dlrm_dcnv2"), system_for_profile(load_profile("bigbasin-8gpu")))
    assert v100.precision == "fp16"  # no bf16 units
    h100 = system_for_profile(load_profile("dgx-h100-8gpu"))
    fp32, bf16 = (project(load_benchmark("dlrm_dcnv2"), h100, precision=p) for p in ("fp32", "bf16"))
    assert fp32.precision == "fp32" and fp32.step.phase("dense forward GEMMs").seconds > 4 * bf16.step.phase(
        "dense forward GEMMs").seconds  # 67 against 989 TFLOP/s, where the GEMMs are bound by compute
    with pytest.raises(HarnessError, match="cannot be split over 8 ranks"):
        project(load_benchmark("dlrm_dcnv2"), system_for_profile(load_profile("dgx-h100-8gpu")), batch_size=4)


def test_this_machine_is_priced_from_its_measured_memory():
    system = system_for_profile(load_profile("local"), memory_bw_bytes_per_s=10e9)
    assert system.memory_bw_bytes_per_s == pytest.approx(10e9 / MEASURED_COPY_FRACTION)
    assert system.device_class is DeviceClass.CPU and system.ranks == 1
    p = project(load_benchmark("dlrm_synthetic"), system)
    assert p.batch_size == 2048 and p.minutes > 0
    assert dataclasses.replace(p, band=2.0).band_minutes == (p.minutes / 2, p.minutes * 2)
    assert benchmark_workload(load_benchmark("dlrm_synthetic")).ops_per_step > 0


def test_data_generated_alongside_shares_the_cores_and_is_never_less_than_the_generator_alone():
    system = system_for_profile(load_profile("local"), memory_bw_bytes_per_s=10e9)
    spec = load_benchmark("dlrm_synthetic")
    base = project(spec, system)
    cores = system.device.cores
    for per_sample in (1e-7, 1e-4):  # a generator far faster than the step, and one far slower
        p = project(spec, system, plan=base.plan, input_seconds_per_sample=per_sample)
        step_input = p.step.phase("input (synthetic data generated alongside)")
        assert step_input.seconds == pytest.approx(2048 * per_sample)
        alone = step_input.seconds
        assert step_input.exposed == pytest.approx(max(alone / cores, alone - base.step.seconds))
        assert p.step.seconds == pytest.approx(base.step.seconds + step_input.exposed)
        evaluation = p.eval_step.phase("input (synthetic data generated alongside)")
        assert evaluation.seconds == pytest.approx(16384 * per_sample)
    assert [ph.name for ph in base.step.phases if ph.name.startswith("input")] == []


def test_harness_project_counts_this_machines_generator_for_a_synthetic_benchmark(capsys):
    from harness.cli import main

    assert main(["project"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dlrm_synthetic on local:") and "input (synthetic data generated alongside)" in out
    assert main(["project", "--benchmark", "dlrm_dcnv2", "--profile", "dgx-h100-8gpu"]) == 0
    assert "input (" not in capsys.readouterr().out  # real data, on a system that is not this one


def test_the_embeddings_are_priced_per_tier_their_shards_live_on():
    """The 12-trillion-parameter model's tables on 16 ZionEX nodes live in HBM, in DDR behind HBM caches
    and on the SSD behind caches: the slowest rank's lookups and updates are a phase per tier."""
    from harness.projection.step import embedding_cost
    from harness.reference.planner import PlannerConfig, plan_tables
    from harness.reference.planner.models import load_model

    system = system_for_profile(load_profile("zionex-16x8gpu"))
    plan = plan_tables(load_model("dlrm-12t"), system.profile,
                       PlannerConfig(batch_size=65536, ddr_cache_fraction=0.05, ssd_cache_fraction=0.05))
    eff = load_constants().of(DeviceClass.ACCELERATOR)
    cost = embedding_cost(plan, system, eff)
    assert {t.value for t, _ in cost.lookup} >= {"hbm"} and len(cost.lookup) >= 2
    slowest = max(range(plan.world_size), key=lambda r: sum(
        s.perf.fwd_compute + s.perf.bwd_compute for s in plan.shards if s.rank == r) / eff.gather_efficiency
        + (plan.rank_perf[r].fwd_comm + plan.rank_perf[r].bwd_comm) / eff.link_efficiency)
    mine = [s for s in plan.shards if s.rank == slowest]
    for tier, seconds in cost.lookup:
        assert seconds == pytest.approx(sum(s.perf.fwd_compute for s in mine if s.tier is tier))
