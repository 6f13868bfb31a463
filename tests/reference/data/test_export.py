"""``export_dataset``: the tiny synthetic benchmark written as Criteo files reads back, through
``open_dataset``, as exactly the generator's batches; the files are laid out as the real ones; and
every refusal leaves nothing behind."""

from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import criteo_tsv as criteo_tsv
from harness.reference.data import export as data_export
from harness.reference.data import open_dataset
from harness.reference.data.datasets import DataFormat, SyntheticDataset
from harness.reference.data.export import EXPORT_INFO, export_dataset, format_tsv
from harness.rules.specs import load_benchmark, spec_from_dict

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "tiny_benchmark.yaml"
TINY = load_benchmark(str(FIXTURE))
MULTI_HOT = [1, 2, 3, 1, 1, 4] + [1] * 19 + [2]


def variant(**dataset) -> object:
    raw = copy.deepcopy(yaml.safe_load(FIXTURE.read_text()))
    raw["name"] = "tiny_variant"
    raw["dataset"].update(dataset)
    return spec_from_dict(raw, what="a test spec")


def same(a, b) -> int:
    a, b = list(a), list(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x.dense, y.dense), "dense"
        assert torch.equal(x.sparse, y.sparse), "sparse"
        assert torch.equal(x.labels, y.labels), "labels"
        assert x.pooling == y.pooling
    return len(a)


CASES = {
    "criteo-tsv": (TINY, "criteo-tsv", False),
    "criteo-tsv-gzip": (TINY, "criteo-tsv", True),
    "mlperf-npy": (TINY, "mlperf-npy", False),
    "mlperf-npy-multi-hot": (variant(pooling=MULTI_HOT, formats=["mlperf-npy"]), "mlperf-npy", False),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request, tmp_path_factory):
    spec, fmt, gz = CASES[request.param]
    out = tmp_path_factory.mktemp("export") / request.param
    result = export_dataset(spec, fmt, out, days=5, gzip=gz)
    return spec, out, result, gz


def test_the_export_reads_back_as_the_generator(exported) -> None:
    spec, out, _, gz = exported
    files, generator = open_dataset(spec, out), SyntheticDataset(spec.dataset)
    assert (files.train_samples, files.eval_samples) == (32768, 8192)
    assert files.reshuffles is not gz
    epochs = (0,) if gz else (0, 1)
    for world in (1, 2):
        for rank in range(world):
            for epoch in epochs:
                for start in (0, 7):
                    kw = dict(epoch=epoch, seed=11, rank=rank, world_size=world, start=start)
                    assert same(files.train_batches(1024, **kw), generator.train_batches(1024, **kw)) == 32 - start
            assert same(files.eval_batches(3000, rank=rank, world_size=world),
                        generator.eval_batches(3000, rank=rank, world_size=world)) == (3 if world == 1 else 2)
    # ... and so from its manifest, as a run reopens it
    again = open_dataset(spec, out, manifest=files.manifest())
    same(again.train_batches(2048, epoch=epochs[-1], seed=2), generator.train_batches(2048, epoch=epochs[-1], seed=2))


def test_the_files_are_laid_out_as_the_real_ones(exported) -> None:
    spec, out, result, gz = exported
    sizes = [len(p) for p in np.array_split(np.arange(32768), 4)] + [2 * 8192]
    assert result.day_samples == tuple(sizes) and result.out_dir == out
    info = json.loads((out / EXPORT_INFO).read_text())
    assert info["benchmark"] == spec.name and info["seed"] == 7 and info["day_samples"] == sizes
    assert info["pooling"] == list(spec.dataset["pooling"]) and info["gzip"] is gz
    names = {p.name for p in out.iterdir()}
    assert names == {name for name, _ in result.files}
    assert result.total_bytes == sum(p.stat().st_size for p in out.iterdir())
    if result.format is DataFormat.CRITEO_TSV:
        assert names == {f"day_{d}{'.gz' if gz else ''}" for d in range(5)} | {EXPORT_INFO}
        assert criteo_tsv._is_gzip(out / f"day_0{'.gz' if gz else ''}") is gz
        if not gz:
            first = (out / "day_0").read_bytes().split(b"\n", 1)[0].decode().split("\t")
            gen = SyntheticDataset(spec.dataset).generator
            sample = gen.samples(np.array([0]))
            assert first[0] == str(int(sample.labels[0]))
            assert first[1:14] == [str(c) for c in gen.dense_counts(np.array([0]))[0]]
            assert first[14:] == [format(int(i), "x") for i in sample.sparse[0]]
        return
    multi = any(p != 1 for p in spec.dataset["pooling"])
    for d, n in enumerate(sizes):
        dense = np.load(out / f"day_{d}_dense.npy", mmap_mode="r")
        labels = np.load(out / f"day_{d}_labels.npy", mmap_mode="r")
        assert dense.dtype == np.float32 and dense.shape == (n, 13)
        assert labels.dtype == np.int32 and labels.shape == (n, 1)
        if multi:
            path = out / f"day_{d}_sparse_multi_hot.npz"
            with zipfile.ZipFile(path) as zf:
                assert [i.filename for i in zf.infolist()] == [f"{f}.npy" for f in range(26)]
                assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
            with np.load(path) as npz:
                for f, p in enumerate(MULTI_HOT):
                    assert npz[str(f)].dtype == np.int32 and npz[str(f)].shape == (n, p)
        else:
            sparse = np.load(out / f"day_{d}_sparse.npy", mmap_mode="r")
            assert sparse.dtype == np.int32 and sparse.shape == (n, 26)
    assert not any(p.name.startswith(".") for p in out.iterdir())  # the members' temporary files are gone


