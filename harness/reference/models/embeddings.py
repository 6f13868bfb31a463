"""Embedding tables fused into one weight, with the optimizer fused into the backward pass.

This is the approach of FBGEMM's table-batched embeddings: all tables of one dimension
live in a single ``sum(rows) x D`` weight, a batch's lookups of all features are one
``index_select``, and the backward pass never builds a gradient for the whole table. It
sums the gradients of duplicate rows first (sorted unique ids, then an ordered
``index_add_``), so the update is deterministic, and applies the optimizer to exactly the
rows touched. The update for a row equals what ``torch.optim.Adagrad`` (or SGD) does to
that row given its summed gradient; ``tests/reference/models/test_embeddings.py`` checks it
against ``nn.EmbeddingBag(sparse=True)`` with ``torch.optim.Adagrad``.

Because the update happens in backward, one ``loss.backward()`` is one optimizer step for
the embeddings: gradient accumulation over several backward passes is not supported.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np
import torch
from torch import nn

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import counter_rng as rng
from harness.reference.models import rowupdate
from harness.reference.models.hugepages import empty_table
from harness.reference.models.numerics import TableLayout, column_multipliers, fused_layout, stochastic_round
from harness.reference.models.numerics import workspace as _workspace
from harness.reference.timing import phases
from harness.rules.specs import EmbeddingOptimizer

# the spec's own enum (adagrad, rowwise_adagrad, sgd): a spec's optimizer is the config's
SparseOptimizerKind = EmbeddingOptimizer


@dataclass(frozen=True)
class SparseOptimizerConfig:
    """The fused optimizer of the embedding tables. MLPerf closed fixes eps=1e-8 and no decay."""

    kind: SparseOptimizerKind = SparseOptimizerKind.ADAGRAD
    learning_rate: float = 0.01
    eps: float = 1e-8
    initial_accumulator_value: float = 0.0


_S_EMBEDDING = 11 << 20  # counter_rng stream of the embedding tables' initial weights (one per table)
# values made at a time: a block of any size is made in bounded memory (the hash's uint64 and float64
# temporaries of a chunk: 512 KB each), and faster than in chunks of 4M values, the chunks'
# temporaries staying in cache (measured: docs/performance.md, "Figures behind the code's choices")
_INIT_CHUNK_VALUES = 1 << 16


def initial_weights(seed: int, table: int, table_rows: int, dim: int, rows: tuple[int, int],
                    cols: tuple[int, int] = (0, -1), *, out: torch.Tensor | None = None) -> torch.Tensor:
    """DLRM's initial weights of rows ``rows[0] .. rows[1] - 1`` and columns ``cols[0] ..
    cols[1] - 1`` (-1: to the last) of table ``table`` (``table_rows x dim``): uniform in
    ``+-sqrt(1 / table_rows)``, each weight a pure function of ``(seed, table, row, column)``
    through :mod:`harness.reference.data.counter_rng`. So any block of any table, made on any rank
    for any plan, equals that block of the single-process model, bit for bit, and no rank
    needs the whole table to make its shard. ``out`` (the block's shape, any floating type: the
    values rounded to it): written in place and returned, so a table is made in its own storage
    with no block-sized temporary.
    """
    (r0, r1), (c0, c1) = rows, (cols[0], dim if cols[1] < 0 else cols[1])
    key, bound = rng.key(seed, _S_EMBEDDING + table), math.sqrt(1.0 / table_rows)
    if out is None:
        out = torch.empty(max(r1 - r0, 0), max(c1 - c0, 0))
    step = max(1, _INIT_CHUNK_VALUES // max(c1 - c0, 1))
    col = np.arange(c0, c1, dtype=np.uint64)
    for lo in range(r0, r1, step):
        hi = min(lo + step, r1)
        counters = np.arange(lo, hi, dtype=np.uint64)[:, None] * np.uint64(dim) + col
        out[lo - r0 : hi - r0] = torch.from_numpy(((2.0 * rng.uniform(key, counters) - 1.0) * bound).astype(np.float32))
    return out


def initial_state(opt: SparseOptimizerConfig | None, rows: int, cols: int, device=None) -> torch.Tensor:
    """The fused optimizer's initial state of ``rows x cols`` weights: Adagrad ``rows x cols``,
    row-wise Adagrad ``rows`` (one accumulator per row), SGD and inference none."""
    if opt is None or opt.kind is SparseOptimizerKind.SGD:
        return torch.empty(0, device=device)
    shape = (rows, cols) if opt.kind is SparseOptimizerKind.ADAGRAD else (rows,)
    return empty_table(shape, device=device).fill_(opt.initial_accumulator_value)


def distinct(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)``, the same
    three tensors, computed faster on CPU.

    Every step needs the distinct rows of its ids (to sum duplicate gradients, and for the
    row cache), and on CPU ``torch.unique`` sorts them with a comparison sort that, for one
    batch of the default benchmark, costs a large share of the step. Here the ids are sorted
    stably with their positions (:func:`_sorted_segments`); positions then give the inverse.
    Other devices, and ids too large to pack, use ``torch.unique``.
    """
    seg = _sorted_segments(ids, with_inverse=True)
    if seg is None:
        unique, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
        return unique, inverse, counts
    unique, _, starts, inverse = seg
    assert inverse is not None
    return unique, inverse.reshape(ids.shape), torch.diff(starts, append=torch.tensor([ids.numel()]))


