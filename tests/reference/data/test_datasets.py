"""The Dataset protocol's rules (order, sharding, splits) and the synthetic dataset that follows them."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import open_dataset
from harness.reference.data.datasets import (
    Dataset,
    SyntheticDataset,
    batch_order,
    eval_range,
    rank_slice,
    train_ranges,
)
from harness.rules.specs import load_benchmark, spec_from_dict

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "tiny_benchmark.yaml"


def tiny() -> SyntheticDataset:
    return SyntheticDataset(yaml.safe_load(FIXTURE.read_text())["dataset"])


def cat(batches) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    bs = list(batches)
    return torch.cat([b.dense for b in bs]), torch.cat([b.sparse for b in bs]), torch.cat([b.labels for b in bs])


@pytest.mark.parametrize("n", [2, 3, 7, 64, 1000, 4097])
def test_later_epochs_are_keyed_permutations_of_the_batches(n):
    every = np.arange(n)
    assert np.array_equal(batch_order(5, 0, n, every), every)  # epoch 0: the data in order
    one = batch_order(5, 1, n, every)
    assert np.array_equal(np.sort(one), every)  # a permutation
    assert np.array_equal(batch_order(5, 1, n, every), one)  # a pure function of (seed, epoch)
    if n >= 7:
        assert not np.array_equal(one, every)
        assert not np.array_equal(batch_order(6, 1, n, every), one)
        assert not np.array_equal(batch_order(5, 2, n, every), one)
    # any rank computes any part of it alone
    part = every[n // 3 :]
    assert np.array_equal(batch_order(5, 1, n, part), one[n // 3 :])


def test_rank_slices_tile_every_global_batch():
    assert [rank_slice(12, r, 3) for r in range(3)] == [(0, 4), (4, 4), (8, 4)]
    with pytest.raises(HarnessError, match="not divisible"):
        rank_slice(10, 0, 4)
    for epoch in (0, 1):
        one = list(train_ranges(1000, 96, epoch=epoch, seed=3, rank=0, world_size=1, start=0))
        per_rank = [list(train_ranges(1000, 96, epoch=epoch, seed=3, rank=r, world_size=4, start=0)) for r in range(4)]
        assert len(one) == 1000 // 96 and all(len(p) == len(one) for p in per_rank)
        for k, (lo, hi) in enumerate(one):
            assert [p[k] for p in per_rank] == [(lo + 24 * r, lo + 24 * (r + 1)) for r in range(4)]
        assert list(train_ranges(1000, 96, epoch=epoch, seed=3, rank=0, world_size=1, start=4)) == one[4:]


def test_eval_parts_are_array_splits():
    for n, w in ((10, 3), (8192, 4), (5, 8)):
        parts = [eval_range(n, r, w) for r in range(w)]
        expect = np.array_split(np.arange(n), w)
        assert [hi - lo for lo, hi in parts] == [len(e) for e in expect]
        assert [lo for lo, _ in parts] == [int(e[0]) if len(e) else lo for e, (lo, _) in zip(expect, parts)]
        assert parts[0][0] == 0 and parts[-1][1] == n


def test_the_synthetic_dataset_reads_the_generator_in_sample_order():
    data = tiny()
    assert isinstance(data, Dataset)
    first = next(data.train_batches(1024))
    direct = data.generator.samples(np.arange(1024))
    assert torch.equal(first.sparse, direct.sparse) and torch.equal(first.labels, direct.labels)
    # the eval split is the samples after the training ones: the splits are disjoint
    assert max(hi for _, hi in train_ranges(32768, 1024, epoch=1, seed=2, rank=0, world_size=1, start=0)) <= 32768
    ev = next(data.eval_batches(100))
    assert torch.equal(ev.dense, data.generator.samples(np.arange(32768, 32868)).dense)


@pytest.mark.parametrize(("world_size", "epoch"), [(2, 0), (4, 0), (2, 1), (4, 3)])
def test_the_union_over_ranks_does_not_depend_on_the_world_size(world_size, epoch):
    data = tiny()
    one = list(data.train_batches(1024, epoch=epoch, seed=9))
    shards = [list(data.train_batches(1024, epoch=epoch, seed=9, rank=r, world_size=world_size))
              for r in range(world_size)]
    assert len(one) == 32 and all(len(s) == 32 for s in shards)
    for step, batch in enumerate(one):
        dense, sparse, labels = cat(s[step] for s in shards)
        assert torch.equal(batch.dense, dense) and torch.equal(batch.sparse, sparse)
        assert torch.equal(batch.labels, labels)
    whole = cat(data.eval_batches(1000))
    union = cat(itertools.chain.from_iterable(data.eval_batches(1000, rank=r, world_size=world_size)
                                              for r in range(world_size)))
    assert all(torch.equal(a, b) for a, b in zip(whole, union)) and whole[2].numel() == 8192


def test_a_later_epoch_reorders_whole_batches_and_start_skips_ahead():
    data = tiny()
    epoch0 = [b.labels for b in data.train_batches(1024)]
    epoch1 = [b.labels for b in data.train_batches(1024, epoch=1, seed=9)]
    order = batch_order(9, 1, 32, np.arange(32))
    assert all(torch.equal(epoch1[k], epoch0[b]) for k, b in enumerate(order))
    assert not all(torch.equal(a, b) for a, b in zip(epoch0, epoch1))
    late = [b.labels for b in data.train_batches(1024, epoch=1, seed=9, start=30)]
    assert len(late) == 2 and all(torch.equal(a, b) for a, b in zip(late, epoch1[30:]))


def test_a_benchmark_on_real_data_needs_a_path():
    with pytest.raises(HarnessError, match="--data PATH") as info:
        open_dataset(load_benchmark("dlrm_dcnv2"))
    assert info.value.category is ErrorCategory.BAD_INPUT
    spec = spec_from_dict(yaml.safe_load(FIXTURE.read_text()), what="tiny")
    assert isinstance(open_dataset(spec), SyntheticDataset)
