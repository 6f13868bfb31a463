"""Tiered memory: the row cache's policies, and training through an SSD-backed cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from harness.errors import HarnessError
from harness.reference import synthetic
from harness.reference.tiered import CachePolicy, MemoryRows, RowCache, SsdRows
from harness.reference.trainer import RunConfig, Trainer
from harness.rules.specs import spec_from_dict

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_benchmark.yaml"
STEPS, BATCH = 200, 512


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


# -- training -------------------------------------------------------------------------------


def big_table_spec() -> dict:
    """The tiny benchmark with tables large enough that 5% of their rows is a real cache."""
    spec = yaml.safe_load(FIXTURE.read_text())
    spec["dataset"]["table_rows"] = [40_000] * 26
    spec["dataset"]["train_samples"] = STEPS * BATCH
    return spec


def trainer(tmp_path: Path, tier: dict | None) -> Trainer:
    spec = big_table_spec()
    hp = dict(spec_from_dict(spec, what="test spec").reference_hyperparameters, global_batch_size=BATCH)
    return Trainer(RunConfig.offline(spec, hp, 3, who="test", embedding_tier=tier))


def train(t: Trainer) -> tuple[list[float], list[float], torch.Tensor]:
    """STEPS steps as ``Trainer.run`` takes them, evaluating at 100 and 200: losses, AUCs, final tables."""
    model, dense_opt = t._model()
    data = t._data()
    order = synthetic.EpochOrder.from_seed(t.config.seed, t.spec.dataset["train_samples"])
    loss_fn = torch.nn.BCEWithLogitsLoss()
    losses, aucs = [], []
    for step, item in enumerate(t._train_items(data, order, BATCH, model), start=1):
        losses.append(t.train_step(model, dense_opt, loss_fn, item).item())
        if step % 100 == 0:
            aucs.append(t.evaluate(model, data))
    emb = model.sparse_arch.embeddings
    weights = emb.full_weight() if t._tiered_tables is not None else emb.weight.detach().clone()
    return losses, aucs, weights


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory) -> tuple[list[float], list[float], torch.Tensor]:
    return train(trainer(tmp_path_factory.mktemp("memory"), None))


@pytest.mark.parametrize(("policy", "ssd_tables"), [("lru", None), ("lfu", None), ("lru", list(range(0, 26, 2)))])
def test_training_on_the_ssd_tier_behind_a_5_percent_cache_is_bit_identical(in_memory, tmp_path, policy, ssd_tables):
    t = trainer(tmp_path, {"tier": "ssd", "path": str(tmp_path / "tables.bin"), "cache_fraction": 0.05,
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
    assert t._tiered_tables.read_ahead_batches >= STEPS - 2
    t._tiered_tables.close()


def test_an_unknown_tier_is_refused(tmp_path):
    t = trainer(tmp_path, {"tier": "tape", "path": str(tmp_path / "x"), "cache_fraction": 0.1})
    with pytest.raises(HarnessError, match="only the SSD tier"):
        t._model()


def test_harness_run_on_the_ssd_tier_logs_and_prints_the_cache(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--benchmark", str(FIXTURE), "--runs", "1", "--threads", "1",
         "--embedding-tier", "ssd", "--cache-fraction", "0.5", "--cache-policy", "lfu", "--ssd-tables", "3,5,7"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lfu cache of 1,550 of 3,100 SSD rows (4,620 rows of 23 tables kept in memory): hit rate" in proc.stdout
    [log] = tmp_path.glob("results/reference/results/*/tiny_synthetic/result_0.txt")
    [report] = [json.loads(line.split(":::MLLOG ", 1)[1])["value"] for line in log.read_text().splitlines()
                if '"harness_embedding_cache"' in line]
    assert report["memory_tables"] == [t for t in range(26) if t not in (3, 5, 7)]
    assert report["ssd_bytes_read_per_step"] > 0 and 0 < report["hit_rate"] <= 1
    assert not list(tmp_path.glob("results/.harness/**/*.tables.bin"))  # the run's SSD file is gone
