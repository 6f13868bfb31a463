"""The embedding sharding planner (harness.reference.planner) and ``harness plan``."""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compliance.schemas import validate
from harness.cli.plan import DEFAULT_CACHE_FRACTION
from harness.cli.plan import plan as plan_command
from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import load_profile
from harness.hw_profiles.profiles import (
    CollectiveBackend,
    DeviceType,
    HostSpec,
    Interconnect,
    MemoryTier,
    Profile,
)
from harness.reference.planner import (
    CommPrecision,
    Plan,
    PlannerConfig,
    PlannerError,
    PlannerErrorType,
    ShardingType,
    TableSpec,
    Tier,
    plan_tables,
)
from harness.reference.planner.models import load_model, tables_for_benchmark
from harness.rules.specs import load_benchmark

GB = 10**9


def make_profile(nodes: int = 1, accelerators: int = 4, hbm: int = 16 * GB, ddr: int = 256 * GB,
                 ssd: int = 0) -> Profile:
    """A hand-built profile; DDR and SSD are per node."""
    return Profile(
        name=f"test-{nodes}x{accelerators}",
        description="built by the test",
        nodes=nodes,
        accelerators_per_node=accelerators,
        accelerator="test accelerator" if accelerators else None,
        hbm=MemoryTier(hbm if accelerators else 0, 2e12 if accelerators else 0.0),
        ddr=MemoryTier(ddr, 2e11),
        ssd=MemoryTier(ssd, 5e9 if ssd else 0.0),
        host=HostSpec("test cpu", 1, 8),
        interconnect=Interconnect(6e11, 5e10),
        collective_backend=CollectiveBackend.NCCL if accelerators else CollectiveBackend.GLOO,
        device_type=DeviceType.CUDA if accelerators else DeviceType.CPU,
        sources=(),
    )


def check_capacities(plan: Plan) -> None:
    """Every rank's bytes per tier, recounted from the shards (and the caches of cached shards: an
    SSD shard's, and a DDR shard's under HBM, each in the fastest tier above it, replicas never),
    fit that tier's capacity."""
    used: dict[tuple[int, Tier], int] = defaultdict(int)
    caches: dict[tuple[int, Tier], int] = defaultdict(int)
    fractions = {Tier.SSD: plan.config.get("ssd_cache_fraction", 0.0), Tier.DDR: plan.config.get("ddr_cache_fraction", 0.0)}
    replicas = {t.name for t, st in zip(plan.tables, plan.sharding_types) if st is ShardingType.DATA_PARALLEL}
    tiers = list(Tier)
    for shard in plan.shards:
        used[shard.rank, shard.tier] += shard.storage_bytes
        above = [t for t in tiers[: tiers.index(shard.tier)] if plan.rank_capacity.get(t) > 0]
        fraction = fractions.get(shard.tier, 0.0)
        if above and fraction and shard.table not in replicas:  # at least its share (more when one batch needs more)
            caches[shard.rank, above[0]] += math.ceil(shard.storage_bytes * fraction) + 4 * shard.rows
    for rank, storage in enumerate(plan.rank_storage):
        for tier in tiers:
            if caches[rank, tier]:
                assert storage.get(tier) >= used[rank, tier] + caches[rank, tier], (rank, tier, storage)
            else:
                assert storage.get(tier) == used[rank, tier], (rank, tier, storage)
        assert storage.fits_in(plan.rank_capacity), (rank, storage, plan.rank_capacity)


def check_coverage(plan: Plan) -> None:
    """Each sharded table's shards cover its rows x dim exactly once (a replica per rank if data-parallel)."""
    cells: dict[str, int] = defaultdict(int)
    for shard in plan.shards:
        cells[shard.table] += shard.rows * shard.cols
    for table, sharding in zip(plan.tables, plan.sharding_types):
        copies = plan.world_size if sharding is ShardingType.DATA_PARALLEL else 1
        assert cells[table.name] == table.rows * table.dim * copies, table.name


# -- the 12T model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def plan_12t() -> tuple[Plan, float]:
    """The 12T model as `harness plan` plans it: DDR and SSD shards behind caches of 5% of their
    rows in HBM (a huge table whole on one rank's SSD would need a 50 GB cache, more than its HBM)."""
    tables = load_model("dlrm-12t")
    start = time.perf_counter()
    config = PlannerConfig(ddr_cache_fraction=DEFAULT_CACHE_FRACTION, ssd_cache_fraction=DEFAULT_CACHE_FRACTION)
    plan = plan_tables(tables, load_profile("zionex-16x8gpu"), config)
    return plan, time.perf_counter() - start


