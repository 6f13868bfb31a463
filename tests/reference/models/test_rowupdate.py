"""The compiled Adagrad of a bf16 table's rows (harness/reference/models/_rowupdate.c) against the torch
operations it replaces: the same weights and state, bit for bit."""

import pytest
import torch

from harness.reference.models import embeddings as E
from harness.reference.models import rowupdate
from harness.reference.models.numerics import TableLayout

pytestmark = pytest.mark.skipif(rowupdate.compiled() is None,
                                reason="the compiled row update was not built (no C compiler at install)")


def _tables(rows: int, cols: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    weight = (torch.randn(rows, cols, generator=g) * 0.05).to(torch.bfloat16)
    state = torch.rand(rows, cols, generator=g) * 0.01
    return weight, state, g


@pytest.mark.parametrize("cols,col_offset", [(64, 0), (40, 24), (7, 3)])
def test_the_compiled_update_is_the_torch_path_bit_for_bit(cols, col_offset):
    weight, state, g = _tables(5000, cols, seed=cols)
    rows = torch.randperm(5000, generator=g)[:1300].sort().values
    grad = torch.randn(1300, cols, generator=g) * torch.logspace(-6, 1, 1300).unsqueeze(1)  # tiny to large
    opt = E.SparseOptimizerConfig(E.SparseOptimizerKind.ADAGRAD, 0.03, 1e-8)
    layout = TableLayout(seed=11, tables=(0, 1), block_rows=(2000, 3000), col_offset=col_offset)
    keys, multipliers = layout.bits(rows, 9, cols)
    w_torch, s_torch = weight.clone(), state.clone()
    E._update_rows_torch(w_torch, s_torch, rows, grad.clone(), opt, (keys, multipliers))
    w_c, s_c = weight.clone(), state.clone()
    assert rowupdate.adagrad_bf16(w_c, s_c, rows, grad.clone(), keys.reshape(-1), multipliers, 0.03, 1e-8)
    assert torch.equal(s_c, s_torch)
    assert torch.equal(w_c.view(torch.int16), w_torch.view(torch.int16))
    assert (w_c != weight).any(dim=1).sum() > 650  # the rows did change (tiny gradients may leave a row as it was)
    untouched = torch.ones(5000, dtype=torch.bool)
    untouched[rows] = False
    assert torch.equal(w_c[untouched].view(torch.int16), weight[untouched].view(torch.int16))


def test_training_updates_go_through_it_and_equal_the_torch_path(monkeypatch):
    """``update_from_bags`` (a training step's update: duplicate ids summed, then the rows updated)
    with and without the compiled pass."""
    weight, state, g = _tables(3000, 16, seed=5)
    ids = torch.randint(0, 3000, (4000,), generator=g)
    bag_grads = torch.randn(4000, 16, generator=g)
    opt = E.SparseOptimizerConfig(E.SparseOptimizerKind.ADAGRAD, 0.1, 1e-8)
    layout = TableLayout(seed=3, tables=(0,), block_rows=(3000,))
    calls = []
    real = rowupdate.adagrad_bf16
    monkeypatch.setattr(rowupdate, "adagrad_bf16", lambda *a: calls.append(1) or real(*a))
    w_c, s_c = weight.clone(), state.clone()
    E.update_from_bags(w_c, s_c, ids, None, bag_grads, opt, (layout, 4))
    assert calls
    monkeypatch.setattr(rowupdate, "adagrad_bf16", lambda *a: False)  # as where it is not built
    w_t, s_t = weight.clone(), state.clone()
    E.update_from_bags(w_t, s_t, ids, None, bag_grads, opt, (layout, 4))
    assert torch.equal(s_c, s_t) and torch.equal(w_c.view(torch.int16), w_t.view(torch.int16))


def test_it_declines_what_it_does_not_read():
    weight, state, _ = _tables(10, 8, seed=1)
    rows = torch.tensor([1, 3])
    grad = torch.ones(2, 8)
    keys, mult = torch.zeros(2, dtype=torch.int32), torch.ones(8, dtype=torch.int32)
    assert not rowupdate.adagrad_bf16(weight.float(), state, rows, grad, keys, mult, 0.1, 1e-8)  # fp32 table
    assert not rowupdate.adagrad_bf16(weight, state[:, :4], rows, grad, keys, mult, 0.1, 1e-8)  # state's shape
    assert not rowupdate.adagrad_bf16(weight, state, rows, grad.t().contiguous().t(), keys, mult, 0.1, 1e-8)
    with pytest.raises(IndexError):
        rowupdate.adagrad_bf16(weight, state, torch.tensor([1, 10]), grad, keys, mult, 0.1, 1e-8)
