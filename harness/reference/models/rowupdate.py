"""Adagrad on a bf16 table's rows in one compiled pass (``_rowupdate.c``): :func:`adagrad_bf16` (the
rows' summed gradients given), :func:`sum_adagrad_bf16` (each row's gradients summed in the same pass);
:func:`segments`, the sort of a batch's ids that every sparse update starts from; and
:func:`gather_rows`, the forward lookup of one id per feature.

A plain C library built at install as the optional extension ``harness.reference.models._rowupdate``
(``setup.py``) and loaded with ctypes; where it is missing (no C compiler at install) or refuses to
load, they return False (None) and the caller runs the torch (NumPy) path, which computes the same values bit for bit
(``tests/reference/models/test_rowupdate.py``).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from harness.reference.models import clib


@functools.cache
def compiled() -> ctypes.CDLL | None:
    """The compiled library, or None where it was not built or does not load."""
    lib = clib.load("_rowupdate")
    fn = None if lib is None else getattr(lib, "rowupdate_adagrad_bf16", None)
    if fn is None:
        return None
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_float]
    fused = getattr(lib, "rowupdate_sum_adagrad_bf16", None)
    if fused is not None:
        fused.restype = ctypes.c_int
        fused.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                          ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                          ctypes.c_float, ctypes.c_float, ctypes.c_int, ctypes.c_int]
    segments_fn = getattr(lib, "rowupdate_segments", None)
    if segments_fn is not None:
        segments_fn.restype = ctypes.c_int64
        segments_fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    gather_fn = getattr(lib, "rowupdate_gather_rows", None)
    if gather_fn is not None:
        gather_fn.restype = None
        gather_fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                              ctypes.c_int]
    return lib


def adagrad_bf16(weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor,
                 keys: torch.Tensor, multipliers: torch.Tensor, lr: float, eps: float) -> bool:
    """Adagrad on the distinct ``rows`` of a bf16 ``weight`` (``N x C``) and its fp32 ``state``
    (``N x C``) given their summed fp32 ``grad`` (``U x C``), the new rows rounded stochastically with
    ``keys`` (``U`` or ``U x 1`` int32) and ``multipliers`` (``C`` int32), in one pass over the rows:
    what ``embeddings._update_rows``' torch path computes, bit for bit. False (nothing done) where the
    library is missing or the tensors are not laid out as it reads them (CPU, contiguous, those types)."""
    lib = compiled()
    cols = weight.shape[1] if weight.dim() == 2 else -1
    if (lib is None or weight.dtype != torch.bfloat16 or state.dtype != torch.float32
            or grad.dtype != torch.float32 or rows.dtype != torch.int64 or keys.dtype != torch.int32
            or multipliers.dtype != torch.int32 or state.shape != weight.shape or grad.dim() != 2
            or grad.shape != (rows.numel(), cols) or keys.numel() != rows.numel() or multipliers.numel() != cols
            or any(t.device.type != "cpu" or not t.is_contiguous()
                   for t in (weight, state, rows, grad, keys, multipliers))):
        return False
    if rows.numel():
        if int(rows.min()) < 0 or int(rows.max()) >= weight.shape[0]:
            raise IndexError(f"rows out of the table's {weight.shape[0]} rows")
        lib.rowupdate_adagrad_bf16(weight.data_ptr(), state.data_ptr(), cols, rows.data_ptr(), rows.numel(),
                                   grad.data_ptr(), keys.data_ptr(), multipliers.data_ptr(), lr, eps)
    return True


def sum_adagrad_bf16(weight: torch.Tensor, state: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor,
                     grad_rows: torch.Tensor, grads: torch.Tensor,
                     key_blocks: tuple[torch.Tensor, torch.Tensor, torch.Tensor], multipliers: torch.Tensor,
                     lr: float, eps: float, threads: int, rowwise: bool = False) -> bool:
    """The sum of each distinct row's gradients and its Adagrad update in one pass, on ``threads``
    threads: for the ``U`` ascending distinct ``rows`` of a bf16 ``weight`` (``N x C``, fp32
    ``state`` alike), row ``rows[i]``'s gradient is the sum of rows ``grad_rows[starts[i] ..
    starts[i + 1] - 1]`` of ``grads`` (``M x C``, fp32 or bf16), added in that order as
    ``embedding_bag`` sums a bag; then :func:`adagrad_bf16`'s update, each row's key computed from
    ``key_blocks`` (:meth:`~harness.reference.models.numerics.TableLayout.key_blocks`). What
    ``embeddings.update_from_bags``' other paths compute, bit for bit, without the sums' and the keys'
    passes through memory. False (nothing done) where the library lacks it, the tensors are not laid
    out as it reads them, or it could not get its memory or threads. With ``rowwise``, row-wise Adagrad
    (``state`` one fp32 value a row, ``N``): each row's accumulator grows by the mean of its summed
    gradient's squares (:func:`~harness.reference.models.embeddings.row_mean_square`'s order) and its
    values move by ``g / (sqrt(acc) + eps) * -lr``, as ``embeddings._optimizer_delta`` computes."""
    lib = compiled()
    fn = None if lib is None else getattr(lib, "rowupdate_sum_adagrad_bf16", None)
    cols = weight.shape[1] if weight.dim() == 2 else -1
    block_starts, block_offsets, block_keys = key_blocks
    state_shape = weight.shape[:1] if rowwise else weight.shape
    if (fn is None or weight.dtype != torch.bfloat16 or state.dtype != torch.float32 or state.shape != state_shape
            or grads.dtype not in (torch.float32, torch.bfloat16) or grads.dim() != 2 or grads.shape[1] != cols
            or rows.dtype != torch.int64 or starts.dtype != torch.int64 or grad_rows.dtype != torch.int64
            or starts.numel() != rows.numel() or multipliers.dtype != torch.int32 or multipliers.numel() != cols
            or block_starts.dtype != torch.int64 or block_offsets.dtype != torch.int64
            or block_keys.dtype != torch.int32 or block_starts.numel() != block_keys.numel() + 1
            or block_offsets.numel() != block_keys.numel()
            or any(t.device.type != "cpu" or not t.is_contiguous()
                   for t in (weight, state, rows, starts, grad_rows, grads, multipliers, block_starts,
                             block_offsets, block_keys))):
        return False
    n = rows.numel()
    if n == 0:
        return True
    if not bool((rows[1:] > rows[:-1]).all()):
        raise ValueError("the rows of a fused sum and update must ascend, each once")
    if int(rows[0]) < 0 or int(rows[-1]) >= min(weight.shape[0], int(block_starts[-1])):  # ascending: the ends
        raise IndexError(f"rows out of the table's {weight.shape[0]} rows")
    if (int(starts[0]) < 0 or int(starts[-1]) > grad_rows.numel() or not bool((starts[1:] >= starts[:-1]).all())
            or (grad_rows.numel() and (int(grad_rows.min()) < 0 or int(grad_rows.max()) >= grads.shape[0]))):
        raise IndexError(f"segments out of the {grad_rows.numel()} gradient rows or the {grads.shape[0]} given")
    return fn(weight.data_ptr(), state.data_ptr(), cols, rows.data_ptr(), n, starts.data_ptr(), grad_rows.numel(),
              grad_rows.data_ptr(), grads.data_ptr(), int(grads.dtype == torch.bfloat16), block_starts.data_ptr(),
              block_offsets.data_ptr(), block_keys.data_ptr(), block_keys.numel(), multipliers.data_ptr(), lr, eps,
              int(rowwise), max(1, int(threads))) == 0


def segments(ids: torch.Tensor, max_id: int,
             with_inverse: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """The segments of the flat CPU int64 ``ids`` (none negative, none above ``max_id``) by a stable
    radix sort: the distinct ids ascending, the positions of ``ids`` in sorted order (each id's
    positions ascending), where each distinct id's positions start in that order, and (``with_inverse``)
    each position's index among the distinct ids. What sorting the keys ``id << b | position`` gives,
    in two or three passes over the ids instead of a comparison sort, each on torch's threads (measured:
    docs/performance.md, "Figures behind the code's choices"). None where the library lacks it or could
    not get its memory."""
    lib = compiled()
    fn = None if lib is None else getattr(lib, "rowupdate_segments", None)
    if fn is None or ids.dtype != torch.int64 or ids.device.type != "cpu" or not ids.is_contiguous():
        return None
    n = ids.numel()
    order, unique, starts = (torch.empty(n, dtype=torch.int64) for _ in range(3))
    inverse = torch.empty(n, dtype=torch.int64) if with_inverse else None
    count = fn(ids.data_ptr(), n, max(1, int(max_id).bit_length()), order.data_ptr(), unique.data_ptr(),
               starts.data_ptr(), None if inverse is None else inverse.data_ptr(), torch.get_num_threads())
    if count < 0:
        return None
    return unique[:count], order, starts[:count], inverse


def gather_rows(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor | None:
    """``weight.index_select(0, ids)`` for a contiguous 2-D CPU ``weight`` and flat int64 ``ids``: each
    row's lines fetched early, on torch's threads (faster on a large table: docs/performance.md,
    "Figures behind the code's choices"). The same rows, byte for byte; an id outside the table raises
    ``IndexError`` as ``index_select`` does. None where the library lacks it or the tensors are not laid
    out as it reads them."""
    lib = compiled()
    fn = None if lib is None else getattr(lib, "rowupdate_gather_rows", None)
    if (fn is None or weight.dim() != 2 or weight.device.type != "cpu" or not weight.is_contiguous()
            or ids.dtype != torch.int64 or ids.dim() != 1 or ids.device.type != "cpu" or not ids.is_contiguous()):
        return None
    n = ids.numel()
    out = torch.empty(n, weight.shape[1], dtype=weight.dtype)
    if n == 0:
        return out
    if int(ids.min()) < 0 or int(ids.max()) >= weight.shape[0]:
        raise IndexError(f"ids out of the table's {weight.shape[0]} rows")
    fn(weight.data_ptr(), weight.shape[1] * weight.element_size(), ids.data_ptr(), n, out.data_ptr(),
       torch.get_num_threads())
    return out
