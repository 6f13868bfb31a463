"""The real Criteo data as :class:`~harness.reference.data.datasets.Dataset` s: raw TSV and MLPerf's npy layout.

Two formats, found by :func:`find_layout` and opened by :func:`open_files` (which
:func:`harness.reference.data.datasets.open_dataset` calls), both following the positions, order and
sharding rules of :mod:`harness.reference.data.datasets`:

:class:`CriteoTsvDataset` (``criteo-tsv``)
    Criteo's click logs as text, plain or gzip (recognised by its magic bytes, whatever the name):
    Terabyte, a folder of ``day_0`` .. ``day_{D-1}`` (or ``day_N.gz``), or Kaggle, ``train.txt``
    (or ``train.txt.gz``). Each line holds 40 tab-separated fields: the label (``0``/``1``), 13
    integer counts and 26 categorical values written as hex strings (eight digits in the real data).

:class:`MlperfNpyDataset` (``mlperf-npy``)
    MLPerf's preprocessed Criteo 1TB: ``day_<d>_dense.npy`` (N x 13 float, already transformed),
    ``day_<d>_labels.npy`` (N or N x 1) and ``day_<d>_sparse.npy`` (N x 26, one-hot) or
    ``day_<d>_sparse_multi_hot.npz`` (members ``"0"`` .. ``"25"``, N x P_f, multi-hot), memory-mapped.

**Splits** (as MLPerf's references split Criteo; facebookresearch/dlrm ``data_utils.py``
``getCriteoAdData`` and ``dlrm_data_pytorch.py`` ``CriteoDataset`` are the source): days
``0 .. D-2`` in order are the train split; the first ``ceil(n / 2)`` samples of the last day are
the eval split (dlrm's ``test_size = ceil(num_samples / 2)``), the rest of it (dlrm's validation
half) is unused. With Terabyte's 24 days that is MLPerf's split: days 0-22 train, the first half
of day 23 eval (89,137,319 samples). Kaggle's ``train.txt`` is first cut into 7 day-sized parts
as dlrm does (``divmod(total, 7)``, the first ``extras`` parts one line longer), then split alike.
A global batch may span days.

**Categorical values -> rows.** A hex string is read as an unsigned integer (at most 16 digits,
case-insensitive, empty -> 0) and reduced modulo the table's rows::

    id = int(value, 16) % table_rows[f]

the convention of MLPerf's and TorchRec's preprocessing (``torchrec/datasets/criteo.py``
``BinaryCriteoUtils.tsv_to_npys``: ``int(x, 16)``, empty -> 0; the ids modulo
``num_embeddings_per_feature`` at batch time) and of facebookresearch/dlrm's ``getCriteoAdData``
with ``--max-ind-range`` (``int(x, 16) % max_ind_range``). MLPerf-npy ids are reduced alike.

**Dense features.** TSV counts become ``log(1 + max(x, 0))`` as float32, computed in float64
(facebookresearch/dlrm; empty counts are 0, negative ones clamp to 0); the synthetic generator
computes its dense features the same way, so an exported copy reads back bit for bit.
MLPerf-npy dense values pass through unchanged: its preprocessing already transformed them (as
``log(x + 3)``, see below).

**The TSV reader's buffer budget** (``buffer_bytes``, default :data:`DEFAULT_BUFFER_BYTES`) bounds
all of the reader's own working memory: the batch being assembled, the raw read block (with its
line index) and the parse chunk, whose vectorised arrays cost about :data:`_PARSE_BYTES_PER_LINE`
per line beyond a few bytes per text byte, roughly an order of magnitude more than the text
(:func:`buffer_plan`). Batches already handed out are the caller's. Each rank streams the files
(skipping, by a seek on the line-offset index of a plain file, what it does not need) and parses
only its own slices; a plain TSV seeks to any global batch, so it reshuffles; a gzip file can
only be read in order, once (``reshuffles`` is False).

**Validation before training.** :func:`open_files` without a manifest reads everything once:
every TSV line is parsed (the first malformed one is reported as ``file:line``) and counted, an
index of line offsets is kept every :data:`INDEX_STRIDE` lines; every npy header, shape, dtype and
row count is checked (label values are checked as they are read). The dataset's
:meth:`~CriteoTsvDataset.manifest` reopens it later without reading, after checking that every
file still has its size.

What the reference preprocessing writes (confirmed by reading the sources):

* ``torchrec/datasets/criteo.py`` (pytorch/torchrec), ``BinaryCriteoUtils.tsv_to_npys``, called
  by ``torchrec/datasets/scripts/npy_preproc_criteo.py`` once per day file ``day_{0..23}``:
  ``day_{d}_dense.npy`` as float32 N x 13 already log-transformed, as ``log(x + 3)``
  (``dense_np += 3; np.log(dense_np, dtype=np.float32)``), not ``log(1 + x)``;
  ``day_{d}_sparse.npy`` int32 N x 26 (``int(hex, 16)``, empty -> 0); ``day_{d}_labels.npy``
  int32 reshaped to N x 1.
* ``contiguous_preproc_criteo.py`` / ``BinaryCriteoUtils.sparse_to_contiguous`` remaps each sparse
  column to contiguous ids (from 2, infrequent ids to 1), and ``BinaryCriteoUtils.shuffle`` writes
  the final days 0..22 (``astype(np.int32)``) and copies day 23 unchanged. The ids are not capped:
  MLPerf's loader reduces them modulo ``num_embeddings_per_feature`` (40M for the largest tables)
  at batch time, as we do.
* ``materialize_synthetic_multihot_dataset.py`` (mlcommons/training ``recommendation_v2/
  torchrec_dlrm``) saves ``np.savez(f"day_{i}_sparse_multi_hot.npz", **{str(j): ids})``:
  uncompressed, zip members ``"0.npy"`` .. ``"25.npy"``, each N x P_j int32; the README's
  ``--multi_hot_sizes`` and table sizes are the ``dlrm_dcnv2`` spec's ``pooling`` and ``table_rows``.
* ``recommendation_v2/torchrec_dlrm/data/multi_hot_criteo.py`` memory-maps each stored member
  (asserting it is uncompressed int32) and reads labels as N x 1. So do we: a compressed member
  (``np.savez_compressed``) is refused, since it could only be read whole.
"""

