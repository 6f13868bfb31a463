"""Tiered memory: training through an SSD-backed cache (the cache: test_cache.py; the SSD file:
test_store.py), and `harness run` and the planner placing tables on the SSD tier."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from harness.errors import HarnessError
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession
from harness.rules.specs import load_benchmark, spec_from_dict

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "tiny_benchmark.yaml"
STEPS, BATCH = 200, 512


# what the tier computes, not the drive's speed (tests/reference/conftest.py)


# -- training -------------------------------------------------------------------------------


def big_table_spec() -> dict:
    """The tiny benchmark with tables large enough that 5% of their rows is a real cache."""
    spec = yaml.safe_load(FIXTURE.read_text())
    spec["dataset"]["table_rows"] = [40_000] * 26
    spec["dataset"]["train_samples"] = STEPS * BATCH
    return spec


def session(tmp_path: Path, tier: dict | None, precision: str = "fp32") -> TrainingSession:
    spec = big_table_spec()
    hp = dict(spec_from_dict(spec, what="test spec").reference_hyperparameters, global_batch_size=BATCH)
    # the tier through the page cache: what it computes, not the drive's speed
    tier = None if tier is None else {**tier, "direct_io": False}
    return TrainingSession(RunConfig.offline(spec, hp, 3, who="test", embedding_tier=tier, precision=precision))


class Losses(SessionHooks):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def after_step(self, session, loss) -> bool:
        self.losses.append(loss.item())
        return False


def train(s: TrainingSession) -> tuple[list[float], list[float], torch.Tensor]:
    """STEPS steps through the session's loop, evaluating at 100 and 200: losses, AUCs, final tables."""
    hooks = Losses()
    outcome = s.train(hooks, eval_at=[100, 200], stop_at_target=False)
    emb = s.model.sparse_arch.embeddings
    weights = emb.full_weight() if s.tables_in_store else emb.weight.detach().clone()
    return hooks.losses, [auc for _, auc in outcome.eval_accuracies], weights


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory) -> tuple[list[float], list[float], torch.Tensor]:
    return train(session(tmp_path_factory.mktemp("memory"), None))


@pytest.mark.parametrize(("policy", "ssd_tables"), [("lru", None), ("lfu", None), ("lru", list(range(0, 26, 2)))])
def test_training_on_the_ssd_tier_behind_a_5_percent_cache_is_bit_identical(in_memory, tmp_path, policy, ssd_tables):
    t = session(tmp_path, {"tier": "ssd", "path": str(tmp_path / "tables.bin"), "cache_fraction": 0.05,
                           "policy": policy, "ssd_tables": ssd_tables})
    losses, aucs, weights = train(t)
    assert len(losses) == STEPS and len(aucs) == 2
    assert losses == in_memory[0]  # bit for bit, every step
    assert aucs == in_memory[1]
    assert torch.equal(weights, in_memory[2])
    report = t.cache_report()
    on_ssd = 26 if ssd_tables is None else len(ssd_tables)
    assert report["rows"] == on_ssd * 40_000 and report["memory_rows"] == (26 - on_ssd) * 40_000
    assert report["cache_rows"] == on_ssd * 2_000 and report["batches"] >= STEPS
    assert 0 < report["hit_rate"] < 1 and report["ssd_bytes_read"] > 0 and report["ssd_bytes_written"] > 0
    # the rows of almost every batch were read while the previous step computed
    assert report["read_ahead_batches"] >= STEPS - 2
    t.close()


