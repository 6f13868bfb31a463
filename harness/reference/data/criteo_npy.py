"""MLPerf's preprocessed Criteo 1TB as numpy files (``.npy`` one-hot, ``.npz`` multi-hot): where each
array lies (read from its header, never loaded), the checks of a day's files, and
:class:`MlperfNpyDataset`, memory-mapped, split as :mod:`harness.reference.data.criteo` says.

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
import math
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from harness.errors import HarnessError
from harness.reference.data import datasets
from harness.reference.data.batches import NUM_DENSE, NUM_SPARSE, Batch
from harness.reference.data.criteo_manifest import (
    Layout,
    bad_input,
    check_eval_batching,
    check_manifest_files,
    check_table_rows,
    days_text,
    not_found,
)
from harness.reference.data.datasets import DataFormat

__all__ = [
    "MlperfNpyDataset",
    "NpyArray",
    "NpyDay",
    "check_labels",
    "npy_array",
    "npy_day",
    "npz_arrays",
    "reduce_ids",
]

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
        raise bad_input(f"{where}: unsupported .npy format version {version}")
    if dtype.hasobject:
        raise bad_input(f"{where}: holds Python objects")
    return tuple(int(s) for s in shape), bool(fortran), dtype


def _check_fits(path: Path, array: NpyArray, where: str) -> None:
    need = array.offset + math.prod(array.shape) * np.dtype(array.dtype).itemsize
    size = path.stat().st_size
    if size < need:
        raise bad_input(f"{where}: truncated ({size} bytes, its header needs {need})")


def npy_array(path: Path) -> NpyArray:
    """The array of a ``.npy`` file, from its header."""
    if not path.is_file():
        raise not_found(path)
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = _read_header(f, str(path))
            array = NpyArray(path.name, f.tell(), shape, dtype.str, fortran)
    except HarnessError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise bad_input(f"{path}: not a readable .npy file ({exc})") from None
    _check_fits(path, array, str(path))
    return array


def npz_arrays(path: Path) -> dict[str, NpyArray]:
    """The arrays of an ``.npz`` (by key, ``"0"`` for member ``0.npy``), each stored uncompressed
    as ``np.savez`` writes them, so that they can be memory-mapped."""
    if not path.is_file():
        raise not_found(path)
    out = {}
    try:
        with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                key = info.filename[: -len(".npy")]
                if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                    raise bad_input(f"{path}: array {key!r} is compressed; the reader memory-maps the arrays, so "
                                    "write them with numpy.savez (not savez_compressed), as MLPerf's "
                                    "materialize_synthetic_multihot_dataset.py does")
                f.seek(info.header_offset)
                header = f.read(30)
                if len(header) != 30 or header[:4] != b"PK\x03\x04":
                    raise bad_input(f"{path}: corrupt zip entry {info.filename!r}")
                name_len, extra_len = struct.unpack("<HH", header[26:30])
                f.seek(info.header_offset + 30 + name_len + extra_len)
                shape, fortran, dtype = _read_header(f, f"{path}: array {key!r}")
                out[key] = NpyArray(path.name, f.tell(), shape, dtype.str, fortran)
    except HarnessError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise bad_input(f"{path}: not a readable .npz file ({exc})") from None
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
        raise bad_input(f"{where}: expected shape N x {NUM_DENSE}, found {dense.shape}")
    if np.dtype(dense.dtype).kind != "f":
        raise bad_input(f"{where}: expected floating point (already log-transformed) values, "
                        f"found {np.dtype(dense.dtype)}")
    n = dense.shape[0]

    labels = npy_array(root / labels_name)
    where = root / labels_name
    if not (len(labels.shape) == 1 or (len(labels.shape) == 2 and labels.shape[1] == 1)):
        raise bad_input(f"{where}: expected shape N or N x 1, found {labels.shape}")
    if np.dtype(labels.dtype).kind not in "biuf":
        raise bad_input(f"{where}: expected integer, bool or float labels, found {np.dtype(labels.dtype)}")
    if labels.shape[0] != n:
        raise bad_input(f"{where}: {labels.shape[0]} rows but {dense_name} has {n}")

    if multi_hot:
        name = f"day_{d}_sparse_multi_hot.npz"
        members = npz_arrays(root / name)
        sparse = []
        for f in range(NUM_SPARSE):
            ids = members.get(str(f))
            if ids is None:
                raise bad_input(f"{root / name}: no array '{f}' (expected keys '0'..'{NUM_SPARSE - 1}')")
            if len(ids.shape) != 2 or ids.shape[1] < 1:
                raise bad_input(f"{root / name}: array '{f}' has shape {ids.shape}, expected N x P")
            if np.dtype(ids.dtype).kind not in "iu":
                raise bad_input(f"{root / name}: array '{f}' has dtype {np.dtype(ids.dtype)}, expected integer ids")
            if ids.shape[0] != n:
                raise bad_input(f"{root / name}: array '{f}' has {ids.shape[0]} rows but {dense_name} has {n}")
            sparse.append(ids)
    else:
        name = f"day_{d}_sparse.npy"
        ids = npy_array(root / name)
        if len(ids.shape) != 2 or ids.shape[1] != NUM_SPARSE:
            raise bad_input(f"{root / name}: expected shape N x {NUM_SPARSE}, found {ids.shape}")
        if np.dtype(ids.dtype).kind not in "iu":
            raise bad_input(f"{root / name}: expected integer ids, found {np.dtype(ids.dtype)}")
        if ids.shape[0] != n:
            raise bad_input(f"{root / name}: {ids.shape[0]} rows but {dense_name} has {n}")
        sparse = [ids]
    return NpyDay(day=d, rows=n, dense=dense, labels=labels, sparse=tuple(sparse))


def check_labels(labels: np.ndarray, where: str, first_row: int) -> np.ndarray:
    """``labels`` as float32, refusing a value that is not 0 or 1 (naming the file and row)."""
    ok = (labels == 0) | (labels == 1)
    if not ok.all():
        r = int(np.argmin(ok))
        raise bad_input(f"{where}: row {first_row + r}: label {labels[r].item()!r} is not 0 or 1")
    return labels.astype(np.float32)


def reduce_ids(ids: np.ndarray, rows: np.ndarray | int) -> np.ndarray:
    """Ids modulo their table's rows, as int64 (negative ids of a signed dtype wrap into range)."""
    ids = np.asarray(ids)
    if ids.dtype.kind == "u":
        return (ids % np.asarray(rows).astype(np.uint64)).astype(np.int64)
    return np.remainder(ids.astype(np.int64), rows)


