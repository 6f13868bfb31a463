"""Criteo's click logs as TSV text (Terabyte's day files, Kaggle's train.txt; plain or gzip): the
vectorised line parser, the categorical convention, the reader's buffer budget, and
:class:`CriteoTsvDataset`, split as :mod:`harness.reference.data.criteo` says.

**The buffer budget** (``buffer_bytes``, default :data:`DEFAULT_BUFFER_BYTES`) bounds
all of the reader's own working memory: the batch being assembled, the raw read block (with its
line index) and the parse chunk, whose vectorised arrays cost about :data:`_PARSE_BYTES_PER_LINE`
per line beyond a few bytes per text byte, roughly an order of magnitude more than the text
(:func:`buffer_plan`). Batches already handed out are the caller's. Each rank streams the files
(skipping, by a seek on the line-offset index of a plain file, what it does not need) and parses
only its own slices; a plain TSV seeks to any global batch, so it reshuffles; a gzip file can
only be read in order, once (``reshuffles`` is False).
"""

from __future__ import annotations

import bisect
import gzip
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import datasets
from harness.reference.data.batches import NUM_DENSE, NUM_SPARSE, Batch
from harness.reference.data.criteo_manifest import (
    KAGGLE_PARTS,
    Layout,
    bad_input,
    check_eval_batching,
    check_manifest_files,
    check_table_rows,
    days_text,
    kaggle_parts,
    not_found,
)
from harness.reference.data.datasets import DataFormat

__all__ = [
    "DEFAULT_BUFFER_BYTES",
    "INDEX_STRIDE",
    "BufferPlan",
    "CriteoTsvDataset",
    "MalformedLine",
    "Parsed",
    "TsvFile",
    "buffer_plan",
    "categorical_id",
    "parse_text",
    "read_tsv_file",
    "scan_tsv_file",
]

NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE  # 40

#: The TSV reader's default buffer budget.
DEFAULT_BUFFER_BYTES = 64 << 20
#: Lines between two entries of a plain TSV file's offset index (a few MB of manifest for Terabyte).
INDEX_STRIDE = 65536

_MAX_HEX_DIGITS = 16  # 64 bits
_MAX_DEC_DIGITS = 18  # fits int64 with room to spare

# The memory model of the TSV reader (measured with tracemalloc, with margin: docs/performance.md,
# "Figures behind the code's choices"): parsing a chunk costs this much per line (the per-field
# index arrays) plus this much per byte of text (its copy and the byte masks); a read block of R
# bytes costs _READ_COST * R (the block, its line index, the masks of the newline search, gzip's
# output).
_PARSE_BYTES_PER_LINE = 2304
_PARSE_BYTES_PER_TEXT_BYTE = 5
_READ_COST = 3
_READ_SHARE = 0.25  # of what the batch leaves, for the read block
_MIN_READ_BYTES = 64 << 10
_MAX_READ_BYTES = 16 << 20
_MIN_CHUNK_LINES = 16
_LINES_PER_BLOCK_BYTE = 1 / 64  # the line index of a block holds at most this many lines per byte
_MAX_LINE_BYTES = 4096  # a Criteo line is at most ~710 bytes: longer is not a Criteo line


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# --------------------------------------------------------------------------- categorical ids


def categorical_id(value: str, feature: int, rows: int) -> int:
    """The row of table ``feature`` (of ``rows`` rows) that a TSV reader gives the hex string
    ``value``: ``int(value, 16) % rows``, the empty string counting as 0 (MLPerf's, TorchRec's
    and dlrm's convention; see :mod:`harness.reference.data.criteo`).

    Raises:
        HarnessError: (BAD_INPUT) ``value`` is not at most 16 hex digits, ``rows < 1`` or
            ``feature`` is not a feature.
    """
    if rows < 1:
        raise bad_input(f"table rows must be at least 1, got {rows}")
    if not 0 <= feature < NUM_SPARSE:
        raise bad_input(f"categorical feature index must be in 0..{NUM_SPARSE - 1}, got {feature}")
    if len(value) > _MAX_HEX_DIGITS or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise bad_input(f"categorical value is not hexadecimal: {value!r}")
    return (int(value, 16) if value else 0) % rows


# --------------------------------------------------------------------------- parsing