def test_tables_in_bf16_on_the_ssd_tier_train_as_in_memory_bit_for_bit_in_three_quarters_of_the_bytes(tmp_path):
    """16-bit tables behind a cache: the slots hold bf16 rows, the file two values to a word
    (fp32 Adagrad state beside them), and each update rounds with the bits of the row's place
    in the tables, not of its slot, so the run equals the tables in memory in bf16."""
    memory = train(session(tmp_path / "m", None, "bf16"))
    path = tmp_path / "tables.bin"
    t = session(tmp_path, {"tier": "ssd", "path": str(path), "cache_fraction": 0.05, "policy": "lru"}, "bf16")
    losses, aucs, weights = train(t)
    assert weights.dtype == torch.bfloat16 and t.cache_report()["hit_rate"] > 0
    assert losses == memory[0] and aucs == memory[1] and torch.equal(weights, memory[2])
    dim = big_table_spec()["model"]["embedding_dim"]
    assert path.stat().st_size == 26 * 40_000 * (dim // 2 + dim) * 4  # fp32: (dim + dim) * 4
    t.close()


def test_an_unknown_tier_is_refused(tmp_path):
    with pytest.raises(HarnessError, match="only the SSD tier"):
        session(tmp_path, {"tier": "tape", "path": str(tmp_path / "x"), "cache_fraction": 0.1})


def test_harness_run_on_the_ssd_tier_logs_and_prints_the_cache(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--benchmark", str(FIXTURE), "--runs", "1", "--threads", "1",
         "--embedding-tier", "ssd", "--ssd-io", "buffered", "--cache-fraction", "0.5", "--cache-policy", "lfu", "--ssd-tables", "3,5,7"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # half of the 3,100 rows would be 1,550, but one batch (1,024 ids per table) may need 1,000 + 1,024 + 100
    assert "lfu cache of 2,124 of 3,100 SSD rows (4,620 rows of 23 tables kept in memory): hit rate" in proc.stdout
    assert "tables: 23 in DDR, 3 on the SSD tier (SSD shards behind an LFU cache of 0.5 of their rows); used: DDR" in proc.stdout
    [log] = tmp_path.glob("results/reference/results/*/tiny_synthetic/result_0.txt")
    [report] = [json.loads(line.split(":::MLLOG ", 1)[1])["value"] for line in log.read_text().splitlines()
                if '"harness_embedding_cache"' in line]
    assert report["memory_tables"] == [t for t in range(26) if t not in (3, 5, 7)]
    assert report["ssd_bytes_read_per_step"] > 0 and 0 < report["hit_rate"] <= 1
    # how the rows moved: the blocks with O_DIRECT (or the page cache, and why), and by what reader
    assert report["ssd_io"].startswith(("direct (O_DIRECT, 512-byte blocks); ", "direct (O_DIRECT, 4096-byte blocks); ",
                                        "buffered ("))
    assert f"rows moved {report['ssd_io']}" in proc.stdout
    assert not list(tmp_path.glob("results/.harness/**/*.tables.bin"))  # the run's SSD file is gone


SMALL_MEMORY_PROFILE = """
name: small-memory-cpu
description: one CPU whose memory may hold only part of the tiny benchmark's tables (494 KB)
nodes: 1
accelerators_per_node: 0
accelerator: null
hbm: {capacity_bytes: 0, bandwidth_bytes_per_s: 0}
ddr: {capacity_bytes: %d, bandwidth_bytes_per_s: 10000000000}
ssd: {capacity_bytes: 1000000000, bandwidth_bytes_per_s: 1000000000}
host: {processor_model: test cpu, sockets: 1, cores_per_socket: 2}
interconnect: {intra_node_bw_bytes_per_s: 5000000000, scale_out_bw_bytes_per_s: 2500000000}
collective_backend: gloo
device_type: cpu
sources: {%s}
"""
_SOURCES = ("accelerator", "hbm.capacity_bytes", "hbm.bandwidth_bytes_per_s", "ddr.capacity_bytes",
            "ddr.bandwidth_bytes_per_s", "ssd.capacity_bytes", "ssd.bandwidth_bytes_per_s", "host",
            "interconnect.intra_node_bw_bytes_per_s", "interconnect.scale_out_bw_bytes_per_s")


def small_memory_profile(tmp_path: Path, ddr_bytes: int) -> Path:
    path = tmp_path / "small-memory-cpu.yaml"
    path.write_text(SMALL_MEMORY_PROFILE % (ddr_bytes, ", ".join(f"{k}: made up by the test" for k in _SOURCES)))
    return path


def test_the_planner_places_the_tables_that_memory_cannot_hold_on_the_ssd(tmp_path):
    from harness.rules.precision import Precision
    from harness.runsets.placement import table_tiers
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import EmbeddingTierChoice, RunSetRequest

    profile = small_memory_profile(tmp_path, 500_000)

    def planned(**kw):
        return plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile=str(profile), results_dir=tmp_path / "r",
                                          embedding_tier=EmbeddingTierChoice.AUTO, precision=Precision.FP32, **kw))

    plan = planned()
    tiers = table_tiers(plan.tier_plan)
    rows = load_benchmark(str(FIXTURE)).dataset["table_rows"]
    ssd = [i for i, t in enumerate(tiers) if t == "ssd"]
    assert ssd and set(tiers) == {"ddr", "ssd"}
    # by heat (lookups per stored byte): the SSD tables are the largest ones
    assert min(rows[i] for i in ssd) >= max(r for i, r in enumerate(rows) if i not in ssd)
    used = plan.tier_plan.to_dict()["ranks"][0]["storage_bytes"]
    row_bytes = 8 * 4 * 2  # dim 8, float32 weights and Adagrad state
    # each SSD table's cache: 5% of its rows, or all that one batch (1,024 ids) may look up if more
    cache = sum(max(math.ceil(rows[i] * 0.05), min(rows[i], 1024)) * (row_bytes + 26) + 4 * rows[i] for i in ssd)
    assert used["ddr"] == sum(r * row_bytes for i, r in enumerate(rows) if i not in ssd) + cache <= 500_000
    assert list(plan.embedding_tier.ssd_tables) == ssd and list(plan.embedding_tier.table_tiers) == tiers
    # a table set to the SSD goes there; the planner places the others
    forced = planned(ssd_tables=(0,))
    assert table_tiers(forced.tier_plan)[0] == "ssd" and set(forced.embedding_tier.ssd_tables) == {0, *ssd}
    # where memory holds every table, auto keeps them all there
    roomy = plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile=str(small_memory_profile(tmp_path, 10**9)),
                                       results_dir=tmp_path / "r", embedding_tier=EmbeddingTierChoice.AUTO,
                                       precision=Precision.FP32))
    assert set(table_tiers(roomy.tier_plan)) == {"ddr"} and roomy.embedding_tier is None