class MlperfNpyDataset:
    """MLPerf's preprocessed Criteo 1TB days (one-hot or multi-hot) as a
    :class:`~harness.reference.data.datasets.Dataset`, memory-mapped; split as
    :mod:`harness.reference.data.criteo` says.

    Build it with :meth:`scan` (checks every header) or :meth:`from_manifest` (reads nothing).
    """

    format = DataFormat.MLPERF_NPY
    reshuffles = True

    def __init__(self, layout: Layout, days: Sequence[NpyDay], table_rows: Sequence[int]):
        self.layout, self.days = layout, tuple(days)
        self.table_rows: tuple[int, ...] = tuple(int(r) for r in check_table_rows(table_rows))
        self._rows = np.array(self.table_rows, np.int64)
        self.pooling: tuple[int, ...] = self.days[0].pooling
        for day in self.days[1:]:
            if day.pooling != self.pooling:
                f = next(i for i, (a, b) in enumerate(zip(day.pooling, self.pooling)) if a != b)
                raise bad_input(f"{layout.root / day.sparse[f].name}: feature {f} has {day.pooling[f]} ids per sample "
                                f"but {self.days[0].sparse[f].name} has {self.pooling[f]}")
        self._cols = np.concatenate([[0], np.cumsum(self.pooling)]).astype(np.int64)
        self.train_samples = int(sum(d.rows for d in self.days[:-1]))
        self.eval_samples = (self.days[-1].rows + 1) // 2
        self._train_starts = np.cumsum([0] + [d.rows for d in self.days[:-1]]).tolist()
        self._maps: dict[tuple[int, str, int], np.ndarray] = {}

    @classmethod
    def scan(cls, layout: Layout, table_rows: Sequence[int]) -> MlperfNpyDataset:
        """Check every day's headers, shapes, dtypes and row counts, and open them."""
        check_table_rows(table_rows)
        multi_hot = layout.layout == "multi-hot"
        return cls(layout, [npy_day(layout.root, d, multi_hot) for d in range(layout.days)], table_rows)

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], table_rows: Sequence[int]) -> MlperfNpyDataset:
        root = Path(manifest["root"])
        check_manifest_files(root, manifest["files"])
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
        return days_text(self.layout.layout, len(self.days))

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
        check_eval_batching(batch_size, rank, world_size)
        lo, hi = datasets.eval_range(self.eval_samples, rank, world_size)
        last = len(self.days) - 1
        return (self._batch([(last, a, min(a + batch_size, hi))]) for a in range(lo, hi, batch_size))
