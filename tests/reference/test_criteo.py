"""Tests for the real Criteo readers, on small files written in the real formats."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference import criteo
from harness.reference.criteo import (
    MLPERF_MULTI_HOT_SIZES,
    Criteo1TB,
    CriteoTsv,
    categorical_id,
)

ROWS = [1000, 37, 5, 2**40] + [97] * 22  # includes a tiny and a huge table

# ----------------------------------------------------------------------------- helpers

M64 = (1 << 64) - 1


def sm64(x: int) -> int:
    """SplitMix64's finaliser, written independently of the module under test."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def expected_id(s: str, f: int, rows: int, seed: int = 0) -> int:
    salt = sm64((sm64(seed & M64) + f) & M64)
    value = int(s, 16) if s else 0
    return sm64((sm64(value ^ salt) + len(s)) & M64) % rows


CATS_A = [
    "68fd1e64", "80e26c9b", "fb936136", "7b4723c4", "25c83c98", "7e0ccccf", "de7995b8",
    "1f89b562", "a73ee510", "a8cd5504", "b2cb9c98", "37c9c164", "2824a5f6", "1adce6ef",
    "8ba8b39a", "891b62e7", "e5ba7672", "f54016b9", "21ddcdc9", "b1252a9d", "07b5194c",
    "", "3a171ecb", "c5c50484", "e8b83407", "9727dd16",
]  # fmt: skip
CATS_B = [
    "05db9164", "0B153874", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "",
    "", "", "", "", "", "", "", "00000000",
]  # fmt: skip


def tsv_line(label: str, ints: list[str], cats: list[str]) -> str:
    assert len(ints) == 13 and len(cats) == 26
    return "\t".join([label, *ints, *cats])


LINE_A = tsv_line(
    "0", ["1", "1", "5", "0", "1382", "4", "15", "2", "181", "1", "2", "", "2"], CATS_A
)
LINE_B = tsv_line("1", ["", "-2", "", "", "", "", "", "", "", "", "", "", "7"], CATS_B)


def numbered(i: int) -> str:
    """A distinct valid line: the label alternates and the first count is ``i``."""
    cats = [f"{(i * 7919 + f) & 0xFFFFFFFF:08x}" for f in range(26)]
    return tsv_line(str(i % 2), [str(i)] + [str(f) for f in range(12)], cats)


def write_tsv(path: Path, lines: list[str], *, gz: bool = False) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def collect(batches) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    bs = list(batches)
    return (
        torch.cat([b.dense for b in bs]),
        torch.cat([b.sparse for b in bs]),
        torch.cat([b.labels for b in bs]),
    )


def bad_input(fn) -> HarnessError:
    with pytest.raises(HarnessError) as info:
        fn()
    assert info.value.category is ErrorCategory.BAD_INPUT, info.value
    return info.value


# ----------------------------------------------------------------------------- TSV


def test_tsv_decodes_dense_labels_and_hashed_ids(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "day_0", [LINE_A, LINE_B])
    [batch] = list(CriteoTsv([path], ROWS, hash_seed=5).batches(8))

    assert batch.size == 2 and batch.pooling == (1,) * 26
    assert batch.dense.dtype == torch.float32 and batch.dense.shape == (2, 13)
    assert batch.sparse.dtype == torch.int64 and batch.sparse.shape == (2, 26)
    assert batch.labels.dtype == torch.float32
    assert batch.labels.tolist() == [0.0, 1.0]

    counts_a = [1, 1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2]
    counts_b = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]  # empty -> 0, -2 clamps to 0
    want = np.log1p(np.array([counts_a, counts_b], np.float64)).astype(np.float32)
    np.testing.assert_allclose(batch.dense.numpy(), want, rtol=1e-6)

    for row, cats in enumerate([CATS_A, CATS_B]):
        got = batch.sparse[row].tolist()
        assert got == [expected_id(s, f, ROWS[f], seed=5) for f, s in enumerate(cats)]
        assert got == [categorical_id(s, f, ROWS[f], seed=5) for f, s in enumerate(cats)]
        assert all(0 <= v < ROWS[f] for f, v in enumerate(got))


def test_hash_is_stable_seeded_and_distinguishes_the_empty_string() -> None:
    # Pinned values: a change here silently re-maps every trained embedding.
    assert categorical_id("68fd1e64", 0, 1000) == expected_id("68fd1e64", 0, 1000)
    big = 2**62
    assert categorical_id("", 3, big) != categorical_id("00000000", 3, big)
    assert categorical_id("", 3, big) != categorical_id("0", 3, big)
    # Hex is case-insensitive; the feature index and the seed both change the id.
    assert categorical_id("0B153874", 1, big) == categorical_id("0b153874", 1, big)
    assert categorical_id("0b153874", 1, big) != categorical_id("0b153874", 2, big)
    assert categorical_id("0b153874", 1, big) != categorical_id("0b153874", 1, big, seed=1)
    with pytest.raises(HarnessError):
        categorical_id("xyz", 0, 10)


