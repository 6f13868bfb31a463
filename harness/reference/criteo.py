"""Readers for the real Criteo click logs: raw TSV files and MLPerf's preprocessed layout.

Two data sources, both yielding :class:`~harness.reference.batches.Batch`:

:class:`CriteoTsv`
    The raw Criteo Kaggle (``train.txt``) or Terabyte (``day_0`` .. ``day_23``) text
    files, plain or gzip-compressed. Each line holds 40 tab-separated fields: the label
    (``0``/``1``), 13 integer counts and 26 categorical values written as hex strings
    (eight digits in the real data). Integer fields may be empty (read as 0) and may be
    negative in the real data (clamped to 0); the dense features are
    ``log(1 + max(x, 0))`` as float32. Categorical values may be empty too.

    Categorical ids are a stable, seeded hash of the string, independent of Python's
    hash randomisation (see :func:`categorical_id`)::

        salt_f = splitmix64(splitmix64(seed) + f)
        id     = splitmix64(splitmix64(int(s, 16) ^ salt_f) + len(s)) % table_rows[f]

    with all arithmetic modulo 2**64 and ``splitmix64`` the finaliser of Steele, Lea and
    Flood's SplitMix64 generator. Mixing in ``len(s)`` makes the empty string a value of
    its own (``""``, ``"0"`` and ``"00000000"`` hash differently); hex digits are
    case-insensitive. At most 16 hex digits (64 bits) are accepted.

:class:`Criteo1TB`
    The MLPerf DLRM v2 (DCNv2) training layout: one-hot or materialised multi-hot per-day
    numpy files, read with memory maps.

What the reference sources write (confirmed by reading them):

* ``torchrec/datasets/criteo.py`` (pytorch/torchrec), ``BinaryCriteoUtils.tsv_to_npys``,
  called by ``torchrec/datasets/scripts/npy_preproc_criteo.py`` once per day file
  ``day_{0..23}``: writes ``day_{d}_dense.npy`` as **float32 N x 13 already
  log-transformed**, but as ``log(x + 3)`` (``dense_np += 3; np.log(dense_np,
  dtype=np.float32)``), not ``log(1 + x)``; ``day_{d}_sparse.npy`` int32 N x 26
  (``int(hex, 16)``, empty -> 0); ``day_{d}_labels.npy`` int32 reshaped to **N x 1**.
* ``torchrec/datasets/scripts/contiguous_preproc_criteo.py`` /
  ``BinaryCriteoUtils.sparse_to_contiguous`` remaps each sparse column to contiguous ids
  (starting at 2, infrequent ids to 1), and ``BinaryCriteoUtils.shuffle``
  (``shuffle_preproc_criteo.py``) writes the final ``day_{d}_dense.npy`` (float32),
  ``day_{d}_sparse.npy`` (``astype(np.int32)``) and ``day_{d}_labels.npy``
  (``astype(np.int32)``, N x 1) for days 0..22 and copies day 23 unchanged. These
  contiguous ids are *not* capped: MLPerf's loader reduces them modulo
  ``num_embeddings_per_feature`` (40M for the largest tables) at batch time, as we do.
* ``materialize_synthetic_multihot_dataset.py`` (mlcommons/training
  ``recommendation_v2/torchrec_dlrm``, also in the torchrec DLRM example) reads
  ``day_{i}_sparse.npy``, reduces column ``j`` modulo its table size, looks it up in a
  per-feature one-hot -> multi-hot table and saves
  ``np.savez(f"day_{i}_sparse_multi_hot.npz", **{str(j): ids})`` -- uncompressed, keys
  ``"0"`` .. ``"25"`` (zip members ``"0.npy"`` ..), each N x P_j; with
  ``--copy_labels_and_dense`` it copies ``day_{i}_labels.npy`` / ``day_{i}_dense.npy``
  next to it. The README gives ``--multi_hot_sizes
  3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1`` and the table sizes in
  :data:`MLPERF_TABLE_ROWS`.
* ``recommendation_v2/torchrec_dlrm/data/multi_hot_criteo.py`` (mlcommons/training),
  ``MultiHotCriteoIterDataPipe``: memory-maps each zip member ``f"{j}.npy"`` of the npz
  (asserting it is stored uncompressed and int32), reads labels as ``N x 1`` and
  flattens them.

So :class:`Criteo1TB` passes the dense values through unchanged (cast to float32; they
are ``log(x + 3)`` in MLPerf's files), accepts labels of shape N or N x 1 of an integer,
bool or float dtype holding 0/1, integer ids of any width, and memory-maps both the
``.npy`` files and the stored members of the ``.npz``.

Sharding, for both readers: the global sample order is the file (or day) order; global
batch ``k`` holds samples ``k * batch_size .. (k + 1) * batch_size - 1`` and goes, whole,
to rank ``k % world_size``. Only the final global batch may be short; ``drop_last``
drops it. Ranks may therefore get one batch more or fewer than each other.
"""

