"""MLPerf's Criteo npy/npz readers' low level, on small files written in the real format: the
one-hot and multi-hot days, the npz members, and the checks of shapes, dtypes, row counts and names.
(The TSV reader: tests/reference/data/test_criteo_tsv.py; the datasets built on them:
tests/reference/data/test_criteo.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import criteo_npy as criteo_npy
from harness.reference.data.criteo_manifest import find_layout
from harness.reference.data.criteo_npy import MlperfNpyDataset
from harness.rules.specs import load_benchmark
from tests.reference.data.test_criteo_tsv import bad_input

# MLPerf's materialised multi-hot Criteo 1TB: ids per sample of each feature (the spec's, once)
MLPERF_MULTI_HOT_SIZES: tuple[int, ...] = tuple(load_benchmark("dlrm_dcnv2").dataset["pooling"])


# ----------------------------------------------------------------------------- npy layout

ONE_TB_ROWS = [50] * 26
ONE_TB_ROWS[3] = 7


def write_day(root: Path, day: int, n: int, rng: np.random.Generator, *, multi_hot: bool = False,
              pooling=MLPERF_MULTI_HOT_SIZES, compressed: bool = False,
              labels_2d: bool = True) -> dict[str, np.ndarray]:
    """Write one day as MLPerf's scripts do; return what was written."""
    dense = np.log(rng.integers(0, 1000, (n, 13)) + 3, dtype=np.float32)
    labels = rng.integers(0, 2, n).astype(np.int32)
    np.save(root / f"day_{day}_dense.npy", dense)
    np.save(root / f"day_{day}_labels.npy", labels.reshape(-1, 1) if labels_2d else labels)
    out = {"dense": dense, "labels": labels}
    if multi_hot:
        feats = {str(f): rng.integers(0, 120, (n, p)).astype(np.int32) for f, p in enumerate(pooling)}
        (np.savez_compressed if compressed else np.savez)(root / f"day_{day}_sparse_multi_hot.npz", **feats)
        out.update(feats)
    else:
        sparse = rng.integers(0, 120, (n, 26)).astype(np.int32)
        np.save(root / f"day_{day}_sparse.npy", sparse)
        out["sparse"] = sparse
    return out


def npy(root: Path) -> MlperfNpyDataset:
    return MlperfNpyDataset.scan(find_layout(root), ONE_TB_ROWS)


def collect(batches) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    bs = list(batches)
    return torch.cat([b.dense for b in bs]), torch.cat([b.sparse for b in bs]), torch.cat([b.labels for b in bs])


def test_one_hot_days_decode_and_reduce_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    d0 = write_day(tmp_path, 0, 5, rng)
    d1 = write_day(tmp_path, 1, 4, rng, labels_2d=False)
    d2 = write_day(tmp_path, 2, 3, rng)
    data = npy(tmp_path)
    assert (data.train_samples, data.eval_samples, data.pooling) == (9, 2, (1,) * 26)

    batches = list(data.train_batches(4))
    assert [b.size for b in batches] == [4, 4]  # a batch spans days 0 and 1; the partial one is dropped
    dense, sparse, labels = collect(batches)
    # Dense values are already log(x + 3) in MLPerf's files: passed through, not re-logged.
    np.testing.assert_array_equal(dense.numpy(), np.concatenate([d0["dense"], d1["dense"]])[:8])
    raw = np.concatenate([d0["sparse"], d1["sparse"]])[:8].astype(np.int64)
    assert (raw >= np.array(ONE_TB_ROWS)).any()  # the test exercises the reduction
    np.testing.assert_array_equal(sparse.numpy(), raw % np.array(ONE_TB_ROWS))
    assert sparse.dtype == torch.int64 and labels.dtype == torch.float32
    assert labels.tolist() == np.concatenate([d0["labels"], d1["labels"]])[:8].tolist()
    _, _, eval_labels = collect(data.eval_batches(8))
    assert eval_labels.tolist() == d2["labels"][:2].tolist()


def test_multi_hot_pooling_and_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    days = [write_day(tmp_path, d, n, rng, multi_hot=True) for d, n in [(0, 3), (1, 4), (2, 2)]]
    data = npy(tmp_path)
    assert data.layout.layout == "multi-hot" and data.pooling == MLPERF_MULTI_HOT_SIZES

    batches = list(data.train_batches(2))
    assert [b.size for b in batches] == [2, 2, 2]
    width = sum(MLPERF_MULTI_HOT_SIZES)
    for b in batches:
        assert b.sparse.shape == (b.size, width) and b.pooling == MLPERF_MULTI_HOT_SIZES
    _, sparse, _ = collect(batches)
    offsets = np.cumsum((0,) + MLPERF_MULTI_HOT_SIZES)
    for f in range(26):
        want = np.concatenate([d[str(f)] for d in days[:2]])[:6].astype(np.int64) % ONE_TB_ROWS[f]
        np.testing.assert_array_equal(sparse[:, offsets[f] : offsets[f + 1]].numpy(), want)


def test_npz_members_are_memory_mapped_and_compressed_ones_refused(tmp_path: Path) -> None:
    ids = np.arange(40, dtype=np.int32).reshape(10, 4)
    np.savez(tmp_path / "x.npz", **{"0": ids, "1": ids[:, :1]})
    members = criteo_npy.npz_arrays(tmp_path / "x.npz")
    mapped = members["0"].open(tmp_path)
    assert isinstance(mapped, np.memmap)
    np.testing.assert_array_equal(mapped, ids)
    np.testing.assert_array_equal(members["1"].open(tmp_path), ids[:, :1])
    np.savez_compressed(tmp_path / "y.npz", **{"0": ids})
    err = bad_input(lambda: criteo_npy.npz_arrays(tmp_path / "y.npz"))
    assert "array '0' is compressed" in str(err) and "numpy.savez" in str(err)


