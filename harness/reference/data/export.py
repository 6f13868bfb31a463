"""``harness data export``: a synthetic benchmark written in its real data's formats: Criteo's for
the tabular generator, Yambda's flat parquet for the event streams (:func:`export_event_streams`).

The copy is laid out so that :func:`harness.reference.data.criteo.open_files` reads exactly (bit for
bit) the batches of :class:`~harness.reference.data.datasets.SyntheticDataset` for any epoch, rank,
world size and start, and the same eval batches:

* train samples ``0 .. N-1`` go, in order, to days ``0 .. D-2`` (``numpy.array_split``'s sizes);
* the last day holds the eval samples ``N .. N+E-1`` followed by ``E`` more generated samples
  ``N+E .. N+2E-1``, so that its first half (the reader's eval split) is exactly the eval split;
* ``criteo-tsv`` (Terabyte names ``day_0`` .. ``day_{D-1}``, ``.gz`` with ``gzip``): the label,
  the 13 integer counts (:meth:`~harness.reference.data.synthetic.SyntheticCriteo.dense_counts`, whose
  ``log(1 + x)`` in float64 rounded to float32 is the generator's dense feature) and the 26 ids in
  lower-case hex (read back as themselves, since every id is below its table's rows);
* ``mlperf-npy``: ``day_<d>_dense.npy`` float32 (the generator's dense values),
  ``day_<d>_labels.npy`` int32 N x 1 (as TorchRec writes them) and ``day_<d>_sparse.npy`` int32
  N x 26 when every pooling is 1, else ``day_<d>_sparse_multi_hot.npz`` (uncompressed, members
  ``"0"`` .. ``"25"``, N x P_f int32, as MLPerf's ``materialize_synthetic_multihot_dataset.py``).

Samples are generated and written a chunk at a time (memory-mapped npy files, per-feature
temporary npy files stored into the npz), so memory does not depend on the dataset's size. The
export goes to a temporary sibling folder renamed to ``out_dir`` at the end: an interrupted
export leaves nothing under that name. ``harness_export.json`` beside the data records where it
came from; readers ignore it.
"""

from __future__ import annotations

import gzip as gzip_module
import io
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.batches import NUM_DENSE, NUM_SPARSE
from harness.reference.data.datasets import DataFormat, SyntheticDataset
from harness.reference.data.events import Action, SyntheticEventStreams

if TYPE_CHECKING:
    from harness.rules.specs import BenchmarkSpec

__all__ = ["EXPORT_INFO", "EventExportResult", "ExportResult", "export_dataset", "export_event_streams", "format_tsv"]

#: The provenance file written beside the data.
EXPORT_INFO = "harness_export.json"

_CHUNK_SAMPLES = 16384
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _bad(message: str) -> HarnessError:
    return HarnessError(message, ErrorCategory.BAD_INPUT)


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: the folder, its files with their sizes, and the day sizes."""

    out_dir: Path
    format: DataFormat
    days: int
    day_samples: tuple[int, ...]
    files: tuple[tuple[str, int], ...]  # (name, bytes)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)


# --------------------------------------------------------------------------- TSV text


def _digits(values: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (non-negative int64) as fixed-width digit characters ``n x w`` and a mask of
    the digits to keep (no leading zeros; ``0`` is one digit)."""
    top = int(values.max()) if values.size else 0
    width = 1
    while base**width <= top:
        width += 1
    powers = np.array([base ** (width - 1 - j) for j in range(width)], np.int64)
    digits = (values[:, None] // powers[None, :]) % base
    keep = values[:, None] >= powers[None, :]
    keep[:, -1] = True
    return _HEX[digits], keep


def format_tsv(labels: np.ndarray, counts: np.ndarray, ids: np.ndarray) -> bytes:
    """Criteo TSV lines (each ending in ``\\n``) for ``n`` samples: the 0/1 ``labels``, the
    ``n x 13`` non-negative ``counts`` in decimal and the ``n x 26`` non-negative ``ids`` in
    lower-case hex, built as one character matrix (vectorised) and its kept characters."""
    n = len(labels)
    columns = [(np.where(labels > 0, ord("1"), ord("0")).astype(np.uint8)[:, None], np.ones((n, 1), bool))]
    for k in range(NUM_DENSE):
        columns.append(_digits(counts[:, k].astype(np.int64), 10))
    for f in range(NUM_SPARSE):
        columns.append(_digits(ids[:, f].astype(np.int64), 16))
    parts, keeps = [], []
    sep = np.full((n, 1), ord("\t"), np.uint8)
    for i, (chars, keep) in enumerate(columns):
        parts += [chars, sep if i < len(columns) - 1 else np.full((n, 1), ord("\n"), np.uint8)]
        keeps += [keep, np.ones((n, 1), bool)]
    return np.concatenate(parts, axis=1)[np.concatenate(keeps, axis=1)].tobytes()


# --------------------------------------------------------------------------- writers


def _chunks(first: int, count: int, size: int) -> Iterator[np.ndarray]:
    for a in range(first, first + count, size):
        yield np.arange(a, min(a + size, first + count), dtype=np.int64)


def _write_tsv_day(data: SyntheticDataset, path: Path, first: int, count: int, gz: bool, chunk: int) -> None:
    gen = data.generator
    with open(path, "wb") as raw:
        out: io.BufferedIOBase = gzip_module.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) if gz else raw
        try:
            for idx in _chunks(first, count, chunk):
                batch = gen.samples(idx)
                out.write(format_tsv(batch.labels.numpy(), gen.dense_counts(idx), batch.sparse.numpy()))
        finally:
            if gz:
                out.close()


