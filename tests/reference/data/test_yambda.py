"""Yambda's parquet as published: the flat and the per-type layouts give the same samples; an export of
the generator reads back as the generator's batches bit for bit (train and eval, one rank and two) and
trains the same steps; a malformed file is one line naming it; the memory budget bounds every batch read.

The tests write their own small files in Yambda's schema (nothing can be downloaded here)."""

from __future__ import annotations

import copy
from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import open_dataset
from harness.reference.data.datasets import dataset_manifest
from harness.reference.data.event_batch import EventBatch
from harness.reference.data.events import SyntheticEventStreams
from harness.reference.data.export import export_event_streams
from harness.reference.data.yambda import open_yambda
from harness.reference.data.yambda_inspect import format_yambda_report, inspect_yambda
from harness.reference.data.yambda_store import batch_rows
from harness.rules.specs import load_benchmark, spec_from_dict

DATASET = {"users": 128, "item_rows": 800, "artist_rows": 20, "album_rows": 80, "warmup_windows": 2,
           "train_windows": 3, "user_samples_per_window": [0, 4], "train_samples": 400, "eval_samples": 24,
           "eval_user_fraction": 0.25, "max_sequence_length": 12}


def tiny_raw() -> dict:
    raw = copy.deepcopy(load_benchmark("dlrmv4_synthetic").raw)
    raw["dataset"].update(DATASET)
    raw["model"].update({"embedding_dim": 8, "attention_dim": 4, "linear_dim": 4, "max_sequence_length": 12,
                         "time_buckets": 8, "preprocessor_hidden_dim": 8, "head_hidden_dim": 8})
    raw["eval"].update({"every_data_fraction": 0.5, "first_samples": 100, "batch_size": 20})
    raw["reference_hyperparameters"].update({"global_batch_size": 32, "opt_learning_rate_warmup_steps": 2})
    return raw


def cat(batches) -> dict[str, torch.Tensor]:
    batches = list(batches)
    assert batches
    return {f.name: torch.cat([getattr(b, f.name) for b in batches]) for f in fields(EventBatch)}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def every_batch(ds, world: int = 1) -> list[dict[str, torch.Tensor]]:
    """Each rank's train batches of epochs 0 and 1 and its eval batches, ``world`` ranks."""
    out = []
    for r in range(world):
        out.append(cat(ds.train_batches(32, rank=r, world_size=world)))
        out.append(cat(ds.train_batches(32, epoch=1, seed=5, rank=r, world_size=world, start=3)))
        out.append(cat(ds.eval_batches(16, rank=r, world_size=world)))
    return out


@pytest.fixture(scope="module")
def spec():
    return spec_from_dict(tiny_raw(), what="the tiny event streams")


@pytest.fixture(scope="module")
def generator(spec):
    return SyntheticEventStreams(spec.dataset)


