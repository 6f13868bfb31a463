"""Yambda read from any layout a user has: the Hub's ``flat/<scale>/`` and ``sequential/<scale>/`` with the
mappings at the dataset's root (pointed at the scale's folder or at the root), the reference's
``raw/<size>/`` + ``shared_metadata/``, one folder of everything: the same samples every time;
``event_type`` in every Arrow string type; files in Yambda's published schema at the reference's largest
ids pass ``inspect`` as dlrmv4 but for the sample count; ``inspect`` with a benchmark is a gate (mapping
columns, id ranges, a damaged row group named).

The files are the tiny export of :mod:`tests.reference.data.test_yambda` (its spec and helpers), laid out anew."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.export import export_event_streams
from harness.reference.data.yambda import open_yambda
from harness.reference.data.yambda_inspect import format_yambda_report, inspect_yambda
from harness.reference.data.yambda_store import event_type_codes, find_layout, is_yambda_folder
from harness.rules.specs import load_benchmark, spec_from_dict
from tests.reference.data.test_yambda import every_batch, per_type_copy, same, tiny_raw

MAPPINGS = ("artist_item_mapping.parquet", "album_item_mapping.parquet")
# the largest ids of Yambda-5B: each table of the reference's configs.py (PR #889, lines 765-786) one row more
MAX_UID, MAX_ITEM, MAX_ARTIST, MAX_ALBUM = 1_000_000, 9_390_623, 1_293_394, 3_367_691


@pytest.fixture(scope="module")
def spec():
    return spec_from_dict(tiny_raw(), what="the tiny event streams")


@pytest.fixture(scope="module")
def exported(spec, tmp_path_factory) -> Path:
    """test_yambda.py's tiny export (128 users, 4 row groups), in Yambda's flat layout."""
    out = tmp_path_factory.mktemp("yambda") / "flat"
    export_event_streams(spec, out, users_per_chunk=40)
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _copy(src: Path, dst: Path, names) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(src / name, dst / name)
    return dst


def _events_of(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.parquet") if p.name not in MAPPINGS)


def as_sequential(table: pa.Table) -> pa.Table:
    """A table of one row an event, (uid, timestamp)-sorted, as Yambda's sequential layout: a row a user,
    every other column the list of that user's values."""
    table = table.combine_chunks()
    uid = table.column("uid").to_numpy()
    starts = np.flatnonzero(np.concatenate([[True], uid[1:] != uid[:-1]]))
    offsets = pa.array(np.append(starts, len(uid)).astype(np.int32))
    columns = {"uid": pa.array(uid[starts])}
    for name in table.column_names:
        if name != "uid":
            columns[name] = pa.ListArray.from_arrays(offsets, table.column(name).chunk(0))
    return pa.table(columns)


def _refused(fn) -> str:
    with pytest.raises(HarnessError) as err:
        fn()
    assert err.value.category is ErrorCategory.BAD_INPUT and err.value.exit_code == 2
    assert "\n" not in err.value.message
    return err.value.message


# ------------------------------------------------------------------------------------------ layouts
def test_every_layout_a_user_has_gives_the_same_samples(spec, exported, cache, tmp_path):
    """The Hub's flat/50m with the mappings two folders up (given the scale's folder, or the root and a
    scale, or the root alone with one scale), the reference's raw/50m + shared_metadata/, one folder."""
    want = every_batch(open_yambda(spec.dataset, exported, cache_dir=cache))
    hub = tmp_path / "hub"
    _copy(exported, hub / "flat" / "50m", ["multi_event.parquet"])
    _copy(exported, hub, MAPPINGS)
    ref = tmp_path / "reference"
    _copy(exported, ref / "raw" / "50m", ["multi_event.parquet"])
    _copy(exported, ref / "shared_metadata", MAPPINGS)
    hub_50m, ref_50m = hub / "flat" / "50m", ref / "raw" / "50m"
    cases = [(hub_50m, None, hub_50m), (hub, "50m", hub_50m), (hub, None, hub_50m), (ref_50m, None, ref_50m),
             (ref, "50m", ref_50m), (exported, None, exported)]  # (--data, scale, the events' folder)
    for path, scale, events in cases:
        assert is_yambda_folder(path), path
        ds = open_yambda(spec.dataset, path, cache_dir=cache, scale=scale)
        assert ds.store.meta["root"] == str(events)
        assert all(same(a, b) for a, b in zip(every_batch(ds), want, strict=True)), path
    layout = find_layout(hub / "flat" / "50m")
    assert layout.scale == "50m" and dict(layout.mappings)["artist"] == (hub / MAPPINGS[0]).absolute()
    album = dict(find_layout(ref / "raw" / "50m").mappings)["album"]
    assert album == (ref / "shared_metadata" / MAPPINGS[1]).absolute()