def test_hash_golden_values() -> None:
    # Pure integer mixing, so independent of Python's hash randomisation; pinned because a
    # change would silently re-map every trained embedding row.
    values = ["68fd1e64", "", "ffffffff"]
    assert [categorical_id(s, f, 2**31) for f, s in enumerate(values)] == [
        1738165644, 589547829, 870626970,
    ]
    assert [categorical_id(s, f, 2**31, seed=12345) for f, s in enumerate(values)] == [
        1286788422, 1524497984, 881071766,
    ]


def test_gzip_reads_the_same_as_plain(tmp_path: Path) -> None:
    lines = [numbered(i) for i in range(7)]
    plain = write_tsv(tmp_path / "day_0.tsv", lines)
    packed = write_tsv(tmp_path / "day_0.tsv.gz", lines, gz=True)
    a = collect(CriteoTsv([plain], ROWS).batches(3))
    b = collect(CriteoTsv([packed], ROWS).batches(3))
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert a[0][:, 0].tolist() == pytest.approx([math.log1p(i) for i in range(7)])


def test_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "win.tsv"
    path.write_bytes((LINE_A + "\r\n" + LINE_B).encode())
    dense, sparse, labels = collect(CriteoTsv([path], ROWS).batches(4))
    assert labels.tolist() == [0.0, 1.0]
    assert sparse[0, 25].item() == expected_id(CATS_A[25], 25, ROWS[25])


def test_batches_span_files_and_drop_last(tmp_path: Path) -> None:
    first = write_tsv(tmp_path / "day_0", [numbered(i) for i in range(4)])
    second = write_tsv(tmp_path / "day_1.gz", [numbered(i) for i in range(4, 10)], gz=True)
    reader = CriteoTsv([first, second], ROWS)

    batches = list(reader.batches(3))
    assert [b.size for b in batches] == [3, 3, 3, 1]
    order = torch.cat([b.dense[:, 0] for b in batches])
    assert torch.allclose(order, torch.log1p(torch.arange(10, dtype=torch.float32)))
    assert [b.size for b in reader.batches(3, drop_last=True)] == [3, 3, 3]
    assert [b.size for b in reader.batches(5, drop_last=True)] == [5, 5]