from __future__ import annotations

import bisect
import gzip
import math
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import datasets
from harness.reference.data.batches import NUM_DENSE, NUM_SPARSE, Batch
from harness.reference.data.datasets import DataFormat

if TYPE_CHECKING:
    from harness.rules.specs import BenchmarkSpec

__all__ = [
    "DEFAULT_BUFFER_BYTES",
    "INDEX_STRIDE",
    "BufferPlan",
    "CriteoTsvDataset",
    "Layout",
    "MalformedLine",
    "MlperfNpyDataset",
    "NpyArray",
    "NpyDay",
    "Parsed",
    "TsvFile",
    "buffer_plan",
    "categorical_id",
    "find_layout",
    "kaggle_parts",
    "npy_array",
    "npy_day",
    "npz_arrays",
    "open_files",
    "parse_text",
    "read_tsv_file",
    "scan_tsv_file",
]

NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE  # 40
KAGGLE_PARTS = 7  # dlrm's days=7 for train.txt

#: The TSV reader's default buffer budget.
DEFAULT_BUFFER_BYTES = 64 << 20
#: Lines between two entries of a plain TSV file's offset index (a few MB of manifest for Terabyte).
INDEX_STRIDE = 65536

_MAX_HEX_DIGITS = 16  # 64 bits
_MAX_DEC_DIGITS = 18  # fits int64 with room to spare

# The memory model of the TSV reader (measured with tracemalloc, with margin): parsing a chunk
# costs this much per line (the per-field index arrays: ~42 bytes per field) plus this much per
# byte of text (its copy and the byte masks); a read block of R bytes costs _READ_COST * R (the
# block, its line index, the masks of the newline search, gzip's output).
_PARSE_BYTES_PER_LINE = 2304
_PARSE_BYTES_PER_TEXT_BYTE = 5
_READ_COST = 3
_READ_SHARE = 0.25  # of what the batch leaves, for the read block
_MIN_READ_BYTES = 64 << 10
_MAX_READ_BYTES = 16 << 20
_MIN_CHUNK_LINES = 16
_LINES_PER_BLOCK_BYTE = 1 / 64  # the line index of a block holds at most this many lines per byte
_MAX_LINE_BYTES = 4096  # a Criteo line is at most ~710 bytes: longer is not a Criteo line

_DAY_TSV = re.compile(r"day_(\d+)(\.gz)?")
_DAY_NPY = re.compile(r"day_(\d+)_dense\.npy")


def _bad(message: str) -> HarnessError:
    return HarnessError(message, ErrorCategory.BAD_INPUT)


def _not_found(path: Path, what: str = "file") -> HarnessError:
    return HarnessError(f"{path}: no such {what}", ErrorCategory.NOT_FOUND)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# --------------------------------------------------------------------------- categorical ids


