"""Tiered memory: the row cache's policies (harness.reference.tiered.cache), and the bytes the planner
counts for a cache."""

from __future__ import annotations

import pytest
import torch

from harness.errors import HarnessError
from harness.reference.tiered import CachePolicy, MemoryRows, RowCache

# what the tier computes, not the drive's speed (tests/reference/conftest.py)


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


@pytest.mark.parametrize("policy", [CachePolicy.LRU, CachePolicy.LFU])
@pytest.mark.parametrize(("rows", "cols", "state_cols", "slots"), [(1000, 16, 16, 50), (37, 8, 1, 37), (500, 4, 0, 9)])
def test_the_planner_counts_exactly_what_a_cache_allocates(policy, rows, cols, state_cols, slots):
    from harness.reference.planner.estimators import cache_nbytes

    cache = RowCache(MemoryRows(rows, cols, state_cols), slots, policy)
    assert cache.nbytes == cache_nbytes(rows, slots, 4 * (cols + state_cols), lfu=policy is CachePolicy.LFU)