def _write_npy_day(data: SyntheticDataset, root: Path, d: int, first: int, count: int, chunk: int) -> None:
    gen, pooling = data.generator, data.pooling
    open_memmap = np.lib.format.open_memmap
    dense = open_memmap(root / f"day_{d}_dense.npy", mode="w+", dtype=np.float32, shape=(count, NUM_DENSE))
    labels = open_memmap(root / f"day_{d}_labels.npy", mode="w+", dtype=np.int32, shape=(count, 1))
    one_hot = all(p == 1 for p in pooling)
    cols = np.concatenate([[0], np.cumsum(pooling)]).astype(np.int64)
    if one_hot:
        sparse = [open_memmap(root / f"day_{d}_sparse.npy", mode="w+", dtype=np.int32, shape=(count, NUM_SPARSE))]
    else:
        tmp = root / f".day_{d}_members"
        tmp.mkdir()
        sparse = [open_memmap(tmp / f"{f}.npy", mode="w+", dtype=np.int32, shape=(count, p))
                  for f, p in enumerate(pooling)]
    for idx in _chunks(first, count, chunk):
        batch = gen.samples(idx)
        a, b = int(idx[0]) - first, int(idx[-1]) + 1 - first
        dense[a:b] = batch.dense.numpy()
        labels[a:b, 0] = batch.labels.numpy().astype(np.int32)
        ids = batch.sparse.numpy()
        if one_hot:
            sparse[0][a:b] = ids
        else:
            for f in range(NUM_SPARSE):
                sparse[f][a:b] = ids[:, cols[f] : cols[f + 1]]
    for array in [dense, labels, *sparse]:
        array.flush()
    del dense, labels, sparse
    if not one_hot:
        with zipfile.ZipFile(root / f"day_{d}_sparse_multi_hot.npz", "w", compression=zipfile.ZIP_STORED,
                             allowZip64=True) as zf:
            for f in range(NUM_SPARSE):
                zf.write(tmp / f"{f}.npy", arcname=f"{f}.npy")
        shutil.rmtree(tmp)


# --------------------------------------------------------------------------- export


def _day_sizes(train: int, eval_: int, days: int) -> list[int]:
    return [len(p) for p in np.array_split(np.arange(train), days - 1)] + [2 * eval_]