@pytest.mark.parametrize("batch_size", [1, 3, 4])
def test_tsv_rank_sharding_is_round_robin_over_whole_batches(
    tmp_path: Path, batch_size: int
) -> None:
    first = write_tsv(tmp_path / "a.tsv", [numbered(i) for i in range(6)])
    second = write_tsv(tmp_path / "b.tsv.gz", [numbered(i) for i in range(6, 11)], gz=True)
    reader = CriteoTsv([first, second], ROWS, hash_seed=3)

    full = list(reader.batches(batch_size))
    rank0 = list(reader.batches(batch_size, rank=0, world_size=2))
    rank1 = list(reader.batches(batch_size, rank=1, world_size=2))
    assert len(rank0) + len(rank1) == len(full)
    for k, batch in enumerate(full):
        mine = (rank0 if k % 2 == 0 else rank1)[k // 2]
        assert torch.equal(mine.dense, batch.dense)
        assert torch.equal(mine.sparse, batch.sparse)
        assert torch.equal(mine.labels, batch.labels)


def test_small_read_blocks_and_parse_chunks_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [numbered(i) for i in range(23)]
    first = write_tsv(tmp_path / "a.tsv", lines[:11])
    second = write_tsv(tmp_path / "b.tsv.gz", lines[11:], gz=True)
    reader = CriteoTsv([first, second], ROWS)
    want = [collect(reader.batches(3, rank=r, world_size=2)) for r in range(2)]

    # Lines now straddle read blocks, and parsing flushes every couple of batches.
    monkeypatch.setattr(criteo, "_READ_BYTES", 97)
    monkeypatch.setattr(criteo, "_PARSE_CHUNK_LINES", 5)
    for r in range(2):
        got = collect(reader.batches(3, rank=r, world_size=2))
        assert all(torch.equal(x, y) for x, y in zip(got, want[r]))

    bad = write_tsv(tmp_path / "c.tsv.gz", lines[:13] + [_replace(lines[13], 20, "g")], gz=True)
    err = bad_input(lambda: list(CriteoTsv([first, bad], ROWS).batches(2)))
    assert "c.tsv.gz:14: categorical feature 6 (field 21)" in str(err)


def test_missing_tsv_is_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "day_7.gz"
    with pytest.raises(HarnessError) as info:
        CriteoTsv([missing], ROWS)
    assert info.value.category is ErrorCategory.NOT_FOUND
    assert str(missing) in str(info.value)


def _replace(line: str, index: int, value: str) -> str:
    fields = line.split("\t")
    fields[index] = value
    return "\t".join(fields)


MALFORMED = {
    "too few fields": (
        "\t".join(LINE_A.split("\t")[:39]),
        "expected 40 tab-separated fields, found 39",
    ),
    "too many fields": (LINE_A + "\t", "expected 40 tab-separated fields, found 41"),
    "blank line": ("", "expected 40 tab-separated fields, found 1"),
    "fractional count": (_replace(LINE_A, 3, "1.5"), "integer feature 2 (field 4)"),
    "word as count": (_replace(LINE_A, 13, "abc"), "integer feature 12 (field 14)"),
    "lone minus": (_replace(LINE_A, 1, "-"), "integer feature 0 (field 2)"),
    "label 2": (_replace(LINE_A, 0, "2"), "label must be 0 or 1, found '2'"),
    "empty label": (_replace(LINE_A, 0, ""), "label must be 0 or 1, found ''"),
    "non-hex category": (_replace(LINE_A, 14, "zz12ab34"), "categorical feature 0 (field 15)"),
    "17 hex digits": (_replace(LINE_A, 39, "1" * 17), "categorical feature 25 (field 40)"),
}


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_line_names_file_and_line(tmp_path: Path, case: str, gz: bool) -> None:
    bad_line, detail = MALFORMED[case]
    good = write_tsv(tmp_path / "day_0.tsv", [numbered(i) for i in range(5)])
    lines = [numbered(i) for i in range(16)] + [bad_line] + [numbered(99)]
    name = "day_1.tsv.gz" if gz else "day_1.tsv"
    bad = write_tsv(tmp_path / name, lines, gz=gz)
    reader = CriteoTsv([good, bad], ROWS)
    err = bad_input(lambda: list(reader.batches(4)))
    assert f"{name}:17: " in str(err)
    assert detail in str(err)


def test_first_malformed_line_is_reported(tmp_path: Path) -> None:
    lines = [numbered(0), _replace(numbered(1), 5, "x"), numbered(2), "short\tline"]
    path = write_tsv(tmp_path / "day_2", lines)
    err = bad_input(lambda: list(CriteoTsv([path], ROWS).batches(100)))
    assert "day_2:2: integer feature 4" in str(err)


def test_corrupt_gzip_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "day_0.gz"
    whole = gzip.compress(("\n".join(numbered(i) for i in range(50)) + "\n").encode())
    path.write_bytes(whole[:60])
    err = bad_input(lambda: list(CriteoTsv([path], ROWS).batches(8)))
    assert "day_0.gz" in str(err)


def test_bad_arguments_are_bad_input(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "d", [LINE_A])
    bad_input(lambda: CriteoTsv([path], ROWS[:25]))
    bad_input(lambda: CriteoTsv([path], [0] + ROWS[1:]))
    reader = CriteoTsv([path], ROWS)
    bad_input(lambda: list(reader.batches(0)))
    bad_input(lambda: list(reader.batches(2, rank=2, world_size=2)))


# ----------------------------------------------------------------------------- 1TB

ONE_TB_ROWS = [50] * 26
ONE_TB_ROWS[3] = 7


def write_day(
    root: Path,
    day: int,
    n: int,
    rng: np.random.Generator,
    *,
    multi_hot: bool = False,
    pooling=MLPERF_MULTI_HOT_SIZES,
    compressed: bool = False,
    labels_2d: bool = True,
) -> dict[str, np.ndarray]:
    """Write one day as MLPerf's scripts do; return what was written."""
    dense = np.log(rng.integers(0, 1000, (n, 13)) + 3, dtype=np.float32)
    labels = rng.integers(0, 2, n).astype(np.int32)
    np.save(root / f"day_{day}_dense.npy", dense)
    np.save(root / f"day_{day}_labels.npy", labels.reshape(-1, 1) if labels_2d else labels)
    out = {"dense": dense, "labels": labels}
    if multi_hot:
        feats = {
            str(f): rng.integers(0, 120, (n, p)).astype(np.int32) for f, p in enumerate(pooling)
        }
        save = np.savez_compressed if compressed else np.savez
        save(root / f"day_{day}_sparse_multi_hot.npz", **feats)
        out.update(feats)
    else:
        sparse = rng.integers(0, 120, (n, 26)).astype(np.int32)
        np.save(root / f"day_{day}_sparse.npy", sparse)
        out["sparse"] = sparse
    return out


def test_one_hot_days_decode_and_reduce_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    d0 = write_day(tmp_path, 0, 5, rng)
    d1 = write_day(tmp_path, 1, 4, rng, labels_2d=False)
    data = Criteo1TB(tmp_path, [0, 1], ONE_TB_ROWS, multi_hot=False)
    assert data.num_samples == 9 and data.pooling == (1,) * 26

    batches = list(data.batches(4))
    assert [b.size for b in batches] == [4, 4, 1]
    dense, sparse, labels = collect(batches)
    # Dense values are already log(x + 3) in MLPerf's files: passed through, not re-logged.
    np.testing.assert_array_equal(dense.numpy(), np.concatenate([d0["dense"], d1["dense"]]))
    raw = np.concatenate([d0["sparse"], d1["sparse"]]).astype(np.int64)
    assert (raw >= np.array(ONE_TB_ROWS)).any()  # the test exercises the reduction
    np.testing.assert_array_equal(sparse.numpy(), raw % np.array(ONE_TB_ROWS))
    assert sparse.dtype == torch.int64 and labels.dtype == torch.float32
    assert labels.tolist() == np.concatenate([d0["labels"], d1["labels"]]).tolist()


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
def test_multi_hot_pooling_and_layout(tmp_path: Path, compressed: bool) -> None:
    rng = np.random.default_rng(1)
    days = [
        write_day(tmp_path, d, n, rng, multi_hot=True, compressed=compressed)
        for d, n in [(0, 3), (1, 4)]
    ]
    data = Criteo1TB(tmp_path, [0, 1], ONE_TB_ROWS, multi_hot=True)
    assert data.pooling == MLPERF_MULTI_HOT_SIZES

    batches = list(data.batches(2))
    assert [b.size for b in batches] == [2, 2, 2, 1]
    width = sum(MLPERF_MULTI_HOT_SIZES)
    for b in batches:
        assert b.sparse.shape == (b.size, width) and b.pooling == MLPERF_MULTI_HOT_SIZES
    _, sparse, _ = collect(batches)
    offsets = np.cumsum((0,) + MLPERF_MULTI_HOT_SIZES)
    for f in range(26):
        want = np.concatenate([d[str(f)] for d in days]).astype(np.int64) % ONE_TB_ROWS[f]
        np.testing.assert_array_equal(sparse[:, offsets[f] : offsets[f + 1]].numpy(), want)


def test_multi_hot_npz_written_by_savez_is_memory_mapped(tmp_path: Path) -> None:
    ids = np.arange(40, dtype=np.int32).reshape(10, 4)
    np.savez(tmp_path / "x.npz", **{"0": ids, "1": ids[:, :1]})
    mapped = criteo._npz_member(tmp_path / "x.npz", "0")
    assert isinstance(mapped, np.memmap)
    np.testing.assert_array_equal(mapped, ids)
    np.testing.assert_array_equal(criteo._npz_member(tmp_path / "x.npz", "1"), ids[:, :1])


@pytest.mark.parametrize("multi_hot", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_1tb_rank_sharding_union_is_the_single_rank_stream(
    tmp_path: Path, multi_hot: bool, drop_last: bool
) -> None:
    rng = np.random.default_rng(2)
    pooling = (2,) * 26
    for d, n in [(0, 5), (1, 0), (2, 6)]:
        write_day(tmp_path, d, n, rng, multi_hot=multi_hot, pooling=pooling)
    data = Criteo1TB(tmp_path, [0, 1, 2], ONE_TB_ROWS, multi_hot=multi_hot)
    full = list(data.batches(2, drop_last=drop_last))
    assert [b.size for b in full] == ([2] * 5 if drop_last else [2] * 5 + [1])
    shards = [list(data.batches(2, rank=r, world_size=3, drop_last=drop_last)) for r in range(3)]
    assert sum(len(s) for s in shards) == len(full)
    for k, batch in enumerate(full):
        mine = shards[k % 3][k // 3]
        assert torch.equal(mine.dense, batch.dense)
        assert torch.equal(mine.sparse, batch.sparse)
        assert torch.equal(mine.labels, batch.labels)


def test_1tb_row_count_mismatch_names_both_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    write_day(tmp_path, 3, 5, rng)
    np.save(tmp_path / "day_3_sparse.npy", np.zeros((4, 26), np.int32))
    err = bad_input(lambda: Criteo1TB(tmp_path, [3], ONE_TB_ROWS, multi_hot=False))
    assert str(err) == "day_3_sparse.npy: 4 rows but day_3_dense.npy has 5"

    np.save(tmp_path / "day_3_sparse.npy", np.zeros((5, 26), np.int32))
    np.save(tmp_path / "day_3_labels.npy", np.zeros((6, 1), np.int32))
    err = bad_input(lambda: Criteo1TB(tmp_path, [3], ONE_TB_ROWS, multi_hot=False))
    assert str(err) == "day_3_labels.npy: 6 rows but day_3_dense.npy has 5"


def test_1tb_shape_and_dtype_errors_name_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    write_day(tmp_path, 0, 5, rng)
    open_day = lambda: Criteo1TB(tmp_path, [0], ONE_TB_ROWS, multi_hot=False)  # noqa: E731

    np.save(tmp_path / "day_0_sparse.npy", np.zeros((5, 25), np.int32))
    assert "day_0_sparse.npy: expected shape N x 26" in str(bad_input(open_day))
    np.save(tmp_path / "day_0_sparse.npy", np.zeros((5, 26), np.float32))
    assert "day_0_sparse.npy: expected integer ids" in str(bad_input(open_day))
    np.save(tmp_path / "day_0_sparse.npy", np.zeros((5, 26), np.int64))

    np.save(tmp_path / "day_0_dense.npy", np.zeros((5, 13), np.int32))
    assert "day_0_dense.npy: expected floating point" in str(bad_input(open_day))
    np.save(tmp_path / "day_0_dense.npy", np.zeros((5, 12), np.float32))
    assert "day_0_dense.npy: expected shape N x 13" in str(bad_input(open_day))
    np.save(tmp_path / "day_0_dense.npy", np.zeros((5, 13), np.float32))

    np.save(tmp_path / "day_0_labels.npy", np.zeros((5, 2), np.int32))
    assert "day_0_labels.npy: expected shape N or N x 1" in str(bad_input(open_day))
    (tmp_path / "day_0_labels.npy").write_bytes(b"not numpy at all")
    assert "day_0_labels.npy" in str(bad_input(open_day))

    np.save(tmp_path / "day_0_labels.npy", np.array([0, 1, 2, 0, 1], np.int32))
    data = open_day()
    err = bad_input(lambda: list(data.batches(2)))
    assert "day_0_labels.npy: row 2: label" in str(err)


def test_1tb_missing_files_are_not_found(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    write_day(tmp_path, 0, 3, rng)  # one-hot only: no multi-hot npz
    for multi_hot, missing in [(False, "day_1_dense.npy"), (True, "day_0_sparse_multi_hot.npz")]:
        days = [0, 1] if not multi_hot else [0]
        with pytest.raises(HarnessError) as info:
            Criteo1TB(tmp_path, days, ONE_TB_ROWS, multi_hot=multi_hot)
        assert info.value.category is ErrorCategory.NOT_FOUND
        assert missing in str(info.value)
    with pytest.raises(HarnessError) as info:
        Criteo1TB(tmp_path / "nowhere", [0], ONE_TB_ROWS, multi_hot=False)
    assert info.value.category is ErrorCategory.NOT_FOUND


def test_multi_hot_key_and_pooling_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    write_day(tmp_path, 0, 3, rng, multi_hot=True)
    write_day(tmp_path, 1, 3, rng, multi_hot=True, pooling=(1,) * 26)
    err = bad_input(lambda: Criteo1TB(tmp_path, [0, 1], ONE_TB_ROWS, multi_hot=True))
    assert str(err).startswith("day_1_sparse_multi_hot.npz: feature 0 has 1 ids per sample")

    feats = {str(f): np.zeros((3, 1), np.int32) for f in range(26) if f != 7}
    np.savez(tmp_path / "day_2_sparse_multi_hot.npz", **feats)
    np.save(tmp_path / "day_2_dense.npy", np.zeros((3, 13), np.float32))
    np.save(tmp_path / "day_2_labels.npy", np.zeros((3, 1), np.int32))
    err = bad_input(lambda: Criteo1TB(tmp_path, [2], ONE_TB_ROWS, multi_hot=True))
    assert "day_2_sparse_multi_hot.npz: no array '7'" in str(err)

    feats["7"] = np.zeros((2, 1), np.int32)
    np.savez(tmp_path / "day_2_sparse_multi_hot.npz", **feats)
    err = bad_input(lambda: Criteo1TB(tmp_path, [2], ONE_TB_ROWS, multi_hot=True))
    assert "day_2_sparse_multi_hot.npz: array '7' has 2 rows but day_2_dense.npy has 3" in str(err)