def _segments(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """On CPU: the sorted distinct ids, the positions of ``ids`` in that order (stable: each id's
    positions ascending) and where each distinct id's positions start; None where
    :func:`distinct` would use ``torch.unique`` (another device, ids too large to pack)."""
    seg = _sorted_segments(ids, with_inverse=False)
    return None if seg is None else seg[:3]


def _sorted_segments(ids: torch.Tensor,
                     with_inverse: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """:func:`rowupdate.segments` of the CPU ``ids`` (flattened): the compiled radix sort, or where
    the library is missing each id packed with its position (``row << bits | position``, distinct
    keys, so any sort is a stable one) and the keys sorted by NumPy (both several times faster than
    ``torch.unique``'s comparison sort: docs/performance.md, "Figures behind the code's choices").
    None on another device, or where an id is negative or too large to pack."""
    flat = ids.reshape(-1)
    n = flat.numel()
    bits = max(1, (n - 1).bit_length())
    if ids.device.type != "cpu" or n == 0:
        return None
    top = int(flat.max())
    if top >= 1 << (62 - bits) or int(flat.min()) < 0:
        return None
    seg = rowupdate.segments(flat.contiguous(), top, with_inverse)
    if seg is not None:
        return seg
    keys = np.sort((flat.numpy() << bits) | np.arange(n, dtype=np.int64))
    rows = keys >> bits
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(rows[1:], rows[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    order = keys & ((1 << bits) - 1)
    inverse = None
    if with_inverse:
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.cumsum(first) - 1
    return (torch.from_numpy(rows[starts]), torch.from_numpy(order), torch.from_numpy(starts),
            None if inverse is None else torch.from_numpy(inverse))


_SEGMENT_COLUMNS = 64  # torch's CPU embedding_bag's fast path stops at 64 floats (measured: docs/performance.md)
_SEGMENT_BYTES = 24 << 20  # a part's sums stay below glibc's 32 MB mmap limit: reused memory, no page faults


def _segment_columns(rows: int, width: int, itemsize: int) -> int:
    """The columns summed per ``embedding_bag`` call: at most 64, and few enough that one call's
    ``rows x columns`` result stays below 24 MB (at least 8)."""
    fit = _SEGMENT_BYTES // max(1, rows * itemsize)
    return max(8, min(_SEGMENT_COLUMNS, width, fit // 8 * 8))


def coalesce_bags(ids: torch.Tensor, bag_of_id: torch.Tensor | None, bag_grads: torch.Tensor, *,
                  reuse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per distinct id, the sum of the gradients of the bags that looked it up.

    Args:
        ids: ``N`` int64 row ids, with repeats.
        bag_of_id: ``N``: the bag (row of ``bag_grads``) of each id; None: id ``i``'s is row ``i``.
        bag_grads: ``M x D`` gradient rows, one per bag.
        reuse: rows wider than 64 are summed into a buffer of this thread that the next call
            with ``reuse`` overwrites (for a caller that consumes them at once: a fresh tensor of
            the size of a multi-hot batch's sums, above glibc's 32 MB mmap limit, costs more in
            page faults on every step than the sum itself).

    Returns:
        ``(unique_ids, summed)``: ``U`` sorted distinct ids and their ``U x D`` summed gradients,
        each the sum over the id's positions in ascending order (so the same sum, bit for bit,
        as adding them one by one in the ids' order).

    On CPU the sum is one ``embedding_bag`` over the bags' rows in the order of the sorted ids
    (its "bags" are the distinct ids): a segment sum by PyTorch's fused pooling kernel, with no
    ``N x D`` copy of the gradients per id and no sparse tensor to coalesce, several times faster
    than either for the multi-hot ``dlrm_dcnv2`` batch (measured: docs/performance.md, "Figures
    behind the code's choices"). Rows wider than 64 are summed a few columns
    at a time (each column's sum is the same): the kernel's fast path stops at 64 floats, and a
    part's result is kept below 24 MB (:func:`_segment_columns`).
    """
    flat = ids.reshape(-1)
    grads = bag_grads.reshape(bag_grads.shape[0], -1)
    if flat.numel() == 0:
        return flat.new_empty(0), grads.new_zeros(0, grads.shape[1])
    seg = _segments(flat)
    if seg is not None:
        unique_ids, order, starts = seg
        rows = order if bag_of_id is None else bag_of_id.reshape(-1).index_select(0, order)
        width = grads.shape[1]
        step = _segment_columns(unique_ids.numel(), width, grads.element_size())
        if step >= width:
            return unique_ids, torch.nn.functional.embedding_bag(rows, grads, starts, mode="sum")
        shape = (unique_ids.numel(), width)
        summed = _workspace("coalesced", grads, shape=shape) if reuse else grads.new_empty(shape)
        for c in range(0, width, step):
            part = grads[:, c : c + step]
            summed[:, c : c + part.shape[1]] = torch.nn.functional.embedding_bag(rows, part, starts, mode="sum")
        return unique_ids, summed
    unique_ids, inverse, _ = distinct(flat)
    per_id = grads if bag_of_id is None else grads.index_select(0, bag_of_id.reshape(-1))
    summed = torch.zeros(unique_ids.numel(), grads.shape[1], dtype=grads.dtype, device=grads.device)
    summed.index_add_(0, inverse.reshape(-1), per_id)
    return unique_ids, summed


def coalesce(ids: torch.Tensor, grads: torch.Tensor, *, reuse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum the gradient rows of duplicate ids, deterministically.

    Args:
        ids: ``N`` int64 row ids, with repeats.
        grads: ``N x D`` gradient rows, one per id.

    Returns:
        ``(unique_ids, summed)``: ``U`` sorted distinct ids and their ``U x D`` summed gradients.
    """
    return coalesce_bags(ids, None, grads, reuse=reuse)


@torch.no_grad()
def sparse_update(
    weight: torch.Tensor,
    state: torch.Tensor,
    rows: torch.Tensor,
    grad: torch.Tensor,
    opt: SparseOptimizerConfig | None,
    rounding: tuple[TableLayout, int] | None = None,
    *,
    key_rows: torch.Tensor | None = None,
) -> None:
    """Apply the fused optimizer to the distinct ``rows`` of ``weight`` given their summed ``grad``.

    ``state`` is the optimizer state of ``weight`` (``N x C`` for Adagrad, ``N`` for row-wise
    Adagrad, empty for SGD), fp32 whatever the weight's type. ``grad`` (fp32) is consumed
    (modified in place). A weight stored in bf16 or fp16 is updated in fp32 and its rows
    rounded stochastically with the bits of ``rounding`` (the weight's
    :class:`~harness.reference.models.numerics.TableLayout` and the step; see
    :mod:`harness.reference.models.numerics`), by default of ``rows``; ``key_rows`` are the rows of the
    layout that ``rows`` hold when they are not the same (the slots of a cache hold rows of a
    table). The sharded embeddings (:mod:`harness.reference.distributed.sharded`) and the tiers
    update with this same function.
    """
    if opt is None:
        raise HarnessError(
            "backward through embeddings built without an optimizer (inference tables)",
            ErrorCategory.BAD_INPUT,
        )
    bits = _rounding_bits(weight, rows if key_rows is None else key_rows, rounding)
    # a block of rows at a time, each block's fp32 intermediates about 2 MB: every pass of the
    # update then runs in the caches, not in memory (faster, measured: docs/performance.md,
    # "Figures behind the code's choices"; each row's update is the same, bit for bit)
    block = _update_block(weight)
    for start in range(0, rows.numel(), block):
        end = start + block
        _update_rows(weight, state, rows[start:end], grad[start:end], opt,
                     None if bits is None else (bits[0][start:end], bits[1]))


_UPDATE_BLOCK_BYTES = 2 << 20


def _update_block(weight: torch.Tensor) -> int:
    """Rows per block of an update: about 2 MB of fp32 values."""
    return max(1, _UPDATE_BLOCK_BYTES // (4 * max(1, weight.shape[1] if weight.dim() > 1 else 1)))


def _rounding_bits(weight: torch.Tensor, rows: torch.Tensor, rounding: tuple[TableLayout, int] | None
                   ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """For a 16-bit ``weight``: the rounding keys of ``rows`` and the columns' multipliers."""
    if weight.dtype == torch.float32:
        return None
    if rounding is None:
        raise HarnessError(f"an update of a {weight.dtype} table needs its rounding layout", ErrorCategory.BAD_INPUT)
    layout, step = rounding
    return layout.bits(rows, step, weight.shape[1])


def _update_rows(weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor,
                 opt: SparseOptimizerConfig, bits: tuple[torch.Tensor, torch.Tensor] | None) -> None:
    """:func:`sparse_update` of one block of rows (``bits``: the rows' rounding keys and the
    columns' multipliers, for a 16-bit weight)."""
    if bits is None:
        # ``rows`` are distinct (coalesced), so index_add_ is an exact, ordered update of each
        # row, and cheaper than gathering the rows and scattering them back
        weight.index_add_(0, rows, _optimizer_delta(state, rows, grad, opt))
        return
    # Adagrad on a bf16 table: one compiled pass over the rows where it is built (the same bits as below)
    if opt.kind is SparseOptimizerKind.ADAGRAD and rowupdate.adagrad_bf16(
            weight, state, rows, grad, bits[0].reshape(-1), bits[1], opt.learning_rate, opt.eps):
        return
    _update_rows_torch(weight, state, rows, grad, opt, bits)


def _update_rows_torch(weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor,
                       opt: SparseOptimizerConfig, bits: tuple[torch.Tensor, torch.Tensor]) -> None:
    """:func:`_update_rows` of a 16-bit weight in torch's operations (gather, widen, update, round,
    scatter)."""
    new = _workspace("widened", grad)
    new.copy_(torch.index_select(weight, 0, rows, out=_workspace("narrow", new, weight.dtype)))
    if opt.kind is SparseOptimizerKind.ADAGRAD:
        _fused_adagrad(new, state, rows, grad, opt)
    else:
        new.add_(_optimizer_delta(state, rows, grad, opt))
    weight.index_copy_(0, rows, stochastic_round(new, weight.dtype, *bits))


def update_from_bags(weight: torch.Tensor, state: torch.Tensor, ids: torch.Tensor, bag_of_id: torch.Tensor | None,
                     bag_grads: torch.Tensor, opt: SparseOptimizerConfig | None,
                     rounding: tuple[TableLayout, int] | None = None, grad_unscale: float | None = None) -> None:
    """:func:`coalesce_bags`, :func:`unscale` and :func:`sparse_update` in one, a block of distinct
    rows at a time: each block's gradients are summed into a buffer of about 2 MB and applied at
    once, so the sums are never written to memory as a whole (for a multi-hot batch they are
    tens of MB, and passing them through memory twice costs more than the sums). The same
    values, bit for bit, as the three calls one after another (every row's sum and update is
    made alike). ``bag_grads`` of a 16-bit type are summed and applied in fp32 alike (widened
    exactly; the compiled update of a bf16 table reads bf16 gradients as they are)."""
    flat = ids.reshape(-1)
    grads = bag_grads.reshape(bag_grads.shape[0], -1)
    if flat.numel() == 0:
        return
    seg = _segments(flat)
    if seg is None or opt is None:
        grads = widened(grads)
        unique_ids, summed = coalesce_bags(flat, bag_of_id, grads)
        sparse_update(weight, state, unique_ids, unscale(summed, grad_unscale), opt, rounding)
        return
    unique_ids, order, starts = seg
    rows = order if bag_of_id is None else bag_of_id.reshape(-1).index_select(0, order)
    width = grads.shape[1]
    if _fused_sum_update(weight, state, unique_ids, starts, rows, grads, opt, rounding, grad_unscale):
        return
    grads = widened(grads)
    parts = [grads[:, c : c + _SEGMENT_COLUMNS].contiguous() for c in range(0, width, _SEGMENT_COLUMNS)]
    bits = _rounding_bits(weight, unique_ids, rounding)
    block = _update_block(weight)
    total = unique_ids.numel()
    for a in range(0, total, block):
        b = min(total, a + block)
        lo = int(starts[a])
        hi = int(starts[b]) if b < total else flat.numel()
        seg_rows, seg_starts = rows[lo:hi], starts[a:b] - lo
        if len(parts) == 1:
            summed = torch.nn.functional.embedding_bag(seg_rows, parts[0], seg_starts, mode="sum")
        else:
            summed = _workspace("coalesced", grads, shape=(b - a, width))
            for i, part in enumerate(parts):
                c = i * _SEGMENT_COLUMNS
                summed[:, c : c + part.shape[1]] = torch.nn.functional.embedding_bag(seg_rows, part, seg_starts,
                                                                                     mode="sum")
        _update_rows(weight, state, unique_ids[a:b], unscale(summed, grad_unscale), opt,
                     None if bits is None else (bits[0][a:b], bits[1]))


def widened(grads: torch.Tensor) -> torch.Tensor:
    """``grads`` in fp32: as they are, or 16-bit ones widened (exactly) into a buffer kept from step
    to step (a fresh one costs more in page faults than the conversion)."""
    if grads.dtype == torch.float32:
        return grads
    return _workspace("pooled_grad", grads, torch.float32).copy_(grads)


def _fused_sum_update(weight: torch.Tensor, state: torch.Tensor, unique_ids: torch.Tensor, starts: torch.Tensor,
                      grad_rows: torch.Tensor, grads: torch.Tensor, opt: SparseOptimizerConfig,
                      rounding: tuple[TableLayout, int] | None, grad_unscale: float | None) -> bool:
    """:func:`update_from_bags`' sums and Adagrad (or row-wise Adagrad) update of a bf16 table in one compiled pass
    (:func:`rowupdate.sum_adagrad_bf16`: the same values, bit for bit, as the blocks below); False
    where it does not apply (another optimizer or type, a scaled loss, a layout whose keys it does
    not compute, the library not built). On torch's threads (its OpenMP threads, which the library
    shares: threads of its own beside torch's slowed the step, its share of torch's faster:
    docs/performance.md, "Figures behind the code's choices")."""
    rowwise = opt.kind is SparseOptimizerKind.ROWWISE_ADAGRAD
    if (not (rowwise or opt.kind is SparseOptimizerKind.ADAGRAD) or weight.dtype != torch.bfloat16 or rounding is None
            or grad_unscale is not None):
        return False
    layout, step = rounding
    key_blocks = layout.key_blocks(step)
    if key_blocks is None:
        return False
    return rowupdate.sum_adagrad_bf16(weight, state, unique_ids, starts, grad_rows, grads, key_blocks,
                                      column_multipliers(layout.col_offset, weight.shape[1]), opt.learning_rate,
                                      opt.eps, threads=torch.get_num_threads(), rowwise=rowwise)


def _optimizer_delta(state: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor,
                     opt: SparseOptimizerConfig) -> torch.Tensor:
    """The change of each of ``rows`` (in ``grad``'s storage), the optimizer state updated."""
    if opt.kind is SparseOptimizerKind.SGD:
        return grad.mul_(-opt.learning_rate)
    if opt.kind is SparseOptimizerKind.ADAGRAD:
        # the same values as ``state.index_add_(0, rows, grad * grad)`` then
        # ``state.index_select(0, rows)`` (``rows`` are distinct), with one gather and one
        # scatter of the state's rows instead of two gathers and a scatter: the rows are spread
        # over a large table, and each touch of one is a cache miss. Into buffers kept from step
        # to step: a fresh tensor of that size costs more in page faults than the arithmetic
        denom = _workspace("denom", grad)
        torch.index_select(state, 0, rows, out=denom)
        denom.addcmul_(grad, grad)
        state.index_copy_(0, rows, denom)
        denom.sqrt_().add_(opt.eps)
    else:
        state.index_add_(0, rows, row_mean_square(grad))
        # the square root correctly rounded (through fp64), as the compiled update's: torch's fp32 sqrt on a
        # CPU may be its vector library's, not correctly rounded (docs/performance.md, "Figures behind the
        # code's choices")
        denom = state.index_select(0, rows).double().sqrt_().to(state.dtype).add_(opt.eps).unsqueeze(1)
    return grad.div_(denom).mul_(-opt.learning_rate)


def row_mean_square(grad: torch.Tensor) -> torch.Tensor:
    """Each row's mean of squares (row-wise Adagrad's increment of the row's accumulator), its sum in one
    fixed order on every machine: the squares folded in halves (value ``c`` plus value ``c + ceil(w / 2)``
    while the width ``w`` is above one, the middle value of an odd width carried), then divided by the
    row's length. The compiled update (``_rowupdate.c``) adds in the same order; torch's ``mean`` adds in
    an order that depends on the vector width its kernels were dispatched to."""
    sq = grad * grad
    width = sq.shape[1]
    while width > 1:
        half = (width + 1) // 2
        sq[:, : width - half] += sq[:, half:width]
        width = half
    return sq[:, 0] / grad.shape[1]


def _fused_adagrad(new: torch.Tensor, state: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor,
                   opt: SparseOptimizerConfig) -> None:
    """Adagrad on ``new`` (the fp32 values of the distinct ``rows``), their state updated: torch's
    fused Adagrad kernel over the gathered rows, one pass where the unfused arithmetic takes six
    (its result for an element depends on the element's values only, not on where it sits in the
    buffer, so a shard of the rows updates them as the whole table does)."""
    acc = _workspace("denom", grad)
    torch.index_select(state, 0, rows, out=acc)
    torch._fused_adagrad_([new], [grad], [acc], [grad.new_ones(())], lr=opt.learning_rate, lr_decay=0.0,
                          weight_decay=0.0, eps=opt.eps, maximize=False)
    state.index_copy_(0, rows, acc)


def unscale(grad: torch.Tensor, factor: float | None) -> torch.Tensor:
    """With a scaled loss (``factor`` = 1 / its scale), ``grad`` unscaled in place, each value that
    overflowed (an inf or a NaN) taken as zero: that weight is not updated this step, and the loss
    scaler, which sees the overflow in the dense gradients, skips the dense step and lowers the
    scale. The decision is per value, so it is the same whatever the tables' sharding (a
    decision per update call would differ between one fused weight and its shards)."""
    if factor is not None:
        grad.mul_(factor).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return grad


class HasSparseOptimizer(Protocol):
    """What :func:`set_learning_rate` changes: a collection's fused optimizer (None: frozen tables)."""

    optimizer: SparseOptimizerConfig | None


def set_learning_rate(owner: HasSparseOptimizer, lr: float) -> None:
    """Give ``owner``'s fused optimizer (its ``optimizer`` attribute) the rate ``lr``."""
    opt = owner.optimizer
    if opt is None:
        raise HarnessError("embeddings built without an optimizer (inference tables) have no learning rate",
                           ErrorCategory.BAD_INPUT)
    if opt.learning_rate != lr:
        owner.optimizer = dataclasses.replace(opt, learning_rate=float(lr))


class _FusedLookup(torch.autograd.Function):
    """``weight[ids]`` pooled per feature; backward applies the fused optimizer in place."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, ids: torch.Tensor, owner: FusedEmbeddingCollection) -> torch.Tensor:
        ctx.owner = owner
        ctx.save_for_backward(ids)
        return owner._lookup(weight, ids)

    @staticmethod
    def backward(ctx, grad_pooled: torch.Tensor):
        (ids,) = ctx.saved_tensors
        owner: FusedEmbeddingCollection = ctx.owner
        # summed and applied in fp32 whatever the tables' type (widened where it is used: the compiled
        # update of a bf16 table reads the bf16 gradients as they are, half the bytes)
        with phases.CLOCK.phase(phases.EMBEDDING_BACKWARD):
            owner._update_from_pooled(ids, grad_pooled.contiguous())
        return None, None, None


class FusedEmbeddingCollection(nn.Module):
    """All embedding tables of a DLRM as one weight with a fused sparse optimizer.

    Args:
        table_rows: rows of each table (one table per categorical feature).
        dim: the embedding dimension, the same for every table (as DLRM's interaction needs).
        pooling: ids per sample of each feature; the ids of a feature are sum-pooled.
        optimizer: the fused optimizer; ``None`` means the tables are frozen (inference).
        device: where the weight lives; ``torch.device("meta")`` builds without memory.
        seed: the tables' initial weights are :func:`initial_weights` of this seed.
        table_ids: each table's index in the model (default ``0, 1, ...``), which keys its
            initial weights: a collection of some of a model's tables (data-parallel replicas)
            starts from those tables' weights.
        allocate: False leaves the weight empty, for a subclass that keeps the rows elsewhere
            (:class:`harness.reference.tiered.TieredEmbeddingCollection`).
        dtype: the tables' storage type: fp32, or bf16/fp16 (half the bytes; updated in fp32 and
            rounded stochastically, see :mod:`harness.reference.models.numerics`). The optimizer state
            is fp32 whatever it is; the pooled output has the tables' type.
    """

    # buffers (register_buffer): declared, since torch's stubs type a module's attributes Tensor | Module
    column_offsets: torch.Tensor
    column_feature: torch.Tensor
    optimizer_state: torch.Tensor

    def __init__(
        self,
        table_rows: Sequence[int],
        dim: int,
        pooling: Sequence[int],
        optimizer: SparseOptimizerConfig | None = None,
        device: torch.device | str | None = None,
        *,
        allocate: bool = True,
        seed: int = 0,
        table_ids: Sequence[int] | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        if len(table_rows) != len(pooling):
            raise HarnessError(f"{len(table_rows)} tables but {len(pooling)} pooling factors")
        self.table_rows = tuple(int(r) for r in table_rows)
        self.pooling = tuple(int(p) for p in pooling)
        self.dim = int(dim)
        self.optimizer = optimizer
        self.seed = int(seed)
        self.table_ids = tuple(range(len(self.table_rows))) if table_ids is None else tuple(int(t) for t in table_ids)
        row_offsets = torch.tensor([0, *self.table_rows[:-1]], dtype=torch.int64).cumsum(0)
        column_feature = torch.repeat_interleave(torch.arange(len(self.pooling)), torch.tensor(self.pooling))
        self.register_buffer("column_offsets", row_offsets[column_feature].to(device), persistent=False)
        self.register_buffer("column_feature", column_feature.to(device), persistent=False)
        self._one_hot = all(p == 1 for p in self.pooling)
        total = sum(self.table_rows) if allocate else 0  # not allocated: a subclass stores the rows
        self.weight = nn.Parameter(empty_table((total, self.dim), dtype, device))
        self.layout = fused_layout(self.seed, self.table_ids, self.table_rows)
        self.update_step = 0  # the optimizer step of the next update (its rounding bits)
        self.grad_unscale: float | None = None  # 1 / the loss scale, when the loss is scaled
        self.register_buffer("optimizer_state", self._new_state(total, device))
        self.reset_parameters()

    def _new_state(self, total: int, device) -> torch.Tensor:
        return initial_state(self.optimizer, total, self.dim, device)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """DLRM's initialisation: table ``t`` uniform in ``+-sqrt(1 / rows_t)``, as
        :func:`initial_weights` of the collection's seed (the same on every rank)."""
        if self.weight.is_meta or self.weight.numel() == 0:
            return
        start = 0
        for t, rows in enumerate(self.table_rows):
            initial_weights(self.seed, self.table_ids[t], rows, self.dim, (0, rows), out=self.weight[start : start + rows])
            start += rows

    def _lookup(self, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (``B x L``) of ``weight``, sum-pooled per feature: ``B x F x D``."""
        batch = ids.shape[0]
        if self._one_hot:
            flat = ids.reshape(-1)
            rows = rowupdate.gather_rows(weight, flat)
            return (weight.index_select(0, flat) if rows is None else rows).view(batch, ids.shape[1], -1)
        # one bag per (sample, feature), as nn.EmbeddingBag does it, without a B x L x D copy
        starts = torch.tensor((0, *self.pooling[:-1]), device=ids.device).cumsum(0)
        offsets = (torch.arange(batch, device=ids.device).unsqueeze(1) * ids.shape[1] + starts).reshape(-1)
        pooled = torch.nn.functional.embedding_bag(ids.reshape(-1), weight, offsets, mode="sum")
        return pooled.view(batch, len(self.pooling), -1)

    def _coalesce_pooled(self, ids: torch.Tensor, grad_pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per distinct row, the sum of the pooled gradients of every bag that looked it up
        (:func:`coalesce_bags`: a segment sum of the bags' gradients in the sorted ids' order)."""
        return coalesce_bags(ids.reshape(-1), self._bags(ids), grad_pooled.reshape(-1, grad_pooled.shape[-1]),
                             reuse=True)

    def _bags(self, ids: torch.Tensor) -> torch.Tensor | None:
        """Each id's bag (row of the ``(B * F) x D`` pooled gradients); None: one id per bag."""
        if self._one_hot:
            return None
        batch = ids.shape[0]
        return (torch.arange(batch, device=ids.device).unsqueeze(1) * len(self.pooling) + self.column_feature).reshape(-1)

    def _update_from_pooled(self, ids: torch.Tensor, grad_pooled: torch.Tensor) -> None:
        """Apply the fused optimizer with the pooled gradients ``grad_pooled`` (the pooled output's
        type) of ``ids``."""
        update_from_bags(self.weight.data, self.optimizer_state, ids.reshape(-1), self._bags(ids),
                         grad_pooled.reshape(-1, grad_pooled.shape[-1]), self.optimizer,
                         (self.layout, self.update_step), self.grad_unscale)

    def set_step(self, step: int, grad_unscale: float | None = None) -> None:
        """The optimizer step whose update comes next (its rounding bits), and 1 / the loss scale
        of its gradients (None: not scaled)."""
        self.update_step, self.grad_unscale = int(step), grad_unscale

    def set_learning_rate(self, lr: float) -> None:
        """The fused optimizer's rate from the next update on (the learning-rate schedule's)."""
        set_learning_rate(self, lr)

    def table_weights(self) -> list[torch.Tensor]:
        """Each table's weights, in order (a copy)."""
        w = self.weight.detach()
        starts = (0, *itertools.accumulate(self.table_rows))
        return [w[starts[t] : starts[t + 1]].clone() for t in range(len(self.table_rows))]

    def global_ids(self, sparse: torch.Tensor) -> torch.Tensor:
        """Per-table ids ``B x L`` -> rows of the fused weight ``B x L``."""
        return sparse + self.column_offsets

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """Look up and pool.

        Args:
            sparse: ``B x L`` int64 per-table ids, features side by side
                (see :class:`harness.reference.data.batches.Batch`).

        Returns:
            ``B x F x D`` sum-pooled embeddings, one ``D``-vector per feature.

        Example::

            emb = FusedEmbeddingCollection([10, 20], dim=4, pooling=[1, 2])
            emb(torch.tensor([[3, 0, 19]])).shape  # torch.Size([1, 2, 4])
        """
        with phases.CLOCK.phase(phases.EMBEDDING_FORWARD):
            ids = self.global_ids(sparse)
            if self.training and self.optimizer is not None and torch.is_grad_enabled():
                return _FusedLookup.apply(self.weight, ids, self)
            with torch.no_grad():
                return self._lookup(self.weight, ids)


class GroupedEmbeddingCollection(nn.Module):
    """Tables of several embedding dimensions: one :class:`FusedEmbeddingCollection` (one fused
    weight and optimizer) per dimension, as FBGEMM's table-batched embeddings group tables.

    Each group looks up its tables' id columns of the batch; the pooled vectors come out in the
    model's feature order, each table's ``dim`` values after the previous table's: ``B x
    sum(dims)``. Table ``t`` of group ``g`` keeps its model index (``table_ids``), so its initial
    weights are those of table ``t`` whatever the grouping.

    Args:
        table_rows, dims, pooling: per table, in the model's order.
        optimizer, device, seed: as for :class:`FusedEmbeddingCollection`.
    """

    _order: torch.Tensor  # a buffer (register_buffer), declared as for FusedEmbeddingCollection's

    def __init__(self, table_rows: Sequence[int], dims: Sequence[int], pooling: Sequence[int],
                 optimizer: SparseOptimizerConfig | None = None, device: torch.device | str | None = None, *,
                 seed: int = 0, dtype: torch.dtype = torch.float32):
        super().__init__()
        if not len(table_rows) == len(dims) == len(pooling):
            raise HarnessError(f"{len(table_rows)} tables, {len(dims)} dimensions, {len(pooling)} pooling factors")
        self.table_rows, self.dims = tuple(int(r) for r in table_rows), tuple(int(d) for d in dims)
        self.pooling, self.optimizer, self.seed = tuple(int(p) for p in pooling), optimizer, int(seed)
        self.group_dims = tuple(sorted(set(self.dims)))
        self.group_tables = tuple(tuple(t for t, d in enumerate(self.dims) if d == g) for g in self.group_dims)
        self.groups = nn.ModuleList(
            FusedEmbeddingCollection([self.table_rows[t] for t in tables], dim, [self.pooling[t] for t in tables],
                                     optimizer=optimizer, device=device, seed=seed, table_ids=tables, dtype=dtype)
            for dim, tables in zip(self.group_dims, self.group_tables)
        )
        col_start = (0, *itertools.accumulate(self.pooling))
        for g, tables in enumerate(self.group_tables):
            columns = torch.cat([torch.arange(col_start[t], col_start[t + 1]) for t in tables])
            self.register_buffer(f"_columns{g}", columns.to(device), persistent=False)
        # the groups' outputs side by side -> the model's feature order
        out_start = (0, *itertools.accumulate(self.dims))
        grouped = [c for tables in self.group_tables for t in tables for c in range(out_start[t], out_start[t + 1])]
        order = torch.empty(len(grouped), dtype=torch.int64)
        order[torch.tensor(grouped, dtype=torch.int64)] = torch.arange(len(grouped))
        self.register_buffer("_order", order.to(device), persistent=False)

    def fused_groups(self) -> list[FusedEmbeddingCollection]:
        """The groups, in order (``groups`` is an nn.ModuleList: its items are typed nn.Module)."""
        return [cast(FusedEmbeddingCollection, group) for group in self.groups]

    def columns(self, group: int) -> torch.Tensor:
        """The batch's id columns of group ``group``'s tables."""
        return getattr(self, f"_columns{group}")

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """``B x L`` per-table ids -> ``B x sum(dims)`` pooled embeddings in feature order."""
        with phases.CLOCK.phase(phases.EMBEDDING_FORWARD):
            outs = [group(sparse.index_select(1, self.columns(g))).flatten(1) for g, group in enumerate(self.groups)]
            return torch.cat(outs, dim=1).index_select(1, self._order)

    def set_learning_rate(self, lr: float) -> None:
        for group in self.fused_groups():
            group.set_learning_rate(lr)

    def set_step(self, step: int, grad_unscale: float | None = None) -> None:
        for group in self.fused_groups():
            group.set_step(step, grad_unscale)

    def table_weights(self) -> list[torch.Tensor]:
        """Each table's weights, in the model's order (a copy)."""
        out: dict[int, torch.Tensor] = {}
        for group, tables in zip(self.fused_groups(), self.group_tables):
            for t, w in zip(tables, group.table_weights()):
                out[t] = w
        return [out[t] for t in range(len(self.table_rows))]  # every table is in one group
