"""Yambda's published files (Hugging Face ``yandex/yambda``): where they lie, one pass of pyarrow
over them that checks every batch, and the memory-mapped columns it leaves in a cache folder, which
:mod:`harness.reference.data.yambda` cuts into samples.

**The files.** A scale's events are either the one ``multi_event.parquet`` (its ``event_type`` one
of ``listen``, ``like``, ``dislike``, ``unlike``, ``undislike``: a string, or a dictionary of
strings such as the polars Enum Yambda writes) or one file per type (``listens.parquet``,
``likes.parquet``, ``dislikes.parquet``, ``unlikes.parquet``, ``undislikes.parquet``), each with
the columns ``uid``, ``item_id``, ``timestamp`` (seconds), ``is_organic``; listens (and the
multi-event file) add ``played_ratio_pct`` and ``track_length_seconds`` (null on other events).
Yambda publishes each scale in two arrangements: ``flat/<scale>/``, one row per event, and
``sequential/<scale>/``, one row per user whose columns but ``uid`` are lists of that user's events;
both read the same way. The mappings ``artist_item_mapping.parquet`` (``item_id``, ``artist_id``) and
``album_item_mapping.parquet`` (``item_id``, ``album_id``) are shared by every scale.

**Where they lie** (:func:`find_layout`): the folder given holds the events, or is a dataset's root
whose ``flat/<scale>/``, ``sequential/<scale>/``, ``raw/<scale>/`` (the reference's download script)
or ``<scale>/`` does (the scale is named, or the only one there). The mappings are looked for beside
the events, then one and two folders up (Yambda's root, above ``flat/<scale>/``), in each of those
folders and its ``shared_metadata/`` (the reference's). Every event file is sorted by ``(uid,
timestamp)``, as Yambda publishes it; the reader checks it. Any scale (50M, 500M, 5B events) reads the
same way.

**One pass, then memory maps.** :func:`build_store` reads each file once by record batches of a
bounded number of rows (``memory_budget_bytes`` sets it: :func:`batch_rows`; a sequential file is read
whole users at a time, as many as hold that many events on average), row group by row group, checks
every batch (columns and types, ids inside the spec's tables, the order, the event types), and appends
the events a sample can hold to flat binary columns in a cache folder: ``uid``, ``item``, ``timestamp``,
``organic`` (``is_organic``, a cross feature's key) and the ``action`` (:class:`~harness.reference.data.events.Action`), in ``(uid, timestamp)`` order (the
per-type files are merged a range of users at a time). Samples then read those columns through memory
maps: the events are never in memory as a whole, and never as Python objects. The cache is keyed by the
files' names, sizes and modification times, so a second run (or a run set's worker) opens it without
reading the parquet again. A missing, truncated or malformed file is one ``HarnessError`` (BAD_INPUT,
exit 2) naming the file, and the row, column or row group.
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

__all__ = ["EVENT_FILES", "FLAT_FILE", "MAPPING_FILES", "SCALES", "YambdaLayout", "YambdaStore", "batch_rows",
           "build_store", "event_type_codes", "find_layout", "is_yambda_folder"]

FLAT_FILE = "multi_event.parquet"
#: the per-type files, by the ``event_type`` the flat file gives their rows
EVENT_FILES = {"listen": "listens.parquet", "like": "likes.parquet", "dislike": "dislikes.parquet",
               "unlike": "unlikes.parquet", "undislike": "undislikes.parquet"}
MAPPING_FILES = {"artist": ("artist_item_mapping.parquet", "artist_id"),
                 "album": ("album_item_mapping.parquet", "album_id")}
#: Yambda's scales, and the folders of a dataset's root that hold a scale's events, in the order they are
#: preferred: Yambda's own arrangements, the reference's download (``raw/<size>/``), then ``<scale>/``
SCALES = ("50m", "500m", "5b")
SCALE_PARENTS = ("flat", "sequential", "raw", "")
SHARED_METADATA = "shared_metadata"  # where the reference's download script puts the mappings
EVENT_COLUMNS = ("uid", "item_id", "timestamp", "is_organic")
LISTEN_COLUMNS = ("played_ratio_pct", "track_length_seconds")
DEFAULT_MEMORY_BUDGET = 256 << 20
_ARROW_BYTES_PER_ROW = 96  # a record batch of these columns, its numpy copies and the masks made from it
_STORE_VERSION = 2  # 2: the is_organic column (a cross feature's key)
_DROPPED = 255  # the action code of an event no history holds (dislike, unlike, undislike)
_COLUMNS = {"uid": np.uint32, "item": np.uint32, "timestamp": np.int64, "action": np.uint8, "organic": np.uint8}

Where = Callable[[int], str]  # a batch's i-th row (or event) as a message names it: "row 12"


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


def layout_name(kind: LayoutKind, sequential: bool) -> str:
    """``flat``, ``per-type`` (a row an event), ``sequential``, ``sequential per-type`` (a row a user)."""
    if not sequential:
        return kind.value
    return "sequential" if kind is LayoutKind.FLAT else f"sequential {kind.value}"


@dataclass(frozen=True)
class YambdaLayout:
    """Which of Yambda's files a folder holds: ``root`` is the folder of the events, ``scale`` the
    scale it is (the scale folder's name, when it is one of :data:`SCALES`)."""

    root: Path
    kind: LayoutKind
    events: tuple[tuple[str, Path], ...]  # (event type or "multi", file)
    mappings: tuple[tuple[str, Path], ...]  # ("artist" | "album", file)
    scale: str | None = None

    def files(self) -> list[Path]:
        return [p for _, p in self.events] + [p for _, p in self.mappings]

    def entries(self) -> list[dict[str, Any]]:
        """Each file's name and size (and modification time): what a cache and a manifest key on."""
        out = []
        for path in self.files():
            st = path.stat()
            out.append({"name": path.name, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
        return out


def _has_events(folder: Path) -> bool:
    return (folder / FLAT_FILE).is_file() or (folder / EVENT_FILES["listen"]).is_file()


def _scale_folders(root: Path) -> dict[str, list[Path]]:
    """The scales whose events lie under the dataset root ``root``, each with its folders (preferred first)."""
    found: dict[str, list[Path]] = {}
    for scale in SCALES:
        for parent in SCALE_PARENTS:
            folder = root / parent / scale if parent else root / scale
            if _has_events(folder):
                found.setdefault(scale, []).append(folder)
    return found


def is_yambda_folder(path: Path | str) -> bool:
    """Whether ``path`` is a folder of Yambda's events, or a dataset root holding a scale's
    (:func:`find_layout`)."""
    root = Path(path)
    return root.is_dir() and (_has_events(root) or bool(_scale_folders(root)))


def _events_folder(root: Path, scale: str | None) -> Path:
    if _has_events(root):
        return root
    found = _scale_folders(root)
    where = "flat/<scale>/, sequential/<scale>/, raw/<scale>/ or <scale>/"
    if scale is not None and scale in found:
        return found[scale][0]
    if scale is not None and found:
        raise bad_input(f"{root}: no events of Yambda's {scale} scale ({where.replace('<scale>', scale)}): it holds "
                        f"{', '.join(found)}; give that scale's folder, e.g. {found[next(iter(found))][0]}")
    if len(found) == 1:
        return next(iter(found.values()))[0]
    if found:
        raise bad_input(f"{root}: holds Yambda's scales {', '.join(found)}: name one (the benchmark's dataset.scale) "
                        f"or give its folder, e.g. {found[next(iter(found))][0]}")
    raise bad_input(f"{root}: no Yambda events: neither {FLAT_FILE} nor {EVENT_FILES['listen']}, nor a scale's folder "
                    f"under it ({where}; scales {', '.join(SCALES)}: Hugging Face yandex/yambda)")


def _find_mapping(folder: Path, name: str) -> Path | None:
    """``name`` beside the events, else one or two folders up, in each folder or its ``shared_metadata/``."""
    here = folder.absolute()
    for up in (here, here.parent, here.parent.parent):
        for place in (up, up / SHARED_METADATA):
            if (place / name).is_file():
                return folder / name if place == here else place / name
    return None


def find_layout(path: Path | str, scale: str | None = None) -> YambdaLayout:
    """The Yambda files at ``path`` (see the module's docstring): a folder of events, the flat file when
    ``multi_event.parquet`` is there, else the per-type files (``listens.parquet`` at least); or a dataset
    root and a ``scale`` (None: the only scale there). Both mappings are required.

    Raises:
        HarnessError: NOT_FOUND for no such folder; BAD_INPUT for no events, several scales and none named,
            an unknown scale, a missing mapping.
    """
    root = Path(path)
    if not root.is_dir():
        raise HarnessError(f"{root}: no such folder (a Yambda scale's folder: multi_event.parquet or "
                           "listens.parquet, likes.parquet, ..., and the artist and album mappings)",
                           ErrorCategory.NOT_FOUND if not root.exists() else ErrorCategory.BAD_INPUT)
    if scale is not None and str(scale).lower() not in SCALES:
        raise bad_input(f"Yambda scale {scale!r} is none of {', '.join(SCALES)}")
    folder = _events_folder(root, None if scale is None else str(scale).lower())
    if (folder / FLAT_FILE).is_file():
        events: tuple[tuple[str, Path], ...] = (("multi", folder / FLAT_FILE),)
        kind = LayoutKind.FLAT
    else:
        kind = LayoutKind.PER_TYPE
        events = tuple((t, folder / name) for t, name in EVENT_FILES.items() if (folder / name).is_file())
    mappings = []
    for what, (name, column) in MAPPING_FILES.items():
        found = _find_mapping(folder, name)
        if found is None:
            raise bad_input(f"{folder / name}: missing (Yambda's {what} mapping, item_id -> {column}: looked beside "
                            f"the events and one and two folders up, in each and its {SHARED_METADATA}/; Yambda "
                            "publishes it at the dataset's root, above flat/<scale>/)")
        mappings.append((what, found))
    return YambdaLayout(folder, kind, events, tuple(mappings), folder.name if folder.name in SCALES else None)


# --------------------------------------------------------------------------- reading parquet
def open_parquet(path: Path) -> Any:
    try:
        return pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow's ArrowInvalid, OSError: a truncated or foreign file
        raise bad_input(f"{path}: not a readable parquet file ({_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _is_list(t: Any) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def is_text(t: Any) -> bool:
    """A string type of Arrow's (``string``, ``large_string``, ``string_view``), or a dictionary of one
    (any integer indices: the polars Enum Yambda writes reads as ``dictionary<values=string, indices=uint32>``)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (pa.types.is_integer, "an integer"),
    "number": (lambda t: pa.types.is_integer(t) or pa.types.is_floating(t), "a number"),
    "flag": (lambda t: pa.types.is_integer(t) or pa.types.is_boolean(t), "an integer or a bool"),
    "text": (is_text, "a string (or a dictionary of strings)"),
}


def _check_schema(path: Path, pf: Any, wanted: dict[str, str], *, sequential: bool = False) -> None:
    """Refuse a file that lacks one of ``wanted``'s columns or holds it in another type (``int``: an
    integer; ``number``: an integer or a float; ``flag``: an integer or a bool; ``text``: a string or a
    dictionary of strings). ``sequential``: one row a user, every column but ``uid`` a list of those."""
    schema = pf.schema_arrow
    for name, kind in wanted.items():
        if schema.get_field_index(name) < 0:
            raise bad_input(f"{path}: no column {name!r} (it has {', '.join(schema.names)})")
        t = schema.field(name).type
        ok, want = _KINDS[kind]
        if sequential and name != "uid":
            if not _is_list(t):
                raise bad_input(f"{path}: column {name!r} is {t}, not a list (item_id is a list: Yambda's sequential "
                                "layout, one row a user, each column but uid a list of the user's events)")
            t = t.value_type
        elif _is_list(t):
            raise bad_input(f"{path}: column {name!r} is {t}, not {want} (one row an event; in Yambda's sequential "
                            "layout every column but uid is a list)")
        if not ok(t):
            raise bad_input(f"{path}: column {name!r} is {t}, not {want}")


def _batches(path: Path, pf: Any, columns: list[str], rows: int) -> Iterator[tuple[Any, int]]:
    """The file's record batches of at most ``rows`` rows, each with the row it starts at, row group by
    row group; a damaged page is one line naming the file and its row group."""
    meta, first = pf.metadata, 0
    for group in range(meta.num_row_groups):
        n = meta.row_group(group).num_rows
        it = pf.iter_batches(batch_size=rows, columns=columns, row_groups=[group])
        at = first
        while True:
            try:
                batch = next(it)
            except StopIteration:
                break
            except Exception as err:  # noqa: BLE001 - pyarrow's errors of a damaged page, whatever their type
                raise bad_input(f"{path}: row group {group} of {meta.num_row_groups} (rows {first}..{first + n - 1}) "
                                f"is unreadable ({_first_line(err)})") from None
            yield batch, at
            at += batch.num_rows
        first += n


def _rows_from(first: int) -> Where:
    return lambda i: f"row {first + i}"


def _ints(path: Path, batch: Any, name: str, where: Where) -> np.ndarray:
    column = batch.column(name)
    if column.null_count:
        raise bad_input(f"{path}: {where(int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0]))}: "
                        f"{name} is null")
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


@dataclass
class Maximum:
    """The largest value of a column seen so far, and where it was first (``file: row N``)."""

    value: int = -1
    where: str = ""

    def see(self, path: Path, values: np.ndarray, where: Where) -> None:
        if len(values) and int(values.max()) > self.value:
            i = int(np.argmax(values))
            self.value, self.where = int(values[i]), f"{path}: {where(i)}"


def mapping_batches(path: Path, column: str, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray, Where]]:
    """A mapping file's ``(item_id, column)`` pairs a batch at a time, checked: both columns there and
    integers, no nulls, no negative ids."""
    pf = open_parquet(path)
    _check_schema(path, pf, {"item_id": "int", column: "int"})
    for batch, first in _batches(path, pf, ["item_id", column], rows):
        where = _rows_from(first)
        item, value = _ints(path, batch, "item_id", where), _ints(path, batch, column, where)
        for name, ids in (("item_id", item), (column, value)):
            if len(ids) and int(ids.min()) < 0:
                i = int(np.argmin(ids))
                raise bad_input(f"{path}: {where(i)}: {name} {int(ids[i])} is negative (an id is 0 or more)")
        yield item, value, where


def read_mapping(path: Path, column: str, item_rows: int, rows: int, *, what: str = "",
                 limit: int | None = None) -> np.ndarray:
    """``item -> column`` over ``item_rows`` items (0 where the file says nothing; the last row wins;
    items from ``item_rows`` on, which no event of the spec's tables holds, are left out). ``limit``: the
    spec's rows of ``what`` (artist, album): a larger id is refused, naming the row."""
    out = np.zeros(item_rows, dtype=np.int64)
    for item, value, where in mapping_batches(path, column, rows):
        if limit is not None and len(value) and int(value.max()) >= limit:
            i = int(np.flatnonzero(value >= limit)[0])
            raise bad_input(f"{path}: {where(i)}: {column} {int(value[i])} is outside the spec's {what}_rows "
                            f"(0..{limit - 1})")
        inside = item < item_rows
        out[item[inside]] = value[inside]
    return out


_KNOWN_TYPES = {t: pa.array(list(EVENT_FILES), t) for t in (pa.string(), pa.large_string())}


def event_type_codes(column: Any) -> np.ndarray:
    """Each ``event_type`` as its index in :data:`EVENT_FILES`: -1 an unknown type, -2 a null. Any
    :func:`is_text` type; a dictionary's values are looked up once, then taken by its indices."""
    if pa.types.is_dictionary(column.type):
        codes = np.append(event_type_codes(column.dictionary), -2)  # the last: a null index
        indices = pc.fill_null(column.indices, len(column.dictionary)).to_numpy(zero_copy_only=False)
        return codes[indices.astype(np.int64)]
    values = column if column.type in _KNOWN_TYPES else column.cast(pa.large_string())  # string_view: no index_in
    found = pc.index_in(values, value_set=_KNOWN_TYPES[values.type])
    out = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    out[values.is_null().to_numpy(zero_copy_only=False)] = -2
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
        self.files = {name: open(folder / f"{prefix}{name}.bin", "wb") for name in _COLUMNS}  # noqa: SIM115
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
    """One event file read by batches, checked, its events turned into the store's columns. A file of
    Yambda's sequential layout (``item_id`` a list: a row a user) is read whole users at a time and
    flattened to a row an event; its messages name the row and the event in its lists."""

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
        schema = self.pf.schema_arrow
        self.sequential = schema.get_field_index("item_id") >= 0 and _is_list(schema.field("item_id").type)
        _check_schema(path, self.pf, wanted, sequential=self.sequential)
        self.columns = list(wanted)
        self.last = (-1, -1)
        self.maxima = {"uid": Maximum(), "item_id": Maximum()}
        self.read_rows = self._users_per_batch() if self.sequential else rows

    def _users_per_batch(self) -> int:
        """Users a batch of a sequential file: as many as hold ``rows`` events on average (from the
        footer's count of item_id's values)."""
        meta = self.pf.metadata
        leaf = next((j for j in range(meta.num_columns) if meta.schema.column(j).path.startswith("item_id.")), None)
        if leaf is None or not meta.num_rows:
            return self.rows
        values = sum(meta.row_group(g).column(leaf).num_values for g in range(meta.num_row_groups))
        return max(1, self.rows * meta.num_rows // max(values, 1))

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for batch, first in _batches(self.path, self.pf, self.columns, self.read_rows):
            where = _rows_from(first)
            if self.sequential:
                batch, where = self._flatten(batch, first)
            self.stats["peak_batch_rows"] = max(self.stats["peak_batch_rows"], batch.num_rows)
            self.stats["peak_batch_bytes"] = max(self.stats["peak_batch_bytes"], batch.nbytes)
            yield self._events(batch, where)

    def _flatten(self, batch: Any, first: int) -> tuple[Any, Where]:
        """A batch of a sequential file's rows (users) as a batch of their events, and where each event is."""
        path = self.path
        uid = batch.column("uid")
        lengths, reference, arrays = None, "", {}
        for name in self.columns[1:]:  # uid first
            column = batch.column(name)
            if column.null_count:
                i = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
                raise bad_input(f"{path}: row {first + i}: {name} is null (not a list of the user's events)")
            n = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
            if lengths is None:
                lengths, reference = n, name
            elif not np.array_equal(n, lengths):
                i = int(np.flatnonzero(n != lengths)[0])
                raise bad_input(f"{path}: row {first + i}: {name} holds {n[i]} events, {reference} {lengths[i]} (the "
                                "lists of one row are one user's events, one value each)")
            arrays[name] = pc.list_flatten(column)
        assert lengths is not None
        if uid.null_count:
            i = int(np.flatnonzero(uid.is_null().to_numpy(zero_copy_only=False))[0])
            raise bad_input(f"{path}: row {first + i}: uid is null")
        row = np.repeat(np.arange(len(lengths)), lengths)
        start = np.cumsum(lengths) - lengths
        flat = pa.RecordBatch.from_arrays(
            [pa.array(np.repeat(uid.to_numpy(zero_copy_only=False), lengths)), *arrays.values()],
            names=["uid", *arrays])

        def where(i: int) -> str:
            return f"row {first + int(row[i])}, event {i - int(start[row[i]])} of its lists"

        return flat, where

    def _events(self, batch: Any, where: Where) -> dict[str, np.ndarray]:
        path, b = self.path, self.bounds
        uid, item, ts, organic = (_ints(path, batch, c, where) for c in ("uid", "item_id", "timestamp", "is_organic"))
        if len(organic) and not np.isin(organic, (0, 1)).all():
            i = int(np.flatnonzero(~np.isin(organic, (0, 1)))[0])
            raise bad_input(f"{path}: {where(i)}: is_organic {int(organic[i])} is not 0 or 1")
        for name, values, limit, key in (("uid", uid, b.users, "users"), ("item_id", item, b.item_rows, "item_rows")):
            self.maxima[name].see(path, values, where)
            bad = (values < 0) | (values >= limit)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise bad_input(f"{path}: {where(i)}: {name} {int(values[i])} is outside the spec's {key} "
                                f"(0..{limit - 1})")
        if len(ts) and int(ts.min()) < 0:
            i = int(np.argmin(ts))
            raise bad_input(f"{path}: {where(i)}: timestamp {int(ts[i])} is negative (seconds, 0 or more)")
        self._check_order(uid, ts, where)
        kind = self._types(batch, where)
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
        return {"uid": uid[keep], "item": item[keep], "timestamp": ts[keep], "action": action[keep],
                "organic": organic[keep]}

    def _check_order(self, uid: np.ndarray, ts: np.ndarray, where: Where) -> None:
        if not len(uid):
            return
        prev_uid = np.concatenate([[self.last[0]], uid[:-1]])
        prev_ts = np.concatenate([[self.last[1]], ts[:-1]])
        bad = (uid < prev_uid) | ((uid == prev_uid) & (ts < prev_ts))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise bad_input(f"{self.path}: {where(i)} is out of (uid, timestamp) order (Yambda publishes its files "
                            "sorted so; sort it by uid, then timestamp)")
        self.last = (int(uid[-1]), int(ts[-1]))

    def _types(self, batch: Any, where: Where) -> np.ndarray:
        """Each row's event type, as its index in :data:`EVENT_FILES`."""
        if self.event_type != "multi":
            return np.full(batch.num_rows, list(EVENT_FILES).index(self.event_type), dtype=np.int64)
        column = batch.column("event_type")
        codes = event_type_codes(column)
        if (codes < 0).any():
            i = int(np.flatnonzero(codes < 0)[0])
            what = "is null" if codes[i] == -2 else f"{column[i].as_py()!r} is none of {', '.join(EVENT_FILES)}"
            raise bad_input(f"{self.path}: {where(i)}: event_type {what}")
        return codes


@dataclass
class YambdaStore:
    """The events a sample can hold (listens and likes), in ``(uid, timestamp)`` order, memory-mapped;
    each user's first event, the listens' positions, the item mappings and what the pass counted."""

    folder: Path
    uid: np.ndarray
    item: np.ndarray
    timestamp: np.ndarray
    action: np.ndarray
    organic: np.ndarray  # is_organic, 0 or 1
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
    limits = {"artist": bounds.artist_rows, "album": bounds.album_rows}
    mappings = {what: read_mapping(path, MAPPING_FILES[what][1], bounds.item_rows, rows, what=what, limit=limits[what])
                for what, path in layout.mappings}
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
    meta = {"version": _STORE_VERSION, "layout": layout_name(layout.kind, any(r.sequential for r in readers)),
            "root": str(layout.root),
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