def test_a_root_of_several_scales_needs_one_named(exported, tmp_path):
    root = tmp_path / "yambda"
    for scale in ("50m", "5b"):
        _copy(exported, root / "flat" / scale, ["multi_event.parquet"])
    _copy(exported, root, MAPPINGS)
    assert find_layout(root, scale="5b").root == root / "flat" / "5b"
    assert find_layout(root, scale="5B").scale == "5b"
    msg = _refused(lambda: find_layout(root))
    assert msg.startswith(f"{root}: holds Yambda's scales 50m, 5b: name one") and str(root / "flat" / "50m") in msg
    msg = _refused(lambda: find_layout(root, scale="500m"))
    assert f"{root}: no events of Yambda's 500m scale (flat/500m/, sequential/500m/" in msg
    assert "it holds 50m, 5b" in msg
    assert "scale '1b' is none of 50m, 500m, 5b" in _refused(lambda: find_layout(root, scale="1b"))
    assert find_layout(root / "flat", scale="5b").root == root / "flat" / "5b"  # a folder of scales' folders
    (root / MAPPINGS[1]).unlink()
    msg = _refused(lambda: find_layout(root / "flat" / "50m"))
    assert msg.startswith(f"{root / 'flat' / '50m' / MAPPINGS[1]}: missing (Yambda's album mapping")
    assert "one and two folders up" in msg and "shared_metadata/" in msg
    (tmp_path / "empty").mkdir()
    assert "no Yambda events: neither multi_event.parquet" in _refused(lambda: find_layout(tmp_path / "empty"))


def test_the_sequential_layout_reads_as_the_flat_one(spec, exported, cache, tmp_path):
    """Yambda's sequential/<scale>/ (a row a user, the columns lists of the user's events), the multi-event
    file and the per-type files, gives the flat layout's samples; its errors name the row and the event."""
    want = every_batch(open_yambda(spec.dataset, exported, cache_dir=cache))
    root = tmp_path / "yambda"
    seq = root / "sequential" / "50m"
    seq.mkdir(parents=True)
    pq.write_table(as_sequential(pq.read_table(exported / "multi_event.parquet")), seq / "multi_event.parquet",
                   row_group_size=30)
    _copy(exported, root, MAPPINGS)
    ds = open_yambda(spec.dataset, root, cache_dir=cache, scale="50m")
    assert ds.store.meta["layout"] == "sequential" and ds.store.meta["root"] == str(seq)
    assert all(same(a, b) for a, b in zip(every_batch(ds), want, strict=True))
    # a batch holds whole users, as many as hold the budget's rows on average (1,704 events of 128 users)
    small = open_yambda(spec.dataset, seq, cache_dir=tmp_path / "small", memory_budget_bytes=300 * 96)
    assert 0 < small.store.meta["peak_batch_rows"] <= 2 * 300 and small.store.meta["batch_rows"] == 300
    per_type = per_type_copy(exported, tmp_path / "per_type")
    seq_pt = tmp_path / "seq_pt"
    seq_pt.mkdir()
    for name in _events_of(per_type):
        pq.write_table(as_sequential(pq.read_table(per_type / name)), seq_pt / name)
    _copy(per_type, seq_pt, MAPPINGS)
    ds = open_yambda(spec.dataset, seq_pt, cache_dir=cache)
    assert ds.store.meta["layout"] == "sequential per-type"
    assert all(same(a, b) for a, b in zip(every_batch(ds), want, strict=True))
    # a damaged row: the lists of one user of different lengths, an id beyond the tables
    table = as_sequential(pq.read_table(exported / "multi_event.parquet"))
    items = table.column("item_id").to_pylist()
    items[3] = items[3][:-1]
    pq.write_table(table.set_column(table.schema.get_field_index("item_id"), "item_id",
                                    pa.array(items, pa.list_(pa.uint32()))), seq / "multi_event.parquet")
    msg = _refused(lambda: open_yambda(spec.dataset, seq, cache_dir=tmp_path / "c1"))
    n = len(table.column("timestamp")[3])
    assert f"multi_event.parquet: row 3: timestamp holds {n} events, item_id {n - 1}" in msg
    items = table.column("item_id").to_pylist()
    items[5][2] = 900
    pq.write_table(table.set_column(table.schema.get_field_index("item_id"), "item_id",
                                    pa.array(items, pa.list_(pa.uint32()))), seq / "multi_event.parquet")
    msg = _refused(lambda: open_yambda(spec.dataset, seq, cache_dir=tmp_path / "c2"))
    assert "multi_event.parquet: row 5, event 2 of its lists: item_id 900 is outside the spec's item_rows (0..799)" \
        in msg


TEXT_TYPES = [pa.string(), pa.large_string(), pa.string_view(), pa.dictionary(pa.uint32(), pa.string()),
              pa.dictionary(pa.int8(), pa.large_string()), pa.dictionary(pa.uint64(), pa.string()),
              pa.dictionary(pa.int32(), pa.string_view())]


