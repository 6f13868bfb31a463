"""The synthetic Criteo-like generator: purity, world-size independence, the teacher's AUC."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from harness.reference import synthetic
from harness.reference.synthetic import EpochOrder, SyntheticCriteo, SyntheticSpec

ROWS = (10, 50, 200, 1000, 500, 2000, 30, 100, 300, 5, 800, 400, 20, 150, 60, 250, 5, 90, 120, 70, 450, 30, 600, 90, 40, 350)


def _data(**kw) -> SyntheticCriteo:
    spec = dict(seed=3, train_samples=20_000, eval_samples=6_000, table_rows=ROWS)
    spec.update(kw)
    return SyntheticCriteo(SyntheticSpec(**spec))


def _same(a, b):
    assert torch.equal(a.dense, b.dense) and torch.equal(a.sparse, b.sparse) and torch.equal(a.labels, b.labels)


def test_sample_is_a_pure_function_of_seed_and_index():
    d1, d2 = _data(), _data()
    idx = np.array([5, 17, 19_999, 3])
    _same(d1.samples(idx), d2.samples(idx))
    # one at a time, in another order, gives the same rows
    singles = [d1.samples(np.array([i])) for i in idx]
    _same(d2.samples(idx), type(singles[0])(
        dense=torch.cat([s.dense for s in singles]), sparse=torch.cat([s.sparse for s in singles]),
        labels=torch.cat([s.labels for s in singles]), pooling=singles[0].pooling,
    ))
    assert not torch.equal(_data(seed=4).samples(idx).sparse, d1.samples(idx).sparse)


@pytest.mark.parametrize("world_size", [2, 4])
def test_union_of_rank_shards_equals_one_producer(world_size):
    data = _data()
    order = EpochOrder.from_seed(11, data.spec.train_samples)
    one = list(synthetic.train_batches(data, order, 1024))
    shards = [list(synthetic.train_batches(data, order, 1024, rank=r, world_size=world_size)) for r in range(world_size)]
    assert len(one) == data.spec.train_samples // 1024
    for step, batch in enumerate(one):
        union = [shards[r][step] for r in range(world_size)]
        assert torch.equal(batch.sparse, torch.cat([u.sparse for u in union]))
        assert torch.equal(batch.dense, torch.cat([u.dense for u in union]))
        assert torch.equal(batch.labels, torch.cat([u.labels for u in union]))
    eval_one = torch.cat([b.labels for b in synthetic.eval_batches(data, 1000)])
    eval_union = torch.cat([b.labels for r in range(world_size) for b in synthetic.eval_batches(data, 1000, rank=r, world_size=world_size)])
    assert torch.equal(eval_one, eval_union) and eval_one.numel() == data.spec.eval_samples


def test_epoch_order_is_a_permutation_and_depends_on_the_seed():
    n = 10_007 * 3
    a = EpochOrder.from_seed(1, n).indices(np.arange(n))
    assert np.array_equal(np.sort(a), np.arange(n))
    assert not np.array_equal(a, EpochOrder.from_seed(2, n).indices(np.arange(n)))


def test_train_and_eval_splits_are_disjoint():
    data = _data()
    order = EpochOrder.from_seed(5, data.spec.train_samples)
    train = order.indices(np.arange(data.spec.train_samples))
    assert train.max() < data.spec.train_samples <= data.eval_indices().min()


def test_reported_best_auc_is_the_teachers_auc_on_the_eval_split():
    data = _data()
    idx = data.eval_indices()
    labels = data.samples(idx).labels.numpy()
    probs = data.probabilities(idx)
    assert data.best_auc() == pytest.approx(roc_auc_score(labels, probs), abs=1e-12)
    assert 0.7 < data.best_auc() < 0.95
    # the labels really are drawn from the teacher: calibration within sampling error
    assert abs(labels.mean() - probs.mean()) < 0.02


def test_category_frequencies_follow_a_power_law():
    data = _data(table_rows=(10_000,) * 26, train_samples=200_000)
    ids = data.samples(np.arange(200_000)).sparse[:, 0].numpy()
    counts = np.sort(np.bincount(ids, minlength=10_000))[::-1].astype(float)
    ranks = np.arange(1, 101)
    slope = np.polyfit(np.log(ranks), np.log(counts[:100]), 1)[0]
    assert -1.25 < slope < -0.85  # exponent 1.05
    assert counts[:100].sum() / counts.sum() > 0.4  # the head dominates


def test_multi_hot_pooling_shapes_and_ranges():
    pooling = (3, 1, 2) + (1,) * 23
    data = _data(pooling=pooling)
    batch = data.samples(np.arange(64))
    assert batch.sparse.shape == (64, sum(pooling))
    cols = np.concatenate([[0], np.cumsum(pooling)])
    for f, rows in enumerate(ROWS):
        block = batch.sparse[:, cols[f] : cols[f + 1]]
        assert block.min() >= 0 and block.max() < rows


def test_materialised_and_on_the_fly_teacher_agree(monkeypatch):
    idx = np.arange(500)
    materialised = _data().probabilities(idx)
    monkeypatch.setattr(synthetic, "_MATERIALISE_LIMIT", 0)
    assert np.array_equal(materialised, _data().probabilities(idx))


def test_default_benchmark_records_its_teachers_best_auc():
    from harness.reference.trainer import synthetic_data
    from harness.rules.specs import load_benchmark

    spec = load_benchmark("dlrm_synthetic")
    assert synthetic_data(spec).best_auc() == pytest.approx(spec.dataset["best_auc"], abs=5e-6)