def test_12t_model_has_1000_tables_of_12_trillion_parameters():
    tables = load_model("dlrm-12t")
    assert len(tables) == 1000 and len({t.name for t in tables}) == 1000
    assert sum(t.rows * t.dim for t in tables) == pytest.approx(1.2e13, rel=0.01)
    assert {t.dim for t in tables} <= set(range(64, 257)) and {64, 256} <= {t.dim for t in tables}
    assert load_model("dlrm-12t") == tables  # generated deterministically


def test_12t_plans_on_zionex_quickly_balanced_over_all_tiers(plan_12t):
    plan, seconds = plan_12t
    assert seconds < 60
    assert plan.world_size == 128
    assert plan.imbalance <= 1.05
    total = plan.total_storage
    assert total.hbm > 0 and total.ddr > 0 and total.ssd > 0
    check_capacities(plan)
    check_coverage(plan)
    assert 0 < plan.step_time_s < 10 and plan.samples_per_s == pytest.approx(65536 / plan.step_time_s)


def test_12t_does_not_fit_one_h200():
    with pytest.raises(PlannerError) as info:
        plan_tables(load_model("dlrm-12t"), load_profile("h200-1gpu"))
    err = info.value
    assert err.planner_category is PlannerErrorType.INSUFFICIENT_STORAGE
    assert isinstance(err, HarnessError) and err.category is ErrorCategory.HARDWARE
    message = str(err)
    assert "h200-1gpu" in message and "short by" in message and "TB" in message
    assert "Possible solutions" in message and "more nodes" in message and "optimizer state" in message


def test_a_table_larger_than_any_rank_tier_is_named():
    with pytest.raises(PlannerError) as info:
        plan_tables([TableSpec("big", 10**9, 64)], make_profile(nodes=1, accelerators=1, ddr=200 * GB, ssd=200 * GB))
    assert info.value.planner_category is PlannerErrorType.INSUFFICIENT_STORAGE
    assert "'big'" in str(info.value) and "Possible solutions" in str(info.value)


# -- invariants -------------------------------------------------------------------------

