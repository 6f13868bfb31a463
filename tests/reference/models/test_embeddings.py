"""The fused embeddings and their fused optimizers against plain PyTorch."""

import pytest
import torch
from torch import nn

from harness.reference.models.embeddings import (
    FusedEmbeddingCollection,
    SparseOptimizerConfig,
    SparseOptimizerKind,
    coalesce,
    distinct,
)


def _reference_tables(fused: FusedEmbeddingCollection) -> list[nn.EmbeddingBag]:
    tables, start = [], 0
    for rows in fused.table_rows:
        bag = nn.EmbeddingBag(rows, fused.dim, mode="sum", sparse=True)
        with torch.no_grad():
            bag.weight.copy_(fused.weight[start : start + rows])
        tables.append(bag)
        start += rows
    return tables


@pytest.mark.parametrize("pooling", [(1, 1, 1), (2, 1, 3)])
@pytest.mark.parametrize("kind", [SparseOptimizerKind.ADAGRAD, SparseOptimizerKind.SGD])
def test_fused_update_equals_torch_optimizer_on_sparse_embedding_bags(pooling, kind):
    torch.manual_seed(0)
    rows, dim, lr = (7, 11, 5), 4, 0.1
    fused = FusedEmbeddingCollection(rows, dim, pooling, SparseOptimizerConfig(kind=kind, learning_rate=lr))
    tables = _reference_tables(fused)
    params = [t.weight for t in tables]
    opt = (
        torch.optim.Adagrad(params, lr=lr, eps=1e-8)
        if kind is SparseOptimizerKind.ADAGRAD
        else torch.optim.SGD(params, lr=lr)
    )
    for _ in range(5):
        # heavy duplication, so coalescing matters
        sparse = torch.cat([torch.randint(0, r, (16, p)) for r, p in zip(rows, pooling)], dim=1)
        target = torch.randn(16, len(rows), dim)
        loss = ((fused(sparse) - target) ** 2).sum()
        loss.backward()
        opt.zero_grad()
        cols = torch.tensor((0, *pooling)).cumsum(0)
        ref = torch.stack([t(sparse[:, cols[i] : cols[i + 1]]) for i, t in enumerate(tables)], dim=1)
        ((ref - target) ** 2).sum().backward()
        opt.step()
    assert torch.allclose(fused.weight, torch.cat([t.weight for t in tables]), atol=1e-6)
    assert fused.weight.grad is None  # no dense gradient of the table was ever built


def test_rowwise_adagrad_keeps_one_accumulator_per_row():
    fused = FusedEmbeddingCollection(
        (5,), 3, (1,), SparseOptimizerConfig(kind=SparseOptimizerKind.ROWWISE_ADAGRAD, learning_rate=1.0)
    )
    before = fused.weight.detach().clone()
    out = fused(torch.tensor([[2], [2]]))
    out.sum().backward()  # gradient of row 2: two ones per dim -> 2.0; mean square 4.0
    assert fused.optimizer_state.shape == (5,)
    assert fused.optimizer_state[2].item() == pytest.approx(4.0)
    assert torch.allclose(fused.weight[2], before[2] - 2.0 / (2.0 + 1e-8))
    assert torch.equal(fused.weight[[0, 1, 3, 4]], before[[0, 1, 3, 4]])


def test_coalesce_sums_duplicates_in_sorted_order():
    ids = torch.tensor([4, 1, 4, 4, 0])
    grads = torch.arange(10.0).view(5, 2)
    unique, summed = coalesce(ids, grads)
    assert unique.tolist() == [0, 1, 4]
    assert summed.tolist() == [[8.0, 9.0], [2.0, 3.0], [0 + 4 + 6.0, 1 + 5 + 7.0]]


def test_builds_on_meta_device_without_memory():
    fused = FusedEmbeddingCollection((10**9, 10**9), 128, (1, 1), SparseOptimizerConfig(), device="meta")
    assert fused.weight.is_meta and fused.weight.shape == (2 * 10**9, 128)


@pytest.mark.parametrize("shape", [(1,), (7,), (512, 26), (3, 5, 4)])
@pytest.mark.parametrize("high", [3, 5_200_000, 2**50])
def test_distinct_is_torch_unique_sorted_with_inverse_and_counts(shape, high):
    ids = torch.randint(0, high, shape, generator=torch.Generator().manual_seed(high + len(shape)))
    expected = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
    got = distinct(ids)  # ids near 2**50 cannot be packed with their positions: torch.unique's path
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and torch.equal(g, e)
    empty = distinct(torch.empty(0, dtype=torch.int64))
    assert [t.numel() for t in empty] == [0, 0, 0]
