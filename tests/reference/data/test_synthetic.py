"""The synthetic Criteo-like generator: purity, the teacher's AUC, the shape of its data (its order
and sharding as a dataset: tests/reference/data/test_datasets.py)."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from harness.reference.data import synthetic
from harness.reference.data.synthetic import SyntheticCriteo, SyntheticSpec

ROWS = (10, 50, 200, 1000, 500, 2000, 30, 100, 300, 5, 800, 400, 20, 150, 60, 250, 5, 90, 120, 70, 450, 30, 600, 90, 40, 350)


def _generator(**kw) -> SyntheticCriteo:
    spec = dict(seed=3, train_samples=20_000, eval_samples=6_000, table_rows=ROWS)
    spec.update(kw)
    return SyntheticCriteo(SyntheticSpec(**spec))


def _same(a, b):
    assert torch.equal(a.dense, b.dense) and torch.equal(a.sparse, b.sparse) and torch.equal(a.labels, b.labels)


def test_sample_is_a_pure_function_of_seed_and_index():
    d1, d2 = _generator(), _generator()
    idx = np.array([5, 17, 19_999, 3])
    _same(d1.samples(idx), d2.samples(idx))
    # one at a time, in another order, gives the same rows
    singles = [d1.samples(np.array([i])) for i in idx]
    _same(d2.samples(idx), type(singles[0])(
        dense=torch.cat([s.dense for s in singles]), sparse=torch.cat([s.sparse for s in singles]),
        labels=torch.cat([s.labels for s in singles]), pooling=singles[0].pooling,
    ))
    assert not torch.equal(_generator(seed=4).samples(idx).sparse, d1.samples(idx).sparse)


def test_reported_best_auc_is_the_teachers_auc_on_the_eval_split():
    data = _generator()
    idx = data.eval_indices()
    labels = data.samples(idx).labels.numpy()
    probs = data.probabilities(idx)
    assert data.best_auc() == pytest.approx(roc_auc_score(labels, probs), abs=1e-12)
    assert 0.7 < data.best_auc() < 0.95
    # the labels really are drawn from the teacher: calibration within sampling error
    assert abs(labels.mean() - probs.mean()) < 0.02


def test_category_frequencies_follow_a_power_law():
    data = _generator(table_rows=(10_000,) * 26, train_samples=200_000)
    ids = data.samples(np.arange(200_000)).sparse[:, 0].numpy()
    counts = np.sort(np.bincount(ids, minlength=10_000))[::-1].astype(float)
    ranks = np.arange(1, 101)
    slope = np.polyfit(np.log(ranks), np.log(counts[:100]), 1)[0]
    assert -1.25 < slope < -0.85  # exponent 1.05
    assert counts[:100].sum() / counts.sum() > 0.4  # the head dominates


def test_multi_hot_pooling_shapes_and_ranges():
    pooling = (3, 1, 2) + (1,) * 23
    data = _generator(pooling=pooling)
    batch = data.samples(np.arange(64))
    assert batch.sparse.shape == (64, sum(pooling))
    cols = np.concatenate([[0], np.cumsum(pooling)])
    for f, rows in enumerate(ROWS):
        block = batch.sparse[:, cols[f] : cols[f + 1]]
        assert block.min() >= 0 and block.max() < rows


def test_dense_features_are_log1p_of_the_integer_counts():
    data = _generator()
    idx = np.arange(0, 5000, 7)
    counts = data.dense_counts(idx)
    assert counts.dtype == np.int64 and counts.min() >= 0 and counts.max() > 100
    expect = np.log1p(counts.astype(np.float64)).astype(np.float32)
    assert np.array_equal(data.samples(idx).dense.numpy().view(np.int32), expect.view(np.int32))


def test_materialised_and_on_the_fly_teacher_agree(monkeypatch):
    idx = np.arange(500)
    materialised = _generator().probabilities(idx)
    monkeypatch.setattr(synthetic, "_MATERIALISE_LIMIT", 0)
    assert np.array_equal(materialised, _generator().probabilities(idx))


def test_default_benchmark_records_its_teachers_best_auc():
    from harness.reference.data.datasets import SyntheticDataset
    from harness.rules.specs import load_benchmark

    spec = load_benchmark("dlrm_synthetic")
    assert SyntheticDataset(spec.dataset).best_auc() == pytest.approx(spec.dataset["best_auc"], abs=5e-6)
