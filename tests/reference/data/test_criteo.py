"""The Criteo file datasets (TSV, MLPerf npy one-hot and multi-hot) against the rules of
harness.reference.data.datasets: splits, sharding, epoch orders, ``start``, manifests, every refusal
of ``open_files``, and the TSV reader's memory budget. Every sample carries its global number ``g``
(its position in day order) as the first categorical id, so a batch says which samples it holds."""

from __future__ import annotations

import copy
import gc
import gzip
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import criteo_manifest as criteo_manifest
from harness.reference.data import criteo_npy as criteo_npy
from harness.reference.data import criteo_tsv as criteo_tsv
from harness.reference.data import datasets, open_dataset
from harness.reference.data.criteo import open_files
from harness.reference.data.criteo_manifest import find_layout
from harness.reference.data.criteo_npy import MlperfNpyDataset
from harness.reference.data.criteo_tsv import CriteoTsvDataset
from harness.reference.data.datasets import DataFormat, Dataset, batch_order
from harness.reference.data.export import format_tsv
from harness.rules.specs import spec_from_dict

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "tiny_benchmark.yaml"
TABLES = [2**40] + [97] * 25  # table 0 keeps the global sample number


def make_spec(train: int, eval_: int, *, pooling=(1,) * 26, formats=("criteo-tsv", "mlperf-npy")):
    raw = copy.deepcopy(yaml.safe_load(FIXTURE.read_text()))
    raw["name"] = "tiny_files"
    raw["dataset"].update(train_samples=train, eval_samples=eval_, table_rows=TABLES, pooling=list(pooling),
                          formats=list(formats))
    return spec_from_dict(raw, what="a test spec")


# ----------------------------------------------------------------------------- writers


def tsv_bytes(first: int, n: int) -> bytes:
    g = np.arange(first, first + n, dtype=np.int64)
    counts = np.stack([g % 1000] + [(g * (k + 3)) % 50 for k in range(12)], axis=1)
    ids = np.stack([g] + [(g * 31 + f) % 4099 for f in range(1, 26)], axis=1)
    return format_tsv((g % 3 == 0).astype(np.float32), counts, ids)


