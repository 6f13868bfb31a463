"""The C allocator's policy for a training process: transient tensors reuse the heap, not fresh pages.

A CPU training step allocates and frees the same tensors every step (hundreds of them, tens of MB:
``bench/step_breakdown.py`` prints a config's). glibc serves an allocation above its mmap threshold with a fresh
mapping and unmaps it when freed, and returns freed memory at the heap's top to the kernel above
its trim threshold; either way the next step's tensor of that size is new pages, each one faulted
in and zeroed by the kernel on first touch. glibc raises the mmap threshold by itself as it sees
large chunks freed (up to 32 MB on a 64-bit system), but trims the heap's top whenever more than
twice that threshold lies free there, so pages keep being returned and faulted back.

:func:`keep_freed_heap` fixes both for the process (``mallopt``): allocations up to 32 MB (glibc's
own ceiling for the dynamic threshold) come from the heap, and up to 512 MB freed at its top stays
there, for the next step to reuse. What PyTorch's CPU performance guides reach with jemalloc or
tcmalloc through ``LD_PRELOAD``, with the allocator the process already has; a step of the small
config and of dcnv2 takes less time with it, and the default benchmark's score is lower (measured:
docs/performance.md, "The allocator's policy"). The tables are not concerned: they live in mappings of
their own (:mod:`harness.reference.models.hugepages`). It changes no value; the price is that up to
512 MB of freed memory is held by the process instead of the kernel, below the peak a step reaches
anyway. Off glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import functools

from harness.reference.models import hugepages

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
TRIM_THRESHOLD_BYTES = 512 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h


@functools.cache
def keep_freed_heap() -> bool:
    """Set the process's glibc allocator as the module says (once; later calls return the first's
    answer). True where it was set: Linux with glibc, both settings accepted. The two go together:
    setting the trim threshold alone also stops glibc's raising of the mmap threshold, and every
    allocation above 128 KB then gets fresh pages (a step twice as slow: docs/performance.md)."""
    lib = hugepages.libc()
    mallopt = None if lib is None else getattr(lib, "mallopt", None)  # musl has none
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
        return False
    return mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