@pytest.mark.parametrize("kind", TEXT_TYPES, ids=str)
def test_event_type_is_read_in_every_arrow_string_type(kind):
    values = ["listen", "like", None, "dislike", "skip", "undislike", "unlike", "listen"]
    if pa.types.is_dictionary(kind):
        words = ["like", "listen", "skip", "dislike", "undislike", "unlike"]
        index = [words.index(v) if v is not None else None for v in values]
        column = pa.DictionaryArray.from_arrays(pa.array(index, kind.index_type), pa.array(words, kind.value_type))
    else:
        column = pa.array(values, pa.string()).cast(kind)
    assert column.type == kind
    assert event_type_codes(column).tolist() == [0, 1, -2, 2, -1, 4, 3, 0]
    assert event_type_codes(column.slice(3, 3)).tolist() == [2, -1, 4]


def test_a_string_view_event_type_file_reads_as_the_string_one(spec, exported, cache, tmp_path):
    table = pq.read_table(exported / "multi_event.parquet")
    at = table.schema.get_field_index("event_type")
    view = _copy(exported, tmp_path / "view", MAPPINGS)
    pq.write_table(table.set_column(at, "event_type", table.column("event_type").cast(pa.string_view())),
                   view / "multi_event.parquet")
    assert pq.read_schema(view / "multi_event.parquet").field("event_type").type == pa.string_view()
    want = every_batch(open_yambda(spec.dataset, exported, cache_dir=cache))
    assert all(same(a, b) for a, b in zip(every_batch(open_yambda(spec.dataset, view, cache_dir=cache)), want,
                                          strict=True))


# ------------------------------------------------------------------------------------------ the published schema
PUBLISHED = pa.schema([("uid", pa.uint32()), ("timestamp", pa.uint32()), ("is_organic", pa.uint8()),
                       ("item_id", pa.uint32()), ("event_type", pa.dictionary(pa.uint32(), pa.string())),
                       ("played_ratio_pct", pa.uint16()), ("track_length_seconds", pa.uint32())])
TYPES = ["listen", "like", "dislike", "unlike", "undislike"]


