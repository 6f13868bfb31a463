"""dlrmv4's hashed crosses as the reference hashes them: our vectorised XXH64 equals the ``xxhash``
package's, and every sample of a Yambda folder carries, per cross, ``xxh64(seed=salt)`` of its candidate's
keys packed as little-endian int64s modulo the table's rows (``dlrm_v4/datasets/utils.py``
``xxhash_cross``, read at the candidate as ``datasets/yambda.py``'s ``_build_sample``), restated here from
the parquet rows themselves."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from harness.errors import HarnessError
from harness.reference.data.crosses import cross_features, xxh64_int64
from harness.reference.data.export import export_event_streams
from harness.reference.data.yambda import open_yambda
from harness.rules.specs import spec_from_dict
from tests.reference.data.test_yambda import tiny_raw


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9])
def test_xxh64_of_packed_int64s_equals_the_xxhash_package(n):
    rng = np.random.default_rng(n)
    columns = [rng.integers(-(2**62), 2**62, 64) for _ in range(n)]
    for seed in (0, 1, 2**64 - 1):
        ours = xxh64_int64(columns, seed)
        theirs = [xxhash.xxh64(struct.pack(f"<{n}q", *(int(c[i]) for c in columns)), seed=seed).intdigest()
                  for i in range(64)]
        assert [int(h) for h in ours] == theirs


def test_every_sample_carries_the_references_hash_of_its_candidates_keys(tmp_path):
    raw = tiny_raw()
    # salts other than the reference's 0 too, and a cross of three keys
    raw["dataset"]["cross_features"][0]["salt"] = 7
    raw["dataset"]["cross_features"][6]["salt"] = 2**40
    spec = spec_from_dict(raw, what="the tiny event streams")
    folder = tmp_path / "flat"
    export_event_streams(spec, folder, users_per_chunk=40)
    ds = open_yambda(spec.dataset, folder, cache_dir=tmp_path / "cache")

    events = pq.read_table(folder / "multi_event.parquet").to_pydict()
    organic = {(u, t, i): o for u, t, i, o, k in zip(events["uid"], events["timestamp"], events["item_id"],
                                                     events["is_organic"], events["event_type"]) if k == "listen"}
    assert set(organic.values()) == {0, 1}  # the generator's flags, both
    artist = dict(zip(*pq.read_table(folder / "artist_item_mapping.parquet").to_pydict().values()))
    album = dict(zip(*pq.read_table(folder / "album_item_mapping.parquet").to_pydict().values()))
    crosses = raw["dataset"]["cross_features"]
    checked = 0
    for batch in (ds.samples("train", np.arange(ds.train_samples)), ds.samples("eval", np.arange(ds.eval_samples))):
        candidate = batch.offsets()[1:] - 1  # one candidate a sample, last in its sequence
        for u in range(batch.users):
            e = int(candidate[u])
            uid, item, ts = int(batch.uid[u]), int(batch.item[e]), int(batch.timestamp[e])
            keys = {"uid": uid, "item_id": item, "artist_id": artist[item], "album_id": album[item],
                    "hour_of_day": ts // 3600 % 24, "is_organic": organic[(uid, ts, item)]}
            for j, c in enumerate(crosses):
                packed = struct.pack(f"<{len(c['keys'])}q", *(keys[k] for k in c["keys"]))
                assert int(batch.cross[u, j]) == xxhash.xxh64(packed, seed=c["salt"]).intdigest() % c["rows"]
            checked += 1
    assert checked == ds.train_samples + ds.eval_samples


def test_a_cross_of_an_unknown_key_or_one_key_is_refused_in_one_line():
    for bad in ({"name": "x", "keys": ["uid", "weekday"], "rows": 10}, {"name": "x", "keys": ["uid"], "rows": 10}):
        with pytest.raises(HarnessError, match=r"cross feature 'x': keys .* at least two, each one of") as err:
            cross_features({"cross_features": [bad]})
        assert "\n" not in str(err.value)
    with pytest.raises(HarnessError, match="repeat"):
        cross_features({"cross_features": [{"name": "x", "keys": ["uid", "item_id"], "rows": 3}] * 2})
    assert [c.name for c in cross_features({"cross_features": [{"name": "y", "keys": ["uid", "is_organic"],
                                                                "rows": 2}]})] == ["y"]


def test_the_store_refuses_an_is_organic_flag_other_than_0_or_1(tmp_path):
    spec = spec_from_dict(tiny_raw(), what="the tiny event streams")
    folder = tmp_path / "flat"
    export_event_streams(spec, folder, users_per_chunk=40)
    table = pq.read_table(folder / "multi_event.parquet")
    flags = table.column("is_organic").to_numpy().copy()
    flags[5] = 3
    pq.write_table(table.set_column(table.schema.get_field_index("is_organic"), "is_organic",
                                    pa.array(flags, pa.uint8())), folder / "multi_event.parquet")
    with pytest.raises(HarnessError, match=r"multi_event.parquet: row 5: is_organic 3 is not 0 or 1"):
        open_yambda(spec.dataset, Path(folder), cache_dir=tmp_path / "cache")