tables_strategy = st.lists(
    st.builds(
        lambda rows, dim, pooling, factor: (rows, dim, pooling, factor),
        st.integers(1, 500_000),
        st.sampled_from([4, 16, 64, 128, 256]),
        st.floats(0, 40),
        st.sampled_from([0.0, 1.0, 2.0]),
    ),
    min_size=1,
    max_size=14,
)
profile_strategy = st.builds(
    make_profile,
    nodes=st.integers(1, 3),
    accelerators=st.integers(0, 4),
    hbm=st.integers(0, 2 * GB),
    ddr=st.one_of(st.integers(2**20, 64 * 2**20), st.integers(GB // 4, 24 * GB)),  # tight or roomy
    ssd=st.integers(0, 16 * GB),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=tables_strategy, profile=profile_strategy, precision=st.sampled_from(list(CommPrecision)),
       cache=st.sampled_from([0.0, 0.05, 0.5]), pins=st.lists(st.sampled_from([None, (Tier.SSD,), (Tier.HBM, Tier.DDR)]),
                                                            max_size=8))
def test_plans_never_exceed_any_tier_on_any_rank(specs, profile, precision, cache, pins):
    tables = [TableSpec(f"t{i}", r, d, p, f) for i, (r, d, p, f) in enumerate(specs)]
    tiers = tuple((f"t{i}", pin) for i, pin in enumerate(pins[: len(tables)]) if pin is not None)
    config = PlannerConfig(batch_size=4096, comm_precision=precision, ssd_cache_fraction=cache, ddr_cache_fraction=cache,
                           tiers=tiers)
    try:
        plan = plan_tables(tables, profile, config)
    except PlannerError as err:
        assert "Possible solutions" in str(err) or "set it to another tier" in str(err)
        return
    check_capacities(plan)
    check_coverage(plan)
    for name, allowed in tiers:
        assert all(s.tier in allowed for s in plan.shards if s.table == name)
    assert plan.imbalance >= 1 - 1e-9


# -- choices ----------------------------------------------------------------------------


def test_tiny_tables_are_data_parallel_and_huge_ones_split_into_hbm():
    # 256 GB: on DDR whole it would read at 77 GB/s per rank; split, every shard fits one HBM
    tables = [TableSpec("tiny", 10, 64, 1.0), TableSpec("huge", 500_000_000, 128, 1.0, 1 / 128)]
    profile = load_profile("zionex-8gpu")
    plan = plan_tables(tables, profile)
    chosen = dict(zip((t.name for t in tables), plan.sharding_types))
    assert chosen["tiny"] is ShardingType.DATA_PARALLEL
    assert chosen["huge"] in (ShardingType.COLUMN_WISE, ShardingType.ROW_WISE)
    assert {s.tier for s in plan.shards if s.table == "huge"} == {Tier.HBM}
    # a size threshold set by hand still sends the large tables row-wise (one node: no table-row-wise),
    # or table-row-wise on several nodes when balancing does not take them further
    forced = PlannerConfig(large_table_bytes=profile.hbm.capacity_bytes)
    assert plan_tables(tables, profile, forced).sharding_types[1] is ShardingType.ROW_WISE
    unbalanced = PlannerConfig(large_table_bytes=profile.hbm.capacity_bytes, balance_max_steps=0)
    assert plan_tables(tables, load_profile("zionex-16x8gpu"), unbalanced).sharding_types[1] in (
        ShardingType.ROW_WISE,
        ShardingType.TABLE_ROW_WISE,
    )


# -- JSON, fingerprint, benchmark tables -------------------------------------------------


def test_plan_json_validates_and_its_fingerprint_is_stable():
    tables = tables_for_benchmark(load_benchmark("dlrm"))
    assert len(tables) == 26 and {t.dim for t in tables} == {128}
    first = plan_tables(tables, load_profile("zionex-8gpu"))
    data = first.to_dict()
    validate(data, "sharding_plan", what="plan")
    assert json.loads(json.dumps(data)) == data
    again = plan_tables(tables, load_profile("zionex-8gpu"))
    assert again.to_dict()["fingerprint"] == data["fingerprint"] == first.fingerprint
    other = plan_tables(tables, load_profile("zionex-8gpu"), PlannerConfig(comm_precision=CommPrecision.FP16))
    assert other.fingerprint != first.fingerprint


def test_12t_plan_json_validates(plan_12t):
    plan, _ = plan_12t
    data = plan.to_dict()
    validate(data, "sharding_plan", what="12T plan")
    assert data["summary"]["imbalance"] == plan.imbalance


def test_12t_plan_read_back_from_its_json_is_the_same_plan(plan_12t):
    plan, _ = plan_12t
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))).to_dict() == plan.to_dict()


# -- CLI --------------------------------------------------------------------------------


