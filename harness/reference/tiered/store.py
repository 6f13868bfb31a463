"""Where embedding rows live: host memory, or an SSD tier as a memory-mapped file.

A row is its weights followed by its optimizer state (Adagrad: one value per weight;
row-wise Adagrad: one per row; SGD: none), stored contiguously so that one row is one read and
one write, as 4-byte words: the state is float32 always; the weights are float32, or, for tables
stored in bf16 or fp16, two 16-bit values to a word (half the bytes, a trailing half-word of
padding when the row has an odd number of columns). :meth:`RowStore.pack` makes a row's words
and :meth:`RowStore.weights_of` / :meth:`RowStore.state_of` read them back. :class:`MemoryRows` keeps them in a tensor (the HBM or DDR tier; on
a CPU-only machine both are host memory); :class:`SsdRows` in a file on local disk, read and
written row by row (the blocks each row lies on, at the device's queue depth: no page per row),
made durable (``fsync``) on :meth:`flush`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.tiers import Tier
from harness.reference.planner.types import RowReader
from harness.reference.tiered import rowio


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
    """Rows in a file on local disk, read and written row by row through the row reader.

    The file holds the rows packed, one after another (``rows x width`` words, nothing else),
    so its size is the table's bytes. Where the file system takes ``O_DIRECT`` (probed on the
    file: :func:`~harness.reference.tiered.rowio.probe_direct`), every transfer bypasses the
    page cache and covers only the blocks a row lies on (512 bytes on most drives): a row of
    260 bytes costs one or two blocks, not the 4 KB page (and the kernel's read-ahead) a memory
    map would fault in. Rows of one call that share a block are one transfer. A write reads
    first the blocks it only partly covers (their other rows' bytes are kept) and then writes
    whole blocks. Where ``O_DIRECT`` is refused, or not ``direct_io`` (tests that check what the
    tier computes, not how fast the drive is), rows are read and written exactly, through the
    page cache; :attr:`mode` says which, and why. Every call is one batched submission at
    ``queue_depth`` (:func:`~harness.reference.tiered.rowio.transfer`: the compiled io_uring
    reader, or Python threads, as ``reader`` chooses; named by :attr:`reader`).

    Calls must not overlap (the cache makes them in order, on one thread at a time: a write's
    read-modify-write of a shared block would otherwise race another's).

    Args:
        path: the file; created (zero-filled) when ``create``, else opened and its
            size checked against ``rows x (cols + state_cols)``. A created file has its blocks
            allocated at once (zero-filled), so a full disk is an error here, not later.
    """

    tier = Tier.SSD

    def __init__(self, path: Path, rows: int, cols: int, state_cols: int, *, create: bool,
                 dtype: torch.dtype = torch.float32, queue_depth: int = 64, direct_io: bool = True,
                 reader: RowReader = RowReader.AUTO):
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
        self.size = expected
        self.queue_depth = int(queue_depth)
        if not direct_io:  # the page cache's speed, not the drive's
            align, why = None, "direct I/O off"
        else:
            align, why = rowio.probe_direct(self.path)
        self.align = align or 4  # a transfer's granularity: the block, or (through the page cache) the word
        self.mode = f"direct (O_DIRECT, {align}-byte blocks)" if align else f"buffered ({why})"
        self.reader = rowio.reader_name(reader)
        self._compiled = rowio.uses_compiled(reader)
        self._transfer = rowio.transfer
        self._aligned_empty = rowio.aligned_empty
        self._fd = os.open(self.path, os.O_RDWR | (os.O_DIRECT if align else 0))
        # the last block, where the file ends inside it, is read and written through the page cache
        # (O_DIRECT moves whole blocks only, and a whole block there would grow the file)
        self._tail_fd = os.open(self.path, os.O_RDWR) if align else self._fd
        self.transfers = 0  # transfers submitted, and the bytes they moved (reads and writes)
        self.transfer_bytes = 0

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (a store is closed when it is dropped)."""
        for fd in {getattr(self, "_fd", -1), getattr(self, "_tail_fd", -1)} - {-1}:
            os.close(fd)
        self._fd = self._tail_fd = -1

    def _spans(self, rows: torch.Tensor) -> tuple[np.ndarray, ...]:
        """The transfers of ``rows`` (int64): ``order`` (the rows by offset), per row
        ``word`` (where its first word lands in the buffer), and per transfer its file offset,
        length and buffer offset, and whether the rows cover it wholly (a write need not read it)."""
        rb, a = self.row_bytes, self.align
        at = rows.contiguous().numpy().astype(np.int64) * rb
        order = np.argsort(at, kind="stable")
        at = at[order]
        lo, hi = at // a * a, -(-(at + rb) // a) * a
        first = np.ones(len(at), dtype=bool)
        first[1:] = lo[1:] > hi[:-1]  # rows sharing (or next to) a block share a transfer
        span = np.cumsum(first) - 1
        starts = np.flatnonzero(first)
        offsets = lo[starts]
        ends = np.maximum.reduceat(hi, starts)
        lens = ends - offsets
        bufoffs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        word = (bufoffs[span] + at - offsets[span]) // 4
        distinct = np.ones(len(at), dtype=bool)  # a row given twice covers its bytes once
        distinct[1:] = at[1:] != at[:-1]
        covered = np.bincount(span[distinct], minlength=len(starts)) * rb == lens
        return order, word, offsets, lens, bufoffs, covered

    def _io(self, write: bool, offsets: np.ndarray, lens: np.ndarray, bufoffs: np.ndarray, buf: np.ndarray) -> None:
        """The spans moved in one submission, but for the bytes past the file's last whole block:
        those (at most one block's) through the page cache, as O_DIRECT moves whole blocks only
        and a whole block there would grow the file."""
        whole = self.size // self.align * self.align
        over = np.flatnonzero(offsets + lens > whole)
        tails = []
        if over.size:
            offsets, lens = offsets.copy(), lens.copy()
            for i in over.tolist():
                cut = max(int(offsets[i]), whole)
                tails.append((cut, int(bufoffs[i]) + cut - int(offsets[i]), self.size - cut))
                lens[i] = cut - offsets[i]
        try:
            self._transfer(self._fd, write=write, offsets=offsets[lens > 0], lens=lens[lens > 0],
                           bufoffs=bufoffs[lens > 0], buf=buf, depth=self.queue_depth, compiled=self._compiled)
            view = buf.data
            for at, where, size in tails:
                part = view[where : where + size]
                if (os.pwritev if write else os.preadv)(self._tail_fd, [part], at) != size:
                    raise OSError(errno.EIO, "short transfer or I/O error")
        except OSError as err:
            raise HarnessError(f"{self.path}: {'writing' if write else 'reading'} table rows failed: "
                               f"{err.strerror}", ErrorCategory.RUN_FAILED) from None
        self.transfers += int((lens > 0).sum()) + len(tails)
        self.transfer_bytes += int(lens.sum()) + sum(t[2] for t in tails)

    def read(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.reshape(-1)
        out = torch.empty(rows.numel(), self.width)
        if rows.numel() == 0:
            return out
        order, word, offsets, lens, bufoffs, _ = self._spans(rows)
        buf = self._aligned_empty(int(lens.sum()), max(self.align, 8))
        self._io(False, offsets, lens, bufoffs, buf)
        windows = np.lib.stride_tricks.sliding_window_view(buf.view(np.float32), self.width)
        out.numpy()[order] = windows[word]
        return out

    def write(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        rows = rows.reshape(-1)
        if rows.numel() == 0:
            return
        order, word, offsets, lens, bufoffs, covered = self._spans(rows)
        buf = self._aligned_empty(int(lens.sum()), max(self.align, 8))
        partial = np.flatnonzero(~covered)
        if partial.size:  # the other rows' bytes of the blocks the rows share with them
            self._io(False, offsets[partial], lens[partial], bufoffs[partial], buf)
        windows = np.lib.stride_tricks.sliding_window_view(buf.view(np.float32), self.width, writeable=True)
        windows[word] = values.detach().to(torch.float32).numpy()[order]
        self._io(True, offsets, lens, bufoffs, buf)

    def write_rows(self, lo: int, values: torch.Tensor) -> None:
        """Contiguous rows (filling a store a chunk at a time): one span, of which only the first
        and last blocks are read first."""
        n = int(values.shape[0])
        if n == 0:
            return
        rb, a = self.row_bytes, self.align
        start, end = lo * rb, (lo + n) * rb
        first, last = start // a * a, -(-end // a) * a
        buf = self._aligned_empty(last - first, max(a, 8))
        heads = [(first, a)] if start > first else []
        if end < last and (not heads or last - a > first):
            heads.append((last - a, a))
        if heads:
            offs = np.array([h[0] for h in heads], dtype=np.int64)
            self._io(False, offs, np.array([h[1] for h in heads], dtype=np.int64), offs - first, buf)
        buf.view(np.float32)[(start - first) // 4 : (end - first) // 4] = \
            values.detach().to(torch.float32).numpy().reshape(-1)
        self._io(True, np.array([first], dtype=np.int64), np.array([last - first], dtype=np.int64),
                 np.zeros(1, dtype=np.int64), buf)

    def flush(self) -> None:
        os.fsync(self._fd)


def ssd_io(stores: list[RowStore]) -> dict[str, str]:
    """How the SSD stores among ``stores`` move their rows (``{"ssd_io": "<mode>; <reader>"}``, the
    logs' ``harness_embedding_cache``), or nothing when none is on the SSD tier."""
    ways = sorted({f"{s.mode}; {s.reader}" for s in stores if isinstance(s, SsdRows)})
    return {"ssd_io": " | ".join(ways)} if ways else {}