def write_terabyte(root: Path, sizes: list[int], *, gz=False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    first = 0
    for d, n in enumerate(sizes):
        packed = gz if isinstance(gz, bool) else d in gz
        data = tsv_bytes(first, n)
        (root / (f"day_{d}.gz" if packed else f"day_{d}")).write_bytes(gzip.compress(data) if packed else data)
        first += n
    return root


def write_npy(root: Path, sizes: list[int], *, pooling=None) -> Path:
    """MLPerf's layout; ``pooling``: multi-hot (feature 0's ids are ``g, g + 1, ...``)."""
    root.mkdir(parents=True, exist_ok=True)
    first = 0
    for d, n in enumerate(sizes):
        g = np.arange(first, first + n, dtype=np.int64)
        np.save(root / f"day_{d}_dense.npy", np.stack([g % 977] * 13, axis=1).astype(np.float32))
        np.save(root / f"day_{d}_labels.npy", (g % 3 == 0).astype(np.int32).reshape(-1, 1))
        if pooling is None:
            ids = np.stack([g] + [(g * 31 + f) % 4099 for f in range(1, 26)], axis=1).astype(np.int32)
            np.save(root / f"day_{d}_sparse.npy", ids)
        else:
            members = {str(f): ((g[:, None] * (1 if f == 0 else 7 * f + 1)) + np.arange(p)).astype(np.int32)
                       for f, p in enumerate(pooling)}
            np.savez(root / f"day_{d}_sparse_multi_hot.npz", **members)
        first += n
    return root


def numbers(batches) -> list[int]:
    """The global sample numbers of a stream of batches (feature 0's first id)."""
    return [int(g) for b in batches for g in b.sparse[:, 0].tolist()]


def expected_train(n_train: int, batch: int, *, epoch=0, seed=0, rank=0, world=1, start=0) -> list[int]:
    """Train positions by the rules, written out: batch ``k`` holds ``pi_e(k)``'s positions."""
    nb = n_train // batch
    local = batch // world
    out = []
    for k in range(start, nb):
        b = int(batch_order(seed, epoch, nb, np.array([k]))[0])
        out += list(range(b * batch + rank * local, b * batch + (rank + 1) * local))
    return out


def same(a, b) -> None:
    a, b = list(a), list(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x.dense, y.dense) and torch.equal(x.sparse, y.sparse) and torch.equal(x.labels, y.labels)
        assert x.pooling == y.pooling


def bad_input(fn, category=ErrorCategory.BAD_INPUT) -> str:
    with pytest.raises(HarnessError) as info:
        fn()
    assert info.value.category is category, info.value
    assert "\n" not in str(info.value)
    return str(info.value)


SIZES = [37, 41, 30, 23]  # train: days 0-2 (108 samples); eval: the first ceil(23 / 2) = 12 of day 3
TRAIN, EVAL = 108, 12


def tsv(tmp_path: Path, *, gz=False, **kw) -> CriteoTsvDataset:
    return CriteoTsvDataset.scan(find_layout(write_terabyte(tmp_path / "tb", SIZES, gz=gz)), TABLES, **kw)


def all_kinds(tmp_path: Path) -> dict[str, Dataset]:
    return {
        "tsv": CriteoTsvDataset.scan(find_layout(write_terabyte(tmp_path / "tb", SIZES)), TABLES, index_stride=5),
        "tsv-gzip": CriteoTsvDataset.scan(find_layout(write_terabyte(tmp_path / "gz", SIZES, gz={1, 3})), TABLES),
        "npy": MlperfNpyDataset.scan(find_layout(write_npy(tmp_path / "npy", SIZES)), TABLES),
        "npy-multi-hot": MlperfNpyDataset.scan(
            find_layout(write_npy(tmp_path / "mh", SIZES, pooling=[2, 1, 3] + [1] * 23)), TABLES),
    }


# ----------------------------------------------------------------------------- splits


def test_every_kind_satisfies_the_protocol_and_splits_by_days(tmp_path: Path) -> None:
    for name, data in all_kinds(tmp_path).items():
        assert isinstance(data, Dataset), name
        assert (data.train_samples, data.eval_samples) == (TRAIN, EVAL), name
        assert numbers(data.train_batches(TRAIN)) == list(range(TRAIN)), name  # days 0-2 in order
        assert numbers(data.eval_batches(5)) == list(range(TRAIN, TRAIN + EVAL)), name  # day 3's first half
        assert [b.size for b in data.eval_batches(5)] == [5, 5, 2]
        assert data.table_rows == tuple(TABLES) and data.describe()["days"] == 4


def test_the_split_of_terabyte_and_kaggle_tsv(tmp_path: Path) -> None:
    data = tsv(tmp_path)
    assert data.describe() == {"format": "criteo-tsv", "layout": "terabyte", "path": str(tmp_path / "tb"),
                               "days": 4, "gzip": False, "train_samples": TRAIN, "eval_samples": EVAL}
    # Kaggle: 73 lines -> parts of 11, 11, 11, 10, 10, 10, 10 (divmod(73, 7), the first 3 longer)
    root = tmp_path / "kaggle"
    root.mkdir()
    (root / "train.txt.gz").write_bytes(gzip.compress(tsv_bytes(0, 73)))
    for path in (root, root / "train.txt.gz"):
        kaggle = CriteoTsvDataset.scan(find_layout(path), TABLES)
        assert kaggle.day_samples == (11, 11, 11, 10, 10, 10, 10)
        assert (kaggle.train_samples, kaggle.eval_samples) == (63, 5)
        assert numbers(kaggle.train_batches(9)) == list(range(63))
        assert numbers(kaggle.eval_batches(4)) == list(range(63, 68))
        assert kaggle.describe()["layout"] == "kaggle" and kaggle.describe()["gzip"] is True


def test_the_mlperf_split_numbers() -> None:
    # dlrm's rule on Criteo Terabyte's day 23 (178,274,637 lines) gives MLPerf's eval split.
    assert (178274637 + 1) // 2 == 89137319
    assert criteo_manifest.kaggle_parts(45840617) == [6548660] * 4 + [6548659] * 3


# ----------------------------------------------------------------------------- order and sharding


@pytest.mark.parametrize("kind", ["tsv", "tsv-gzip", "npy", "npy-multi-hot"])
def test_union_over_ranks_is_the_one_rank_stream(tmp_path: Path, kind: str) -> None:
    data = all_kinds(tmp_path)[kind]
    epochs = (0, 1, 2) if data.reshuffles else (0,)
    for epoch in epochs:
        whole = list(data.train_batches(12, epoch=epoch, seed=5))
        assert numbers(whole) == expected_train(TRAIN, 12, epoch=epoch, seed=5)
        for world in (1, 2, 4):
            shards = [list(data.train_batches(12, epoch=epoch, seed=5, rank=r, world_size=world)) for r in range(world)]
            for r in range(world):
                assert numbers(shards[r]) == expected_train(TRAIN, 12, epoch=epoch, seed=5, rank=r, world=world)
            for k, batch in enumerate(whole):  # global batch k is the ranks' slices side by side
                joined = [shards[r][k] for r in range(world)]
                assert torch.equal(torch.cat([b.dense for b in joined]), batch.dense)
                assert torch.equal(torch.cat([b.sparse for b in joined]), batch.sparse)
                assert torch.equal(torch.cat([b.labels for b in joined]), batch.labels)
            evals = [numbers(data.eval_batches(5, rank=r, world_size=world)) for r in range(world)]
            assert sum(evals, []) == list(range(TRAIN, TRAIN + EVAL))
            assert [len(e) for e in evals] == [len(p) for p in np.array_split(np.arange(EVAL), world)]


@pytest.mark.parametrize("kind", ["tsv", "npy", "npy-multi-hot"])
def test_later_epochs_reshuffle_whole_batches_and_start_anywhere(tmp_path: Path, kind: str) -> None:
    data = all_kinds(tmp_path)[kind]
    first = list(data.train_batches(12, epoch=0))
    second = list(data.train_batches(12, epoch=1, seed=9))
    order = batch_order(9, 1, 9, np.arange(9))
    assert sorted(order.tolist()) == list(range(9)) and order.tolist() != list(range(9))
    same(second, [first[b] for b in order])
    for epoch in (0, 1):
        for start in (0, 4, 8, 9, 20):
            full = list(data.train_batches(12, epoch=epoch, seed=9, rank=1, world_size=2))
            same(data.train_batches(12, epoch=epoch, seed=9, rank=1, world_size=2, start=start), full[start:])


def test_plain_tsv_seeks_on_its_offset_index(tmp_path: Path) -> None:
    strided = tsv(tmp_path, index_stride=4)
    assert len(strided.files[0].offsets) == 10  # lines 0, 4, .., 36 of day 0's 37
    text = (tmp_path / "tb" / "day_0").read_bytes()
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == ord("\n")]
    assert list(strided.files[0].offsets) == starts[0:37:4]
    whole = CriteoTsvDataset.scan(find_layout(tmp_path / "tb"), TABLES)  # one index entry per file
    assert [len(f.offsets) for f in whole.files] == [1, 1, 1, 1]
    for epoch in (0, 3):
        same(strided.train_batches(6, epoch=epoch, seed=1, rank=2, world_size=3, start=2),
             whole.train_batches(6, epoch=epoch, seed=1, rank=2, world_size=3, start=2))


