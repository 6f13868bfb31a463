"""Where embedding rows live: host memory, or an SSD tier as a memory-mapped file.

A row is its weights followed by its optimizer state (Adagrad: one value per weight;
row-wise Adagrad: one per row; SGD: none), float32, stored contiguously so that one row is
one read and one write. :class:`MemoryRows` keeps them in a tensor (the HBM or DDR tier; on
a CPU-only machine both are host memory); :class:`SsdRows` in a file on local disk through
``numpy.memmap``, read and written row by row, flushed (``msync``) on :meth:`flush`.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError


class RowStore:
    """``rows`` rows of ``cols`` weights and ``state_cols`` optimizer-state values each."""

    tier = "ddr"

    def __init__(self, rows: int, cols: int, state_cols: int):
        self.rows, self.cols, self.state_cols = int(rows), int(cols), int(state_cols)

    @property
    def row_bytes(self) -> int:
        return 4 * (self.cols + self.state_cols)

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``rows`` (int64) as a ``len(rows) x (cols + state_cols)`` float32 tensor (a copy)."""
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
            self.write(torch.arange(lo, hi), torch.cat([weight[lo:hi], state[lo:hi]], dim=1))


class MemoryRows(RowStore):
    """Rows in a tensor in memory."""

    def __init__(self, rows: int, cols: int, state_cols: int, tier: str = "ddr"):
        super().__init__(rows, cols, state_cols)
        self.tier = tier
        self.data = torch.zeros(rows, cols + state_cols)

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        return self.data.index_select(0, rows)

    def write(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        self.data.index_copy_(0, rows, values)


class SsdRows(RowStore):
    """Rows in a file on local disk, memory-mapped.

    Args:
        path: the file; created (sparse, zero-filled) when ``create``, else opened and its
            size checked against ``rows x (cols + state_cols)``.
    """

    tier = "ssd"

    def __init__(self, path: Path, rows: int, cols: int, state_cols: int, *, create: bool):
        super().__init__(rows, cols, state_cols)
        self.path = Path(path)
        width = cols + state_cols
        expected = rows * width * 4
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "wb") as f:
                f.truncate(expected)
        elif not self.path.is_file() or self.path.stat().st_size != expected:
            raise HarnessError(
                f"{self.path}: not a table file of {rows} rows x {width} values ({expected} bytes)",
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