from __future__ import annotations

import bisect
import gzip
import math
import struct
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.batches import NUM_DENSE, NUM_SPARSE, Batch

__all__ = [
    "MLPERF_MULTI_HOT_SIZES",
    "MLPERF_TABLE_ROWS",
    "Criteo1TB",
    "CriteoTsv",
    "categorical_id",
]

#: Ids per sample of each feature in MLPerf's materialised multi-hot Criteo 1TB.
MLPERF_MULTI_HOT_SIZES: tuple[int, ...] = (
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
)  # fmt: skip

#: MLPerf DLRM v2's ``num_embeddings_per_feature`` (the largest tables capped at 40M rows).
MLPERF_TABLE_ROWS: tuple[int, ...] = (
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
    2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36,
)  # fmt: skip

NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE  # 40

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB

_MAX_HEX_DIGITS = 16  # 64 bits
_MAX_DEC_DIGITS = 18  # fits int64 with room to spare

# Lines parsed together (rounded up to whole batches): large enough to amortise numpy.
_PARSE_CHUNK_LINES = 16384
_READ_BYTES = 1 << 22


def _bad(message: str) -> HarnessError:
    return HarnessError(message, ErrorCategory.BAD_INPUT)


def _not_found(path: Path, what: str = "file") -> HarnessError:
    return HarnessError(f"{path}: no such {what}", ErrorCategory.NOT_FOUND)


# --------------------------------------------------------------------------- hashing