def test_cli_prints_ranks_imbalance_projection_and_fingerprint():
    result = CliRunner().invoke(plan_command, ["--profile", "zionex-8gpu", "--benchmark", "dlrm"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "8 rank(s), batch 55296" in out  # the benchmark's global batch size
    assert "imbalance (max/mean rank cost)" in out and "samples/s" in out and "fingerprint: sha256:" in out
    assert sum(line.strip().startswith(str(r)) for r in range(8) for line in out.splitlines()[3:11]) >= 8


@pytest.mark.parametrize("profile", ["zionex-8gpu", "zionex-16x8gpu"])
def test_cli_plans_dlrm_dcnv2_on_zionex_balanced(profile):
    # the command: table 20 (40M rows, 100 ids per sample) sat whole on one rank, imbalance 3.24;
    # on 16 nodes its table-row-wise shards (one node's) cost 1.6x the mean rank until it could be a grid
    result = CliRunner().invoke(plan_command, ["--profile", profile, "--benchmark", "dlrm_dcnv2"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("imbalance"))
    assert float(line.split(":")[1]) <= 1.05, result.output


def test_cli_json_is_the_plan():
    args = ["--profile", "zionex-8gpu", "--benchmark", "dlrm", "--batch-size", "4096", "--comm-precision", "fp16",
            "--json"]
    result = CliRunner().invoke(plan_command, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    validate(data, "sharding_plan", what="plan")
    assert data["batch_size"] == 4096 and data["comm_precision"] == "fp16"


def test_cli_refuses_a_benchmark_and_a_model_at_once():
    """Neither is the default benchmark (tests/cli/test_plan.py); both is one clear error."""
    result = CliRunner().invoke(plan_command, ["--profile", "zionex-8gpu", "--benchmark", "dlrm", "--model", "dlrm-12t"])
    assert isinstance(result.exception, HarnessError) and "not both" in str(result.exception)


def test_cli_reports_the_planner_error_and_unknown_models():
    result = CliRunner().invoke(plan_command, ["--profile", "h200-1gpu", "--model", "dlrm-12t"])
    assert isinstance(result.exception, PlannerError)
    assert result.exception.planner_category is PlannerErrorType.INSUFFICIENT_STORAGE
    result = CliRunner().invoke(plan_command, ["--profile", "h200-1gpu", "--model", "nope"])
    assert isinstance(result.exception, HarnessError) and result.exception.category is ErrorCategory.NOT_FOUND
    result = CliRunner().invoke(plan_command, ["--profile", "zionex-8gpu", "--model", "dlrm-12t",
                                               "--comm-precision", "fp64"])
    assert result.exit_code == 2


def test_shards_that_fit_in_total_but_not_packed_raise_a_partition_error():
    profile = make_profile(nodes=1, accelerators=1, hbm=0, ddr=GB, ssd=GB)
    tables = [TableSpec(f"t{i}", 600_000_000 // 256, 64) for i in range(3)]  # 0.6 GB each, 1.8 GB of 2 GB
    with pytest.raises(PlannerError) as info:
        plan_tables(tables, profile)
    assert info.value.planner_category is PlannerErrorType.PARTITION
    assert "no rank has room" in str(info.value) and "Possible solutions" in str(info.value)


# -- tiers -------------------------------------------------------------------------------


def one_rank_cpu(ddr: int, ssd: int) -> Profile:
    return make_profile(nodes=1, accelerators=0, ddr=ddr, ssd=ssd)


def test_a_tier_setting_forces_a_table_onto_that_tier():
    tables = [TableSpec(f"t{i}", 10_000, 16, 1.0, 1.0) for i in range(4)]  # 1.28 MB each
    profile = one_rank_cpu(ddr=GB, ssd=GB)
    free = plan_tables(tables, profile)
    assert {s.tier for s in free.shards} == {Tier.DDR}  # room in memory: nothing goes to the SSD
    pinned = plan_tables(tables, profile, PlannerConfig(tiers=(("t1", (Tier.SSD,)), ("t3", (Tier.SSD,)))))
    assert {s.table: s.tier for s in pinned.shards} == {"t0": Tier.DDR, "t1": Tier.SSD, "t2": Tier.DDR, "t3": Tier.SSD}
    check_capacities(pinned)


def test_the_planner_moves_the_coldest_tables_to_the_ssd_when_memory_runs_out():
    # three hot small tables and a cold large one; memory holds about half of them
    tables = [TableSpec(f"hot{i}", 5_000, 16, 4.0, 1.0) for i in range(3)] + [TableSpec("cold", 50_000, 16, 1.0, 1.0)]
    profile = one_rank_cpu(ddr=4 * 10**6, ssd=GB)
    plan = plan_tables(tables, profile, PlannerConfig(batch_size=1024, ssd_cache_fraction=0.05))
    tiers = {s.table: s.tier for s in plan.shards}
    assert tiers == {"hot0": Tier.DDR, "hot1": Tier.DDR, "hot2": Tier.DDR, "cold": Tier.SSD}
    cache = math.ceil(50_000 * 0.05) * (16 * 8 + 26) + 4 * 50_000  # 2,500 slots, their bookkeeping, the map
    assert plan.rank_storage[0].ddr == 3 * 5_000 * 16 * 8 + cache  # the cold table's cache is in DDR
    check_capacities(plan)


def test_an_ssd_shard_is_placed_only_where_its_cache_fits_too():
    tables = [TableSpec("big", 100_000, 16, 1.0, 1.0)]  # 12.8 MB
    profile = one_rank_cpu(ddr=10**6, ssd=GB)
    assert plan_tables(tables, profile).shards[0].tier is Tier.SSD  # no cache: fits
    with pytest.raises(PlannerError) as info:  # a 20% cache (3.08 MB + 0.4 MB of map) does not fit 1 MB of DDR
        plan_tables(tables, profile, PlannerConfig(batch_size=1024, ssd_cache_fraction=0.2))
    assert info.value.planner_category is PlannerErrorType.INSUFFICIENT_STORAGE
    message = str(info.value)
    assert "\n" not in message and "'big'" in message and "its shard of 12.8 MB (table_wise) fits the SSD" in message
    assert "its cache (0.2 of its rows" in message and "needs 3.48 MB of DDR, and one rank has 1 MB of DDR" in message
    assert "Possible solutions: a lower cache fraction" in message
    # a 1% cache is 1,000 rows, but one batch of 1,024 ids may need 1,024: the cache gets those, with
    # 26 bytes of bookkeeping per slot (+ 400 KB of map): what RowCache allocates, to the byte
    assert plan_tables(tables, profile, PlannerConfig(batch_size=1024, ssd_cache_fraction=0.01)).rank_storage[0].ddr == (
        1024 * (128 + 26) + 4 * 100_000)
    # and a batch of 8,192 ids would need 1 MB of rows: no room
    with pytest.raises(PlannerError, match=r"its cache \(0.01 of its rows, and at least those one step looks up\) "
                                           r"needs 1.662 MB of DDR, and one rank has 1 MB"):
        plan_tables(tables, profile, PlannerConfig(batch_size=8192, ssd_cache_fraction=0.01))


def test_a_cache_that_finds_no_room_is_named_with_its_bytes_its_tier_and_the_room_left():
    # each 6.4 MB SSD table's cache (2,500 slots of 154 B and a 200 KB row map: 585 KB) fits 1 MB of
    # DDR alone, not both: the second shard fits the SSD, and the line says its cache did not
    tables = [TableSpec(f"t{i}", 50_000, 16, 1.0, 1.0) for i in range(2)]
    with pytest.raises(PlannerError) as info:
        plan_tables(tables, one_rank_cpu(ddr=10**6, ssd=GB), PlannerConfig(batch_size=64, ssd_cache_fraction=0.05))
    assert info.value.planner_category is PlannerErrorType.PARTITION and info.value.table == "t1"
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("no rank has room for the cache of a 6,400,000 B shard of table 't1' (table_wise) on "
                              "the SSD: the shard fits, but its cache (0.05 of its rows")
    assert "needs 585,000 B of DDR, and the most free DDR left on a rank with room for the shard is 415,000 B" in message
    assert "Possible solutions: a lower cache fraction" in message


def twelve_t_shaped() -> tuple[list[TableSpec], Profile, PlannerConfig]:
    """dlrm-12t's case in small: a 2.6 GB table of one id a sample on 2 x 2 ranks of 150 MB of HBM, 1 GB
    of DDR and 4 GB of SSD each, and hot tables for the HBM. Whole on one rank's SSD, its cache (5% of
    its rows, in HBM) would be 183 MB: more than a rank's HBM."""
    tables = [TableSpec("huge", 10_000_000, 64, 1.0, 1 / 64)]
    tables += [TableSpec(f"hot{i}", 100_000, 64, 20.0, 1 / 64) for i in range(12)]
    profile = make_profile(nodes=2, accelerators=2, hbm=150 * 10**6, ddr=2 * GB, ssd=8 * GB)
    return tables, profile, PlannerConfig(batch_size=1024, ssd_cache_fraction=0.05, ddr_cache_fraction=0.05)


def test_a_table_whose_cache_fits_no_rank_whole_is_split_until_its_shards_and_caches_fit():
    tables, profile, config = twelve_t_shaped()
    plan = plan_tables(tables, profile, config)
    kinds = dict(zip((t.name for t in plan.tables), plan.sharding_types))
    assert kinds["huge"] is not ShardingType.TABLE_WISE and len([s for s in plan.shards if s.table == "huge"]) > 1
    check_capacities(plan)  # caches included
    check_coverage(plan)
    assert plan_tables(tables, profile, config).fingerprint == plan.fingerprint


def test_a_tier_the_profile_lacks_or_an_unknown_table_is_one_clear_error():
    tables = [TableSpec("t0", 1000, 16)]
    with pytest.raises(PlannerError, match="'t0' is set to the SSD tier, which the profile does not have") as info:
        plan_tables(tables, one_rank_cpu(ddr=GB, ssd=0), PlannerConfig(tiers=(("t0", (Tier.SSD,)),)))
    assert info.value.planner_category is PlannerErrorType.INSUFFICIENT_STORAGE
    with pytest.raises(PlannerError, match="tier settings name tables the model does not have: nope"):
        plan_tables(tables, one_rank_cpu(ddr=GB, ssd=GB), PlannerConfig(tiers=(("nope", (Tier.SSD,)),)))


def test_a_table_whose_allowed_types_cannot_apply_is_one_clear_error():
    config = PlannerConfig(batch_size=64, column_block=8, sharding_types=(("narrow", (ShardingType.COLUMN_WISE,)),))
    with pytest.raises(PlannerError, match="'narrow' .* can take none of the sharding types allowed for it") as info:
        plan_tables([TableSpec("narrow", 100, 8)], load_profile("zionex-8gpu"), config)
    assert info.value.planner_category is PlannerErrorType.BAD_INPUT