def test_gzip_reads_one_epoch_only(tmp_path: Path) -> None:
    data = all_kinds(tmp_path)["tsv-gzip"]
    assert not data.reshuffles
    message = bad_input(lambda: data.train_batches(12, epoch=1))
    assert message.startswith(f"{tmp_path / 'gz'}: a gzip-compressed TSV can only be read in order, once")
    assert numbers(data.train_batches(12, start=3)) == list(range(36, TRAIN))  # epoch 0 from any batch
    assert tsv(tmp_path).reshuffles


def test_a_batch_spans_days_and_files_close_when_abandoned(tmp_path: Path) -> None:
    data = tsv(tmp_path)
    it = data.train_batches(50)
    assert numbers([next(it)]) == list(range(50))  # days 0 and 1
    it.close()
    assert numbers(data.train_batches(50, start=1)) == list(range(50, 100))


# ----------------------------------------------------------------------------- manifests


@pytest.mark.parametrize("kind", ["tsv", "tsv-gzip", "npy", "npy-multi-hot"])
def test_a_manifest_reopens_without_reading(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = all_kinds(tmp_path)[kind]
    manifest = json.loads(json.dumps(data.manifest()))  # plain JSON
    assert datasets.dataset_manifest(data) == manifest
    assert all(e["samples"] > 0 and e["bytes"] > 0 for e in manifest["files"])
    root = Path(manifest["root"])
    assert manifest["format"] == data.format.value

    def no_reading(*args, **kwargs):
        raise AssertionError("read while reopening from a manifest")

    for module, name in ((criteo_tsv, "parse_text"), (criteo_tsv, "scan_tsv_file"), (criteo_npy, "npy_array"),
                         (criteo_npy, "npz_arrays"), (criteo_npy, "npy_day")):
        monkeypatch.setattr(module, name, no_reading)
    spec = make_spec(TRAIN, EVAL, pooling=data.pooling)
    again = open_files(spec, root, manifest=manifest)
    assert again.describe() == data.describe()
    monkeypatch.undo()
    for epoch in (0, 1) if data.reshuffles else (0,):
        same(again.train_batches(12, epoch=epoch, rank=1, world_size=2), data.train_batches(12, epoch=epoch, rank=1,
                                                                                            world_size=2))
    same(again.eval_batches(5), data.eval_batches(5))

    other = tmp_path / "elsewhere"
    other.mkdir()
    assert "the dataset manifest is for" in bad_input(lambda: open_files(spec, other, manifest=manifest))
    victim = root / manifest["files"][-1]["name"]
    with open(victim, "ab") as f:
        f.write(b"\0")
    message = bad_input(lambda: open_files(spec, root, manifest=manifest))
    size = manifest["files"][-1]["bytes"]
    assert message == f"{victim}: changed since it was validated (was {size} bytes, now {size + 1})"
    victim.unlink()
    assert "now missing" in bad_input(lambda: open_files(spec, root, manifest=manifest))
    assert "not a dataset manifest" in bad_input(lambda: open_files(spec, root, manifest={"root": str(root)}))


def test_a_terabyte_manifest_stays_small() -> None:
    # 4.4 billion lines with one offset every 65,536 lines: ~67,000 offsets, ~1 MB of JSON.
    offsets = [i * 65536 * 400 for i in range(4_373_472_329 // criteo_tsv.INDEX_STRIDE)]
    assert len(json.dumps(offsets)) < 1.5e6


# ----------------------------------------------------------------------------- open_files refusals


def test_open_files_detects_each_layout_and_checks_the_spec(tmp_path: Path) -> None:
    write_terabyte(tmp_path / "tb", SIZES)
    write_npy(tmp_path / "npy", SIZES)
    (tmp_path / "kaggle").mkdir()
    (tmp_path / "kaggle" / "train.txt").write_bytes(tsv_bytes(0, 73))
    spec = make_spec(TRAIN, EVAL)
    assert isinstance(open_dataset(spec, tmp_path / "tb"), CriteoTsvDataset)
    assert open_dataset(spec, tmp_path / "npy").format is DataFormat.MLPERF_NPY
    kaggle = open_files(make_spec(63, 5), tmp_path / "kaggle" / "train.txt")
    assert kaggle.describe()["layout"] == "kaggle" and kaggle.manifest()["root"] == str(tmp_path / "kaggle")
    again = open_files(make_spec(63, 5), tmp_path / "kaggle", manifest=kaggle.manifest())
    assert again.train_samples == 63


def test_refusals_are_one_line(tmp_path: Path) -> None:
    tb = write_terabyte(tmp_path / "tb", SIZES)
    npy_root = write_npy(tmp_path / "npy", SIZES)
    spec = make_spec(TRAIN, EVAL)

    # a format the benchmark does not accept
    message = bad_input(lambda: open_files(make_spec(TRAIN, EVAL, formats=["mlperf-npy"]), tb))
    assert message == f"benchmark tiny_files accepts mlperf-npy; {tb} holds criteo-tsv (terabyte layout)"
    message = bad_input(lambda: open_files(make_spec(TRAIN, EVAL, formats=[]), npy_root))
    assert message.startswith("benchmark tiny_files accepts no data files")

    # a short dataset, or too many eval samples
    message = bad_input(lambda: open_files(make_spec(200, EVAL), tb))
    assert message == f"{tb} holds 108 training samples (days 0-2), benchmark tiny_files needs 200"
    message = bad_input(lambda: open_files(make_spec(TRAIN, 10), npy_root))
    assert message == f"{npy_root} holds 12 eval samples (the first half of day 3), benchmark tiny_files needs 10"

    # pooling: multi-hot benchmarks need multi-hot files with exactly their pooling
    multi = make_spec(TRAIN, EVAL, pooling=[2, 1, 3] + [1] * 23)
    message = bad_input(lambda: open_files(multi, tb))
    assert message.startswith(f"{tb} holds criteo-tsv (one id per feature); benchmark tiny_files needs multi-hot")
    message = bad_input(lambda: open_files(multi, npy_root))
    assert message.startswith(f"{npy_root} holds one-hot ids: feature 0 has 1 ids per sample, benchmark "
                              "tiny_files needs 2")
    mh = write_npy(tmp_path / "mh", SIZES, pooling=[2, 2, 3] + [1] * 23)
    message = bad_input(lambda: open_files(multi, mh))
    assert "feature 1 has 2 ids per sample, benchmark tiny_files needs 1" in message

    # a wrong number of features
    np.save(npy_root / "day_2_sparse.npy", np.zeros((30, 25), np.int32))
    assert "day_2_sparse.npy: expected shape N x 26, found (30, 25)" in bad_input(lambda: open_files(spec, npy_root))

    # a malformed line, as file:line
    lines = (tb / "day_1").read_bytes().split(b"\n")
    lines[6] = lines[6].replace(b"\t", b"\tx", 1)
    (tb / "day_1").write_bytes(b"\n".join(lines))
    message = bad_input(lambda: open_files(spec, tb))
    assert message.startswith(f"{tb / 'day_1'}:7: integer feature 0 (field 2) is not an integer")


def test_missing_and_unrecognisable_data_is_not_found(tmp_path: Path) -> None:
    spec = make_spec(TRAIN, EVAL)
    npy_root = write_npy(tmp_path / "npy", SIZES)
    (npy_root / "day_2_labels.npy").unlink()
    assert bad_input(lambda: open_files(spec, npy_root), ErrorCategory.NOT_FOUND) == \
        f"{npy_root / 'day_2_labels.npy'}: no such file"

    tb = write_terabyte(tmp_path / "tb", SIZES)
    (tb / "day_2").rename(tb / "day_5")
    assert bad_input(lambda: open_files(spec, tb), ErrorCategory.NOT_FOUND) == (
        f"{tb / 'day_2'}: no such file (the days must run from day_0 without a gap; day_5 is there)")
    (tb / "day_5").rename(tb / "day_1.gz")
    assert "both day_1 and day_1.gz" in bad_input(lambda: open_files(spec, tb))
    for p in tb.iterdir():
        if p.name != "day_0":
            p.unlink()
    assert "only day_0" in bad_input(lambda: open_files(spec, tb))

    empty = tmp_path / "empty"
    empty.mkdir()
    assert bad_input(lambda: open_files(spec, empty), ErrorCategory.NOT_FOUND) == (
        f"{empty}: no Criteo dataset here: looked for day_0_dense.npy (mlperf-npy), day_0 or day_0.gz "
        "(criteo-tsv, Terabyte) and train.txt or train.txt.gz (criteo-tsv, Kaggle)")
    assert bad_input(lambda: open_files(spec, tmp_path / "nowhere"), ErrorCategory.NOT_FOUND) == (
        f"{tmp_path / 'nowhere'}: no such file or folder")
    stray = tmp_path / "stray.tsv"
    stray.write_text("x")
    assert "not a Criteo dataset" in bad_input(lambda: open_files(spec, stray), ErrorCategory.NOT_FOUND)


# ----------------------------------------------------------------------------- memory


def traced_peak(data: CriteoTsvDataset) -> int:
    """The traced peak of reading every train batch (epochs 0 and 1, one rank of one and of
    two) and every eval batch, above what was allocated before."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for epoch, rank, world in [(0, 0, 1), (1, 1, 2)]:
            for batch in data.train_batches(512, epoch=epoch, seed=3, rank=rank, world_size=world):
                del batch
        for batch in data.eval_batches(512):
            del batch
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_the_tsv_reader_stays_within_its_buffer_budget(tmp_path: Path) -> None:
    budget = 1 << 20
    peaks = []
    for scale in (1, 2):
        root = write_terabyte(tmp_path / f"x{scale}", [12000 * scale, 12000 * scale, 8000 * scale])
        size = sum(p.stat().st_size for p in root.iterdir())
        assert size >= 4 * scale * budget
        data = CriteoTsvDataset.scan(find_layout(root), TABLES, buffer_bytes=budget, index_stride=1000)
        peaks.append(traced_peak(data))
        assert peaks[-1] <= budget, (scale, peaks[-1])
    assert peaks[1] <= peaks[0] * 1.05 + (32 << 10), peaks  # independent of the data's size
