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


def _three_paths(monkeypatch, run, wanted_threads):
    """``run()`` (an update of fresh copies, returning them) through the fused sum and update (on
    ``wanted_threads``; the threads the caller asked for are recorded), through the blocks with the
    compiled row update, and through torch's operations alone."""
    calls = []
    real = rowupdate.sum_adagrad_bf16

    def fused_pass(*args, threads: int, rowwise: bool) -> bool:
        calls.append(threads)
        return real(*args, threads=wanted_threads, rowwise=rowwise)

    monkeypatch.setattr(rowupdate, "sum_adagrad_bf16", fused_pass)
    fused = run()
    assert calls, "the fused sum and update did not run"
    monkeypatch.setattr(E, "_fused_sum_update", lambda *a: False)
    blocks = run()
    monkeypatch.setattr(rowupdate, "adagrad_bf16", lambda *a: False)  # as where it is not built
    return fused, blocks, run(), calls


def _training_update(kind, cols: int, col_offset: int, pooled: bool, grad_dtype: torch.dtype, seed: int):
    """A training step's update of a bf16 table of 20,000 rows in three tables' blocks (the rows' keys
    depend on the table and the row in it): 30,000 ids (~15,500 distinct: both threads have rows), one
    a bag or three. Returns the table, its state (a row's or a value's), the ids and ``run()``, which
    updates fresh copies through ``update_from_bags`` and returns them."""
    weight, state, g = _tables(20_000, cols, seed=seed)
    if kind is E.SparseOptimizerKind.ROWWISE_ADAGRAD:
        state = torch.rand(20_000, generator=g) * 0.01
    layout = TableLayout(seed=7, tables=(4, 0, 9), block_rows=(5_000, 7_000, 8_000), col_offset=col_offset)
    ids = torch.randint(0, 20_000, (30_000,), generator=g)
    bags = torch.arange(10_000).repeat_interleave(3) if pooled else None
    bag_grads = (torch.randn(10_000 if pooled else 30_000, cols, generator=g) * 0.1).to(grad_dtype)
    opt = E.SparseOptimizerConfig(kind, 0.05, 1e-8)

    def run():
        w, s = weight.clone(), state.clone()
        E.update_from_bags(w, s, ids, bags, bag_grads, opt, (layout, 12))
        return w, s

    return weight, state, ids, run


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols,col_offset,pooled,grad_dtype", [
    (64, 0, False, torch.bfloat16), (64, 0, True, torch.float32), (40, 24, True, torch.bfloat16),
    (7, 3, False, torch.float32),
])
def test_training_updates_are_the_same_through_every_path(monkeypatch, threads, cols, col_offset, pooled, grad_dtype):
    """``update_from_bags`` (a training step's update: each distinct row's gradients summed, then the
    rows updated) fused in one compiled pass (on one or two threads), in blocks with the compiled row
    update, and in torch's operations: the same weights and state, bit for bit. Three tables (the
    rows' keys depend on the table and the row in it), duplicates, one id per bag or three."""
    weight, state, ids, run = _training_update(E.SparseOptimizerKind.ADAGRAD, cols, col_offset, pooled, grad_dtype,
                                               seed=cols + threads)
    (w_f, s_f), (w_b, s_b), (w_t, s_t), calls = _three_paths(monkeypatch, run, threads)
    assert calls == [1]  # what the training path asks for
    assert torch.equal(s_f, s_b) and torch.equal(s_f, s_t)
    assert torch.equal(w_f.view(torch.int16), w_b.view(torch.int16))
    assert torch.equal(w_f.view(torch.int16), w_t.view(torch.int16))
    touched = torch.zeros(20_000, dtype=torch.bool)
    touched[ids] = True
    assert (w_f[touched] != weight[touched]).any(dim=1).float().mean() > 0.9
    assert torch.equal(w_f[~touched].view(torch.int16), weight[~touched].view(torch.int16))
    assert torch.equal(s_f[~touched], state[~touched])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols,pooled,grad_dtype", [(64, False, torch.bfloat16), (7, True, torch.float32)])
