"""DLRM's pairwise dot interaction in bf16, forward and backward, in one compiled pass each way
(``_dotinteraction.c``): :func:`forward` writes ``[x, <z_i, z_j> for i < j]`` at once and
:func:`backward` each vector's gradient, without the ``B x n x n`` matrices and the gathers and
concatenations of the torch path (``harness.reference.models.dlrm._PairwiseDots``).

A plain C library built at install as the optional extension ``harness.reference.models._dotinteraction``
(``setup.py``) and loaded with ctypes; where it is missing (no C compiler at install) or refuses to load,
:func:`applies` is False and the torch path runs. Its sums run in one fixed order (each sum over pairs of
terms, as AVX512-BF16's ``VDPBF16PS`` adds them: the file's header), on that instruction where the CPU has
it and in a plain loop with the same additions elsewhere; torch's batched matmul sums in its library's
order, so the two paths agree to within a bf16 rounding, not bit for bit
(``tests/reference/models/test_dotkernel.py``).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from harness.reference.models import clib

_P = ctypes.c_void_p
_I = ctypes.c_int64


@functools.cache
def compiled() -> ctypes.CDLL | None:
    """The compiled library, or None where it was not built or does not load."""
    lib = clib.load("_dotinteraction")
    if lib is None or getattr(lib, "dot_interaction_backward", None) is None:
        return None
    lib.dot_interaction_forward.restype = ctypes.c_int
    lib.dot_interaction_forward.argtypes = [_P, _P, _P, _I, _I, _I, ctypes.c_int, ctypes.c_int]
    lib.dot_interaction_backward.restype = ctypes.c_int
    lib.dot_interaction_backward.argtypes = [_P, _P, _P, _P, _P, _I, _I, _I, ctypes.c_int, ctypes.c_int]
    lib.dot_interaction_kernel.restype = ctypes.c_int
    lib.dot_interaction_kernel.argtypes = []
    return lib


def bf16_instruction() -> bool:
    """Whether the sums run on AVX512-BF16's ``VDPBF16PS`` here (else the plain loop)."""
    lib = compiled()
    return lib is not None and bool(lib.dot_interaction_kernel())


def applies(dense: torch.Tensor, sparse: torch.Tensor) -> bool:
    """Whether the compiled pass takes this interaction: the library built, ``dense`` (``B x D``) and
    ``sparse`` (``B x F x D``) bf16 on a CPU, ``D`` even."""
    return (compiled() is not None and dense.dtype == torch.bfloat16 and sparse.dtype == torch.bfloat16
            and dense.device.type == "cpu" and sparse.device.type == "cpu" and dense.dim() == 2
            and sparse.dim() == 3 and sparse.shape[0] == dense.shape[0] and sparse.shape[2] == dense.shape[1]
            and dense.shape[1] % 2 == 0)


def forward(dense: torch.Tensor, sparse: torch.Tensor, plain: bool = False) -> torch.Tensor:
    """``B x (D + n(n-1)/2)``, ``n = F + 1``: ``dense`` and the dots of ``z = [dense, sparse_1 ..
    sparse_F]``' pairs ``i < j`` in the order of ``torch.triu_indices(n, n, 1)``, on torch's threads.
    ``plain``: the plain loop even where the instruction is there (tests compare the two)."""
    lib = _library(dense, sparse)
    dense, sparse = dense.contiguous(), sparse.contiguous()
    batch, features, dim = sparse.shape
    n = features + 1
    out = torch.empty(batch, dim + n * (n - 1) // 2, dtype=torch.bfloat16)
    _check(lib.dot_interaction_forward(dense.data_ptr(), sparse.data_ptr(), out.data_ptr(), batch, features, dim,
                                       torch.get_num_threads(), int(plain)))
    return out


def backward(dense: torch.Tensor, sparse: torch.Tensor, grad_out: torch.Tensor,
             plain: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``dense`` and ``sparse`` given :func:`forward`'s output gradient ``grad_out``
    (bf16, as autocast's top MLP hands it back): ``grad_out``'s first ``D`` columns plus each vector's
    ``sum_j S_ij z_j``, ``S`` the symmetric matrix of the pairs' gradients."""
    lib = _library(dense, sparse)
    dense, sparse = dense.contiguous(), sparse.contiguous()
    batch, features, dim = sparse.shape
    n = features + 1
    grad_out = grad_out.to(torch.bfloat16).contiguous()
    if grad_out.shape != (batch, dim + n * (n - 1) // 2):
        raise ValueError(f"the interaction's output gradient has shape {tuple(grad_out.shape)}, "
                         f"not ({batch}, {dim + n * (n - 1) // 2})")
    grad_dense, grad_sparse = torch.empty_like(dense), torch.empty_like(sparse)
    _check(lib.dot_interaction_backward(dense.data_ptr(), sparse.data_ptr(), grad_out.data_ptr(),
                                        grad_dense.data_ptr(), grad_sparse.data_ptr(), batch, features, dim,
                                        torch.get_num_threads(), int(plain)))
    return grad_dense, grad_sparse


def _library(dense: torch.Tensor, sparse: torch.Tensor) -> ctypes.CDLL:
    lib = compiled()
    if lib is None or not applies(dense, sparse):
        raise ValueError("the compiled dot interaction takes bf16 CPU tensors B x D and B x F x D (D even) "
                         "where its library is built; check applies() first")
    return lib


def _check(status: int) -> None:
    if status != 0:
        raise MemoryError("the compiled dot interaction could not get its working memory")
