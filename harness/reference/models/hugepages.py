"""Embedding tables in transparent huge pages.

A step of a DLRM reads and writes tens of thousands of rows scattered over tables of hundreds
of MB: with 4 KB pages nearly every row is a TLB miss and a page walk, whose cost on this kind
of machine is of the order of the row's own memory access. Linux backs a region with 2 MB
pages when asked (``madvise(MADV_HUGEPAGE)``, honoured where
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise``, the usual
default), which brings a table of 665 MB to 333 TLB entries: the 16-bit tables' update takes
less time (measured: docs/performance.md, "Figures behind the code's choices").

The advice is given for the tables and their optimizer state only, before their pages are first
touched; it changes no value and does nothing off Linux, on other devices, or where the kernel
does not honour it. (PyTorch's ``THP_MEM_ALLOC_ENABLE=1`` does the same for every allocation of
a process, when set before torch is imported.)

On Linux a CPU table of at least 128 KB (glibc's own first threshold for giving an allocation a
mapping) also lives in a mapping of its own (private, anonymous; one of two huge pages or more
starts on a huge-page boundary), not in the C allocator's heap, as FBGEMM's host
tables live in their own allocations: every 2 MB of it can be a huge page, and the tables, which
live as long as the model, are not interleaved in the heap with the transient tensors of their
initialisation and of the steps. Interleaved, they pinned the heap: a rank kept freed heap that
varied from rank to rank and run to run with the order of allocations, and peak RSS with it
(measured: docs/performance.md, "Figures behind the code's choices"). The mapping is unmapped
when the table's last tensor is freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import mmap
import sys

import torch

_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14


@functools.cache
def libc() -> ctypes.CDLL | None:
    """This process's C library (Linux), None elsewhere or where it does not load. Also the
    training engine's allocator policy's (:mod:`harness.reference.engine.heap`)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def _madvise():
    lib = libc()
    if lib is None:
        return None
    fn = lib.madvise
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def advise_huge_pages(t: torch.Tensor) -> bool:
    """Ask for contiguous ``t``'s bytes (the whole 2 MB pages inside them) to be backed by huge
    pages. True where the kernel took the advice (a CPU tensor of at least two huge pages, on
    Linux)."""
    nbytes = t.numel() * t.element_size()
    if t.device.type != "cpu" or nbytes < 2 * _HUGE_PAGE or not t.is_contiguous():
        return False
    madvise = _madvise()
    if madvise is None:
        return False
    begin = t.data_ptr()
    start = -(-begin // _HUGE_PAGE) * _HUGE_PAGE
    end = (begin + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    return end > start and madvise(start, end - start, _MADV_HUGEPAGE) == 0


_OWN_MAPPING = 128 << 10


def _own_mapping(nbytes: int) -> torch.Tensor:
    """``nbytes`` (uint8) of a private anonymous mapping of their own, starting on a huge-page
    boundary where they span two huge pages. The tensor holds the mapping (``torch.frombuffer``
    keeps its buffer alive); the bytes around it are never touched, so never resident."""
    align = _HUGE_PAGE if nbytes >= 2 * _HUGE_PAGE else mmap.PAGESIZE
    region = mmap.mmap(-1, nbytes + align - mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = torch.frombuffer(region, dtype=torch.uint8)
    offset = -whole.data_ptr() % align
    return whole[offset : offset + nbytes]


def empty_table(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """``torch.empty(shape)`` for a table or its optimizer state: on CPU, in huge pages where the
    kernel gives them (:func:`advise_huge_pages`, before any page is touched), and, on Linux, from
    128 KB, in a mapping of its own (see the module's docstring)."""
    numel = math.prod(shape)
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    if torch.device(device or "cpu").type == "cpu" and nbytes >= _OWN_MAPPING and sys.platform.startswith("linux"):
        t = _own_mapping(nbytes).view(dtype).view(shape)
    else:
        t = torch.empty(shape, dtype=dtype, device=device)
    advise_huge_pages(t)
    return t
