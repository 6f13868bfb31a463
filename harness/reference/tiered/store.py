"""Where embedding rows live: host memory, or an SSD tier as a memory-mapped file.

A row is its weights followed by its optimizer state (Adagrad: one value per weight;
row-wise Adagrad: one per row; SGD: none), stored contiguously so that one row is one read and
one write, as 4-byte words: the state is float32 always; the weights are float32, or, for tables
stored in bf16 or fp16, two 16-bit values to a word (half the bytes, a trailing half-word of
padding when the row has an odd number of columns). :meth:`RowStore.pack` makes a row's words
and :meth:`RowStore.weights_of` / :meth:`RowStore.state_of` read them back. :class:`MemoryRows` keeps them in a tensor (the HBM or DDR tier; on
a CPU-only machine both are host memory); :class:`SsdRows` in a file on local disk through
``numpy.memmap``, read and written row by row, flushed (``msync``) on :meth:`flush`.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.tiers import Tier


def weight_words(cols: int, dtype: torch.dtype = torch.float32) -> int:
    """The 4-byte words of a row's ``cols`` weights stored as ``dtype``."""
    per_word = 4 // torch.empty(0, dtype=dtype).element_size()
    return -(-int(cols) // per_word)


def row_bytes(cols: int, state_cols: int, dtype: torch.dtype = torch.float32) -> int:
    """The bytes of one stored row: its weights in ``dtype``, its optimizer state in fp32."""
    return 4 * (weight_words(cols, dtype) + int(state_cols))


class RowStore:
    """``rows`` rows of ``cols`` weights (stored as ``dtype``) and ``state_cols`` optimizer-state
    values (fp32) each."""

    tier = Tier.DDR

    def __init__(self, rows: int, cols: int, state_cols: int, dtype: torch.dtype = torch.float32):
        self.rows, self.cols, self.state_cols = int(rows), int(cols), int(state_cols)
        self.dtype = dtype
        self.weight_words = weight_words(cols, dtype)
        self.width = self.weight_words + self.state_cols  # 4-byte words per row

    @property
    def row_bytes(self) -> int:
        return 4 * self.width

    def pack(self, weights: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Rows as stored: ``weights`` (``n x cols``, converted to the store's type) and
        ``state`` (``n x state_cols``) as ``n x width`` words (float32)."""
        weights = weights.to(self.dtype)
        if self.dtype != torch.float32:
            pad = self.weight_words * (4 // weights.element_size()) - self.cols
            if pad:
                weights = torch.nn.functional.pad(weights, (0, pad))
            weights = weights.contiguous().view(torch.float32)
        return torch.cat([weights, state.reshape(weights.shape[0], self.state_cols).float()], dim=1)

    def weights_of(self, words: torch.Tensor) -> torch.Tensor:
        """The weights (``n x cols``, the store's type; a view) of rows read as words."""
        w = words[:, : self.weight_words]
        return w if self.dtype == torch.float32 else w.view(self.dtype)[:, : self.cols]

    def state_of(self, words: torch.Tensor) -> torch.Tensor:
        """The optimizer state (``n x state_cols``, fp32; a view) of rows read as words."""
        return words[:, self.weight_words :]

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``rows`` (int64) as a ``len(rows) x width`` tensor of words (a copy; see :meth:`pack`)."""
        raise NotImplementedError

    def write(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Make every write durable."""

    def write_rows(self, lo: int, values: torch.Tensor) -> None:
        """Write the contiguous rows ``lo .. lo + len(values) - 1`` (filling a store a chunk at a time)."""
        self.write(torch.arange(lo, lo + values.shape[0]), values)

    def load(self, weight: torch.Tensor, state: torch.Tensor, chunk: int = 1 << 16) -> None:
        """Write every row: ``weight`` (``rows x cols``) then ``state`` (``rows x state_cols``),
        a chunk of rows at a time."""
        for lo in range(0, self.rows, chunk):
            hi = min(lo + chunk, self.rows)
            self.write(torch.arange(lo, hi), self.pack(weight[lo:hi], state[lo:hi]))


class MemoryRows(RowStore):
    """Rows in a tensor in memory."""

    def __init__(self, rows: int, cols: int, state_cols: int, tier: Tier = Tier.DDR, dtype: torch.dtype = torch.float32):
        super().__init__(rows, cols, state_cols, dtype)
        self.tier = tier
        self.data = torch.zeros(rows, self.width)

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        return self.data.index_select(0, rows)

    def write(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        self.data.index_copy_(0, rows, values)


def _reserve(fd: int, size: int, path: Path) -> None:
    """The file's blocks allocated now: a disk too small for the table fails here, in one line
    (``ENOSPC`` naming the file), not later as a SIGBUS where a write through the map finds no
    block. A filesystem that cannot allocate ahead keeps the file sparse."""
    if size <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return
        raise OSError(err.errno, err.strerror, str(path)) from None


class SsdRows(RowStore):
    """Rows in a file on local disk, memory-mapped.

    Args:
        path: the file; created (zero-filled) when ``create``, else opened and its
            size checked against ``rows x (cols + state_cols)``. A created file has its blocks
            allocated at once (zero-filled), so a full disk is an error here, not a SIGBUS later.
    """

    tier = Tier.SSD

    def __init__(self, path: Path, rows: int, cols: int, state_cols: int, *, create: bool,
                 dtype: torch.dtype = torch.float32):
        super().__init__(rows, cols, state_cols, dtype)
        self.path = Path(path)
        width = self.width
        expected = rows * width * 4
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "wb") as f:
                f.truncate(expected)
                _reserve(f.fileno(), expected, self.path)
        elif not self.path.is_file() or self.path.stat().st_size != expected:
            raise HarnessError(
                f"{self.path}: not a table file of {rows} rows x {width} words ({expected} bytes; weights in "
                f"{str(dtype).removeprefix('torch.')})",
                ErrorCategory.BAD_INPUT,
            )
        self._map = np.memmap(self.path, dtype=np.float32, mode="r+", shape=(rows, width))
        # rows are read where they fall: without this, each page fault reads ahead (Linux: 128 KB
        # around it) for one row of a few hundred bytes, and a table larger than memory is read
        # from the drive hundreds of times over
        advise = getattr(getattr(self._map, "_mmap", None), "madvise", None)
        if advise is not None and hasattr(mmap, "MADV_RANDOM"):
            advise(mmap.MADV_RANDOM)
        # a tensor over the mapped pages (no copy): its gathers and scatters run without the
        # GIL, so a read ahead in a background thread overlaps the step's compute
        self._rows = torch.from_numpy(self._map)

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        return self._rows.index_select(0, rows)

    def write(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        self._rows.index_copy_(0, rows, values)

    def write_rows(self, lo: int, values: torch.Tensor) -> None:
        """Contiguous rows written to the file itself (``pwrite``), not through the map: filling a
        store larger than memory leaves its pages in the page cache, never in this process."""
        data = np.ascontiguousarray(values.detach().numpy(), dtype=np.float32)
        fd = os.open(self.path, os.O_WRONLY)
        try:
            view, at = memoryview(data).cast("B"), lo * self.row_bytes
            while view:
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
        finally:
            os.close(fd)

    def flush(self) -> None:
        self._map.flush()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