def test_row_wise_adagrad_is_the_same_through_the_fused_pass_and_torch(monkeypatch, threads, cols, pooled,
                                                                        grad_dtype):
    """Row-wise Adagrad (one accumulator a row, MLPerf dlrm_dcnv2's) on a bf16 table: the fused compiled
    sum and update (one or two threads) and torch's operations give the same weights and accumulators,
    bit for bit (the mean of squares in :func:`E.row_mean_square`'s order in both)."""
    weight, state, ids, run = _training_update(E.SparseOptimizerKind.ROWWISE_ADAGRAD, cols, 0, pooled, grad_dtype,
                                               seed=cols + threads)
    calls = []
    real = rowupdate.sum_adagrad_bf16
    monkeypatch.setattr(rowupdate, "sum_adagrad_bf16",
                        lambda *a, threads, rowwise: calls.append(rowwise) or real(*a, threads=threads, rowwise=rowwise))
    w_f, s_f = run()
    assert calls == [True]
    monkeypatch.setattr(E, "_fused_sum_update", lambda *a: False)
    w_t, s_t = run()
    assert torch.equal(s_f, s_t)
    assert torch.equal(w_f.view(torch.int16), w_t.view(torch.int16))
    touched = torch.zeros(20_000, dtype=torch.bool)
    touched[ids] = True
    assert (s_f[touched] > state[touched]).all() and torch.equal(s_f[~touched], state[~touched])
    assert (w_f[touched] != weight[touched]).any(dim=1).float().mean() > 0.9
    assert torch.equal(w_f[~touched].view(torch.int16), weight[~touched].view(torch.int16))


def test_the_row_mean_square_is_the_mean_within_its_roundings():
    grad = torch.randn(300, 37, generator=torch.Generator().manual_seed(0)) * torch.logspace(-4, 3, 37)
    exact = grad.double().pow(2).mean(dim=1)
    assert torch.allclose(E.row_mean_square(grad.clone()).double(), exact, rtol=1e-6, atol=0)
    assert torch.equal(E.row_mean_square(torch.tensor([[3.0]])), torch.tensor([9.0]))


def test_the_fused_pass_refuses_rows_it_cannot_read():
    weight, state, _ = _tables(100, 8, seed=2)
    layout = TableLayout(seed=1, tables=(0,), block_rows=(100,))
    grads, mult, blocks = torch.ones(4, 8), torch.ones(8, dtype=torch.int32), layout.key_blocks(0)
    starts, grad_rows = torch.tensor([0, 2]), torch.tensor([0, 1, 2, 3])
    args = (grads, blocks, mult, 0.1, 1e-8, 2)
    with pytest.raises(ValueError, match="ascend"):
        rowupdate.sum_adagrad_bf16(weight, state, torch.tensor([5, 3]), starts, grad_rows, *args)
    with pytest.raises(IndexError):
        rowupdate.sum_adagrad_bf16(weight, state, torch.tensor([5, 100]), starts, grad_rows, *args)
    with pytest.raises(IndexError):
        rowupdate.sum_adagrad_bf16(weight, state, torch.tensor([5, 7]), starts, torch.tensor([0, 1, 2, 4]), *args)
    with pytest.raises(IndexError):
        rowupdate.sum_adagrad_bf16(weight, state, torch.tensor([5, 7]), torch.tensor([0, 5]), grad_rows, *args)
    assert not rowupdate.sum_adagrad_bf16(weight.float(), state, torch.tensor([5, 7]), starts, grad_rows, *args)
    assert not rowupdate.sum_adagrad_bf16(weight, state, torch.tensor([5, 7]), starts, grad_rows,
                                          grads.t().contiguous().t(), *args[1:])
    before = weight.clone()
    assert rowupdate.sum_adagrad_bf16(weight, state, torch.tensor([5, 7]), starts, grad_rows, *args)
    assert (weight[[5, 7]] != before[[5, 7]]).all()


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