def test_harness_run_auto_trains_with_the_planners_placement_and_refuses_what_cannot_fit(tmp_path):
    def run(ddr_bytes: int, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "harness", "run", "--benchmark", str(FIXTURE), "--runs", "1", "--threads", "1",
             "--profile", str(small_memory_profile(tmp_path, ddr_bytes)), "--embedding-tier", "auto",
             "--ssd-io", "buffered", "--precision", "fp32", *extra],  # the byte counts below are fp32's
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )

    proc = run(500_000)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tier plan " in proc.stdout and " in DDR, " in proc.stdout and " on the SSD tier (SSD shards behind an LRU cache" in proc.stdout
    [log] = tmp_path.glob("results/reference/results/*/tiny_synthetic/result_0.txt")
    [report] = [json.loads(line.split(":::MLLOG ", 1)[1])["value"] for line in log.read_text().splitlines()
                if '"harness_embedding_cache"' in line]
    [plan_file] = tmp_path.glob("results/.harness/**/tier_plan.json")
    tiers = report["table_tiers"]
    assert report["tier_plan"] == json.loads(plan_file.read_text())["fingerprint"]
    assert report["memory_tables"] == [i for i, t in enumerate(tiers) if t != "ssd"] and "ssd" in tiers
    assert report["batches"] > 0 and 0 < report["hit_rate"] <= 1
    # SSD tables forced onto a profile whose memory cannot hold their cache: one line, nothing run
    proc = run(20_000, "--embedding-tier", "ssd", "--cache-fraction", "0.5")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr  # 3: the hardware cannot hold it
    # the message names what does not fit: the cache in DDR of a shard that the SSD holds
    assert "fits no rank" in proc.stderr and "its cache" in proc.stderr and " of DDR" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
