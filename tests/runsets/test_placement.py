"""Where a run set's tables live: the tier plan (one rank) and the sharding plan (several), their
bytes in the precision asked, the tables asked onto the SSD tier (never as replicas), and a global
batch the ranks cannot share."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.runsets.plan import plan_run_set
from harness.runsets.request import EmbeddingTierChoice, RunSetRequest
from tests.support.runs import FIXTURE


def test_16_bit_tables_behind_caches_keep_their_precision_and_the_plans_count_their_bytes(tmp_path):
    """Tables on the SSD tier (one rank) and DDR shards behind HBM caches (sharded) run in the
    precision asked, and the plans count their weights in its bytes (half of fp32's)."""
    from harness.rules.precision import Precision
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import EmbeddingTierChoice, RunSetRequest

    def ssd(**request):
        return plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile="local", results_dir=tmp_path / "r",
                                          embedding_tier=EmbeddingTierChoice.SSD, ssd_tables=(0, 3), **request))

    def small_hbm(**request):  # its HBM cannot hold the default benchmark: DDR shards behind caches
        return plan_run_set(RunSetRequest(benchmark="dlrm_synthetic", profile=str(FIXTURE.parent / "small_hbm_4gpu.yaml"),
                                          emulate=True, results_dir=tmp_path / "r", **request))

    def bytes_per_value(plan):
        """Each shard's bytes per weight value (the plans of two precisions may shard differently)."""
        plan = (plan.tier_plan or plan.sharding_plan).to_dict()
        return {s["storage_bytes"] / (s["rows"] * s["cols"]) for t in plan["tables"] for s in t["shards"]}

    def tiers(plan):
        return {s["tier"] for t in (plan.tier_plan or plan.sharding_plan).to_dict()["tables"] for s in t["shards"]}

    for make, slow in ((ssd, "ssd"), (small_hbm, "ddr")):
        full, half = make(precision=Precision.FP32), make(precision=Precision.FP16)
        assert (full.precision, half.precision) == (Precision.FP32, Precision.FP16)
        assert slow in tiers(full) and slow in tiers(half)
        # Adagrad: 2 + 4 bytes per value (fp16 weights, fp32 state) against 4 + 4
        assert (bytes_per_value(half), bytes_per_value(full)) == ({6.0}, {8.0})
    assert not (tmp_path / "r").exists()


def test_a_global_batch_the_ranks_cannot_share_is_refused(tmp_path):
    spec = tmp_path / "odd.yaml"
    spec.write_text(FIXTURE.read_text().replace("global_batch_size: 1024", "global_batch_size: 1020"))
    with pytest.raises(HarnessError, match="not divisible by the 8 ranks"):
        plan_run_set(RunSetRequest(benchmark=str(spec), profile="zionex-8gpu", results_dir=tmp_path, emulate=True))


def test_sharded_plans_with_the_ssd_tier_place_the_set_tables_there_and_never_as_replicas(tmp_path):
    def plan(**kw):
        return plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile="zionex-8gpu", results_dir=tmp_path,
                                          emulate=True, **kw))

    auto = plan(embedding_tier=EmbeddingTierChoice.AUTO)  # the emulated node's memory holds the tiny tables: nothing on the SSD
    assert auto.embedding_tier is None and "ssd" not in {
        s["tier"] for t in auto.sharding_plan.to_dict()["tables"] for s in t["shards"]}
    forced = plan(embedding_tier=EmbeddingTierChoice.AUTO, ssd_tables=(0, 5))  # table 0 (10 rows) would be data-parallel
    tables = forced.sharding_plan.to_dict()["tables"]
    for i in (0, 5):
        assert tables[i]["sharding_type"] != "data_parallel" and {s["tier"] for s in tables[i]["shards"]} == {"ssd"}
    assert forced.embedding_tier.ssd_tables == (0, 5) and forced.fingerprint != auto.fingerprint
    assert forced.sharding_plan.to_dict()["config"]["ssd_cache_fraction"] == 0.05