def _check_request(spec: BenchmarkSpec, fmt: DataFormat, out_dir: Path, days: int, gz: bool) -> None:
    d = spec.dataset
    if d.get("kind") != "synthetic":
        raise _bad(f"benchmark {spec.name} trains on {d.get('kind')} data: only a synthetic benchmark can be "
                   "exported (its generator makes the samples)")
    if fmt.value not in spec.data_formats:
        accepts = ", ".join(spec.data_formats) or "no data files"
        raise _bad(f"benchmark {spec.name} accepts {accepts}: an export as {fmt.value} could not be trained on")
    if fmt is DataFormat.CRITEO_TSV and any(p != 1 for p in d["pooling"]):
        raise _bad(f"benchmark {spec.name} is multi-hot (pooling {list(d['pooling'])}); criteo-tsv holds one id "
                   "per feature: export it as mlperf-npy")
    if gz and fmt is not DataFormat.CRITEO_TSV:
        raise _bad("--gzip applies to criteo-tsv only")
    if days < 2 or days - 1 > d["train_samples"]:
        raise _bad(f"--days must be between 2 and {d['train_samples'] + 1} (the train days and one eval day), "
                   f"got {days}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise _bad(f"{out_dir} exists and is not an empty folder: give a new one (nothing was written)")


def export_dataset(spec: BenchmarkSpec, fmt: DataFormat | str, out_dir: Path | str, *, days: int = 24,
                   gzip: bool = False, chunk_samples: int = _CHUNK_SAMPLES,
                   progress: Callable[[str], None] | None = None) -> ExportResult:
    """Write the synthetic benchmark ``spec`` as ``fmt`` (``criteo-tsv`` or ``mlperf-npy``) into
    the new folder ``out_dir``, in ``days`` days (``gzip``: compressed TSV days).

    Raises:
        HarnessError: (BAD_INPUT) not a synthetic benchmark, a format it does not accept (or
            criteo-tsv for a multi-hot one), bad ``days``, an existing non-empty ``out_dir``.
    """
    try:
        fmt = DataFormat(fmt)
    except ValueError:
        raise _bad(f"unknown data format {fmt!r}: criteo-tsv or mlperf-npy") from None
    out_dir = Path(out_dir).absolute()
    _check_request(spec, fmt, out_dir, days, gzip)
    data = SyntheticDataset(spec.dataset)
    sizes = _day_sizes(data.train_samples, data.eval_samples, days)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    if progress is not None:
        progress(f"exporting {spec.name} as {fmt.value} in {days} days ({sum(sizes)} samples) to {out_dir}")
    try:
        first = 0
        for d, count in enumerate(sizes):
            if fmt is DataFormat.CRITEO_TSV:
                _write_tsv_day(data, tmp / (f"day_{d}.gz" if gzip else f"day_{d}"), first, count, gzip, chunk_samples)
            else:
                _write_npy_day(data, tmp, d, first, count, chunk_samples)
            first += count
            if progress is not None:
                what = "train" if d < days - 1 else "eval + unused"
                progress(f"  day_{d}: {count} samples ({what}), {first} of {sum(sizes)} written")
        _write_info(spec, fmt, tmp, days, gzip, sizes)
        files = tuple(sorted((p.name, p.stat().st_size) for p in tmp.iterdir()))
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(out_dir=out_dir, format=fmt, days=days, day_samples=tuple(sizes), files=files)


def _write_info(spec: BenchmarkSpec, fmt: DataFormat, root: Path, days: int, gz: bool, sizes: list[int]) -> None:
    d = spec.dataset
    info: dict[str, Any] = {
        "benchmark": spec.name, "format": fmt.value,
        "layout": "terabyte" if fmt is DataFormat.CRITEO_TSV else
                  ("one-hot" if all(p == 1 for p in d["pooling"]) else "multi-hot"),
        "days": days, "gzip": gz, "train_samples": d["train_samples"], "eval_samples": d["eval_samples"],
        "day_samples": sizes, "table_rows": list(d["table_rows"]), "pooling": list(d["pooling"]),
        "seed": d["seed"],
        "note": "train samples 0..N-1 in days 0..D-2; the last day holds the eval samples N..N+E-1, then "
                "N+E..N+2E-1 (unused): its first half is the eval split",
    }
    (root / EXPORT_INFO).write_text(json.dumps(info, indent=1) + "\n")


# --------------------------------------------------------------------------- event streams as Yambda


@dataclass(frozen=True)
class EventExportResult:
    """What an export of event streams wrote: the folder, its files with their sizes, the events."""

    out_dir: Path
    files: tuple[tuple[str, int], ...]  # (name, bytes)
    listens: int
    likes: int
    users: int

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)


def _yambda_schema() -> Any:
    # the published types (uid, item_id and timestamp uint32, the ratio uint16, is_organic uint8)
    return pa.schema([("uid", pa.uint32()), ("timestamp", pa.uint32()), ("is_organic", pa.uint8()),
                      ("item_id", pa.uint32()), ("event_type", pa.string()), ("played_ratio_pct", pa.uint16()),
                      ("track_length_seconds", pa.uint32())])


