"""Adagrad on a bf16 table's rows in one compiled pass (``_rowupdate.c``): :func:`adagrad_bf16`.

A plain C library built at install as the optional extension ``harness.reference.models._rowupdate``
(``setup.py``) and loaded with ctypes; where it is missing (no C compiler at install) or refuses to
load, :func:`adagrad_bf16` returns False and the caller runs the torch path, which computes the same
values bit for bit (``tests/reference/models/test_rowupdate.py``).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch


@functools.cache
def compiled() -> ctypes.CDLL | None:
    """The compiled library, or None where it was not built or does not load."""
    found = sorted(Path(__file__).resolve().parent.glob("_rowupdate*.so"))
    if not found:
        return None
    try:
        lib = ctypes.CDLL(str(found[0]))
        fn = lib.rowupdate_adagrad_bf16
    except (OSError, AttributeError):
        return None
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_float]
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
