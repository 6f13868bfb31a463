"""The Criteo readers' low level, on small files written in the real formats: TSV parsing and its
errors, the categorical convention and the buffer plan.
(The npy/npz readers: tests/reference/data/test_criteo_npy.py; the datasets built on them:
tests/reference/data/test_criteo.py.)"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import criteo_tsv as criteo_tsv
from harness.reference.data.criteo_manifest import find_layout
from harness.reference.data.criteo_tsv import (
    BufferPlan,
    CriteoTsvDataset,
    buffer_plan,
    categorical_id,
    read_tsv_file,
)

ROWS = [1000, 37, 5, 2**40] + [97] * 22  # includes a tiny and a huge table

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


def expected_id(s: str, rows: int) -> int:
    """The convention, written independently: the hex string as an integer, modulo the rows."""
    return (int(s, 16) if s else 0) % rows


def tsv_line(label: str, ints: list[str], cats: list[str]) -> str:
    assert len(ints) == 13 and len(cats) == 26
    return "\t".join([label, *ints, *cats])


LINE_A = tsv_line("0", ["1", "1", "5", "0", "1382", "4", "15", "2", "181", "1", "2", "", "2"], CATS_A)
LINE_B = tsv_line("1", ["", "-2", "", "", "", "", "", "", "", "", "", "", "7"], CATS_B)


def numbered(i: int) -> str:
    """A distinct valid line: the label alternates and the first count is ``i``."""
    cats = [f"{(i * 7919 + f) & 0xFFFFFFFF:08x}" for f in range(26)]
    return tsv_line(str(i % 2), [str(i)] + [str(f) for f in range(12)], cats)


def write_tsv(path: Path, lines: list[str], *, gz: bool = False) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def read_all(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = list(read_tsv_file(path))
    return (np.concatenate([p.dense for p in parts]), np.concatenate([p.raw for p in parts]),
            np.concatenate([p.labels for p in parts]))


def terabyte(root: Path, train: list[str], *, gz: bool = False) -> CriteoTsvDataset:
    """A two-day Terabyte folder: ``train`` as day 0, one line of eval day."""
    root.mkdir(exist_ok=True)
    write_tsv(root / ("day_0.gz" if gz else "day_0"), train, gz=gz)
    write_tsv(root / "day_1", [numbered(0)])
    return CriteoTsvDataset.scan(find_layout(root), ROWS)


def bad_input(fn) -> HarnessError:
    with pytest.raises(HarnessError) as info:
        fn()
    assert info.value.category is ErrorCategory.BAD_INPUT, info.value
    return info.value


# ----------------------------------------------------------------------------- categorical ids


def test_categorical_id_is_the_hex_value_modulo_the_rows() -> None:
    assert categorical_id("68fd1e64", 0, 1000) == 0x68FD1E64 % 1000 == 852
    assert categorical_id("", 3, 1000) == 0 == categorical_id("00000000", 3, 1000) == categorical_id("0", 3, 7)
    assert categorical_id("0B153874", 1, 2**62) == categorical_id("0b153874", 1, 2**62) == 0x0B153874
    assert categorical_id("f" * 16, 2, 10**9) == (2**64 - 1) % 10**9
    assert categorical_id("ffffffff", 25, 2**31) == 2**31 - 1
    # the feature does not change the id (the table's rows do)
    assert categorical_id("80e26c9b", 4, 97) == categorical_id("80e26c9b", 20, 97) == 0x80E26C9B % 97
    for value, feature, rows in [("xyz", 0, 10), ("1" * 17, 0, 10), ("12", 26, 10), ("12", 0, 0)]:
        bad_input(lambda: categorical_id(value, feature, rows))


def test_tsv_decodes_dense_labels_and_reduces_ids(tmp_path: Path) -> None:
    data = terabyte(tmp_path, [LINE_A, LINE_B])
    [batch] = list(data.train_batches(2))
    assert batch.size == 2 and batch.pooling == (1,) * 26
    assert batch.dense.dtype == torch.float32 and batch.dense.shape == (2, 13)
    assert batch.sparse.dtype == torch.int64 and batch.sparse.shape == (2, 26)
    assert batch.labels.dtype == torch.float32 and batch.labels.tolist() == [0.0, 1.0]

    counts_a = [1, 1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2]
    counts_b = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]  # empty -> 0, -2 clamps to 0
    want = np.log1p(np.array([counts_a, counts_b], np.float64)).astype(np.float32)
    np.testing.assert_array_equal(batch.dense.numpy(), want)  # float64 log1p, rounded once
    for row, cats in enumerate([CATS_A, CATS_B]):
        got = batch.sparse[row].tolist()
        assert got == [expected_id(s, ROWS[f]) for f, s in enumerate(cats)]
        assert got == [categorical_id(s, f, ROWS[f]) for f, s in enumerate(cats)]
    assert batch.sparse[0, 3].item() == 0x7B4723C4  # the huge table keeps the value itself


def test_raw_values_are_the_hex_integers(tmp_path: Path) -> None:
    _, raw, _ = read_all(write_tsv(tmp_path / "x", [LINE_A, LINE_B]))
    assert raw.dtype == np.uint64
    assert raw[0].tolist() == [expected_id(s, 2**64) for s in CATS_A]
    assert raw[1].tolist() == [expected_id(s, 2**64) for s in CATS_B]


def test_gzip_reads_the_same_as_plain(tmp_path: Path) -> None:
    lines = [numbered(i) for i in range(7)]
    a = read_all(write_tsv(tmp_path / "day_0.tsv", lines))
    b = read_all(write_tsv(tmp_path / "day_0.tsv.gz", lines, gz=True))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a[0][:, 0].tolist() == pytest.approx([math.log1p(i) for i in range(7)])


def test_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "win.tsv"
    path.write_bytes((LINE_A + "\r\n" + LINE_B + "\r").encode())
    _, raw, labels = read_all(path)
    assert labels.tolist() == [0.0, 1.0]
    assert raw[0, 25] == int(CATS_A[25], 16) and raw[1, 25] == 0
    path.write_bytes((LINE_A + "\n" + LINE_B).encode())
    assert read_all(path)[2].tolist() == [0.0, 1.0]


def tiny_plan(read_bytes: int, lines_per_chunk: int):
    per_line = criteo_tsv._PARSE_BYTES_PER_LINE + criteo_tsv._PARSE_BYTES_PER_TEXT_BYTE * 300
    plan = BufferPlan(budget_bytes=0, batch_bytes=0, read_bytes=read_bytes, parse_bytes=lines_per_chunk * per_line)
    return lambda *args, **kwargs: plan


def test_small_read_blocks_and_parse_chunks_change_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [numbered(i) for i in range(23)]
    plain = write_tsv(tmp_path / "a.tsv", lines)
    packed = write_tsv(tmp_path / "b.tsv.gz", lines, gz=True)
    want = read_all(plain)
    chunks = []
    # Lines now straddle read blocks (a line is ~280 bytes), and a chunk holds two lines.
    monkeypatch.setattr(criteo_tsv, "buffer_plan", tiny_plan(397, 2))
    for path in (plain, packed):
        parts = list(read_tsv_file(path))
        chunks.append([p.size for p in parts])
        got = (np.concatenate([p.dense for p in parts]), np.concatenate([p.raw for p in parts]),
               np.concatenate([p.labels for p in parts]))
        for x, y in zip(got, want):
            np.testing.assert_array_equal(x, y)
    assert max(chunks[0]) <= 2 and sum(chunks[0]) == 23

    bad = write_tsv(tmp_path / "c.tsv.gz", lines[:13] + [_replace(lines[13], 20, "g")], gz=True)
    err = bad_input(lambda: list(read_tsv_file(bad)))
    assert f"{bad}:14: categorical feature 6 (field 21)" in str(err)


def test_a_line_longer_than_the_read_block_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_tsv(tmp_path / "day_0", [numbered(0), "1" * 5000])
    monkeypatch.setattr(criteo_tsv, "buffer_plan", tiny_plan(1024, 2))
    err = bad_input(lambda: list(read_tsv_file(path)))
    assert str(err) == f"{path}:2: no line end within 1024 bytes (not a Criteo TSV line)"


def _replace(line: str, index: int, value: str) -> str:
    fields = line.split("\t")
    fields[index] = value
    return "\t".join(fields)


MALFORMED = {
    "too few fields": ("\t".join(LINE_A.split("\t")[:39]), "expected 40 tab-separated fields, found 39"),
    "too many fields": (LINE_A + "\t", "expected 40 tab-separated fields, found 41"),
    "blank line": ("", "expected 40 tab-separated fields, found 1"),
    "fractional count": (_replace(LINE_A, 3, "1.5"), "integer feature 2 (field 4) is not an integer: '1.5'"),
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
    write_tsv(tmp_path / "day_0", [numbered(i) for i in range(5)])
    name = "day_1.gz" if gz else "day_1"
    write_tsv(tmp_path / name, [numbered(i) for i in range(16)] + [bad_line] + [numbered(99)], gz=gz)
    err = bad_input(lambda: CriteoTsvDataset.scan(find_layout(tmp_path), ROWS))
    assert str(err).startswith(f"{tmp_path / name}:17: ")
    assert detail in str(err)


def test_first_malformed_line_is_reported(tmp_path: Path) -> None:
    lines = [numbered(0), _replace(numbered(1), 5, "x"), numbered(2), "short\tline"]
    path = write_tsv(tmp_path / "day_2", lines)
    err = bad_input(lambda: list(read_tsv_file(path)))
    assert f"{path}:2: integer feature 4" in str(err)


def test_partial_reading_yields_the_lines_before_a_malformed_one(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "day_0", [numbered(i) for i in range(5)] + ["1\t2"] + [numbered(9)])
    seen = []
    with pytest.raises(criteo_tsv.MalformedLine) as info:
        for parsed in read_tsv_file(path, partial=True):
            seen.append(parsed.size)
    assert sum(seen) == 5 and info.value.index == 5
    assert str(info.value) == f"{path}:6: expected 40 tab-separated fields, found 2"


def test_corrupt_gzip_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "day_0.gz"
    whole = gzip.compress(("\n".join(numbered(i) for i in range(50)) + "\n").encode())
    path.write_bytes(whole[:60])
    err = bad_input(lambda: list(read_tsv_file(path)))
    assert str(path) in str(err) and "cannot read" in str(err)


def test_bad_arguments_are_bad_input(tmp_path: Path) -> None:
    data = terabyte(tmp_path, [LINE_A, LINE_B])
    bad_input(lambda: CriteoTsvDataset.scan(find_layout(tmp_path), ROWS[:25]))
    bad_input(lambda: CriteoTsvDataset.scan(find_layout(tmp_path), [0] + ROWS[1:]))
    bad_input(lambda: data.train_batches(0))
    bad_input(lambda: data.train_batches(2, rank=2, world_size=2))
    bad_input(lambda: data.train_batches(3, rank=0, world_size=2))
    bad_input(lambda: data.eval_batches(0))
    bad_input(lambda: data.train_batches(2, epoch=-1).__next__())


# ----------------------------------------------------------------------------- the buffer plan


def test_buffer_plan_divides_the_budget_and_refuses_one_too_small() -> None:
    plan = buffer_plan(64 << 20, batch_samples=55296)
    assert plan.batch_bytes == 55296 * (13 * 4 + 26 * 8 + 4)
    assert plan.batch_bytes + plan.read_bytes * criteo_tsv._READ_COST + plan.parse_bytes <= 64 << 20
    assert plan.read_bytes >= 1 << 20 and plan.chunk_text_bytes >= 1 << 20
    err = bad_input(lambda: buffer_plan(8 << 20, batch_samples=55296))
    need = plan.batch_bytes + criteo_tsv._min_work_bytes()
    assert str(err) == (f"the TSV reader's buffer of 8.0 MiB cannot hold a batch of 55296 samples being assembled "
                        f"(13.9 MiB) plus a read block and a parse chunk: it needs at least {need / 2**20:.1f} MiB "
                        f"({need} bytes)")
    assert buffer_plan(need, batch_samples=55296).read_bytes >= criteo_tsv._MIN_READ_BYTES