def _splitmix64(x: int) -> int:
    z = (x + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def _splitmix64_np(x: np.ndarray) -> np.ndarray:
    """:func:`_splitmix64` over a uint64 array (numpy integer arrays wrap silently)."""
    z = x + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


def _feature_salts(seed: int) -> np.ndarray:
    base = _splitmix64(seed & _MASK64)
    return np.array([_splitmix64((base + f) & _MASK64) for f in range(NUM_SPARSE)], np.uint64)


def categorical_id(value: str, feature: int, rows: int, seed: int = 0) -> int:
    """The row of table ``feature`` that :class:`CriteoTsv` gives the hex string ``value``.

    ``splitmix64(splitmix64(int(value, 16) ^ salt) + len(value)) % rows`` with
    ``salt = splitmix64(splitmix64(seed) + feature)``, arithmetic modulo 2**64; the empty
    string counts as 0 of length 0.

    Raises:
        HarnessError: (BAD_INPUT) ``value`` is not at most 16 hex digits, or ``rows < 1``.
    """
    if rows < 1:
        raise _bad(f"table rows must be at least 1, got {rows}")
    if not 0 <= feature < NUM_SPARSE:
        raise _bad(f"categorical feature index must be in 0..{NUM_SPARSE - 1}, got {feature}")
    if len(value) > _MAX_HEX_DIGITS or any(c not in "0123456789abcdefABCDEF" for c in value):
        raise _bad(f"categorical value is not hexadecimal: {value!r}")
    number = int(value, 16) if value else 0
    salt = _splitmix64((_splitmix64(seed & _MASK64) + feature) & _MASK64)
    h = _splitmix64((_splitmix64(number ^ salt) + len(value)) & _MASK64)
    return h % rows


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


class _Parsed:
    __slots__ = ("dense", "sparse", "labels")

    def __init__(self, dense: np.ndarray, sparse: np.ndarray, labels: np.ndarray):
        self.dense = dense
        self.sparse = sparse
        self.labels = labels


def _parse_lines(
    lines: list[bytes],
    runs: list[tuple[int, int, int]],
    paths: Sequence[Path],
    salts: np.ndarray,
    rows: np.ndarray,
) -> _Parsed:
    """Parse raw TSV lines (newline stripped). ``runs`` locates them for messages: each
    ``(offset, file index, line number)`` says that ``lines[offset]`` is that line of that
    file and the lines after it follow on, up to the next run.

    The lines are joined into one byte buffer and every field is located and decoded with
    numpy, so no Python object is made per field. The first malformed line in file order
    raises.
    """

    def loc(i: int) -> str:
        offset, file_idx, line_no = runs[bisect.bisect_right(runs, (i, math.inf)) - 1]
        return f"{paths[file_idx]}:{line_no + i - offset}"

    def field(i: int, col: int) -> str:
        return _show(lines[i].split(b"\t")[col])

    n = len(lines)
    buf = np.frombuffer(b"\n".join(lines), np.uint8).copy()
    tabs = np.flatnonzero(buf == ord("\t"))
    newlines = np.flatnonzero(buf == ord("\n"))
    tabs_before = np.searchsorted(tabs, newlines)  # tabs on the lines before each newline
    tabs_per_line = np.diff(tabs_before, prepend=0, append=len(tabs))
    wrong = np.flatnonzero(tabs_per_line != NUM_FIELDS - 1)
    if wrong.size:
        first = int(wrong[0])
        if first:  # an earlier line's error comes first
            _parse_lines(lines[:first], runs, paths, salts, rows)
        raise _bad(
            f"{loc(first)}: expected {NUM_FIELDS} tab-separated fields, "
            f"found {int(tabs_per_line[first]) + 1}"
        )
    buf[newlines] = ord("\t")  # now exactly 40 * n fields, tab-separated
    ends = np.flatnonzero(buf == ord("\t"))
    starts = np.empty(n * NUM_FIELDS, np.int64)
    starts[0] = 0
    starts[1:] = ends + 1
    stops = np.append(ends, len(buf))
    starts = starts.reshape(n, NUM_FIELDS)
    lengths = (stops.reshape(n, NUM_FIELDS) - starts).astype(np.int64)

    label_len, label_byte = lengths[:, 0], buf[np.minimum(starts[:, 0], max(len(buf) - 1, 0))]
    is_one = (label_len == 1) & (label_byte == ord("1"))
    label_bad = ~(is_one | ((label_len == 1) & (label_byte == ord("0"))))

    dense_cols, cat_cols = slice(1, 1 + NUM_DENSE), slice(1 + NUM_DENSE, NUM_FIELDS)
    dense_mag, dense_neg, dense_bad = _parse_digits(
        buf, starts[:, dense_cols], lengths[:, dense_cols], _DEC_LUT, 10, _MAX_DEC_DIGITS, True
    )
    cat_len = lengths[:, cat_cols]
    cat_val, _, cat_bad = _parse_digits(
        buf, starts[:, cat_cols], cat_len, _HEX_LUT, 16, _MAX_HEX_DIGITS, False
    )

    row_bad = label_bad | dense_bad.any(axis=1) | cat_bad.any(axis=1)
    if row_bad.any():
        i = int(np.argmax(row_bad))
        if label_bad[i]:
            raise _bad(f"{loc(i)}: label must be 0 or 1, found {field(i, 0)}")
        if dense_bad[i].any():
            j = int(np.argmax(dense_bad[i]))
            raise _bad(
                f"{loc(i)}: integer feature {j} (field {j + 2}) is not an integer: "
                f"{field(i, 1 + j)}"
            )
        f = int(np.argmax(cat_bad[i]))
        col = 1 + NUM_DENSE + f
        raise _bad(
            f"{loc(i)}: categorical feature {f} (field {col + 1}) is not a hex string "
            f"of at most {_MAX_HEX_DIGITS} digits: {field(i, col)}"
        )

    # Negative counts clamp to 0, so only the magnitude of non-negative values matters.
    counts = np.where(dense_neg, np.uint64(0), dense_mag).astype(np.float64)
    dense = np.log1p(counts).astype(np.float32)

    mixed = _splitmix64_np(cat_val ^ salts[None, :])
    hashed = _splitmix64_np(mixed + cat_len.astype(np.uint64))
    sparse = (hashed % rows[None, :].astype(np.uint64)).astype(np.int64)

    labels = is_one.astype(np.float32)
    return _Parsed(dense, sparse, labels)


def _check_batching(batch_size: int, rank: int, world_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise _bad(f"batch size must be a positive integer, got {batch_size!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise _bad(f"world size must be a positive integer, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise _bad(f"rank must be in 0..{world_size - 1}, got {rank!r}")


def _check_table_rows(table_rows: Sequence[int]) -> np.ndarray:
    rows = list(table_rows)
    if len(rows) != NUM_SPARSE:
        raise _bad(f"expected {NUM_SPARSE} table sizes, got {len(rows)}")
    for f, r in enumerate(rows):
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
            raise _bad(f"table {f}: rows must be a positive integer, got {r!r}")
    return np.array(rows, np.int64)


def _batch(
    dense: np.ndarray, sparse: np.ndarray, labels: np.ndarray, pooling: tuple[int, ...]
) -> Batch:
    return Batch(
        dense=torch.from_numpy(np.ascontiguousarray(dense, dtype=np.float32)),
        sparse=torch.from_numpy(np.ascontiguousarray(sparse, dtype=np.int64)),
        labels=torch.from_numpy(np.ascontiguousarray(labels, dtype=np.float32)),
        pooling=pooling,
    )


# --------------------------------------------------------------------------- TSV reader


class CriteoTsv:
    """The raw Criteo Kaggle / Terabyte TSV files (plain or gzip), in the given order.

    Args:
        paths: the files; gzip is recognised by its magic bytes, whatever the name.
        table_rows: rows of each of the 26 embedding tables; the hashed ids of feature
            ``f`` lie in ``0 .. table_rows[f] - 1``.
        hash_seed: seed of the categorical hash (see :func:`categorical_id`).

    Raises:
        HarnessError: NOT_FOUND for a missing file, BAD_INPUT for bad ``table_rows``.
    """

    pooling: tuple[int, ...] = (1,) * NUM_SPARSE

    def __init__(self, paths: Sequence[Path], table_rows: Sequence[int], hash_seed: int = 0):
        self.paths: tuple[Path, ...] = tuple(Path(p) for p in paths)
        if not self.paths:
            raise _bad("no Criteo TSV files given")
        for path in self.paths:
            if not path.exists():
                raise _not_found(path)
            if not path.is_file():
                raise _bad(f"{path}: not a regular file")
        self.table_rows: tuple[int, ...] = tuple(int(r) for r in _check_table_rows(table_rows))
        self.hash_seed = int(hash_seed)
        self._rows = np.array(self.table_rows, np.int64)
        self._salts = _feature_salts(self.hash_seed)

    def _blocks(self) -> Iterator[tuple[list[bytes], int, int]]:
        """Lines of every file, a few MiB at a time: (lines without their newline, file
        index, 1-based number of the first line)."""
        for file_idx, path in enumerate(self.paths):
            line_no = 1
            try:
                with open(path, "rb") as raw:
                    gz = raw.read(2) == b"\x1f\x8b"
                    raw.seek(0)
                    stream: BinaryIO = raw
                    if gz:
                        stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
                    rest = b""
                    while True:
                        block = stream.read(_READ_BYTES)
                        if not block:
                            break
                        block = rest + block
                        lines = block.split(b"\n")
                        rest = lines.pop()
                        if lines:
                            yield _strip_cr(lines, b"\r" in block), file_idx, line_no
                            line_no += len(lines)
                    if rest:
                        yield _strip_cr([rest], True), file_idx, line_no
            except FileNotFoundError:
                raise _not_found(path) from None
            except (OSError, EOFError, zlib.error) as exc:
                raise _bad(f"{path}:{line_no}: cannot read ({exc})") from None

    def batches(
        self, batch_size: int, *, rank: int = 0, world_size: int = 1, drop_last: bool = False
    ) -> Iterator[Batch]:
        """This rank's batches: global batch ``k`` goes to rank ``k % world_size``.

        Each rank reads every line but parses (and so validates) only its own.

        Raises:
            HarnessError: BAD_INPUT naming ``file:line`` for a malformed line or an
                unreadable file; NOT_FOUND for a file deleted since construction.
        """
        _check_batching(batch_size, rank, world_size)
        flush_at = max(1, _PARSE_CHUNK_LINES // batch_size) * batch_size
        pending: list[bytes] = []
        runs: list[tuple[int, int, int]] = []  # (offset in pending, file index, line number)
        global_index = 0  # of the first line of the current block
        for lines, file_idx, first_line in self._blocks():
            pos = 0
            while pos < len(lines):
                k = (global_index + pos) // batch_size
                end = min(len(lines), (k + 1) * batch_size - global_index)
                if k % world_size == rank:
                    runs.append((len(pending), file_idx, first_line + pos))
                    pending.extend(lines[pos:end])
                    if len(pending) >= flush_at and len(pending) % batch_size == 0:
                        yield from self._emit(pending, runs, batch_size, drop_last)
                        pending, runs = [], []
                pos = end
            global_index += len(lines)
        if pending:
            yield from self._emit(pending, runs, batch_size, drop_last)

    def _emit(
        self,
        lines: list[bytes],
        runs: list[tuple[int, int, int]],
        batch_size: int,
        drop_last: bool,
    ) -> Iterator[Batch]:
        parsed = _parse_lines(lines, runs, self.paths, self._salts, self._rows)
        for start in range(0, len(lines), batch_size):
            stop = start + batch_size
            if stop > len(lines) and drop_last:
                return
            yield _batch(
                parsed.dense[start:stop],
                parsed.sparse[start:stop],
                parsed.labels[start:stop],
                self.pooling,
            )


def _strip_cr(lines: list[bytes], has_cr: bool) -> list[bytes]:
    """Drop the ``\\r`` of Windows line ends (only looked for when ``has_cr``)."""
    if has_cr:
        return [line[:-1] if line.endswith(b"\r") else line for line in lines]
    return lines


# --------------------------------------------------------------------------- MLPerf 1TB


def _load_npy(path: Path) -> np.ndarray:
    if not path.exists():
        raise _not_found(path)
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise _bad(f"{path.name}: not a readable .npy file ({exc})") from None


def _npz_member(path: Path, key: str) -> np.ndarray:
    """Array ``key`` of an ``.npz``: memory-mapped when stored uncompressed (as
    ``np.savez`` writes it), else read into memory."""
    name = f"{key}.npy"
    try:
        with zipfile.ZipFile(path) as zf:
            try:
                info = zf.getinfo(name)
            except KeyError:
                raise _bad(
                    f"{path.name}: no array {key!r} (expected keys '0'..'{NUM_SPARSE - 1}')"
                ) from None
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                with zf.open(info) as member:
                    return np.lib.format.read_array(member, allow_pickle=False)
        with open(path, "rb") as f:
            f.seek(info.header_offset)
            header = f.read(30)
            if len(header) != 30 or header[:4] != b"PK\x03\x04":
                raise _bad(f"{path.name}: corrupt zip entry {name!r}")
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                with zipfile.ZipFile(path) as zf, zf.open(info) as member:
                    return np.lib.format.read_array(member, allow_pickle=False)
            offset = f.tell()
        if dtype.hasobject:
            raise _bad(f"{path.name}: array {key!r} holds Python objects")
        if math.prod(shape) == 0:
            return np.empty(shape, dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                         order="F" if fortran else "C")
    except HarnessError:
        raise
    except FileNotFoundError:
        raise _not_found(path) from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise _bad(f"{path.name}: not a readable .npz file ({exc})") from None


class _Day:
    __slots__ = ("day", "n", "dense", "labels", "sparse", "label_file")

    def __init__(self, day: int, n: int, dense: np.ndarray, labels: np.ndarray,
                 sparse: list[np.ndarray], label_file: str):
        self.day = day
        self.n = n
        self.dense = dense
        self.labels = labels
        self.sparse = sparse  # one N x P_f array per feature (one-hot: N x 26 as one entry)
        self.label_file = label_file


class Criteo1TB:
    """MLPerf's preprocessed Criteo 1TB days under ``root``, in the order of ``days``.

    Reads ``day_{d}_dense.npy`` (N x 13 float, passed through unchanged: MLPerf's are
    already ``log(x + 3)``), ``day_{d}_labels.npy`` (N or N x 1, 0/1) and either
    ``day_{d}_sparse.npy`` (N x 26 integer ids; one-hot) or
    ``day_{d}_sparse_multi_hot.npz`` (keys ``"0"``..``"25"``, each N x P_f integer ids;
    multi-hot). Ids are reduced modulo ``table_rows[f]``. Everything is memory-mapped.

    Raises:
        HarnessError: NOT_FOUND for a missing root or file; BAD_INPUT naming the file for
            a wrong shape or dtype, row counts that disagree, or a multi-hot pooling that
            differs between days.
    """

    def __init__(self, root: Path, days: Sequence[int], table_rows: Sequence[int], multi_hot: bool):
        self.root = Path(root)
        self.days: tuple[int, ...] = tuple(int(d) for d in days)
        self.multi_hot = bool(multi_hot)
        if not self.days:
            raise _bad("no Criteo 1TB days given")
        if not self.root.is_dir():
            raise _not_found(self.root, "directory")
        self.table_rows: tuple[int, ...] = tuple(int(r) for r in _check_table_rows(table_rows))
        self._rows = np.array(self.table_rows, np.int64)
        self._days = [self._open_day(d) for d in self.days]
        if self.multi_hot:
            self.pooling: tuple[int, ...] = tuple(int(a.shape[1]) for a in self._days[0].sparse)
            first = self._days[0]
            for day in self._days[1:]:
                got = tuple(int(a.shape[1]) for a in day.sparse)
                if got != self.pooling:
                    f = next(i for i, (a, b) in enumerate(zip(got, self.pooling)) if a != b)
                    raise _bad(
                        f"day_{day.day}_sparse_multi_hot.npz: feature {f} has {got[f]} ids "
                        f"per sample but day_{first.day}_sparse_multi_hot.npz has "
                        f"{self.pooling[f]}"
                    )
        else:
            self.pooling = (1,) * NUM_SPARSE
        self._starts = np.cumsum([0] + [d.n for d in self._days])

    @property
    def num_samples(self) -> int:
        """Samples over all the days."""
        return int(self._starts[-1])

    def _open_day(self, d: int) -> _Day:
        dense_name, labels_name = f"day_{d}_dense.npy", f"day_{d}_labels.npy"
        dense = _load_npy(self.root / dense_name)
        if dense.ndim != 2 or dense.shape[1] != NUM_DENSE:
            raise _bad(f"{dense_name}: expected shape N x {NUM_DENSE}, found {dense.shape}")
        if dense.dtype.kind != "f":
            raise _bad(
                f"{dense_name}: expected floating point (already log-transformed) values, "
                f"found {dense.dtype}"
            )
        n = int(dense.shape[0])

        labels = _load_npy(self.root / labels_name)
        if labels.ndim == 2 and labels.shape[1] == 1:
            labels = labels.reshape(-1)
        if labels.ndim != 1:
            raise _bad(f"{labels_name}: expected shape N or N x 1, found {labels.shape}")
        if labels.dtype.kind not in "biuf":
            raise _bad(
                f"{labels_name}: expected integer, bool or float labels, found {labels.dtype}"
            )
        if labels.shape[0] != n:
            raise _bad(f"{labels_name}: {labels.shape[0]} rows but {dense_name} has {n}")

        sparse: list[np.ndarray]
        if self.multi_hot:
            sparse_name = f"day_{d}_sparse_multi_hot.npz"
            path = self.root / sparse_name
            if not path.exists():
                raise _not_found(path)
            sparse = []
            for f in range(NUM_SPARSE):
                ids = _npz_member(path, str(f))
                if ids.ndim != 2 or ids.shape[1] < 1:
                    raise _bad(f"{sparse_name}: array '{f}' has shape {ids.shape}, expected N x P")
                if ids.dtype.kind not in "iu":
                    raise _bad(
                        f"{sparse_name}: array '{f}' has dtype {ids.dtype}, expected integer ids"
                    )
                if ids.shape[0] != n:
                    raise _bad(
                        f"{sparse_name}: array '{f}' has {ids.shape[0]} rows "
                        f"but {dense_name} has {n}"
                    )
                sparse.append(ids)
        else:
            sparse_name = f"day_{d}_sparse.npy"
            ids = _load_npy(self.root / sparse_name)
            if ids.ndim != 2 or ids.shape[1] != NUM_SPARSE:
                raise _bad(f"{sparse_name}: expected shape N x {NUM_SPARSE}, found {ids.shape}")
            if ids.dtype.kind not in "iu":
                raise _bad(f"{sparse_name}: expected integer ids, found {ids.dtype}")
            if ids.shape[0] != n:
                raise _bad(f"{sparse_name}: {ids.shape[0]} rows but {dense_name} has {n}")
            sparse = [ids]
        return _Day(d, n, dense, labels, sparse, labels_name)

    def _rows_of(self, start: int, stop: int) -> Batch:
        dense_parts, label_parts, sparse_parts = [], [], []
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        for i in range(first, len(self._days)):
            lo = max(start, int(self._starts[i]))
            hi = min(stop, int(self._starts[i + 1]))
            if lo >= hi:
                if self._starts[i] >= stop:
                    break
                continue
            day = self._days[i]
            a, b = lo - int(self._starts[i]), hi - int(self._starts[i])
            dense_parts.append(np.asarray(day.dense[a:b], dtype=np.float32))
            labels = np.asarray(day.labels[a:b])
            ok = (labels == 0) | (labels == 1)
            if not ok.all():
                r = int(np.argmin(ok))
                raise _bad(f"{day.label_file}: row {a + r}: label {labels[r]!r} is not 0 or 1")
            label_parts.append(labels.astype(np.float32))
            sparse_parts.append(self._ids(day, a, b))
        return _batch(
            np.concatenate(dense_parts),
            np.concatenate(sparse_parts),
            np.concatenate(label_parts),
            self.pooling,
        )

    def _ids(self, day: _Day, a: int, b: int) -> np.ndarray:
        if self.multi_hot:
            cols = [self._reduce(arr[a:b], self._rows[f]) for f, arr in enumerate(day.sparse)]
            return np.concatenate(cols, axis=1)
        return self._reduce(day.sparse[0][a:b], self._rows[None, :])

    @staticmethod
    def _reduce(ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.dtype.kind == "u":
            return (ids % rows.astype(np.uint64)).astype(np.int64)
        return np.remainder(ids.astype(np.int64), rows)

    def batches(
        self, batch_size: int, *, rank: int = 0, world_size: int = 1, drop_last: bool = False
    ) -> Iterator[Batch]:
        """This rank's batches: global batch ``k`` (which may span days) goes to rank
        ``k % world_size``; only this rank's rows are read from disk.

        Raises:
            HarnessError: BAD_INPUT naming the labels file and row for a label not 0/1.
        """
        _check_batching(batch_size, rank, world_size)
        total = self.num_samples
        count = total // batch_size if drop_last else -(-total // batch_size)
        for k in range(rank, count, world_size):
            start = k * batch_size
            yield self._rows_of(start, min(start + batch_size, total))