def categorical_id(value: str, feature: int, rows: int) -> int:
    """The row of table ``feature`` (of ``rows`` rows) that a TSV reader gives the hex string
    ``value``: ``int(value, 16) % rows``, the empty string counting as 0 (MLPerf's, TorchRec's
    and dlrm's convention; see the module docstring).

    Raises:
        HarnessError: (BAD_INPUT) ``value`` is not at most 16 hex digits, ``rows < 1`` or
            ``feature`` is not a feature.
    """
    if rows < 1:
        raise _bad(f"table rows must be at least 1, got {rows}")
    if not 0 <= feature < NUM_SPARSE:
        raise _bad(f"categorical feature index must be in 0..{NUM_SPARSE - 1}, got {feature}")
    if len(value) > _MAX_HEX_DIGITS or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise _bad(f"categorical value is not hexadecimal: {value!r}")
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
    starts = np.empty(n * NUM_FIELDS, np.int64)
    starts[0] = 0
    starts[1:] = ends + 1
    lengths = np.empty(n * NUM_FIELDS, np.int64)
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
        raise _bad(
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
        raise _not_found(path) from None
    except OSError as exc:
        raise _bad(f"{path}: cannot read ({exc})") from None


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
            raise _not_found(path) from None
        except OSError as exc:
            raise _bad(f"{path}: cannot read ({exc})") from None

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
            raise _bad(f"{self.path}:{self.line + 1}: cannot read ({exc})") from None
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
            raise _bad(f"{self.path}:{self.line + 1}: no line end within {len(self._buf)} bytes "
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
                raise _bad(f"{self.path}: ended at line {self.line}, before the lines it was validated with "
                           "(it changed since it was validated)")
            m = min(n, avail)
            self.consume(m)
            n -= m


def _chunks(lines: _FileLines, count: int, plan: BufferPlan, *, partial: bool = False) -> Iterator[Parsed]:
    """Parse the next ``count`` lines of ``lines`` (all of them when ``count`` is None), in chunks
    within ``plan``. ``partial``: before raising on a malformed line, yield the lines before it."""
    left = math.inf if count is None else count
    while left > 0:
        avail = lines.available()
        if not avail:
            if count is None:
                return
            raise _bad(f"{lines.path}: ended at line {lines.line}, before the lines it was validated with "
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


# --------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """What :func:`find_layout` found at a path: the format, its layout (``terabyte`` or ``kaggle``
    for TSV, ``one-hot`` or ``multi-hot`` for npy), the folder, and the files or days."""

    format: DataFormat
    layout: str
    root: Path  # the folder (absolute)
    files: tuple[Path, ...]  # TSV: the files in order; npy: the days' dense files
    days: int  # Terabyte / npy days; Kaggle: the 7 parts of train.txt

    def describe(self) -> str:
        return f"{self.format.value} ({self.layout} layout)"


def _contiguous_days(root: Path, pattern: re.Pattern[str], name: Callable[[int], list[str]]) -> list[Path]:
    """``day_0`` .. ``day_{D-1}`` under ``root`` (one of ``name(d)``'s spellings each), refusing a gap."""
    present: dict[int, list[Path]] = {}
    for entry in root.iterdir():
        m = pattern.fullmatch(entry.name)
        if m:
            present.setdefault(int(m.group(1)), []).append(entry)
    out = []
    for d in range(len(present) + 1):
        if d not in present:
            if present and max(present) > d:
                raise HarnessError(
                    f"{root / name(d)[0]}: no such file (the days must run from day_0 without a gap; "
                    f"day_{max(present)} is there)", ErrorCategory.NOT_FOUND)
            break
        if len(present[d]) > 1:
            raise _bad(f"{root}: both {' and '.join(sorted(p.name for p in present[d]))}: keep one")
        out.append(present[d][0])
    return out


def find_layout(path: Path | str, *, multi_hot: bool | None = None) -> Layout:
    """The dataset at ``path``: a folder with ``day_0_dense.npy`` (mlperf-npy), with ``day_0`` or
    ``day_0.gz`` (criteo-tsv, Terabyte), with ``train.txt[.gz]`` or that file (criteo-tsv, Kaggle).
    ``multi_hot`` picks the npy ids when a day has both (default: the npz when there is one).

    Raises:
        HarnessError: NOT_FOUND saying what was looked for; BAD_INPUT for fewer than two days.
    """
    p = Path(path).absolute()
    if not p.exists():
        raise HarnessError(f"{p}: no such file or folder", ErrorCategory.NOT_FOUND)
    if p.is_file():
        if p.name in ("train.txt", "train.txt.gz"):
            return Layout(DataFormat.CRITEO_TSV, "kaggle", p.parent, (p,), KAGGLE_PARTS)
        raise HarnessError(f"{p}: not a Criteo dataset: a file must be Kaggle's train.txt or train.txt.gz, "
                           "else give the folder of the days", ErrorCategory.NOT_FOUND)
    if (p / "day_0_dense.npy").is_file():
        dense = _contiguous_days(p, _DAY_NPY, lambda d: [f"day_{d}_dense.npy"])
        npz, npy = (p / "day_0_sparse_multi_hot.npz").exists(), (p / "day_0_sparse.npy").exists()
        hot = npz if multi_hot is None else (npz or not npy) if multi_hot else (npz and not npy)
        layout = Layout(DataFormat.MLPERF_NPY, "multi-hot" if hot else "one-hot", p, tuple(dense), len(dense))
    elif (p / "day_0").exists() or (p / "day_0.gz").exists():
        files = _contiguous_days(p, _DAY_TSV, lambda d: [f"day_{d}", f"day_{d}.gz"])
        layout = Layout(DataFormat.CRITEO_TSV, "terabyte", p, tuple(files), len(files))
    elif (p / "train.txt").exists() or (p / "train.txt.gz").exists():
        if (p / "train.txt").exists() and (p / "train.txt.gz").exists():
            raise _bad(f"{p}: both train.txt and train.txt.gz: keep one")
        name = "train.txt" if (p / "train.txt").exists() else "train.txt.gz"
        return Layout(DataFormat.CRITEO_TSV, "kaggle", p, (p / name,), KAGGLE_PARTS)
    else:
        raise HarnessError(
            f"{p}: no Criteo dataset here: looked for day_0_dense.npy (mlperf-npy), day_0 or day_0.gz "
            "(criteo-tsv, Terabyte) and train.txt or train.txt.gz (criteo-tsv, Kaggle)", ErrorCategory.NOT_FOUND)
    if layout.days < 2:
        raise _bad(f"{p}: only day_0: the {layout.describe()} needs at least two days "
                   "(the last one holds the eval split)")
    return layout


def kaggle_parts(total: int, parts: int = KAGGLE_PARTS) -> list[int]:
    """dlrm's day-sized parts of ``total`` lines: ``divmod``, the first ``extras`` one longer."""
    base, extras = divmod(total, parts)
    return [base + (1 if j < extras else 0) for j in range(parts)]


def _check_eval_batching(batch_size: int, rank: int, world_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise _bad(f"batch size must be a positive integer, got {batch_size!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise _bad(f"rank {rank} of a world of {world_size}")


def _check_table_rows(table_rows: Sequence[int]) -> np.ndarray:
    rows = list(table_rows)
    if len(rows) != NUM_SPARSE:
        raise _bad(f"expected {NUM_SPARSE} table sizes, got {len(rows)}")
    for f, r in enumerate(rows):
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
            raise _bad(f"table {f}: rows must be a positive integer, got {r!r}")
    return np.array(rows, np.int64)


def _days_text(layout: str, days: int) -> tuple[str, str]:
    """How the train and the eval split are named in messages."""
    if layout == "kaggle":
        return "parts 0-5 of train.txt", "the first half of part 6 of train.txt"
    return f"days 0-{days - 2}", f"the first half of day {days - 1}"


def _check_manifest_files(root: Path, entries: Sequence[dict[str, Any]]) -> None:
    for entry in entries:
        path = root / entry["name"]
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise _bad(f"{path}: changed since it was validated (was {entry['bytes']} bytes, now missing)") from None
        if size != entry["bytes"]:
            raise _bad(f"{path}: changed since it was validated (was {entry['bytes']} bytes, now {size})")


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
    :class:`~harness.reference.data.datasets.Dataset`, split as the module docstring says.

    Build it with :meth:`scan` (validates every line) or :meth:`from_manifest` (reads nothing).
    """

    format = DataFormat.CRITEO_TSV

    def __init__(self, layout: Layout, files: Sequence[TsvFile], table_rows: Sequence[int], *,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES, index_stride: int = INDEX_STRIDE):
        self.layout, self.files = layout, tuple(files)
        self.table_rows: tuple[int, ...] = tuple(int(r) for r in _check_table_rows(table_rows))
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
        _check_table_rows(table_rows)
        plan = buffer_plan(buffer_bytes)
        files = []
        for path in layout.files:
            files.append(scan_tsv_file(path, plan, index_stride))
            if progress is not None:
                progress(f"{path.name}: {files[-1].lines} lines")
        return cls(layout, files, table_rows, buffer_bytes=buffer_bytes, index_stride=index_stride)

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any], table_rows: Sequence[int], *,
                      buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> CriteoTsvDataset:
        """Reopen from :meth:`manifest` without reading, after checking every file's size."""
        root = Path(manifest["root"])
        _check_manifest_files(root, manifest["files"])
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
        return _days_text(self.layout.layout, len(self.day_samples))

    def train_batches(self, batch_size: int, *, epoch: int = 0, seed: int = 0, rank: int = 0,
                      world_size: int = 1, start: int = 0) -> Iterator[Batch]:
        datasets.check_epoch(self, epoch)
        _, local = datasets.rank_slice(batch_size, rank, world_size)
        plan = buffer_plan(self.buffer_bytes, batch_samples=local)
        ranges = datasets.train_ranges(self.train_samples, batch_size, epoch=epoch, seed=seed, rank=rank,
                                       world_size=world_size, start=start)
        return self._batches(ranges, plan)

    def eval_batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        _check_eval_batching(batch_size, rank, world_size)
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


# --------------------------------------------------------------------------- MLPerf npy


@dataclass(frozen=True)
class NpyArray:
    """Where one array lies: in file ``name`` (a ``.npy``, or a stored member of a ``.npz``) at
    byte ``offset``, with its shape and dtype: enough to memory-map it without reading a header."""

    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: str
    fortran: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "offset": self.offset, "shape": list(self.shape), "dtype": self.dtype,
                "fortran": self.fortran}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> NpyArray:
        return cls(raw["name"], int(raw["offset"]), tuple(int(s) for s in raw["shape"]), str(raw["dtype"]),
                   bool(raw["fortran"]))

    def open(self, root: Path) -> np.ndarray:
        dtype = np.dtype(self.dtype)
        if math.prod(self.shape) == 0:
            return np.empty(self.shape, dtype)
        return np.memmap(root / self.name, dtype=dtype, mode="r", offset=self.offset, shape=self.shape,
                         order="F" if self.fortran else "C")


def _read_header(f: BinaryIO, where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise _bad(f"{where}: unsupported .npy format version {version}")
    if dtype.hasobject:
        raise _bad(f"{where}: holds Python objects")
    return tuple(int(s) for s in shape), bool(fortran), dtype


def _check_fits(path: Path, array: NpyArray, where: str) -> None:
    need = array.offset + math.prod(array.shape) * np.dtype(array.dtype).itemsize
    size = path.stat().st_size
    if size < need:
        raise _bad(f"{where}: truncated ({size} bytes, its header needs {need})")


def npy_array(path: Path) -> NpyArray:
    """The array of a ``.npy`` file, from its header."""
    if not path.is_file():
        raise _not_found(path)
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = _read_header(f, str(path))
            array = NpyArray(path.name, f.tell(), shape, dtype.str, fortran)
    except HarnessError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise _bad(f"{path}: not a readable .npy file ({exc})") from None
    _check_fits(path, array, str(path))
    return array


def npz_arrays(path: Path) -> dict[str, NpyArray]:
    """The arrays of an ``.npz`` (by key, ``"0"`` for member ``0.npy``), each stored uncompressed
    as ``np.savez`` writes them, so that they can be memory-mapped."""
    if not path.is_file():
        raise _not_found(path)
    out = {}
    try:
        with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                key = info.filename[: -len(".npy")]
                if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                    raise _bad(f"{path}: array {key!r} is compressed; the reader memory-maps the arrays, so "
                               "write them with numpy.savez (not savez_compressed), as MLPerf's "
                               "materialize_synthetic_multihot_dataset.py does")
                f.seek(info.header_offset)
                header = f.read(30)
                if len(header) != 30 or header[:4] != b"PK\x03\x04":
                    raise _bad(f"{path}: corrupt zip entry {info.filename!r}")
                name_len, extra_len = struct.unpack("<HH", header[26:30])
                f.seek(info.header_offset + 30 + name_len + extra_len)
                shape, fortran, dtype = _read_header(f, f"{path}: array {key!r}")
                out[key] = NpyArray(path.name, f.tell(), shape, dtype.str, fortran)
    except HarnessError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise _bad(f"{path}: not a readable .npz file ({exc})") from None
    for key, array in out.items():
        _check_fits(path, array, f"{path}: array {key!r}")
    return out


@dataclass(frozen=True)
class NpyDay:
    """One day of the npy layout, checked: its rows and where its arrays lie (``sparse``: one
    N x 26 array for one-hot, 26 N x P_f arrays for multi-hot)."""

    day: int
    rows: int
    dense: NpyArray
    labels: NpyArray
    sparse: tuple[NpyArray, ...]

    @property
    def pooling(self) -> tuple[int, ...]:
        if len(self.sparse) == 1:
            return (1,) * NUM_SPARSE
        return tuple(a.shape[1] for a in self.sparse)

    def files(self) -> list[str]:
        return sorted({self.dense.name, self.labels.name, *(a.name for a in self.sparse)})


def npy_day(root: Path, d: int, multi_hot: bool) -> NpyDay:
    """Read and check day ``d``'s headers: shapes, dtypes and row counts consistent between its files.

    Raises:
        HarnessError: NOT_FOUND for a missing file; BAD_INPUT naming the file otherwise.
    """
    dense_name, labels_name = f"day_{d}_dense.npy", f"day_{d}_labels.npy"
    dense = npy_array(root / dense_name)
    where = root / dense_name
    if len(dense.shape) != 2 or dense.shape[1] != NUM_DENSE:
        raise _bad(f"{where}: expected shape N x {NUM_DENSE}, found {dense.shape}")
    if np.dtype(dense.dtype).kind != "f":
        raise _bad(f"{where}: expected floating point (already log-transformed) values, found {np.dtype(dense.dtype)}")
    n = dense.shape[0]

    labels = npy_array(root / labels_name)
    where = root / labels_name
    if not (len(labels.shape) == 1 or (len(labels.shape) == 2 and labels.shape[1] == 1)):
        raise _bad(f"{where}: expected shape N or N x 1, found {labels.shape}")
    if np.dtype(labels.dtype).kind not in "biuf":
        raise _bad(f"{where}: expected integer, bool or float labels, found {np.dtype(labels.dtype)}")
    if labels.shape[0] != n:
        raise _bad(f"{where}: {labels.shape[0]} rows but {dense_name} has {n}")

    if multi_hot:
        name = f"day_{d}_sparse_multi_hot.npz"
        members = npz_arrays(root / name)
        sparse = []
        for f in range(NUM_SPARSE):
            ids = members.get(str(f))
            if ids is None:
                raise _bad(f"{root / name}: no array '{f}' (expected keys '0'..'{NUM_SPARSE - 1}')")
            if len(ids.shape) != 2 or ids.shape[1] < 1:
                raise _bad(f"{root / name}: array '{f}' has shape {ids.shape}, expected N x P")
            if np.dtype(ids.dtype).kind not in "iu":
                raise _bad(f"{root / name}: array '{f}' has dtype {np.dtype(ids.dtype)}, expected integer ids")
            if ids.shape[0] != n:
                raise _bad(f"{root / name}: array '{f}' has {ids.shape[0]} rows but {dense_name} has {n}")
            sparse.append(ids)
    else:
        name = f"day_{d}_sparse.npy"
        ids = npy_array(root / name)
        if len(ids.shape) != 2 or ids.shape[1] != NUM_SPARSE:
            raise _bad(f"{root / name}: expected shape N x {NUM_SPARSE}, found {ids.shape}")
        if np.dtype(ids.dtype).kind not in "iu":
            raise _bad(f"{root / name}: expected integer ids, found {np.dtype(ids.dtype)}")
        if ids.shape[0] != n:
            raise _bad(f"{root / name}: {ids.shape[0]} rows but {dense_name} has {n}")
        sparse = [ids]
    return NpyDay(day=d, rows=n, dense=dense, labels=labels, sparse=tuple(sparse))


def check_labels(labels: np.ndarray, where: str, first_row: int) -> np.ndarray:
    """``labels`` as float32, refusing a value that is not 0 or 1 (naming the file and row)."""
    ok = (labels == 0) | (labels == 1)
    if not ok.all():
        r = int(np.argmin(ok))
        raise _bad(f"{where}: row {first_row + r}: label {labels[r].item()!r} is not 0 or 1")
    return labels.astype(np.float32)


def reduce_ids(ids: np.ndarray, rows: np.ndarray | int) -> np.ndarray:
    """Ids modulo their table's rows, as int64 (negative ids of a signed dtype wrap into range)."""
    ids = np.asarray(ids)
    if ids.dtype.kind == "u":
        return (ids % np.asarray(rows).astype(np.uint64)).astype(np.int64)
    return np.remainder(ids.astype(np.int64), rows)


class MlperfNpyDataset:
    """MLPerf's preprocessed Criteo 1TB days (one-hot or multi-hot) as a
    :class:`~harness.reference.data.datasets.Dataset`, memory-mapped; split as the module docstring says.

    Build it with :meth:`scan` (checks every header) or :meth:`from_manifest` (reads nothing).
    """

    format = DataFormat.MLPERF_NPY
    reshuffles = True

    def __init__(self, layout: Layout, days: Sequence[NpyDay], table_rows: Sequence[int]):
        self.layout, self.days = layout, tuple(days)
        self.table_rows: tuple[int, ...] = tuple(int(r) for r in _check_table_rows(table_rows))
        self._rows = np.array(self.table_rows, np.int64)
        self.pooling: tuple[int, ...] = self.days[0].pooling
        for day in self.days[1:]:
            if day.pooling != self.pooling:
                f = next(i for i, (a, b) in enumerate(zip(day.pooling, self.pooling)) if a != b)
                raise _bad(f"{layout.root / day.sparse[f].name}: feature {f} has {day.pooling[f]} ids per sample "
                           f"but {self.days[0].sparse[f].name} has {self.pooling[f]}")
        self._cols = np.concatenate([[0], np.cumsum(self.pooling)]).astype(np.int64)
        self.train_samples = int(sum(d.rows for d in self.days[:-1]))
        self.eval_samples = (self.days[-1].rows + 1) // 2
        self._train_starts = np.cumsum([0] + [d.rows for d in self.days[:-1]]).tolist()
        self._maps: dict[tuple[int, str, int], np.ndarray] = {}

    @classmethod
    def scan(cls, layout: Layout, table_rows: Sequence[int]) -> MlperfNpyDataset:
        """Check every day's headers, shapes, dtypes and row counts, and open them."""
        _check_table_rows(table_rows)
        multi_hot = layout.layout == "multi-hot"
        return cls(layout, [npy_day(layout.root, d, multi_hot) for d in range(layout.days)], table_rows)

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any], table_rows: Sequence[int]) -> MlperfNpyDataset:
        root = Path(manifest["root"])
        _check_manifest_files(root, manifest["files"])
        days = [NpyDay(day=int(d["day"]), rows=int(d["rows"]), dense=NpyArray.from_json(d["dense"]),
                       labels=NpyArray.from_json(d["labels"]),
                       sparse=tuple(NpyArray.from_json(a) for a in d["sparse"])) for d in manifest["days"]]
        layout = Layout(DataFormat.MLPERF_NPY, manifest["layout"], root,
                        tuple(root / d.dense.name for d in days), len(days))
        return cls(layout, days, table_rows)

    def manifest(self) -> dict[str, Any]:
        """Plain JSON to reopen the dataset without reading it: its files with their sizes and
        sample counts, and where each array lies in them."""
        root = self.layout.root
        files = [{"name": name, "bytes": (root / name).stat().st_size, "samples": day.rows}
                 for day in self.days for name in day.files()]
        days = [{"day": d.day, "rows": d.rows, "dense": d.dense.to_json(), "labels": d.labels.to_json(),
                 "sparse": [a.to_json() for a in d.sparse]} for d in self.days]
        return {"format": self.format.value, "layout": self.layout.layout, "root": str(root),
                "files": files, "days": days}

    def describe(self) -> dict[str, Any]:
        return {"format": self.format.value, "layout": self.layout.layout, "path": str(self.layout.root),
                "days": len(self.days), "train_samples": self.train_samples, "eval_samples": self.eval_samples}

    def split_names(self) -> tuple[str, str]:
        return _days_text(self.layout.layout, len(self.days))

    def _array(self, d: int, kind: str, j: int = 0) -> np.ndarray:
        key = (d, kind, j)
        if key not in self._maps:
            day = self.days[d]
            spec = day.dense if kind == "dense" else day.labels if kind == "labels" else day.sparse[j]
            self._maps[key] = spec.open(self.layout.root)
        return self._maps[key]

    def _fill(self, d: int, a: int, b: int, out: tuple[np.ndarray, np.ndarray, np.ndarray], at: int) -> None:
        """Rows ``a .. b - 1`` of day ``d`` into the batch arrays ``out`` from row ``at``."""
        dense, sparse, labels = out
        m = b - a
        dense[at : at + m] = self._array(d, "dense")[a:b]
        raw = np.asarray(self._array(d, "labels")[a:b]).reshape(-1)
        labels[at : at + m] = check_labels(raw, str(self.layout.root / self.days[d].labels.name), a)
        if len(self.days[d].sparse) == 1:
            sparse[at : at + m] = reduce_ids(self._array(d, "sparse")[a:b], self._rows[None, :])
        else:
            for f in range(NUM_SPARSE):
                sparse[at : at + m, self._cols[f] : self._cols[f + 1]] = reduce_ids(
                    self._array(d, "sparse", f)[a:b], int(self._rows[f]))

    def _batch(self, pieces: Sequence[tuple[int, int, int]]) -> Batch:
        n = sum(b - a for _, a, b in pieces)
        out = (np.empty((n, NUM_DENSE), np.float32), np.empty((n, int(self._cols[-1])), np.int64),
               np.empty(n, np.float32))
        at = 0
        for d, a, b in pieces:
            self._fill(d, a, b, out, at)
            at += b - a
        return Batch(dense=torch.from_numpy(out[0]), sparse=torch.from_numpy(out[1]),
                     labels=torch.from_numpy(out[2]), pooling=self.pooling)

    def _train_pieces(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """``(day, first row, end row)`` of train positions ``lo .. hi - 1`` (they may span days)."""
        out = []
        d = bisect.bisect_right(self._train_starts, lo) - 1
        while lo < hi:
            while self._train_starts[d + 1] <= lo:
                d += 1
            first = self._train_starts[d]
            stop = min(hi, self._train_starts[d + 1])
            out.append((d, lo - first, stop - first))
            lo = stop
        return out

    def train_batches(self, batch_size: int, *, epoch: int = 0, seed: int = 0, rank: int = 0,
                      world_size: int = 1, start: int = 0) -> Iterator[Batch]:
        datasets.check_epoch(self, epoch)
        datasets.rank_slice(batch_size, rank, world_size)
        ranges = datasets.train_ranges(self.train_samples, batch_size, epoch=epoch, seed=seed, rank=rank,
                                       world_size=world_size, start=start)
        return (self._batch(self._train_pieces(lo, hi)) for lo, hi in ranges)

    def eval_batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        _check_eval_batching(batch_size, rank, world_size)
        lo, hi = datasets.eval_range(self.eval_samples, rank, world_size)
        last = len(self.days) - 1
        return (self._batch([(last, a, min(a + batch_size, hi))]) for a in range(lo, hi, batch_size))


# --------------------------------------------------------------------------- opening for a benchmark


def _check_format(spec: BenchmarkSpec, fmt: DataFormat, layout: str, path: Path) -> None:
    accepted = spec.data_formats
    if fmt.value not in accepted:
        accepts = ", ".join(accepted) if accepted else "no data files (it trains on its generator only)"
        raise _bad(f"benchmark {spec.name} accepts {accepts}; {path} holds {fmt.value} ({layout} layout)")


def _check_against_spec(spec: BenchmarkSpec, dataset: CriteoTsvDataset | MlperfNpyDataset, path: Path) -> None:
    d = spec.dataset
    pooling = tuple(int(p) for p in d["pooling"])
    if len(pooling) != NUM_SPARSE or len(d["table_rows"]) != NUM_SPARSE:
        raise _bad(f"benchmark {spec.name} has {len(d['table_rows'])} tables and {len(pooling)} pooling factors; "
                   f"Criteo data has {NUM_SPARSE} categorical features")
    if dataset.pooling != pooling:
        f = next(i for i, (a, b) in enumerate(zip(dataset.pooling, pooling)) if a != b)
        what = ("one-hot ids" if set(dataset.pooling) == {1} else
                f"multi-hot ids (pooling {list(dataset.pooling)})")
        raise _bad(f"{path} holds {what}: feature {f} has {dataset.pooling[f]} ids per sample, benchmark "
                   f"{spec.name} needs {pooling[f]} (pooling {list(pooling)})")
    train_name, eval_name = dataset.split_names()
    if dataset.train_samples != d["train_samples"]:
        raise _bad(f"{path} holds {dataset.train_samples} training samples ({train_name}), benchmark "
                   f"{spec.name} needs {d['train_samples']}")
    if dataset.eval_samples != d["eval_samples"]:
        raise _bad(f"{path} holds {dataset.eval_samples} eval samples ({eval_name}), benchmark "
                   f"{spec.name} needs {d['eval_samples']}")


def open_files(spec: BenchmarkSpec, path: Path | str, *, manifest: dict[str, Any] | None = None,
               buffer_bytes: int = DEFAULT_BUFFER_BYTES, index_stride: int = INDEX_STRIDE,
               progress: Callable[[str], None] | None = None) -> CriteoTsvDataset | MlperfNpyDataset:
    """The benchmark's data in the files at ``path``, checked against ``spec`` (format accepted,
    sample counts, pooling, 26 features; ids are reduced modulo its tables' rows).

    Without ``manifest`` every file is validated first (every TSV line parsed, every npy header
    checked); with one (what :meth:`~CriteoTsvDataset.manifest` returned for the same files) the
    files are only checked to have the sizes they had.

    Raises:
        HarnessError: one line: NOT_FOUND (nothing recognisable at ``path``, a missing file) or
            BAD_INPUT (a format the benchmark does not accept, counts or pooling that differ from
            the spec, a malformed line as ``file:line``, a file changed since it was validated).
    """
    path = Path(path).absolute()
    rows = spec.dataset["table_rows"]
    if manifest is not None:
        dataset = _from_manifest(manifest, path, rows, buffer_bytes)
        _check_format(spec, dataset.format, dataset.layout.layout, path)
    else:
        multi_hot = any(int(p) != 1 for p in spec.dataset["pooling"])
        layout = find_layout(path, multi_hot=multi_hot)
        _check_format(spec, layout.format, layout.layout, path)
        if layout.format is DataFormat.CRITEO_TSV:
            if multi_hot:
                raise _bad(f"{path} holds criteo-tsv (one id per feature); benchmark {spec.name} needs multi-hot "
                           f"pooling {list(spec.dataset['pooling'])}")
            dataset = CriteoTsvDataset.scan(layout, rows, buffer_bytes=buffer_bytes, index_stride=index_stride,
                                            progress=progress)
        else:
            dataset = MlperfNpyDataset.scan(layout, rows)
    _check_against_spec(spec, dataset, path)
    return dataset


def _from_manifest(manifest: dict[str, Any], path: Path, rows: Sequence[int],
                   buffer_bytes: int) -> CriteoTsvDataset | MlperfNpyDataset:
    try:
        root = Path(manifest["root"])
        given = path.resolve()
        if given != root.resolve() and not (given.is_file() and given.parent == root.resolve()):
            raise _bad(f"the dataset manifest is for {root}, not {path}")
        fmt = DataFormat(manifest["format"])
        if fmt is DataFormat.CRITEO_TSV:
            return CriteoTsvDataset.from_manifest(manifest, rows, buffer_bytes=buffer_bytes)
        if fmt is DataFormat.MLPERF_NPY:
            return MlperfNpyDataset.from_manifest(manifest, rows)
        raise _bad(f"not a file dataset's manifest: format {fmt.value}")
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(f"not a dataset manifest ({type(exc).__name__}: {exc})") from None