def test_the_last_day_holds_the_eval_split_then_as_many_more_samples(tmp_path: Path) -> None:
    out = tmp_path / "npy"
    export_dataset(TINY, "mlperf-npy", out, days=2)
    gen = SyntheticDataset(TINY.dataset).generator
    labels = np.load(out / "day_1_labels.npy")[:, 0]
    want = gen.samples(np.arange(32768, 32768 + 2 * 8192)).labels.numpy()
    np.testing.assert_array_equal(labels, want.astype(np.int32))


def test_format_tsv_round_trips_through_the_parser() -> None:
    rng = np.random.default_rng(0)
    n = 500
    labels = rng.integers(0, 2, n).astype(np.float32)
    counts = rng.integers(0, 10 ** rng.integers(1, 18, 13), (n, 13))
    counts[:5] = 0
    counts[5] = 10**17
    ids = rng.integers(0, 2**62, (n, 26))
    ids[:, 3] = 0
    ids[7] = 15
    text = format_tsv(labels, counts, ids)
    assert text.endswith(b"\n") and text.count(b"\n") == n
    assert text.split(b"\n")[0].split(b"\t")[14 + 3] == b"0"
    parsed = criteo_tsv.parse_text(np.frombuffer(text[:-1], np.uint8).copy(), "x", 1)
    np.testing.assert_array_equal(parsed.labels, labels)
    np.testing.assert_array_equal(parsed.raw, ids.astype(np.uint64))
    np.testing.assert_array_equal(parsed.dense, np.log1p(counts.astype(np.float64)).astype(np.float32))


def refused(fn) -> str:
    with pytest.raises(HarnessError) as info:
        fn()
    assert info.value.category is ErrorCategory.BAD_INPUT
    return str(info.value)


def test_refusals_touch_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert "only a synthetic benchmark can be exported" in refused(
        lambda: export_dataset(load_benchmark("dlrm"), "criteo-tsv", out))
    assert "criteo-tsv holds one id per feature" in refused(
        lambda: export_dataset(variant(pooling=MULTI_HOT), "criteo-tsv", out))
    assert refused(lambda: export_dataset(variant(formats=["mlperf-npy"]), "criteo-tsv", out)) == (
        "benchmark tiny_variant accepts mlperf-npy: an export as criteo-tsv could not be trained on")
    assert "--gzip applies to criteo-tsv only" in refused(lambda: export_dataset(TINY, "mlperf-npy", out, gzip=True))
    assert "--days must be between 2" in refused(lambda: export_dataset(TINY, "mlperf-npy", out, days=1))
    assert "unknown data format" in refused(lambda: export_dataset(TINY, "parquet", out))
    assert not out.exists() and list(tmp_path.iterdir()) == []

    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert refused(lambda: export_dataset(TINY, "criteo-tsv", out)) == (
        f"{out} exists and is not an empty folder: give a new one (nothing was written)")
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]

    empty = tmp_path / "empty"
    empty.mkdir()
    export_dataset(TINY, "mlperf-npy", empty, days=2)  # an empty folder is filled
    assert (empty / "day_1_dense.npy").is_file()


def test_an_interrupted_export_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    real = data_export._write_tsv_day
    monkeypatch.setattr(data_export, "_write_tsv_day", interrupted)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        export_dataset(TINY, "criteo-tsv", tmp_path / "out", days=4, progress=lines.append)
    assert len(calls) == 3 and len(lines) == 3  # the start and two days
    assert list(tmp_path.iterdir()) == []
