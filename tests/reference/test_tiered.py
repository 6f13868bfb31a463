"""Tiered memory: the row cache's policies, and training through an SSD-backed cache."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.errors import HarnessError
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession
from harness.reference.tiered import CachePolicy, MemoryRows, RowCache, SsdRows
from harness.rules.specs import load_benchmark, spec_from_dict

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_benchmark.yaml"
STEPS, BATCH = 200, 512


# what the tier computes, not the drive's speed (tests/reference/conftest.py)
pytestmark = pytest.mark.usefixtures("ssd_through_the_page_cache")


def store_with_rows(n: int, cols: int = 2, state: int = 1) -> MemoryRows:
    store = MemoryRows(n, cols, state)
    store.data[:] = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    return store


def admit(cache: RowCache, *rows: int) -> None:
    cache.admit(torch.tensor(sorted(set(rows))))


def resident(cache: RowCache) -> set[int]:
    return set(cache.slot_row[cache.slot_row >= 0].tolist())


def test_lru_evicts_the_row_used_longest_ago_and_never_the_batchs_own():
    cache = RowCache(store_with_rows(10), 3, CachePolicy.LRU)
    admit(cache, 0, 1, 2)
    admit(cache, 0)  # 1 is now the least recently used, then 2
    admit(cache, 0, 3)
    assert resident(cache) == {0, 2, 3}
    admit(cache, 4, 2)
    assert resident(cache) == {2, 3, 4}  # 0 was used before 3; 2 is the batch's own
    assert cache.stats.lookups == 3 + 1 + 2 + 2 and cache.stats.hits == 1 + 1 + 1


def test_lfu_evicts_the_row_looked_up_least_often():
    cache = RowCache(store_with_rows(10), 3, CachePolicy.LFU)
    for _ in range(3):
        admit(cache, 0, 1)
    admit(cache, 2)
    admit(cache, 3)  # 2 has one use, 0 and 1 three: 2 goes though it is the most recent but one
    assert resident(cache) == {0, 1, 3}


def test_dirty_victims_are_written_back_and_clean_ones_are_not():
    store = store_with_rows(10)
    cache = RowCache(store, 2, CachePolicy.LRU)
    admit(cache, 0, 1)
    slot = int(cache.slots_of(torch.tensor(0)))
    cache.weights[slot] = 42.0
    cache.mark_dirty(torch.tensor([slot]))
    admit(cache, 2, 3)
    assert store.data[0, :2].tolist() == [42.0, 42.0]  # the update survived its eviction
    assert store.data[0, 2] == 0.0 and store.data[1].tolist() == [1.0, 1.0, 1.0]
    assert cache.stats.bytes_written == store.row_bytes  # row 1 was clean: not written
    admit(cache, 0, 2)
    assert cache.weights[int(cache.slots_of(torch.tensor(0)))].tolist() == [42.0, 42.0]


def test_write_backs_in_the_background_are_seen_by_every_later_read():
    from concurrent.futures import ThreadPoolExecutor

    store = store_with_rows(10)
    with ThreadPoolExecutor(max_workers=1) as io:
        cache = RowCache(store, 2, CachePolicy.LRU, io=io)
        for value in (42.0, 43.0):
            admit(cache, 0, 1)
            slot = int(cache.slots_of(torch.tensor(0)))
            cache.weights[slot] = value
            cache.mark_dirty(torch.tensor([slot]))
            admit(cache, 2, 3)  # row 0 is evicted, its write-back queued on ``io``
            # a read queued after it (as a read ahead is) sees it; so does one on this thread
            queued = io.submit(store.read, torch.tensor([0])).result()
            assert queued[0, :2].tolist() == [value, value]
        assert cache.stats.bytes_written == 2 * store.row_bytes
        admit(cache, 0)  # read on this thread, after the pending writes
        assert cache.weights[int(cache.slots_of(torch.tensor(0)))].tolist() == [43.0, 43.0]
        cache.flush()
        assert not cache._writes


def test_pinned_rows_of_tables_in_memory_are_never_evicted_nor_counted():
    store = store_with_rows(10)
    cache = RowCache(store, 2, CachePolicy.LRU, pinned=((0, 3),))
    assert cache.capacity == 5 and resident(cache) == {0, 1, 2} and cache.stats.lookups == 0
    for batch in ((0, 5, 6), (1, 7, 8), (2, 3, 9)):
        admit(cache, *batch)
        assert {0, 1, 2} <= resident(cache)
    assert cache.stats.lookups == 6 and cache.stats.hits == 0  # rows 0..2 are not the cache's lookups


def test_a_batch_larger_than_the_cache_is_one_clear_error():
    cache = RowCache(store_with_rows(10), 2)
    with pytest.raises(HarnessError, match="looks up 3 distinct rows of a table but its cache holds 2"):
        admit(cache, 1, 2, 3)


def test_the_ssd_tier_is_a_file_that_keeps_what_was_written(tmp_path):
    store = SsdRows(tmp_path / "t.bin", 100, 4, 4, create=True)
    store.write(torch.tensor([3, 7]), torch.arange(16, dtype=torch.float32).view(2, 8))
    store.flush()
    again = SsdRows(tmp_path / "t.bin", 100, 4, 4, create=False)
    assert again.read(torch.tensor([7, 3, 0])).tolist() == [list(range(8, 16)), list(range(8)), [0.0] * 8]
    assert (tmp_path / "t.bin").stat().st_size == 100 * 8 * 4
    with pytest.raises(HarnessError, match="not a table file of 50 rows"):
        SsdRows(tmp_path / "t.bin", 50, 4, 4, create=False)


@pytest.mark.parametrize("reader", ["compiled", "python"])
def test_the_ssd_tier_moves_the_blocks_rows_lie_on_and_keeps_every_other_rows_bytes(tmp_path, monkeypatch, reader):
    """Random reads and writes of 65-word rows (260 bytes: most straddle two 512-byte blocks, the
    last block is cut by the file's end) equal a store in memory bit for bit, the file itself holds
    the same rows packed, and what the drive moved is the blocks the rows lie on: never a page per
    row. Through the compiled io_uring reader and through its Python fallback."""
    from harness.reference.tiered import rowio

    monkeypatch.delenv("HARNESS_SSD_DIRECT", raising=False)  # the drive itself, where O_DIRECT works
    if reader == "python":
        monkeypatch.setenv("HARNESS_ROWIO", "python")
    rowio.compiled_reader.cache_clear()
    try:
        rows, width = 997, 65
        store = SsdRows(tmp_path / "t.bin", rows, width - 1, 1, create=True)
        memory = MemoryRows(rows, width - 1, 1)
        assert store.reader == rowio.COMPILED if reader == "compiled" else store.reader.startswith(rowio.FALLBACK)
        g = torch.Generator().manual_seed(0)
        first = torch.randn(rows, width, generator=g)
        for lo in range(0, rows, 300):  # filled a chunk at a time, as a shard is
            store.write_rows(lo, first[lo : lo + 300])
            memory.write_rows(lo, first[lo : lo + 300])
        moved = store.transfer_bytes
        for step in range(40):
            ids = torch.randperm(rows, generator=g)[: int(torch.randint(1, 200, (1,), generator=g))]
            if step % 2:
                values = torch.randn(ids.numel(), width, generator=g)
                store.write(ids, values)
                memory.write(ids, values)
            else:
                assert torch.equal(store.read(ids), memory.read(ids)), step
        store.flush()
        assert torch.equal(store.read(torch.arange(rows)), memory.data)
        on_disk = torch.from_numpy(np.fromfile(tmp_path / "t.bin", dtype=np.float32)).view(rows, width)
        assert torch.equal(on_disk, memory.data) and (tmp_path / "t.bin").stat().st_size == rows * width * 4
        if store.align > 4:  # O_DIRECT here: one read of 100 rows moves at most two blocks a row
            before = store.transfer_bytes
            store.read(torch.arange(0, rows, 9)[:100])
            assert store.transfer_bytes - before <= 100 * 2 * store.align < 100 * 4096
            assert store.mode.startswith("direct")
        assert moved > 0
    finally:
        rowio.compiled_reader.cache_clear()


def test_a_row_written_twice_in_one_call_keeps_the_other_row_of_its_block(tmp_path, monkeypatch):
    """Two 256-byte rows to a 512-byte block: a write that names one of them twice does not
    cover the block, so the other row's bytes are read first and kept."""
    monkeypatch.delenv("HARNESS_SSD_DIRECT", raising=False)
    store = SsdRows(tmp_path / "t.bin", 8, 63, 1, create=True)
    first = torch.arange(8 * 64, dtype=torch.float32).view(8, 64)
    store.write_rows(0, first)
    store.write(torch.tensor([2, 2]), torch.full((2, 64), -1.0))
    got = store.read(torch.arange(8))
    assert torch.equal(got[2], torch.full((64,), -1.0)) and torch.equal(got[3], first[3])
    assert torch.equal(got[[0, 1, 4, 5, 6, 7]], first[[0, 1, 4, 5, 6, 7]])


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
         "--embedding-tier", "ssd", "--cache-fraction", "0.5", "--cache-policy", "lfu", "--ssd-tables", "3,5,7"],
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
    assert plan.embedding_tier["ssd_tables"] == ssd and plan.embedding_tier["table_tiers"] == tiers
    # a table set to the SSD goes there; the planner places the others
    forced = planned(ssd_tables=(0,))
    assert table_tiers(forced.tier_plan)[0] == "ssd" and set(forced.embedding_tier["ssd_tables"]) == {0, *ssd}
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
             "--precision", "fp32", *extra],  # the byte counts below are fp32's
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


@pytest.mark.parametrize("policy", [CachePolicy.LRU, CachePolicy.LFU])
@pytest.mark.parametrize(("rows", "cols", "state_cols", "slots"), [(1000, 16, 16, 50), (37, 8, 1, 37), (500, 4, 0, 9)])
def test_the_planner_counts_exactly_what_a_cache_allocates(policy, rows, cols, state_cols, slots):
    from harness.reference.planner.estimators import cache_nbytes

    cache = RowCache(MemoryRows(rows, cols, state_cols), slots, policy)
    assert cache.nbytes == cache_nbytes(rows, slots, 4 * (cols + state_cols), lfu=policy is CachePolicy.LFU)