def write_published(root: Path, scale: str = "50m") -> Path:
    """A few events in Yambda's published schema (uint32 ids and times, event_type the uint32 dictionary
    pyarrow reads the polars Enum as, nulls on non-listens, 17 row groups) at the largest ids of Yambda-5B,
    laid out as the Hub has it: ROOT/flat/<scale>/multi_event.parquet, the mappings at ROOT."""
    uids = [1, 2, 500_000, MAX_UID]
    items = [1, 2, 77, 4_000_000, MAX_ITEM]
    rows: dict[str, list] = {name: [] for name in PUBLISHED.names}
    for u, uid in enumerate(uids):
        for e in range(17):
            kind = 0 if e % 4 else (1 + (e // 4 + u) % 4)
            rows["uid"].append(uid)
            rows["timestamp"].append(86_400 * e + 5 * u)
            rows["is_organic"].append(e % 2)
            rows["item_id"].append(items[(e + u) % len(items)])
            rows["event_type"].append(kind)
            rows["played_ratio_pct"].append((30 * e) % 140 if kind == 0 else None)
            rows["track_length_seconds"].append(180 + e if kind == 0 else None)
    columns = [pa.array(rows[n], PUBLISHED.field(n).type) for n in ("uid", "timestamp", "is_organic", "item_id")]
    columns.append(pa.DictionaryArray.from_arrays(pa.array(rows["event_type"], pa.uint32()), pa.array(TYPES)))
    columns += [pa.array(rows[n], PUBLISHED.field(n).type) for n in ("played_ratio_pct", "track_length_seconds")]
    folder = root / "flat" / scale
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_arrays(columns, schema=PUBLISHED), folder / "multi_event.parquet", row_group_size=4)
    item = pa.array(items, pa.uint32())
    pq.write_table(pa.table({"item_id": item, "artist_id": pa.array([1, 9, 9, 5, MAX_ARTIST], pa.uint32())}),
                   root / MAPPINGS[0])
    # an item on two albums (Yambda's album mapping lists some items twice: the last row wins)
    pq.write_table(pa.table({"item_id": pa.array(items + [77], pa.uint32()),
                             "album_id": pa.array([3, 1, 2, 8, MAX_ALBUM, 4], pa.uint32())}), root / MAPPINGS[1])
    return folder


def test_the_published_schema_at_the_references_largest_ids_passes_inspect_as_dlrmv4(tmp_path):
    """Refused today at the mappings (missing beside flat/50m) and then at the ids (the tables were rounded);
    now the one objection is the sample count: 17 days of 4 users are no Yambda-5B."""
    folder = write_published(tmp_path / "yambda")
    assert pq.ParquetFile(folder / "multi_event.parquet").metadata.num_row_groups == 17
    dlrmv4 = load_benchmark("dlrmv4").dataset
    report = inspect_yambda(folder, dataset=dlrmv4, cache_dir=tmp_path / "cache")
    assert report.well_formed and report.layout == "flat" and report.scale == "50m"
    assert report.max_ids == {"uid": MAX_UID, "item_id": MAX_ITEM, "artist_id": MAX_ARTIST, "album_id": MAX_ALBUM}
    assert report.events == {"listen": 48, "like": 5, "dislike": 5, "unlike": 5, "undislike": 5}
    assert report.mappings["album"] == {"rows": 6, "max_item_id": MAX_ITEM, "max_album_id": MAX_ALBUM}
    assert report.files[1][0] == "../../artist_item_mapping.parquet"
    assert report.serves_benchmark is False and report.refusal is not None
    assert "train_samples" in report.refusal and "give a larger Yambda scale" in report.refusal
    assert report.problem == report.refusal and "\n" not in report.refusal
    assert "these are Yambda's 50m events; the benchmark is defined on its 5b scale" in report.notes
    text = format_yambda_report(report)
    assert "(flat layout, scale 50m), well-formed" in text.splitlines()[0]
    assert text.splitlines()[-1] == f"the benchmark cannot be served from it: {report.refusal}"
    # the root read at the spec's scale (5b) holds none: named in one line; at 50m, the same report
    assert "no events of Yambda's 5b scale" in _refused(lambda: inspect_yambda(tmp_path / "yambda", dataset=dlrmv4))
    again = inspect_yambda(tmp_path / "yambda", dataset=dlrmv4, scale="50m", cache_dir=tmp_path / "cache")
    assert (again.path, again.refusal) == (str(folder), report.refusal)


# ------------------------------------------------------------------------------------------ inspect as a gate
def test_inspect_gates_on_the_mappings_the_ids_and_the_benchmark(spec, exported, cache, tmp_path):
    ok = inspect_yambda(exported, dataset=spec.dataset, cache_dir=cache)
    assert ok.serves_benchmark and ok.problem is None and ok.cut is not None
    assert format_yambda_report(ok).splitlines()[-1] == "the benchmark can be served from it"
    assert inspect_yambda(exported).serves_benchmark is None  # no benchmark: nothing to serve
    # a mapping without its id column: malformed (inspect read only its row count before)
    bad = _copy(exported, tmp_path / "no_artist", ["multi_event.parquet", MAPPINGS[1]])
    pq.write_table(pq.read_table(exported / MAPPINGS[0]).drop_columns(["artist_id"]), bad / MAPPINGS[0])
    report = inspect_yambda(bad, dataset=spec.dataset, cache_dir=cache)
    assert not report.well_formed and report.serves_benchmark is False
    assert report.problem == report.malformed and f"{bad / MAPPINGS[0]}: no column 'artist_id'" in report.malformed
    # an artist id beyond the spec's table: the benchmark refused, naming the file, row and column
    small = {**spec.dataset, "artist_rows": 5}
    report = inspect_yambda(exported, dataset=small, cache_dir=cache)
    artists = pq.read_table(exported / MAPPINGS[0]).column("artist_id").to_numpy()
    row = int(np.argmax(artists))
    assert report.well_formed and report.cut is None
    assert report.refusal == (f"{exported / MAPPINGS[0]}: row {row}: artist_id {artists.max()} is outside the "
                              "spec's artist_rows (0..4)")
    # a benchmark of another kind
    report = inspect_yambda(exported, dataset=load_benchmark("dlrm_dcnv2").dataset)
    assert report.refusal == "the benchmark trains on criteo_1tb data, not on Yambda's events"


def test_a_damaged_row_group_is_named(spec, exported, tmp_path):
    folder = _copy(exported, tmp_path / "damaged", [*MAPPINGS, "multi_event.parquet"])
    path = folder / "multi_event.parquet"
    meta = pq.read_metadata(path)
    assert meta.num_row_groups == 4
    chunk = meta.row_group(2).column(0)
    at = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[at:at + 8] = b"\xff" * 8  # the page header of row group 2's first column
    path.write_bytes(bytes(data))
    first = sum(meta.row_group(g).num_rows for g in range(2))
    where = f"{path}: row group 2 of 4 (rows {first}..{first + meta.row_group(2).num_rows - 1}) is unreadable ("
    report = inspect_yambda(folder, dataset=spec.dataset)
    assert not report.well_formed and report.malformed.startswith(where) and "\n" not in report.malformed
    assert report.events["listen"] > 0  # the groups before it were read
    assert _refused(lambda: open_yambda(spec.dataset, folder, cache_dir=tmp_path / "c")).startswith(where)