_NOT_A_DIGIT = 255
_HEX_LUT = np.full(256, _NOT_A_DIGIT, np.uint8)
_DEC_LUT = np.full(256, _NOT_A_DIGIT, np.uint8)
for _i, _c in enumerate(b"0123456789"):
    _HEX_LUT[_c] = _i
    _DEC_LUT[_c] = _i
for _i, _c in enumerate(b"abcdef"):
    _HEX_LUT[_c] = 10 + _i
    _HEX_LUT[_c - 32] = 10 + _i  # upper case


class MalformedLine(HarnessError):
    """A TSV line that is not a Criteo record: ``index`` is its position in the parsed chunk."""

    def __init__(self, message: str, index: int):
        super().__init__(message, ErrorCategory.BAD_INPUT)
        self.index = index


def _parse_digits(
    buf: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    lut: np.ndarray,
    base: int,
    max_digits: int,
    signed: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse the digit strings ``buf[starts : starts + lengths]``, vectorised.

    Returns ``(magnitude, negative, bad)``: the absolute value as uint64, whether a
    leading ``-`` was present (only when ``signed``) and a mask of malformed entries (a
    non-digit, a lone ``-``, or more than ``max_digits`` digits). Empty strings parse as 0
    and are not malformed.
    """
    shape = starts.shape
    magnitude = np.zeros(shape, np.uint64)
    negative = np.zeros(shape, bool)
    if starts.size == 0:
        return magnitude, negative, np.zeros(shape, bool)
    last = len(buf) - 1

    def byte_at(p: int | np.ndarray) -> np.ndarray:
        return buf[np.minimum(starts + p, last)]

    first_digit = np.zeros(shape, np.int64)
    if signed:
        negative = (lengths > 0) & (byte_at(0) == ord("-"))
        first_digit = negative.astype(np.int64)
    bad = (lengths - first_digit > max_digits) | (negative & (lengths == 1))
    width = min(int(lengths.max()), max_digits + int(signed))
    base_u = np.uint64(base)
    for p in range(width):
        active = p < lengths
        if signed:
            active &= p >= first_digit
        digit = lut[byte_at(p)]
        bad |= active & (digit == _NOT_A_DIGIT)
        np.multiply(magnitude, base_u, out=magnitude, where=active)
        np.add(magnitude, digit.astype(np.uint64), out=magnitude, where=active)
    return magnitude, negative, bad


def _show(field: bytes) -> str:
    text = field.decode("utf-8", "replace")
    return repr(text if len(text) <= 40 else text[:40] + "...")


@dataclass(frozen=True)
class Parsed:
    """A parsed chunk of TSV lines: ``dense`` n x 13 float32 (``log(1 + max(x, 0))``), ``raw``
    n x 26 uint64 (the categorical values as integers, before any table's modulo), ``labels`` n
    float32."""

    dense: np.ndarray
    raw: np.ndarray
    labels: np.ndarray

    @property
    def size(self) -> int:
        return int(self.labels.shape[0])


def parse_text(buf: np.ndarray, path: Path | str, first_line: int) -> Parsed:
    """Parse complete TSV lines: ``buf`` (uint8, owned: it is overwritten) holds them joined by
    ``\\n`` without a final one, the first being line ``first_line`` (1-based) of ``path``.

    Every field is located and decoded with numpy, so no Python object is made per field. The
    first malformed line raises :class:`MalformedLine` naming ``path:line``.
    """
    newlines = np.flatnonzero(buf == ord("\n"))
    n = len(newlines) + 1

    def loc(i: int) -> str:
        return f"{path}:{first_line + i}"

    def field(i: int, col: int) -> str:
        lo = 0 if i == 0 else int(newlines[i - 1]) + 1
        hi = int(newlines[i]) if i < n - 1 else len(buf)
        return _show(bytes(buf[lo:hi]).split(b"\t")[col])

    tabs = np.flatnonzero(buf == ord("\t"))
    tabs_per_line = np.diff(np.searchsorted(tabs, newlines), prepend=0, append=len(tabs))
    del tabs
    wrong = np.flatnonzero(tabs_per_line != NUM_FIELDS - 1)
    if wrong.size:
        first = int(wrong[0])
        if first:  # an earlier line's error comes first
            parse_text(buf[: newlines[first - 1]].copy(), path, first_line)
        raise MalformedLine(
            f"{loc(first)}: expected {NUM_FIELDS} tab-separated fields, found {int(tabs_per_line[first]) + 1}",
            first,
        )
    del tabs_per_line, wrong
    buf[newlines] = ord("\t")  # now exactly 40 * n fields, tab-separated
    ends = np.flatnonzero(buf == ord("\t"))
    starts: np.ndarray = np.empty(n * NUM_FIELDS, np.int64)  # flat, then n x NUM_FIELDS
    starts[0] = 0
    starts[1:] = ends + 1
    lengths: np.ndarray = np.empty(n * NUM_FIELDS, np.int64)
    lengths[:-1] = ends
    lengths[-1] = len(buf)
    del ends
    lengths -= starts
    starts = starts.reshape(n, NUM_FIELDS)
    lengths = lengths.reshape(n, NUM_FIELDS)

    label_len, label_byte = lengths[:, 0], buf[np.minimum(starts[:, 0], max(len(buf) - 1, 0))]
    is_one = (label_len == 1) & (label_byte == ord("1"))
    label_bad = ~(is_one | ((label_len == 1) & (label_byte == ord("0"))))

    dense_cols, cat_cols = slice(1, 1 + NUM_DENSE), slice(1 + NUM_DENSE, NUM_FIELDS)
    dense_mag, dense_neg, dense_bad = _parse_digits(
        buf, starts[:, dense_cols], lengths[:, dense_cols], _DEC_LUT, 10, _MAX_DEC_DIGITS, True
    )
    raw, _, cat_bad = _parse_digits(
        buf, starts[:, cat_cols], lengths[:, cat_cols], _HEX_LUT, 16, _MAX_HEX_DIGITS, False
    )
    del starts, lengths

    row_bad = label_bad | dense_bad.any(axis=1) | cat_bad.any(axis=1)
    if row_bad.any():
        i = int(np.argmax(row_bad))
        if label_bad[i]:
            raise MalformedLine(f"{loc(i)}: label must be 0 or 1, found {field(i, 0)}", i)
        if dense_bad[i].any():
            j = int(np.argmax(dense_bad[i]))
            raise MalformedLine(
                f"{loc(i)}: integer feature {j} (field {j + 2}) is not an integer: {field(i, 1 + j)}", i
            )
        f = int(np.argmax(cat_bad[i]))
        col = 1 + NUM_DENSE + f
        raise MalformedLine(
            f"{loc(i)}: categorical feature {f} (field {col + 1}) is not a hex string "
            f"of at most {_MAX_HEX_DIGITS} digits: {field(i, col)}",
            i,
        )
    del dense_bad, cat_bad, row_bad, label_bad

    # Negative counts clamp to 0, so only the magnitude of non-negative values matters.
    dense_mag[dense_neg] = 0
    dense = np.log1p(dense_mag.astype(np.float64)).astype(np.float32)
    return Parsed(dense=dense, raw=raw, labels=is_one.astype(np.float32))


# --------------------------------------------------------------------------- the buffer budget


@dataclass(frozen=True)
class BufferPlan:
    """How a TSV reader spends its buffer budget: the batch being assembled, the raw read block,
    and the parse chunk (as many lines as fit ``parse_bytes`` at :data:`_PARSE_BYTES_PER_LINE` a
    line plus :data:`_PARSE_BYTES_PER_TEXT_BYTE` a byte of text)."""

    budget_bytes: int
    batch_bytes: int
    read_bytes: int
    parse_bytes: int

    @property
    def chunk_text_bytes(self) -> int:
        """The text a parse chunk of Criteo-sized lines (~250 bytes) holds."""
        return int(self.parse_bytes / (_PARSE_BYTES_PER_TEXT_BYTE + _PARSE_BYTES_PER_LINE / 250))


def _min_work_bytes() -> int:
    read = _MIN_READ_BYTES * _READ_COST / _READ_SHARE
    parse = _MIN_CHUNK_LINES * (_PARSE_BYTES_PER_LINE + _PARSE_BYTES_PER_TEXT_BYTE * _MAX_LINE_BYTES)
    return int(max(read, parse / (1 - _READ_SHARE))) + 1


def buffer_plan(buffer_bytes: int, *, batch_samples: int = 0, ids_per_sample: int = NUM_SPARSE) -> BufferPlan:
    """Divide ``buffer_bytes`` among a batch of ``batch_samples`` being assembled (dense, ids,
    labels), the read block (a quarter of the rest, at :data:`_READ_COST` per byte) and the
    parse chunk (the remainder).

    Raises:
        HarnessError: (BAD_INPUT) the budget cannot hold the batch plus a minimal block and chunk.
    """
    batch = batch_samples * (4 * NUM_DENSE + 8 * ids_per_sample + 4)
    rest = buffer_bytes - batch
    need = batch + _min_work_bytes()
    if buffer_bytes < need:
        raise bad_input(
            f"the TSV reader's buffer of {_mib(buffer_bytes)} cannot hold a batch of {batch_samples} samples "
            f"being assembled ({_mib(batch)}) plus a read block and a parse chunk: it needs at least "
            f"{_mib(need)} ({need} bytes)"
        )
    read = int(min(_MAX_READ_BYTES, rest * _READ_SHARE / _READ_COST))
    return BufferPlan(budget_bytes=buffer_bytes, batch_bytes=batch, read_bytes=read,
                      parse_bytes=int(rest - read * _READ_COST))


# --------------------------------------------------------------------------- reading lines


def _is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except FileNotFoundError:
        raise not_found(path) from None
    except OSError as exc:
        raise bad_input(f"{path}: cannot read ({exc})") from None


class _FileLines:
    """The lines of one TSV file from line ``line`` (at byte ``offset`` of a plain file) on,
    through one buffer of ``read_bytes``: :meth:`available` complete lines at a time."""

    def __init__(self, path: Path, gz: bool, read_bytes: int, *, line: int = 0, offset: int = 0):
        self.path, self.gz = path, gz
        self.line = line  # 0-based number of the next line
        self.offset = offset  # its byte offset in the (uncompressed) file
        self._buf = bytearray(read_bytes)
        self._arr = np.frombuffer(self._buf, np.uint8)
        self._max_lines = max(2, int(read_bytes * _LINES_PER_BLOCK_BYTE))
        self._ends = np.empty(self._max_lines, np.int64)  # where the block's lines end (their newline)
        self._count = 0  # lines in the block's index
        self._next = 0  # index of the next line in it
        self._pos = 0  # where the next line starts in the block
        self._fill = 0  # valid bytes in the block
        self._eof = False
        self._raw: BinaryIO | None = None
        self._stream: Any = None
        try:
            self._raw = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by close())
            if gz:
                self._stream = gzip.GzipFile(fileobj=self._raw, mode="rb")
            else:
                self._raw.seek(offset)
                self._stream = self._raw
        except FileNotFoundError:
            raise not_found(path) from None
        except OSError as exc:
            raise bad_input(f"{path}: cannot read ({exc})") from None

    def close(self) -> None:
        for f in (self._stream, self._raw):
            if f is not None:
                f.close()
        self._stream = self._raw = None

    def seek(self, line: int, offset: int) -> None:
        """Start again at ``line``, at byte ``offset`` (a plain file's index entry)."""
        assert not self.gz
        self._raw.seek(offset)  # type: ignore[union-attr]
        self.line, self.offset = line, offset
        self._count = self._next = self._pos = self._fill = 0
        self._eof = False

    def available(self) -> int:
        """Complete lines in the block now (reading the next block when none is left); 0 at the end."""
        if self._next == self._count:
            self._refill()
        return self._count - self._next

    def _refill(self) -> None:
        rest = max(0, self._fill - self._pos)
        if rest:
            self._arr[:rest] = self._arr[self._pos : self._fill]
        self._pos, self._fill, self._count, self._next = 0, rest, 0, 0
        view = memoryview(self._buf)
        try:
            while not self._eof and self._fill < len(self._buf):
                got = self._stream.readinto(view[self._fill :])
                if not got:
                    self._eof = True
                self._fill += got or 0
        except (OSError, EOFError, zlib.error) as exc:
            raise bad_input(f"{self.path}:{self.line + 1}: cannot read ({exc})") from None
        finally:
            view.release()
        step = max(1, len(self._buf) // 64)
        for a in range(0, self._fill, step):
            found = np.flatnonzero(self._arr[a : min(a + step, self._fill)] == 10)
            take = min(len(found), self._max_lines - self._count)
            self._ends[self._count : self._count + take] = found[:take] + a
            self._count += take
            if self._count == self._max_lines:
                return
        last = int(self._ends[self._count - 1]) + 1 if self._count else 0
        if self._eof and last < self._fill:
            self._ends[self._count] = self._fill  # a final line without its newline
            self._count += 1
        elif not self._count and self._fill == len(self._buf):
            raise bad_input(f"{self.path}:{self.line + 1}: no line end within {len(self._buf)} bytes "
                            "(not a Criteo TSV line)")

    def _end(self, j: int) -> int:
        """End (exclusive) of the ``j``-th available line."""
        return int(self._ends[self._next + j])

    def start_of(self, j: int) -> int:
        """Byte offset in the file of the ``j``-th available line."""
        return self.offset + ((self._end(j - 1) + 1 if j else self._pos) - self._pos)

    def fitting(self, limit: int, parse_bytes: int) -> int:
        """How many of the available lines (at most ``limit``, at least 1) one parse chunk holds."""
        k = max(1, min(limit, self._count - self._next, parse_bytes // _PARSE_BYTES_PER_LINE))
        ends = self._ends[self._next : self._next + k]
        cost = (ends - self._pos) * _PARSE_BYTES_PER_TEXT_BYTE + _PARSE_BYTES_PER_LINE * np.arange(1, k + 1)
        return max(1, int(np.searchsorted(cost, parse_bytes, side="right")))

    def text(self, m: int) -> np.ndarray:
        """A copy of the next ``m`` available lines, joined by ``\\n``, Windows line ends stripped."""
        lo, hi = self._pos, self._end(m - 1)
        out = self._arr[lo:hi].copy()
        if self._buf.find(b"\r", lo, hi) >= 0:
            cr = out == 13
            cr[:-1] &= out[1:] == 10  # a line's last byte (the last line's is the text's last)
            out = out[~cr]
        return out

    def consume(self, m: int) -> None:
        end = self._end(m - 1) + 1
        self.offset += end - self._pos
        self._pos = end
        self._next += m
        self.line += m

    def skip(self, n: int) -> None:
        """Pass over ``n`` lines without parsing them."""
        while n > 0:
            avail = self.available()
            if not avail:
                raise bad_input(f"{self.path}: ended at line {self.line}, before the lines it was validated with "
                                "(it changed since it was validated)")
            m = min(n, avail)
            self.consume(m)
            n -= m


def _chunks(lines: _FileLines, count: int | None, plan: BufferPlan, *, partial: bool = False) -> Iterator[Parsed]:
    """Parse the next ``count`` lines of ``lines`` (all of them when ``count`` is None), in chunks
    within ``plan``. ``partial``: before raising on a malformed line, yield the lines before it."""
    left = math.inf if count is None else count
    while left > 0:
        avail = lines.available()
        if not avail:
            if count is None:
                return
            raise bad_input(f"{lines.path}: ended at line {lines.line}, before the lines it was validated with "
                            "(it changed since it was validated)")
        m = lines.fitting(int(min(avail, left)), plan.parse_bytes)
        first = lines.line + 1
        text = lines.text(m)
        try:
            parsed = parse_text(text, lines.path, first)
        except MalformedLine as err:
            if partial and err.index:
                yield parse_text(lines.text(err.index), lines.path, first)
            raise
        del text
        lines.consume(m)
        left -= m
        yield parsed
        del parsed


# --------------------------------------------------------------------------- TSV dataset


@dataclass(frozen=True)
class TsvFile:
    """One validated TSV file: its lines, and the byte offset of every ``stride``-th line (plain
    files; a gzip file has only its start)."""

    path: Path
    size_bytes: int
    lines: int
    gzip: bool
    offsets: tuple[int, ...]


def scan_tsv_file(path: Path, plan: BufferPlan, stride: int = INDEX_STRIDE) -> TsvFile:
    """Parse every line of ``path`` once (so the first malformed one raises as ``file:line``),
    counting them and indexing every ``stride``-th line's offset."""
    gz = _is_gzip(path)
    size = path.stat().st_size
    lines = _FileLines(path, gz, plan.read_bytes)
    offsets = [0]
    try:
        while lines.available():
            m = lines.fitting(lines.available(), plan.parse_bytes)
            if not gz:
                nxt = len(offsets) * stride
                while nxt < lines.line + m:
                    offsets.append(lines.start_of(nxt - lines.line))
                    nxt += stride
            parse_text(lines.text(m), path, lines.line + 1)
            lines.consume(m)
        return TsvFile(path=path, size_bytes=size, lines=lines.line, gzip=gz, offsets=tuple(offsets))
    finally:
        lines.close()


def read_tsv_file(path: Path, *, buffer_bytes: int = DEFAULT_BUFFER_BYTES, partial: bool = False) -> Iterator[Parsed]:
    """Every line of one TSV file (plain or gzip), parsed, in chunks within ``buffer_bytes``.
    ``partial``: on a malformed line, yield the lines before it first, then raise."""
    plan = buffer_plan(buffer_bytes)
    lines = _FileLines(path, _is_gzip(path), plan.read_bytes)
    try:
        yield from _chunks(lines, None, plan, partial=partial)
    finally:
        lines.close()


class _TsvReader:
    """Parsed chunks of any range of a list of TSV files' concatenated lines, through one
    :class:`_FileLines` at a time: forward by skipping, elsewhere by seeking on the offset index."""

    def __init__(self, files: Sequence[TsvFile], plan: BufferPlan, stride: int):
        self.files, self.plan, self.stride = files, plan, stride
        self.starts = np.cumsum([0] + [f.lines for f in files]).tolist()
        self._lines: _FileLines | None = None
        self._file = -1

    def close(self) -> None:
        if self._lines is not None:
            self._lines.close()
            self._lines = None

    def _position(self, pos: int) -> _FileLines:
        i = bisect.bisect_right(self.starts, pos) - 1
        f, line = self.files[i], pos - self.starts[i]
        cur = self._lines
        if cur is not None and self._file == i and cur.line <= line and (f.gzip or line - cur.line < self.stride):
            cur.skip(line - cur.line)
            return cur
        anchor = 0 if f.gzip else min(line // self.stride, len(f.offsets) - 1)
        if cur is not None and self._file == i and not f.gzip:
            cur.seek(anchor * self.stride, f.offsets[anchor])
        else:
            cur = None
            self.close()  # its buffer goes before the next one is made
            cur = self._lines = _FileLines(f.path, f.gzip, self.plan.read_bytes,
                                           line=anchor * self.stride, offset=f.offsets[anchor])
            self._file = i
        cur.skip(line - cur.line)
        return cur

    def read(self, lo: int, hi: int) -> Iterator[Parsed]:
        """The lines ``lo .. hi - 1`` (global positions), parsed, in chunks."""
        while lo < hi:
            i = bisect.bisect_right(self.starts, lo) - 1
            stop = min(hi, self.starts[i + 1])
            lines = self._position(lo)
            yield from _chunks(lines, stop - lo, self.plan)
            lo = stop


class CriteoTsvDataset:
    """Criteo TSV files (Terabyte days or Kaggle's train.txt, plain or gzip) as a
    :class:`~harness.reference.data.datasets.Dataset`, split as :mod:`harness.reference.data.criteo` says.

    Build it with :meth:`scan` (validates every line) or :meth:`from_manifest` (reads nothing).
    """

    format = DataFormat.CRITEO_TSV

    def __init__(self, layout: Layout, files: Sequence[TsvFile], table_rows: Sequence[int], *,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES, index_stride: int = INDEX_STRIDE):
        self.layout, self.files = layout, tuple(files)
        self.table_rows: tuple[int, ...] = tuple(int(r) for r in check_table_rows(table_rows))
        self._rows = np.array(self.table_rows, np.uint64)
        self.pooling: tuple[int, ...] = (1,) * NUM_SPARSE
        self.buffer_bytes, self.index_stride = int(buffer_bytes), int(index_stride)
        self.reshuffles = not any(f.gzip for f in self.files)
        counts = [f.lines for f in self.files]
        days = kaggle_parts(counts[0]) if layout.layout == "kaggle" else counts
        self.day_samples: tuple[int, ...] = tuple(days)
        self.train_samples = int(sum(days[:-1]))
        self.eval_samples = (days[-1] + 1) // 2
        self._eval_first = self.train_samples  # the last day follows the train days directly
        buffer_plan(self.buffer_bytes)  # a budget too small even to scan is refused now

    @classmethod
    def scan(cls, layout: Layout, table_rows: Sequence[int], *, buffer_bytes: int = DEFAULT_BUFFER_BYTES,
             index_stride: int = INDEX_STRIDE, progress: Callable[[str], None] | None = None) -> CriteoTsvDataset:
        """Validate ``layout``'s files (every line parsed once) and open them.

        Raises:
            HarnessError: BAD_INPUT naming ``file:line`` for the first malformed line; NOT_FOUND
                for a missing file.
        """
        check_table_rows(table_rows)
        plan = buffer_plan(buffer_bytes)
        files = []
        for path in layout.files:
            files.append(scan_tsv_file(path, plan, index_stride))
            if progress is not None:
                progress(f"{path.name}: {files[-1].lines} lines")
        return cls(layout, files, table_rows, buffer_bytes=buffer_bytes, index_stride=index_stride)

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], table_rows: Sequence[int], *,
                      buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> CriteoTsvDataset:
        """Reopen from :meth:`manifest` without reading, after checking every file's size."""
        root = Path(manifest["root"])
        check_manifest_files(root, manifest["files"])
        files = [TsvFile(path=root / e["name"], size_bytes=int(e["bytes"]), lines=int(e["samples"]),
                         gzip=bool(e["gzip"]), offsets=tuple(int(o) for o in e["offsets"]))
                 for e in manifest["files"]]
        layout = Layout(DataFormat.CRITEO_TSV, manifest["layout"], root, tuple(f.path for f in files),
                        KAGGLE_PARTS if manifest["layout"] == "kaggle" else len(files))
        return cls(layout, files, table_rows, buffer_bytes=buffer_bytes, index_stride=int(manifest["index_stride"]))

    def manifest(self) -> dict[str, Any]:
        """Plain JSON to reopen the dataset without reading it: its files, their sizes, line
        counts and offset indexes."""
        return {
            "format": self.format.value, "layout": self.layout.layout, "root": str(self.layout.root),
            "index_stride": self.index_stride,
            "files": [{"name": f.path.name, "bytes": f.size_bytes, "samples": f.lines, "gzip": f.gzip,
                       "offsets": list(f.offsets)} for f in self.files],
        }

    def describe(self) -> dict[str, Any]:
        return {"format": self.format.value, "layout": self.layout.layout, "path": str(self.layout.root),
                "days": len(self.day_samples), "gzip": any(f.gzip for f in self.files),
                "train_samples": self.train_samples, "eval_samples": self.eval_samples}

    def split_names(self) -> tuple[str, str]:
        return days_text(self.layout.layout, len(self.day_samples))

    def train_batches(self, batch_size: int, *, epoch: int = 0, seed: int = 0, rank: int = 0,
                      world_size: int = 1, start: int = 0) -> Iterator[Batch]:
        datasets.check_epoch(self, epoch)
        _, local = datasets.rank_slice(batch_size, rank, world_size)
        plan = buffer_plan(self.buffer_bytes, batch_samples=local)
        ranges = datasets.train_ranges(self.train_samples, batch_size, epoch=epoch, seed=seed, rank=rank,
                                       world_size=world_size, start=start)
        return self._batches(ranges, plan)

    def eval_batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        check_eval_batching(batch_size, rank, world_size)
        plan = buffer_plan(self.buffer_bytes, batch_samples=batch_size)
        lo, hi = datasets.eval_range(self.eval_samples, rank, world_size)
        first = self._eval_first
        ranges = ((first + a, first + min(a + batch_size, hi)) for a in range(lo, hi, batch_size))
        return self._batches(ranges, plan)

    def _batches(self, ranges: Iterator[tuple[int, int]], plan: BufferPlan) -> Iterator[Batch]:
        reader = _TsvReader(self.files, plan, self.index_stride)
        try:
            for lo, hi in ranges:
                n = hi - lo
                dense = np.empty((n, NUM_DENSE), np.float32)
                sparse = np.empty((n, NUM_SPARSE), np.int64)
                labels = np.empty(n, np.float32)
                at = 0
                for parsed in reader.read(lo, hi):
                    m = parsed.size
                    dense[at : at + m] = parsed.dense
                    np.remainder(parsed.raw, self._rows, out=parsed.raw)
                    sparse[at : at + m] = parsed.raw
                    labels[at : at + m] = parsed.labels
                    at += m
                    del parsed
                batch = Batch(dense=torch.from_numpy(dense), sparse=torch.from_numpy(sparse),
                              labels=torch.from_numpy(labels), pooling=self.pooling)
                del dense, sparse, labels
                yield batch
                del batch
        finally:
            reader.close()