@pytest.fixture(scope="module")
def exported(spec, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("yambda") / "flat"
    export_event_streams(spec, out, users_per_chunk=40)  # several row groups
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def per_type_copy(flat: Path, out: Path, *, dislikes: bool = True) -> Path:
    """The flat export rewritten as Yambda's per-type files (listens with their ratio and length, likes
    without), plus a few dislikes, which no sample holds."""
    out.mkdir()
    table = pq.read_table(flat / "multi_event.parquet")
    kind = table.column("event_type").to_numpy(zero_copy_only=False)
    base = ["uid", "timestamp", "is_organic", "item_id"]
    pq.write_table(table.filter(pa.array(kind == "listen")).select(base + ["played_ratio_pct", "track_length_seconds"]),
                   out / "listens.parquet", row_group_size=500)
    pq.write_table(table.filter(pa.array(kind == "like")).select(base), out / "likes.parquet")
    if dislikes:
        pq.write_table(table.filter(pa.array(kind == "like")).select(base).slice(0, 5), out / "dislikes.parquet")
    for name in ("artist_item_mapping.parquet", "album_item_mapping.parquet"):
        (out / name).write_bytes((flat / name).read_bytes())
    return out


# ------------------------------------------------------------------------------------------ equivalence
def test_the_export_reads_back_as_the_generator_bit_for_bit(spec, generator, exported, cache):
    ds = open_yambda(spec.dataset, exported, cache_dir=cache)
    for world in (1, 2):
        mine, theirs = every_batch(ds, world), every_batch(generator, world)
        assert all(same(a, b) for a, b in zip(mine, theirs, strict=True)), world
    assert (ds.eval_window, ds.train_samples, ds.eval_samples) == (generator.eval_window, 400, 24)
    assert np.array_equal(ds.eval_users, generator.eval_users)
    # the run's path: open_dataset on the folder, then a worker reopening it from the manifest
    opened = open_dataset(spec, exported, cache_dir=cache)
    again = open_dataset(spec, exported, manifest=dataset_manifest(opened), cache_dir=cache)
    assert same(cat(again.eval_batches(24)), cat(generator.eval_batches(24)))


def test_both_layouts_give_the_same_samples(spec, exported, cache, tmp_path):
    flat = open_yambda(spec.dataset, exported, cache_dir=cache)
    split = open_yambda(spec.dataset, per_type_copy(exported, tmp_path / "per_type"), cache_dir=cache)
    assert split.store.meta["layout"] == "per-type" and split.store.meta["counts"]["dislike"] == 5
    assert all(same(a, b) for a, b in zip(every_batch(split), every_batch(flat), strict=True))


def test_training_on_the_export_repeats_the_generators_steps(spec, exported, cache):
    from harness.reference.engine.run_config import RunConfig
    from harness.reference.engine.session import TrainingSession

    raw = tiny_raw()

    def losses(data) -> list[float]:
        s = TrainingSession(RunConfig.offline(raw, dict(raw["reference_hyperparameters"]), 3, data=data,
                                             data_cache=str(cache)))
        return [float(s.step(b)) for b in s.batches(until=8)] + [s.evaluate(list(s.dataset.eval_batches(24)))]

    # one thread, as `harness run --threads 1`: the engine's multi-threaded reductions are not bit-reproducible
    # from one session to the next (dlrmv4_synthetic at 2 threads: apart from step 7 on, whatever the data)
    manifest = dataset_manifest(open_dataset(spec, exported, cache_dir=cache))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert losses(manifest) == losses(None)
    finally:
        torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------ bad input
def _refused(dataset, path: Path, cache: Path) -> str:
    with pytest.raises(HarnessError) as err:
        open_yambda(dataset, path, cache_dir=cache)
    assert err.value.category is ErrorCategory.BAD_INPUT and err.value.exit_code == 2
    assert "\n" not in err.value.message
    return err.value.message


def _rewrite(src: Path, dst: Path, change) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix == ".parquet":
            (dst / f.name).write_bytes(f.read_bytes())
    table = pq.read_table(src / "multi_event.parquet")
    change(table, dst / "multi_event.parquet")
    return dst


def test_a_malformed_file_is_one_line_naming_it(spec, exported, tmp_path):
    cache = tmp_path / "cache"
    d = spec.dataset

    def case(name, change) -> str:
        return _refused(d, _rewrite(exported, tmp_path / name, change), cache)

    msg = case("no_item", lambda t, p: pq.write_table(t.drop_columns(["item_id"]), p))
    assert "multi_event.parquet: no column 'item_id'" in msg
    msg = case("text_uid", lambda t, p: pq.write_table(
        t.set_column(0, "uid", pa.array([str(v) for v in t.column("uid").to_pylist()])), p))
    assert "multi_event.parquet: column 'uid' is string, not an integer" in msg
    msg = case("truncated", lambda t, p: (pq.write_table(t, p), p.write_bytes(p.read_bytes()[:-100])))
    assert "multi_event.parquet: not a readable parquet file" in msg
    msg = case("unsorted", lambda t, p: pq.write_table(t.take(pa.array(np.arange(t.num_rows)[::-1])), p))
    assert "multi_event.parquet: row 1 is out of (uid, timestamp) order" in msg
    msg = case("odd_type", lambda t, p: pq.write_table(
        t.set_column(4, "event_type", pa.array(["listen"] * (t.num_rows - 1) + ["skip"])), p))
    assert f"multi_event.parquet: row {pq.read_metadata(exported / 'multi_event.parquet').num_rows - 1}: " \
           "event_type 'skip' is none of listen, like" in msg
    big = spec_from_dict({**tiny_raw(), "dataset": {**tiny_raw()["dataset"], "item_rows": 500}}, what="x").dataset
    assert "is outside the spec's item_rows (0..499)" in _refused(big, exported, cache)
    gone = tmp_path / "no_mapping"
    gone.mkdir()
    (gone / "multi_event.parquet").write_bytes((exported / "multi_event.parquet").read_bytes())
    assert "artist_item_mapping.parquet: missing" in _refused(d, gone, cache)
    # nothing half-built is left in the cache by a refusal
    assert not list(cache.glob(".*partial*"))


def test_a_folder_without_events_or_a_changed_file_is_named(spec, exported, tmp_path):
    with pytest.raises(HarnessError, match="no Yambda events: neither multi_event.parquet") as err:
        open_dataset(load_benchmark("dlrmv4"), tmp_path)
    assert err.value.exit_code == 2
    manifest = {"files": [{"name": "multi_event.parquet", "bytes": 1}], "root": str(exported)}
    with pytest.raises(HarnessError, match="multi_event.parquet: changed since it was validated"):
        open_yambda(spec.dataset, exported, manifest=manifest, cache_dir=tmp_path)


def test_dlrmv4_reads_the_folder_and_says_what_its_windows_lack(exported, tmp_path):
    """The official spec opens the folder as Yambda (the reference's split: 150 warm-up days) and says
    in one line that 13 days hold none of its training windows."""
    with pytest.raises(HarnessError, match=r"none from window 150 \(warmup_windows\) on to train") as err:
        open_yambda(load_benchmark("dlrmv4").dataset, exported, cache_dir=tmp_path)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------ memory budget
def test_a_small_memory_budget_reads_in_small_batches_and_the_same_samples(spec, generator, exported, tmp_path):
    budget = 300 * 96  # batch_rows: 300 rows a batch
    rows = batch_rows(budget)
    ds = open_yambda(spec.dataset, per_type_copy(exported, tmp_path / "pt", dislikes=False), cache_dir=tmp_path,
                     memory_budget_bytes=budget)
    meta = ds.store.meta
    listens = meta["counts"]["listen"]
    assert rows == 300 and listens > 5 * rows
    assert 0 < meta["peak_batch_rows"] <= rows and meta["batch_rows"] == rows
    assert 0 < meta["peak_merge_rows"] <= rows  # the per-type files merged a few users at a time
    assert ds.chunk_rows == rows  # the keys' passes and the per-type merge go a chunk at a time too
    assert all(same(a, b) for a, b in zip(every_batch(ds), every_batch(generator), strict=True))


# ------------------------------------------------------------------------------------------ inspect
def test_inspect_reports_the_events_and_what_the_spec_cuts(spec, exported, tmp_path):
    report = inspect_yambda(exported, dataset=spec.dataset, cache_dir=tmp_path)
    table = pq.read_table(exported / "multi_event.parquet")
    kinds = table.column("event_type").to_numpy(zero_copy_only=False)
    assert report.well_formed and report.layout == "flat"
    assert report.events["listen"] == int((kinds == "listen").sum())
    assert report.events["like"] == int((kinds == "like").sum())
    assert report.users == 128 and not report.users_estimated
    assert report.cut["train_samples"] == 400 and report.cut["eval_window"] == SyntheticEventStreams(
        spec.dataset).eval_window
    assert report.split["windows"] >= 1 and 5.0 < report.days <= 6.0  # windows 0-5 (warm-up, train, eval)
    text = format_yambda_report(report)
    assert "well-formed" in text and "SPLIT (the benchmark)" in text
    bad = _rewrite(exported, tmp_path / "bad", lambda t, p: pq.write_table(t.drop_columns(["timestamp"]), p))
    report = inspect_yambda(bad)
    assert not report.well_formed and "no column 'timestamp'" in report.malformed