def _event_rows(streams: Any, uids: np.ndarray) -> dict[str, np.ndarray]:
    """One row per event of ``uids``' streams, in (uid, timestamp) order: listens with their played
    ratio in whole percents (rounded away from 50, so ``> 50`` still says ``listen_plus``), likes
    without one; the generator's organic flags (a like: its listen's). The generator has no track
    lengths: 0 stands for them."""
    last = streams.spec.windows - 1
    st = streams.streams(uids, last)
    events = len(st.events["item"])
    uid = np.repeat(st.uid, np.diff(st.user_first_event))
    like = st.events["action"] == Action.LIKE
    played = st.listen["played_ratio"].astype(np.float64)
    whole = np.where(st.listen["listen_plus"], np.ceil(played), np.floor(played)).astype(np.uint16)
    ratio = np.zeros(events, dtype=np.uint16)
    ratio[st.listen_event] = whole
    return {"uid": uid, "timestamp": st.events["timestamp"], "is_organic": st.events["organic"].astype(np.uint8),
            "item_id": st.events["item"], "like": like, "played_ratio_pct": ratio}


def export_event_streams(spec: BenchmarkSpec, out_dir: Path | str, *, users_per_chunk: int = 1024,
                         progress: Callable[[str], None] | None = None) -> EventExportResult:
    """Write the event-stream benchmark ``spec``'s generated streams (every window, every user) in
    Yambda's flat layout into the new folder ``out_dir``: ``multi_event.parquet`` (a row group per
    chunk of users), ``artist_item_mapping.parquet`` and ``album_item_mapping.parquet`` (the
    catalogue), and ``harness_export.json``. :func:`harness.reference.data.yambda.open_yambda` reads
    it back as the generator's batches, bit for bit.

    Raises:
        HarnessError: (BAD_INPUT) an existing non-empty ``out_dir``.
    """
    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise _bad(f"{out_dir} exists and is not an empty folder: give a new one (nothing was written)")
    streams = SyntheticEventStreams(spec.dataset)
    s = streams.spec
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    if progress is not None:
        progress(f"exporting {spec.name}'s event streams ({s.users} users, windows 0-{s.windows - 1}) as Yambda's "
                 f"flat layout to {out_dir}")
    listens = likes = 0
    try:
        schema = _yambda_schema()
        with pq.ParquetWriter(tmp / "multi_event.parquet", schema) as writer:
            for lo in range(0, s.users, users_per_chunk):
                rows = _event_rows(streams, np.arange(lo, min(lo + users_per_chunk, s.users), dtype=np.int64))
                like = rows.pop("like")
                listens, likes = listens + int((~like).sum()), likes + int(like.sum())
                columns = {name: pa.array(rows[name].astype(schema.field(name).type.to_pandas_dtype()))
                           for name in ("uid", "timestamp", "is_organic", "item_id")}
                columns["event_type"] = pa.array(np.where(like, "like", "listen"), pa.string())
                columns["played_ratio_pct"] = pa.array(rows["played_ratio_pct"], pa.uint16(), mask=like)
                columns["track_length_seconds"] = pa.array(np.zeros(len(like), np.uint32), pa.uint32(), mask=like)
                writer.write_table(pa.table(columns, schema=schema))
        item = pa.array(np.arange(s.item_rows, dtype=np.uint32))
        cat = streams.catalogue
        pq.write_table(pa.table({"item_id": item, "artist_id": pa.array(cat.item_artist.astype(np.uint32))}),
                       tmp / "artist_item_mapping.parquet")
        pq.write_table(pa.table({"item_id": item, "album_id": pa.array(cat.item_album.astype(np.uint32))}),
                       tmp / "album_item_mapping.parquet")
        info = {"benchmark": spec.name, "format": "yambda-parquet", "layout": "flat", "users": s.users,
                "windows": s.windows, "window_seconds": s.window_seconds, "listens": listens, "likes": likes,
                "seed": s.seed, "note": "the generator's streams, every user and window; the reader cuts the "
                                        "samples by the benchmark's own spec"}
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=1) + "\n")
        files = tuple(sorted((p.name, p.stat().st_size) for p in tmp.iterdir()))
        if out_dir.exists():
            out_dir.rmdir()
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if progress is not None:
        progress(f"  {listens:,} listens and {likes:,} likes of {s.users:,} users written")
    return EventExportResult(out_dir=out_dir, files=files, listens=listens, likes=likes, users=s.users)
