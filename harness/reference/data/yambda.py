"""Yambda's events as published (Hugging Face ``yandex/yambda``, ``flat/<scale>/``), read through pyarrow
and cut into samples exactly as :mod:`harness.reference.data.events` cuts the generator's streams.

**The layout.** A folder holding either the flat ``multi_event.parquet`` (one row per event, its
``event_type`` one of ``listen``, ``like``, ``dislike``, ``unlike``, ``undislike``) or one file per
type (``listens.parquet``, ``likes.parquet``, ``dislikes.parquet``, ``unlikes.parquet``,
``undislikes.parquet``), each with the columns ``uid``, ``item_id``, ``timestamp`` (seconds),
``is_organic``; listens (and the flat file) add ``played_ratio_pct`` and ``track_length_seconds``
(null on the flat file's other events). Beside them ``artist_item_mapping.parquet`` (``item_id``,
``artist_id``) and ``album_item_mapping.parquet`` (``item_id``, ``album_id``). Every event file is
sorted by ``(uid, timestamp)``, as Yambda publishes it; the reader checks it. Any scale (50M, 500M,
5B events) reads the same way.

**One pass, then memory maps.** :func:`build_store` reads each file once by record batches of a
bounded number of rows (``memory_budget_bytes`` sets it: :func:`batch_rows`), checks every batch
(columns and types, ids inside the spec's tables, the order, the event types), and appends the events
a sample can hold to flat binary columns in a cache folder: ``uid``, ``item``, ``timestamp`` and the
``action`` (:class:`~harness.reference.data.events.Action`), in ``(uid, timestamp)`` order (the
per-type files are merged a range of users at a time). Samples then read those columns through
memory maps: the events are never in memory as a whole, and never as Python objects. The cache is
keyed by the files' names, sizes and modification times, so a second run (or a run set's worker)
opens it without reading the parquet again. A missing, truncated or malformed file is one
``HarnessError`` (BAD_INPUT, exit 2) naming the file.

**Samples** are those of the module :mod:`harness.reference.data.events`: a user's ``candidates``
consecutive listens in one window with the user's events before the first of them as history (its
latest ``max_sequence_length - candidates``), labelled ``played_ratio_pct > 50``; train windows in
time order, within a window by the first candidate's time; the eval split is the held-out users'
samples in the window after the last one the train split reaches. The same code
(:class:`~harness.reference.data.events.EventStreams`) cuts them, so an export of the generator
(``harness data export``) trains exactly as the generator.

**The timeline.** A benchmark of ``kind: event_streams`` (an export of the generator) brings its
own: windows of ``window_seconds`` from time 0, ``warmup_windows`` of history only, then
``train_windows``. Yambda itself (``kind: yambda``, ``dlrmv4``) is split as the reference splits it
(``mlcommons/training`` ``recommendation_v4``: ``preprocess_public_data.py``'s global temporal
split, the streaming loop of ``dlrm_v3/datasets/yambda.py`` and ``train/gin/yambda_5b.gin``): the
last day (``test_seconds`` before the latest event) is the test day, training ends ``gap_seconds``
(30 minutes) before it, and nothing of the gap or the test day is ever read; one-day windows count
from the first listen of the ``train_days`` (300) before that; windows from ``warmup_windows``
(the reference's ``start_ts``, 150) on are trained, ``train_windows`` (149) of them; ``eval_user_fraction``
(0.1: the reference's ``train_split_percentage`` of 0.9) of the users are held out.

**Where it differs from the reference.** (1) The reference preprocesses the parquet into sessions
and a flat cache with polars (about 190 GB of RAM at 5B); we stream the published files straight
into memory-mapped columns. (2) Only listens and likes enter histories, as the reference's three
pools (listen-plus, like, skip); dislikes, unlikes and undislikes are validated and counted, not
used. (3) ``listen_plus`` is ``played_ratio_pct > 50`` (Yambda's definition; the reference uses
``>= 50``), a null ratio counts as 0 (as the reference). (4) Held-out users are drawn by the
harness's counter-based hash of ``(seed, uid)`` (the reference: a salted SplitMix64 of the uid), and
the eval window is the one after the last the train split reaches (the reference: a fixed window,
299). (5) An item missing from a mapping gets artist or album 0, and an item listed twice keeps its
last row (as the reference). (6) The cross features and ``is_organic`` are read, checked and not used
(the model has no cross features yet).
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.event_batch import UNKNOWN_ACTION, EventBatch
from harness.reference.data.events import (
    LISTEN_PLUS_PCT,
    Action,
    EventFormat,
    EventStreams,
    EventStreamSpec,
    held_out_users,
)

__all__ = ["EVENT_FILES", "FLAT_FILE", "MAPPING_FILES", "YambdaEventStreams", "YambdaLayout", "YambdaSpec",
           "YambdaStore", "batch_rows", "build_store", "find_layout", "open_yambda"]

FLAT_FILE = "multi_event.parquet"
#: the per-type files, by the ``event_type`` the flat file gives their rows
EVENT_FILES = {"listen": "listens.parquet", "like": "likes.parquet", "dislike": "dislikes.parquet",
               "unlike": "unlikes.parquet", "undislike": "undislikes.parquet"}
MAPPING_FILES = {"artist": ("artist_item_mapping.parquet", "artist_id"),
                 "album": ("album_item_mapping.parquet", "album_id")}
EVENT_COLUMNS = ("uid", "item_id", "timestamp", "is_organic")
LISTEN_COLUMNS = ("played_ratio_pct", "track_length_seconds")
DEFAULT_MEMORY_BUDGET = 256 << 20
_ARROW_BYTES_PER_ROW = 96  # a record batch of these columns, its numpy copies and the masks made from it
_STORE_VERSION = 1
_DROPPED = 255  # the action code of an event no history holds (dislike, unlike, undislike)
_COLUMNS = {"uid": np.uint32, "item": np.uint32, "timestamp": np.int64, "action": np.uint8}


def _bad(message: str) -> HarnessError:
    return HarnessError(message, ErrorCategory.BAD_INPUT)


def batch_rows(memory_budget_bytes: int) -> int:
    """Rows per record batch (and per chunk of the memory-mapped columns) within the budget."""
    return max(256, int(memory_budget_bytes) // _ARROW_BYTES_PER_ROW)


# --------------------------------------------------------------------------- the layout
class LayoutKind(enum.Enum):
    FLAT = "flat"  # multi_event.parquet
    PER_TYPE = "per-type"  # listens.parquet, likes.parquet, ...


@dataclass(frozen=True)
class YambdaLayout:
    """Which of Yambda's files a folder holds."""

    root: Path
    kind: LayoutKind
    events: tuple[tuple[str, Path], ...]  # (event type or "multi", file)
    mappings: tuple[tuple[str, Path], ...]  # ("artist" | "album", file)

    def files(self) -> list[Path]:
        return [p for _, p in self.events] + [p for _, p in self.mappings]

    def entries(self) -> list[dict[str, Any]]:
        """Each file's name and size (and modification time): what a cache and a manifest key on."""
        out = []
        for path in self.files():
            st = path.stat()
            out.append({"name": path.name, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
        return out


def find_layout(path: Path | str) -> YambdaLayout:
    """The Yambda files under ``path``: the flat layout when ``multi_event.parquet`` is there, else
    the per-type files (``listens.parquet`` at least); both mappings are required."""
    root = Path(path)
    if not root.is_dir():
        raise HarnessError(f"{root}: no such folder (a Yambda scale's folder: multi_event.parquet or "
                           "listens.parquet, likes.parquet, ..., and the artist and album mappings)",
                           ErrorCategory.NOT_FOUND if not root.exists() else ErrorCategory.BAD_INPUT)
    if (root / FLAT_FILE).is_file():
        kind, events = LayoutKind.FLAT, (("multi", root / FLAT_FILE),)
    elif (root / EVENT_FILES["listen"]).is_file():
        kind = LayoutKind.PER_TYPE
        events = tuple((t, root / name) for t, name in EVENT_FILES.items() if (root / name).is_file())
    else:
        raise _bad(f"{root}: no Yambda events: neither {FLAT_FILE} nor {EVENT_FILES['listen']} (Hugging Face "
                   "yandex/yambda, flat/50m, flat/500m or flat/5b)")
    mappings = []
    for what, (name, _) in MAPPING_FILES.items():
        if not (root / name).is_file():
            raise _bad(f"{root / name}: missing (Yambda's {what} mapping, published beside the events: "
                       "item_id -> " + MAPPING_FILES[what][1] + ")")
        mappings.append((what, root / name))
    return YambdaLayout(root, kind, events, tuple(mappings))


# --------------------------------------------------------------------------- reading parquet
def open_parquet(path: Path) -> Any:
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as err:  # pyarrow's ArrowInvalid, OSError: a truncated or foreign file
        raise _bad(f"{path}: not a readable parquet file ({_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _check_schema(path: Path, pf: Any, wanted: dict[str, str]) -> None:
    """Refuse a file that lacks one of ``wanted``'s columns or holds it in another type
    (``int``: an integer; ``number``: an integer or a float; ``flag``: an integer or a bool;
    ``text``: a string, or a dictionary of strings)."""
    import pyarrow as pa

    schema = pf.schema_arrow
    for name, kind in wanted.items():
        if schema.get_field_index(name) < 0:
            raise _bad(f"{path}: no column {name!r} (it has {', '.join(schema.names)})")
        t = schema.field(name).type
        if pa.types.is_dictionary(t) and kind == "text":
            t = t.value_type
        ok = {"int": pa.types.is_integer(t), "number": pa.types.is_integer(t) or pa.types.is_floating(t),
              "flag": pa.types.is_integer(t) or pa.types.is_boolean(t),
              "text": pa.types.is_string(t) or pa.types.is_large_string(t)}[kind]
        if not ok:
            want = {"int": "an integer", "number": "a number", "flag": "an integer or a bool",
                    "text": "a string"}[kind]
            raise _bad(f"{path}: column {name!r} is {t}, not {want}")


def _batches(path: Path, pf: Any, columns: list[str], rows: int) -> Iterator[Any]:
    """The file's record batches of at most ``rows`` rows; a damaged page is one line naming the file."""
    it = pf.iter_batches(batch_size=rows, columns=columns)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except Exception as err:
            raise _bad(f"{path}: unreadable ({_first_line(err)})") from None
        yield batch


def _ints(path: Path, batch: Any, name: str, first_row: int) -> np.ndarray:
    column = batch.column(name)
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise _bad(f"{path}: row {row}: {name} is null")
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def read_mapping(path: Path, column: str, item_rows: int, rows: int) -> np.ndarray:
    """``item -> column`` over ``item_rows`` items (0 where the file says nothing; the last row wins)."""
    pf = open_parquet(path)
    _check_schema(path, pf, {"item_id": "int", column: "int"})
    out = np.zeros(item_rows, dtype=np.int64)
    first = 0
    for batch in _batches(path, pf, ["item_id", column], rows):
        item, value = _ints(path, batch, "item_id", first), _ints(path, batch, column, first)
        bad = (item < 0) | (value < 0)
        if bad.any():
            raise _bad(f"{path}: row {first + int(np.flatnonzero(bad)[0])}: a negative id")
        inside = item < item_rows
        out[item[inside]] = value[inside]
        first += batch.num_rows
    return out


# --------------------------------------------------------------------------- the store
@dataclass(frozen=True)
class Bounds:
    """What the spec's tables hold: ids must lie below these."""

    users: int
    item_rows: int
    artist_rows: int
    album_rows: int


class _Columns:
    """Flat binary columns appended batch by batch (a cache folder's files)."""

    def __init__(self, folder: Path, prefix: str = ""):
        self.folder, self.prefix = folder, prefix
        self.files = {name: open(folder / f"{prefix}{name}.bin", "wb") for name in _COLUMNS}
        self.rows = 0

    def append(self, values: dict[str, np.ndarray]) -> None:
        for name, dtype in _COLUMNS.items():
            self.files[name].write(np.ascontiguousarray(values[name], dtype=dtype).tobytes())
        self.rows += len(values["uid"])

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def maps(self) -> dict[str, np.ndarray]:
        return {name: _map(self.folder / f"{self.prefix}{name}.bin", dtype, self.rows)
                for name, dtype in _COLUMNS.items()}


def _map(path: Path, dtype: Any, rows: int) -> np.ndarray:
    if rows == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(rows,))


class EventFileReader:
    """One event file read by batches, checked, its events turned into the store's columns."""

    def __init__(self, path: Path, event_type: str, bounds: Bounds, rows: int, counts: dict[str, int],
                 stats: dict[str, Any]):
        self.path, self.event_type, self.bounds, self.rows = path, event_type, bounds, rows
        self.counts, self.stats = counts, stats
        self.pf = open_parquet(path)
        wanted = dict.fromkeys(("uid", "item_id", "timestamp"), "int") | {"is_organic": "flag"}
        if event_type in ("multi", "listen"):
            wanted |= {"played_ratio_pct": "number", "track_length_seconds": "number"}
        if event_type == "multi":
            wanted["event_type"] = "text"
        _check_schema(path, self.pf, wanted)
        self.columns = list(wanted)
        self.last = (-1, -1)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        first = 0
        for batch in _batches(self.path, self.pf, self.columns, self.rows):
            self.stats["peak_batch_rows"] = max(self.stats["peak_batch_rows"], batch.num_rows)
            self.stats["peak_batch_bytes"] = max(self.stats["peak_batch_bytes"], batch.nbytes)
            yield self._events(batch, first)
            first += batch.num_rows

    def _events(self, batch: Any, first: int) -> dict[str, np.ndarray]:
        path, b = self.path, self.bounds
        uid, item, ts = (_ints(path, batch, c, first) for c in ("uid", "item_id", "timestamp"))
        for name, values, limit, key in (("uid", uid, b.users, "users"), ("item_id", item, b.item_rows, "item_rows")):
            bad = (values < 0) | (values >= limit)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise _bad(f"{path}: row {first + i}: {name} {int(values[i])} is outside the spec's {key} "
                           f"(0..{limit - 1})")
        if len(ts) and int(ts.min()) < 0:
            raise _bad(f"{path}: row {first + int(np.argmin(ts))}: a negative timestamp")
        self._check_order(uid, ts, first)
        kind = self._types(batch, first)
        played = np.zeros(len(uid))
        if "played_ratio_pct" in self.columns:
            column = batch.column("played_ratio_pct")
            listen = kind == 0
            missing = column.is_null().to_numpy(zero_copy_only=False) & listen
            self.counts["listens_without_ratio"] += int(missing.sum())
            played = np.nan_to_num(column.to_numpy(zero_copy_only=False).astype(np.float64), nan=0.0)
        action = np.full(len(uid), _DROPPED, dtype=np.uint8)
        action[kind == 0] = np.where(played[kind == 0] > LISTEN_PLUS_PCT, Action.LISTEN_PLUS, Action.SKIP)
        action[kind == 1] = Action.LIKE
        for code, name in enumerate(EVENT_FILES):
            self.counts[name] += int((kind == code).sum())
        if len(ts):
            self.stats["t_min"] = min(self.stats["t_min"], int(ts.min()))
            self.stats["t_max"] = max(self.stats["t_max"], int(ts.max()))
            if (kind == 0).any():
                self.stats["listen_t_min"] = min(self.stats["listen_t_min"], int(ts[kind == 0].min()))
        keep = action != _DROPPED
        return {"uid": uid[keep], "item": item[keep], "timestamp": ts[keep], "action": action[keep]}

    def _check_order(self, uid: np.ndarray, ts: np.ndarray, first: int) -> None:
        if not len(uid):
            return
        prev_uid = np.concatenate([[self.last[0]], uid[:-1]])
        prev_ts = np.concatenate([[self.last[1]], ts[:-1]])
        bad = (uid < prev_uid) | ((uid == prev_uid) & (ts < prev_ts))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _bad(f"{self.path}: row {first + i} is out of (uid, timestamp) order (Yambda publishes its files "
                       "sorted so; sort it by uid, then timestamp)")
        self.last = (int(uid[-1]), int(ts[-1]))

    def _types(self, batch: Any, first: int) -> np.ndarray:
        """Each row's event type, as its index in :data:`EVENT_FILES`."""
        if self.event_type != "multi":
            return np.full(batch.num_rows, list(EVENT_FILES).index(self.event_type), dtype=np.int64)
        import pyarrow as pa
        import pyarrow.compute as pc

        column = batch.column("event_type")
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        codes = pc.index_in(column, value_set=pa.array(list(EVENT_FILES))).to_numpy(zero_copy_only=False)
        unknown = np.isnan(codes) if codes.dtype.kind == "f" else np.zeros(len(codes), bool)
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise _bad(f"{self.path}: row {first + i}: event_type {column[i].as_py()!r} is none of "
                       f"{', '.join(EVENT_FILES)}")
        return codes.astype(np.int64)


@dataclass
class YambdaStore:
    """The events a sample can hold (listens and likes), in ``(uid, timestamp)`` order, memory-mapped;
    each user's first event, the listens' positions, the item mappings and what the pass counted."""

    folder: Path
    uid: np.ndarray
    item: np.ndarray
    timestamp: np.ndarray
    action: np.ndarray
    user_start: np.ndarray  # [users + 1]
    listen_pos: np.ndarray  # [listens]: each listen's position among the events
    item_artist: np.ndarray
    item_album: np.ndarray
    meta: dict[str, Any]

    @classmethod
    def open(cls, folder: Path) -> YambdaStore:
        meta = json.loads((folder / "meta.json").read_text())
        n, listens = meta["events_kept"], meta["listens"]
        cols = {name: _map(folder / f"{name}.bin", dtype, n) for name, dtype in _COLUMNS.items()}
        return cls(folder=folder, **cols, user_start=np.fromfile(folder / "user_start.bin", dtype=np.int64),
                   listen_pos=_map(folder / "listen_pos.bin", np.int64, listens),
                   item_artist=np.load(folder / "item_artist.npy"), item_album=np.load(folder / "item_album.npy"),
                   meta=meta)


def _cache_root() -> Path:
    env = os.environ.get("HARNESS_DATA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "harness" / "yambda"


def _store_key(layout: YambdaLayout, bounds: Bounds) -> str:
    identity = {"version": _STORE_VERSION, "root": str(layout.root.resolve()), "files": layout.entries(),
                "bounds": [bounds.users, bounds.item_rows, bounds.artist_rows, bounds.album_rows]}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def build_store(layout: YambdaLayout, bounds: Bounds, *, cache_dir: Path | None = None,
                memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                progress: Callable[[str], None] | None = None) -> YambdaStore:
    """The store of ``layout``'s events, from the cache when it holds them, else read once (every
    batch checked against ``bounds``) into a new cache folder, renamed into place when complete.

    Raises:
        HarnessError: BAD_INPUT naming the file (and row) for a missing column, a wrong type, a
            truncated file, an id outside the spec's tables, rows out of order, an unknown event type.
    """
    root = Path(cache_dir) if cache_dir is not None else _cache_root()
    final = root / _store_key(layout, bounds)
    if (final / "meta.json").is_file():
        return YambdaStore.open(final)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=root))
    except OSError as err:
        raise HarnessError(f"{root}: cannot write the Yambda cache there ({err.strerror}); set HARNESS_DATA_CACHE "
                           "to a writable folder", ErrorCategory.IO_FAULT) from None
    try:
        _build(layout, bounds, tmp, batch_rows(memory_budget_bytes), progress)
        try:
            os.rename(tmp, final)
        except OSError:  # another process built it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return YambdaStore.open(final)


def _build(layout: YambdaLayout, bounds: Bounds, folder: Path, rows: int,
           progress: Callable[[str], None] | None) -> None:
    counts = dict.fromkeys(EVENT_FILES, 0) | {"listens_without_ratio": 0}
    stats: dict[str, Any] = {"peak_batch_rows": 0, "peak_batch_bytes": 0, "t_min": 2**62, "t_max": -1,
                             "listen_t_min": 2**62, "batch_rows": rows}
    mappings = {what: read_mapping(path, MAPPING_FILES[what][1], bounds.item_rows, rows)
                for what, path in layout.mappings}
    for what, limit in (("artist", bounds.artist_rows), ("album", bounds.album_rows)):
        if mappings[what].size and int(mappings[what].max()) >= limit:
            raise _bad(f"{dict(layout.mappings)[what]}: {MAPPING_FILES[what][1]} {int(mappings[what].max())} is "
                       f"outside the spec's {what}_rows (0..{limit - 1})")
    readers = [EventFileReader(path, t, bounds, rows, counts, stats) for t, path in layout.events]  # every schema first
    if layout.kind is LayoutKind.FLAT:
        out = _Columns(folder)
        for events in readers[0]:
            out.append(events)
        out.close()
    else:
        parts = []
        for reader in readers:
            part = _Columns(folder, prefix=f"part_{reader.event_type}_")
            for events in reader:
                part.append(events)
            part.close()
            parts.append(part)
            if progress is not None:
                progress(f"{reader.path.name}: {counts[reader.event_type]:,} events")
        out = _merge(parts, folder, bounds.users, rows, stats)
    total = _finish(out, folder, bounds.users, rows)
    np.save(folder / "item_artist.npy", mappings["artist"])
    np.save(folder / "item_album.npy", mappings["album"])
    meta = {"version": _STORE_VERSION, "layout": layout.kind.value, "root": str(layout.root),
            "files": layout.entries(), "counts": counts, "events_kept": out.rows, "users": bounds.users,
            "users_seen": total["users_seen"], "listens": total["listens"], **stats}
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    if progress is not None:
        progress(f"{layout.root}: {sum(counts[t] for t in EVENT_FILES):,} events read, {out.rows:,} kept "
                 f"(listens and likes), {total['users_seen']:,} users")


def _merge(parts: list[_Columns], folder: Path, users: int, rows: int, stats: dict[str, Any]) -> _Columns:
    """The per-type parts (each in (uid, timestamp) order) merged a range of users at a time, at most
    ``rows`` events (unless one user has more); at one time a listen comes before a like (the parts'
    order), rows of one part keep theirs."""
    out = _Columns(folder)
    maps = [p.maps() for p in parts]
    step = max(1, rows // max(1, sum(p.rows for p in parts) // max(users, 1)))

    def events(lo: int, hi: int) -> int:
        return sum(int(np.searchsorted(m["uid"], hi) - np.searchsorted(m["uid"], lo)) for m in maps)

    lo = 0
    while lo < users:
        hi = min(users, lo + step)
        while hi - lo > 1 and events(lo, hi) > rows:  # users with long streams: fewer of them at a time
            hi = lo + (hi - lo) // 2
        pieces = []
        for rank, m in enumerate(maps):
            a, b = np.searchsorted(m["uid"], [lo, hi])
            if b > a:
                pieces.append(({k: np.asarray(v[a:b]) for k, v in m.items()}, rank))
        lo = hi
        if not pieces:
            continue
        cat = {k: np.concatenate([p[k] for p, _ in pieces]) for k in _COLUMNS}
        rank = np.concatenate([np.full(len(p["uid"]), r) for p, r in pieces])
        order = np.lexsort((rank, cat["timestamp"], cat["uid"]))  # stable: a part's rows keep their order
        out.append({k: v[order] for k, v in cat.items()})
        stats["peak_merge_rows"] = max(stats.get("peak_merge_rows", 0), len(order))
    out.close()
    for p in parts:
        for name in _COLUMNS:
            (folder / f"{p.prefix}{name}.bin").unlink()
    return out


def _finish(out: _Columns, folder: Path, users: int, rows: int) -> dict[str, int]:
    """Each user's first event and the listens' positions, a chunk of the columns at a time."""
    maps = out.maps()
    per_user = np.zeros(users, dtype=np.int64)
    listens = 0
    with open(folder / "listen_pos.bin", "wb") as f:
        for a in range(0, out.rows, rows):
            uid = np.asarray(maps["uid"][a:a + rows]).astype(np.int64)
            per_user += np.bincount(uid, minlength=users)
            action = np.asarray(maps["action"][a:a + rows])
            pos = a + np.flatnonzero((action == Action.LISTEN_PLUS) | (action == Action.SKIP))
            f.write(pos.astype(np.int64).tobytes())
            listens += len(pos)
    np.concatenate([[0], np.cumsum(per_user)]).astype(np.int64).tofile(folder / "user_start.bin")
    return {"users_seen": int((per_user > 0).sum()), "listens": listens}


# --------------------------------------------------------------------------- the spec of kind: yambda
@dataclass(frozen=True)
class YambdaSpec:
    """A ``dataset`` section of ``kind: yambda`` (dlrmv4): the tables and splits it states, and the
    reference's timeline where it states none (see the module's docstring)."""

    users: int
    item_rows: int
    artist_rows: int
    album_rows: int
    train_samples: int
    eval_samples: int
    max_sequence_length: int
    candidates: int = 1
    seed: int = 0
    eval_user_fraction: float = 0.1
    window_seconds: int = 86400
    warmup_windows: int = 150
    train_windows: int = 149
    train_days: int = 300
    gap_seconds: int = 1800
    test_seconds: int = 86400
    actions: int = len(Action)

    KIND = "yambda"

    @classmethod
    def from_section(cls, dataset: Mapping[str, Any]) -> YambdaSpec:
        known = set(cls.__dataclass_fields__)
        # the reference's hashed cross features are the model's and the planner's: the reader has no use for them
        unknown = sorted(set(dataset) - known - {"kind", "formats", "cross_features"})
        if dataset.get("kind") != cls.KIND or unknown:
            raise _bad(f"yambda data set: kind {dataset.get('kind')!r}, unknown keys {unknown} "
                       f"(known: {sorted(known)})")
        values = {k: v for k, v in dataset.items() if k in known}
        try:
            return cls(**values)
        except TypeError as err:
            raise _bad(f"yambda data set: {err}") from None


# --------------------------------------------------------------------------- the data set
@dataclass(frozen=True)
class Timeline:
    """Windows of ``window_seconds`` from ``origin``; ``windows`` of them can hold samples. Events
    from ``end`` on (the reference's gap and test day) are never read."""

    origin: int
    window_seconds: int
    windows: int
    train: range
    end: int | None = None


class YambdaEventStreams(EventStreams):
    """Yambda's events (or an export of the generator in its layout) as a data set of
    :class:`EventBatch`: the samples of :class:`~harness.reference.data.events.EventStreams`."""

    format = EventFormat.YAMBDA_PARQUET

    def __init__(self, store: YambdaStore, timeline: Timeline, *, bounds: Bounds, actions: int, candidates: int,
                 max_sequence_length: int, seed: int, eval_user_fraction: float, train_samples: int,
                 eval_samples: int, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET, kind: str = "event_streams"):
        self.store, self.timeline, self.kind = store, timeline, kind
        self.users, self.item_rows, self.artist_rows, self.album_rows = (
            bounds.users, bounds.item_rows, bounds.artist_rows, bounds.album_rows)
        self.actions, self.candidates, self.max_sequence_length = actions, candidates, max_sequence_length
        self.chunk_rows = batch_rows(memory_budget_bytes)
        self._key_windows = timeline.windows + 2  # 0: before the origin, 1..windows, then after them
        self.listen_key = self._listen_keys()
        train_users, eval_users = held_out_users(seed, bounds.users, eval_user_fraction)
        self._cut(train_users=train_users, eval_users=eval_users, train_windows=timeline.train,
                  train_samples=train_samples, eval_samples=eval_samples)

    def _listen_keys(self) -> np.ndarray:
        """``uid * (windows + 2) + slot`` of each listen (slot 0 before the origin, ``w + 1`` in
        window ``w``, then after): sorted, since the events are in (uid, timestamp) order. Kept in the
        store's folder beside the columns, made a chunk at a time."""
        t, st = self.timeline, self.store
        path = st.folder / f"listen_key_{t.origin}_{t.window_seconds}_{t.windows}_{t.end}.bin"
        n = len(st.listen_pos)
        if not path.is_file():
            tmp = path.with_suffix(f".partial-{os.getpid()}")
            with open(tmp, "wb") as f:
                for a in range(0, n, self.chunk_rows):
                    pos = np.asarray(st.listen_pos[a:a + self.chunk_rows])
                    ts = np.asarray(st.timestamp[pos])
                    slot = np.clip((ts - t.origin) // t.window_seconds + 1, 0, t.windows + 1)
                    if t.end is not None:
                        slot = np.where(ts >= t.end, t.windows + 1, slot)
                    f.write((np.asarray(st.uid[pos]).astype(np.int64) * self._key_windows + slot).tobytes())
            os.replace(tmp, path)
        return _map(path, np.int64, n)

    def _listen_range(self, users: np.ndarray, window: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        key = users.astype(np.int64) * self._key_windows + np.asarray(window) + 1
        return np.searchsorted(self.listen_key, key), np.searchsorted(self.listen_key, key + 1)

    def _more_samples_hint(self, name: str) -> str:
        t = self.timeline
        trained = (f"windows {t.train.start}-{t.train.stop - 1} trained" if len(t.train) else
                   f"none from window {t.train.start} (warmup_windows) on to train")
        return (f"the data at {self.store.meta['root']} hold {t.windows} windows of {t.window_seconds} s, {trained}: "
                f"lower {name}_samples, or give a larger Yambda scale (50m, 500m, 5b)")

    # ------------------------------------------------------------------ the source's answers
    def _window_sizes(self, users: np.ndarray, windows: tuple[int, ...]) -> list[int]:
        """One pass over the listens' keys, a chunk at a time: each (user, window) run's samples."""
        member = np.zeros(self.users, dtype=bool)
        member[users] = True
        totals = np.zeros(self._key_windows, dtype=np.int64)
        carry_key, carry_n = -1, 0
        n, k = len(self.listen_key), self.candidates
        for a in range(0, n, self.chunk_rows):
            keys = np.asarray(self.listen_key[a:a + self.chunk_rows])
            starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
            run_keys, run_n = keys[starts], np.diff(np.append(starts, len(keys)))
            if run_keys[0] == carry_key:
                run_n[0] += carry_n
            elif carry_n:
                run_keys, run_n = np.append(carry_key, run_keys), np.append(carry_n, run_n)
            carry_key, carry_n = int(run_keys[-1]), int(run_n[-1])
            self._add_runs(totals, member, run_keys[:-1], run_n[:-1], k)
        if carry_n:
            self._add_runs(totals, member, np.array([carry_key]), np.array([carry_n]), k)
        return [int(totals[w + 1]) for w in windows]

    def _add_runs(self, totals: np.ndarray, member: np.ndarray, keys: np.ndarray, n: np.ndarray, k: int) -> None:
        uid, slot = keys // self._key_windows, keys % self._key_windows
        np.add.at(totals, slot[member[uid]], (n // k)[member[uid]])

    def _anchors(self, users: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
        k = self.candidates
        lo, hi = self._listen_range(users, window)
        n = (hi - lo) // k
        users, lo, n = users[n > 0], lo[n > 0], n[n > 0]
        uid = np.repeat(users, n)
        ordinal = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        anchor_ts = np.asarray(self.store.timestamp[np.asarray(self.store.listen_pos[np.repeat(lo, n) + ordinal * k])])
        order = np.lexsort((ordinal, uid, anchor_ts))
        return uid[order], ordinal[order]

    def _gather(self, uid: np.ndarray, window: np.ndarray, ordinal: np.ndarray) -> tuple[EventBatch, None]:
        st, k, b = self.store, self.candidates, len(uid)
        lo, _ = self._listen_range(uid, window)
        candidate_listens = (lo + ordinal * k)[:, None] + np.arange(k)[None, :]
        candidates = np.asarray(st.listen_pos[candidate_listens.ravel()])  # event positions, sample after sample
        anchor = candidates[::k]
        history = np.minimum(anchor - st.user_start[uid], self.max_sequence_length - k)
        lengths = np.stack([history, np.full(b, k)], axis=1).ravel()
        first = np.stack([anchor - history, np.zeros(b, dtype=np.int64)], axis=1).ravel()
        is_candidate = np.repeat(np.tile([False, True], b), lengths)
        start = np.repeat(np.cumsum(lengths) - lengths, lengths)
        position = np.repeat(first, lengths) + np.arange(int(lengths.sum())) - start
        position[is_candidate] = candidates
        item = np.asarray(st.item[position]).astype(np.int64)
        action = np.asarray(st.action[position]).astype(np.int64)
        labels = action[is_candidate] == Action.LISTEN_PLUS
        action[is_candidate] = UNKNOWN_ACTION
        batch = EventBatch(
            uid=torch.from_numpy(uid.astype(np.int64)),
            history_lengths=torch.from_numpy(history.astype(np.int64)),
            candidate_lengths=torch.full((b,), k, dtype=torch.int64),
            item=torch.from_numpy(item),
            artist=torch.from_numpy(st.item_artist[item]),
            album=torch.from_numpy(st.item_album[item]),
            action=torch.from_numpy(action),
            timestamp=torch.from_numpy(np.asarray(st.timestamp[position]).astype(np.int64)),
            labels=torch.from_numpy(labels.astype(np.float32)),
            label_mask=torch.ones(len(labels), dtype=torch.bool),
        )
        return batch, None

    # ------------------------------------------------------------------ the Dataset protocol
    def describe(self) -> dict[str, Any]:
        t, m = self.timeline, self.store.meta
        return {
            "format": self.format.value, "path": m["root"], "layout": m["layout"], "events": m["counts"],
            "users": self.users, "users_seen": m["users_seen"], "train_users": int(len(self.train_users)),
            "eval_users": int(len(self.eval_users)), "train_samples": self.train_samples,
            "eval_samples": self.eval_samples, "train_samples_available": int(self._train.first[-1]),
            "eval_samples_available": int(self._eval.first[-1]), "window_seconds": t.window_seconds,
            "origin": t.origin, "train_windows": [self._train.windows[0], self.eval_window - 1],
            "eval_window": self.eval_window, "candidates": self.candidates,
            "max_sequence_length": self.max_sequence_length, "tables": self.tables,
        }

    def manifest(self) -> dict[str, Any]:
        """What a run's worker reopens the data from: its files' names and sizes (checked, not read
        again; the run's fingerprint takes them, so a copy elsewhere is the same data)."""
        files = [{"name": e["name"], "bytes": e["bytes"]} for e in self.store.meta["files"]]
        return {"format": self.format.value, "root": self.store.meta["root"], "files": files}


# --------------------------------------------------------------------------- opening
def _timeline_of(spec: EventStreamSpec | YambdaSpec, store: YambdaStore) -> Timeline:
    if isinstance(spec, EventStreamSpec):  # the generator's own (an export)
        return Timeline(0, spec.window_seconds, spec.windows,
                        range(spec.warmup_windows, spec.warmup_windows + spec.train_windows))
    m = store.meta
    if m["t_max"] < 0 or m["listen_t_min"] >= 2**62:
        raise _bad(f"{m['root']}: no listens: nothing to cut samples from")
    test_start = m["t_max"] + 1 - spec.test_seconds
    end = test_start - spec.gap_seconds
    origin = max(int(m["listen_t_min"]), end - spec.train_days * 86400)
    windows = max(1, -(-(end - origin) // spec.window_seconds))
    return Timeline(origin, spec.window_seconds, windows,
                    range(spec.warmup_windows, min(windows, spec.warmup_windows + spec.train_windows)), end)


def open_yambda(dataset: Mapping[str, Any], path: Path | str, *, manifest: Mapping[str, Any] | None = None,
                cache_dir: Path | None = None, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                progress: Callable[[str], None] | None = None) -> YambdaEventStreams:
    """The Yambda files at ``path`` as the data set a benchmark's ``dataset`` section (``kind:
    event_streams`` for an export of the generator, ``kind: yambda`` for Yambda itself) describes,
    validated against it. With ``manifest``, the files must be the ones it names (same sizes)."""
    spec: EventStreamSpec | YambdaSpec = (EventStreamSpec.from_section(dataset) if dataset.get("kind") ==
                                          EventStreamSpec.KIND else YambdaSpec.from_section(dataset))
    layout = find_layout(path)
    if manifest is not None:
        now = {e["name"]: e["bytes"] for e in layout.entries()}
        for entry in manifest["files"]:
            if now.get(entry["name"]) != entry["bytes"]:
                raise _bad(f"{layout.root / entry['name']}: changed since it was validated (was {entry['bytes']} "
                           f"bytes, now {now.get(entry['name'], 'missing')})")
    bounds = Bounds(spec.users, spec.item_rows, spec.artist_rows, spec.album_rows)
    store = build_store(layout, bounds, cache_dir=cache_dir, memory_budget_bytes=memory_budget_bytes,
                        progress=progress)
    return YambdaEventStreams(
        store, _timeline_of(spec, store), bounds=bounds, actions=spec.actions, candidates=spec.candidates,
        max_sequence_length=spec.max_sequence_length, seed=spec.seed, eval_user_fraction=spec.eval_user_fraction,
        train_samples=spec.train_samples, eval_samples=spec.eval_samples, memory_budget_bytes=memory_budget_bytes,
        kind=str(dataset.get("kind")))