@pytest.mark.parametrize("n,high", [(1, 1), (9, 3), (60_000, 5_200_000), (3_000, 2**40)])
def test_the_radix_segments_are_the_sorted_keys_segments(monkeypatch, two_threads, n, high):
    """The compiled radix sort of a batch's ids (two passes for rows below 2**22, four for 2**40; two
    threads, where torch has two, for more than 32,768 ids) gives
    what the NumPy sort of the packed keys gives: the distinct ids, the stable order of the positions,
    the segments' starts and the inverse; ``distinct`` is ``torch.unique`` through both."""
    ids = torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(n))
    compiled = E._sorted_segments(ids, with_inverse=True)
    assert compiled is not None and rowupdate.segments(ids, int(ids.max())) is not None
    monkeypatch.setattr(rowupdate, "segments", lambda *a: None)  # as where the library is not built
    numpy_path = E._sorted_segments(ids, with_inverse=True)
    assert numpy_path is not None
    for c, p in zip(compiled, numpy_path):
        assert c is not None and p is not None and c.dtype == torch.int64 and torch.equal(c, p)
    unique, order, starts, _ = compiled
    assert torch.equal(order, torch.sort(ids, stable=True).indices)
    assert torch.equal(ids[order[starts]], unique)
    monkeypatch.undo()
    expected = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
    for e, g in zip(expected, E.distinct(ids)):
        assert torch.equal(g, e)


@pytest.mark.parametrize("samples,rows,overlap", [(2048, (100_000,) * 26, False), (300, (40, 1, 3_000, 7, 2**21), False),
                                                  (2048, (1_000,) * 4, True)])
def test_a_one_hot_batch_s_segments_are_the_sorted_keys_segments(monkeypatch, two_threads, samples, rows, overlap):
    """Ids laid out as a one-hot batch's (column ``f`` in table ``f``'s rows of the fused weight, offsets
    ascending), which the compiled sort takes a column at a time: the small config's batch (two threads),
    tables of one row (a column of one id), of 2**21 rows and few duplicates; and columns whose ranges
    overlap though the first sample's ids ascend (the radix sort's, as any other ids). The same segments as
    the NumPy sort of the packed keys."""
    g = torch.Generator().manual_seed(samples + len(rows))
    if overlap:
        ids = torch.randint(0, rows[0], (samples, len(rows)), generator=g)
        ids[0] = torch.arange(len(rows))
    else:
        offsets = torch.tensor((0, *rows[:-1])).cumsum(0)
        ids = torch.stack([torch.randint(0, r, (samples,), generator=g) for r in rows], dim=1) + offsets
    ids = ids.reshape(-1)
    compiled = E._sorted_segments(ids, with_inverse=True)
    monkeypatch.setattr(rowupdate, "segments", lambda *a: None)  # as where the library is not built
    numpy_path = E._sorted_segments(ids, with_inverse=True)
    assert compiled is not None and numpy_path is not None
    for c, p in zip(compiled, numpy_path):
        assert c is not None and p is not None and torch.equal(c, p)
    assert torch.equal(compiled[1], torch.sort(ids, stable=True).indices)


@pytest.mark.parametrize("dtype,cols", [(torch.bfloat16, 64), (torch.float32, 7)])
@pytest.mark.parametrize("n", [0, 5, 20_000])
def test_the_gathered_rows_are_index_select_s(two_threads, dtype, cols, n):
    """The forward lookup's compiled gather (rows fetched early, on torch's threads: two where there are
    more than 8,192 ids) gives ``index_select``'s rows byte for byte, and refuses an id outside the table."""
    weight = torch.randn(30_000, cols, generator=torch.Generator().manual_seed(n)).to(dtype)
    ids = torch.randint(0, 30_000, (n,), generator=torch.Generator().manual_seed(n + 1))
    got = rowupdate.gather_rows(weight, ids)
    assert got is not None and got.dtype == dtype and torch.equal(got, weight.index_select(0, ids))
    with pytest.raises(IndexError):
        rowupdate.gather_rows(weight, torch.tensor([0, 30_000]))
    assert rowupdate.gather_rows(weight.t(), ids) is None  # not laid out as it reads them: index_select runs