def test_npy_row_count_mismatch_names_both_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    write_day(tmp_path, 3, 5, rng)
    np.save(tmp_path / "day_3_sparse.npy", np.zeros((4, 26), np.int32))
    err = bad_input(lambda: criteo_npy.npy_day(tmp_path, 3, multi_hot=False))
    assert str(err) == f"{tmp_path / 'day_3_sparse.npy'}: 4 rows but day_3_dense.npy has 5"

    np.save(tmp_path / "day_3_sparse.npy", np.zeros((5, 26), np.int32))
    np.save(tmp_path / "day_3_labels.npy", np.zeros((6, 1), np.int32))
    err = bad_input(lambda: criteo_npy.npy_day(tmp_path, 3, multi_hot=False))
    assert str(err) == f"{tmp_path / 'day_3_labels.npy'}: 6 rows but day_3_dense.npy has 5"


def test_npy_shape_dtype_and_truncation_errors_name_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    write_day(tmp_path, 0, 5, rng)
    write_day(tmp_path, 1, 2, rng)

    def day0() -> str:
        return str(bad_input(lambda: criteo_npy.npy_day(tmp_path, 0, multi_hot=False)))

    np.save(tmp_path / "day_0_sparse.npy", np.zeros((5, 25), np.int32))
    assert "day_0_sparse.npy: expected shape N x 26" in day0()
    np.save(tmp_path / "day_0_sparse.npy", np.zeros((5, 26), np.float32))
    assert "day_0_sparse.npy: expected integer ids" in day0()
    np.save(tmp_path / "day_0_sparse.npy", np.zeros((5, 26), np.int64))

    np.save(tmp_path / "day_0_dense.npy", np.zeros((5, 13), np.int32))
    assert "day_0_dense.npy: expected floating point" in day0()
    np.save(tmp_path / "day_0_dense.npy", np.zeros((5, 12), np.float32))
    assert "day_0_dense.npy: expected shape N x 13" in day0()
    np.save(tmp_path / "day_0_dense.npy", np.zeros((5, 13), np.float32))
    whole = (tmp_path / "day_0_dense.npy").read_bytes()
    (tmp_path / "day_0_dense.npy").write_bytes(whole[:-8])
    assert "day_0_dense.npy: truncated" in day0()
    (tmp_path / "day_0_dense.npy").write_bytes(whole)

    np.save(tmp_path / "day_0_labels.npy", np.zeros((5, 2), np.int32))
    assert "day_0_labels.npy: expected shape N or N x 1" in day0()
    (tmp_path / "day_0_labels.npy").write_bytes(b"not numpy at all")
    assert "day_0_labels.npy: not a readable .npy file" in day0()

    np.save(tmp_path / "day_0_labels.npy", np.array([0, 1, 2, 0, 1], np.int32))
    data = npy(tmp_path)  # values are checked as they are read
    err = bad_input(lambda: list(data.train_batches(2)))
    assert str(err) == f"{tmp_path / 'day_0_labels.npy'}: row 2: label 2 is not 0 or 1"


def test_npy_missing_files_are_not_found(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    write_day(tmp_path, 0, 3, rng)  # one-hot only: no multi-hot npz
    for d, multi_hot, missing in [(1, False, "day_1_dense.npy"), (0, True, "day_0_sparse_multi_hot.npz")]:
        with pytest.raises(HarnessError) as info:
            criteo_npy.npy_day(tmp_path, d, multi_hot=multi_hot)
        assert info.value.category is ErrorCategory.NOT_FOUND
        assert str(info.value) == f"{tmp_path / missing}: no such file"


def test_multi_hot_key_and_pooling_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    write_day(tmp_path, 0, 3, rng, multi_hot=True)
    write_day(tmp_path, 1, 3, rng, multi_hot=True, pooling=(1,) * 26)
    err = bad_input(lambda: npy(tmp_path))
    assert str(err).startswith(f"{tmp_path / 'day_1_sparse_multi_hot.npz'}: feature 0 has 1 ids per sample "
                               "but day_0_sparse_multi_hot.npz has 3")

    feats = {str(f): np.zeros((3, 1), np.int32) for f in range(26) if f != 7}
    np.savez(tmp_path / "day_2_sparse_multi_hot.npz", **feats)
    np.save(tmp_path / "day_2_dense.npy", np.zeros((3, 13), np.float32))
    np.save(tmp_path / "day_2_labels.npy", np.zeros((3, 1), np.int32))
    err = bad_input(lambda: criteo_npy.npy_day(tmp_path, 2, multi_hot=True))
    assert "day_2_sparse_multi_hot.npz: no array '7'" in str(err)

    feats["7"] = np.zeros((2, 1), np.int32)
    np.savez(tmp_path / "day_2_sparse_multi_hot.npz", **feats)
    err = bad_input(lambda: criteo_npy.npy_day(tmp_path, 2, multi_hot=True))
    assert "day_2_sparse_multi_hot.npz: array '7' has 2 rows but day_2_dense.npy has 3" in str(err)
