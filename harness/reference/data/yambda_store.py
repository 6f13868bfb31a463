"""Yambda's published files (Hugging Face ``yandex/yambda``, ``flat/<scale>/``): their layout, one
pass of pyarrow over them that checks every batch, and the memory-mapped columns it leaves in a
cache folder, which :mod:`harness.reference.data.yambda` cuts into samples.

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
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.events import (
    LISTEN_PLUS_PCT,
    Action,
)

__all__ = ["EVENT_FILES", "FLAT_FILE", "MAPPING_FILES", "YambdaLayout", "YambdaStore", "batch_rows", "build_store",
           "find_layout"]

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


def bad_input(message: str) -> HarnessError:
    """A BAD_INPUT error (exit 2) of a Yambda file or section."""
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
        events: tuple[tuple[str, Path], ...] = (("multi", root / FLAT_FILE),)
        kind = LayoutKind.FLAT
    elif (root / EVENT_FILES["listen"]).is_file():
        kind = LayoutKind.PER_TYPE
        events = tuple((t, root / name) for t, name in EVENT_FILES.items() if (root / name).is_file())
    else:
        raise bad_input(f"{root}: no Yambda events: neither {FLAT_FILE} nor {EVENT_FILES['listen']} (Hugging Face "
                   "yandex/yambda, flat/50m, flat/500m or flat/5b)")
    mappings = []
    for what, (name, _) in MAPPING_FILES.items():
        if not (root / name).is_file():
            raise bad_input(f"{root / name}: missing (Yambda's {what} mapping, published beside the events: "
                       "item_id -> " + MAPPING_FILES[what][1] + ")")
        mappings.append((what, root / name))
    return YambdaLayout(root, kind, events, tuple(mappings))


# --------------------------------------------------------------------------- reading parquet
def open_parquet(path: Path) -> Any:
    try:
        return pq.ParquetFile(path)
    except Exception as err:  # pyarrow's ArrowInvalid, OSError: a truncated or foreign file
        raise bad_input(f"{path}: not a readable parquet file ({_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _check_schema(path: Path, pf: Any, wanted: dict[str, str]) -> None:
    """Refuse a file that lacks one of ``wanted``'s columns or holds it in another type
    (``int``: an integer; ``number``: an integer or a float; ``flag``: an integer or a bool;
    ``text``: a string, or a dictionary of strings)."""
    schema = pf.schema_arrow
    for name, kind in wanted.items():
        if schema.get_field_index(name) < 0:
            raise bad_input(f"{path}: no column {name!r} (it has {', '.join(schema.names)})")
        t = schema.field(name).type
        if pa.types.is_dictionary(t) and kind == "text":
            t = t.value_type
        ok = {"int": pa.types.is_integer(t), "number": pa.types.is_integer(t) or pa.types.is_floating(t),
              "flag": pa.types.is_integer(t) or pa.types.is_boolean(t),
              "text": pa.types.is_string(t) or pa.types.is_large_string(t)}[kind]
        if not ok:
            want = {"int": "an integer", "number": "a number", "flag": "an integer or a bool",
                    "text": "a string"}[kind]
            raise bad_input(f"{path}: column {name!r} is {t}, not {want}")


def _batches(path: Path, pf: Any, columns: list[str], rows: int) -> Iterator[Any]:
    """The file's record batches of at most ``rows`` rows; a damaged page is one line naming the file."""
    it = pf.iter_batches(batch_size=rows, columns=columns)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except Exception as err:
            raise bad_input(f"{path}: unreadable ({_first_line(err)})") from None
        yield batch


def _ints(path: Path, batch: Any, name: str, first_row: int) -> np.ndarray:
    column = batch.column(name)
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise bad_input(f"{path}: row {row}: {name} is null")
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
            raise bad_input(f"{path}: row {first + int(np.flatnonzero(bad)[0])}: a negative id")
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
        return {name: map_column(self.folder / f"{self.prefix}{name}.bin", dtype, self.rows)
                for name, dtype in _COLUMNS.items()}


def map_column(path: Path, dtype: Any, rows: int) -> np.ndarray:
    """A column of ``rows`` values of the store, memory-mapped read-only."""
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
                raise bad_input(f"{path}: row {first + i}: {name} {int(values[i])} is outside the spec's {key} "
                           f"(0..{limit - 1})")
        if len(ts) and int(ts.min()) < 0:
            raise bad_input(f"{path}: row {first + int(np.argmin(ts))}: a negative timestamp")
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
            raise bad_input(f"{self.path}: row {first + i} is out of (uid, timestamp) order (Yambda publishes its files "
                       "sorted so; sort it by uid, then timestamp)")
        self.last = (int(uid[-1]), int(ts[-1]))

    def _types(self, batch: Any, first: int) -> np.ndarray:
        """Each row's event type, as its index in :data:`EVENT_FILES`."""
        if self.event_type != "multi":
            return np.full(batch.num_rows, list(EVENT_FILES).index(self.event_type), dtype=np.int64)

        column = batch.column("event_type")
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        codes = pc.index_in(column, value_set=pa.array(list(EVENT_FILES))).to_numpy(zero_copy_only=False)
        unknown = np.isnan(codes) if codes.dtype.kind == "f" else np.zeros(len(codes), bool)
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise bad_input(f"{self.path}: row {first + i}: event_type {column[i].as_py()!r} is none of "
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
        cols = {name: map_column(folder / f"{name}.bin", dtype, n) for name, dtype in _COLUMNS.items()}
        return cls(folder=folder, **cols, user_start=np.fromfile(folder / "user_start.bin", dtype=np.int64),
                   listen_pos=map_column(folder / "listen_pos.bin", np.int64, listens),
                   item_artist=np.load(folder / "item_artist.npy"), item_album=np.load(folder / "item_album.npy"),
                   meta=meta)


def default_cache_dir() -> Path:
    """Where the stores are kept unless the caller says (``harness run --data-cache``)."""
    return Path.home() / ".cache" / "harness" / "yambda"


def _store_key(layout: YambdaLayout, bounds: Bounds) -> str:
    identity = {"version": _STORE_VERSION, "root": str(layout.root.resolve()), "files": layout.entries(),
                "bounds": [bounds.users, bounds.item_rows, bounds.artist_rows, bounds.album_rows]}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def build_store(layout: YambdaLayout, bounds: Bounds, *, cache_dir: Path | str | None = None,
                memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                progress: Callable[[str], None] | None = None) -> YambdaStore:
    """The store of ``layout``'s events, from the cache when it holds them, else read once (every
    batch checked against ``bounds``) into a new cache folder, renamed into place when complete.

    Raises:
        HarnessError: BAD_INPUT naming the file (and row) for a missing column, a wrong type, a
            truncated file, an id outside the spec's tables, rows out of order, an unknown event type.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / _store_key(layout, bounds)
    if (final / "meta.json").is_file():
        return YambdaStore.open(final)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=root))
    except OSError as err:
        raise HarnessError(f"{root}: cannot write the Yambda cache there ({err.strerror}); give --data-cache "
                           "(or HARNESS_DATA_CACHE) a writable folder", ErrorCategory.IO_FAULT) from None
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
            raise bad_input(f"{dict(layout.mappings)[what]}: {MAPPING_FILES[what][1]} {int(mappings[what].max())} is "
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
        ranks = np.concatenate([np.full(len(p["uid"]), r) for p, r in pieces])
        order = np.lexsort((ranks, cat["timestamp"], cat["uid"]))  # stable: a part's rows keep their order
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
