"""dlrmv4's hashed cross features, hashed as the reference hashes them.

The reference (mlcommons/training PR #889, ``recommendation_v4/generative_recommenders``) gives every
sample 7 cross features (``dlrm_v4/configs.py`` ``YAMBDA_5B_CROSS_SPECS``: name, keys, rows, salt),
each one id of its own table and one contextual token at the head of the sample's sequence
(``dlrm_v4/datasets/yambda.py`` ``_build_sample``). A cross's id is ``xxh64(seed=salt)`` of its keys'
values packed as little-endian int64s, modulo its rows (``dlrm_v4/datasets/utils.py``
``xxhash_cross``), where the keys are read at the sample's target (its candidate):

* ``uid``: the user;
* ``item_id``, ``artist_id``, ``album_id``: the candidate's track, its artist and album;
* ``hour_of_day``: ``(timestamp // 3600) % 24`` of the candidate's timestamp (seconds);
* ``is_organic``: the candidate event's ``is_organic`` flag (0 or 1).

:func:`xxh64_int64` is XXH64 written out over numpy's uint64 arithmetic (one hash per row, every row
at once), checked against the ``xxhash`` package in the tests; a batch's crosses cost a few array
operations, not a Python call per sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import ErrorCategory, HarnessError

__all__ = ["CROSS_KEYS", "CrossFeature", "anchor_keys", "cross_features", "hash_crosses", "xxh64_int64"]

#: the values a cross can combine, read at the sample's candidate (the module's docstring)
CROSS_KEYS = ("uid", "item_id", "artist_id", "album_id", "hour_of_day", "is_organic")

_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class CrossFeature:
    """One hashed cross: its table's name and rows, the keys it combines (in order) and its salt."""

    name: str
    keys: tuple[str, ...]
    rows: int
    salt: int = 0

    def __post_init__(self) -> None:
        unknown = [k for k in self.keys if k not in CROSS_KEYS]
        if len(self.keys) < 2 or unknown:
            raise HarnessError(f"cross feature {self.name!r}: keys {list(self.keys)}: at least two, each one of "
                               f"{list(CROSS_KEYS)}", ErrorCategory.BAD_INPUT)
        if self.rows < 1 or not 0 <= self.salt <= _MASK:
            raise HarnessError(f"cross feature {self.name!r}: rows must be at least 1 and salt in [0, 2**64), not "
                               f"{self.rows} and {self.salt}", ErrorCategory.BAD_INPUT)


def cross_features(dataset: Mapping[str, Any]) -> tuple[CrossFeature, ...]:
    """The ``cross_features`` of a spec's ``dataset`` section (``{name, keys, rows, salt}`` each; salt 0
    when absent), in the section's order; ``()`` when it has none."""
    out = []
    for c in dataset.get("cross_features", ()) or ():
        try:
            out.append(CrossFeature(str(c["name"]), tuple(str(k) for k in c["keys"]), int(c["rows"]),
                                    int(c.get("salt", 0))))
        except (KeyError, TypeError, ValueError):
            raise HarnessError(f"dataset.cross_features: {c!r} is not {{name, keys, rows, salt}}",
                               ErrorCategory.BAD_INPUT) from None
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise HarnessError(f"dataset.cross_features: names {names} repeat", ErrorCategory.BAD_INPUT)
    return tuple(out)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    acc = acc + lane * np.uint64(_P2)
    return _rotl(acc, 31) * np.uint64(_P1)


def xxh64_int64(columns: Sequence[np.ndarray], seed: int = 0) -> np.ndarray:
    """XXH64 with ``seed`` of each row's values packed as little-endian int64s: ``xxh64(struct.pack(
    "<nq", *row), seed)`` for the rows of ``columns`` (``n`` equal-length integer arrays), as uint64."""
    lanes = [np.asarray(c).astype(np.int64).view(np.uint64).ravel() for c in columns]
    n = len(lanes[0]) if lanes else 0
    if any(len(x) != n for x in lanes):
        raise ValueError("xxh64_int64: the columns differ in length")
    with np.errstate(over="ignore"):
        i = 0
        if len(lanes) >= 4:  # 32-byte stripes through four accumulators
            v = [np.full(n, (seed + _P1 + _P2) & _MASK, np.uint64), np.full(n, (seed + _P2) & _MASK, np.uint64),
                 np.full(n, seed & _MASK, np.uint64), np.full(n, (seed - _P1) & _MASK, np.uint64)]
            while i + 4 <= len(lanes):
                v = [_round(v[j], lanes[i + j]) for j in range(4)]
                i += 4
            h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for acc in v:
                h = (h ^ _round(np.zeros(n, np.uint64), acc)) * np.uint64(_P1) + np.uint64(_P4)
        else:
            h = np.full(n, (seed + _P5) & _MASK, np.uint64)
        h = h + np.uint64(8 * len(lanes))
        for lane in lanes[i:]:  # the 8-byte lanes left
            h = h ^ _round(np.zeros(n, np.uint64), lane)
            h = _rotl(h, 27) * np.uint64(_P1) + np.uint64(_P4)
        h = h ^ (h >> np.uint64(33))
        h = h * np.uint64(_P2)
        h = h ^ (h >> np.uint64(29))
        h = h * np.uint64(_P3)
        return h ^ (h >> np.uint64(32))


def anchor_keys(*, uid: np.ndarray, item: np.ndarray, artist: np.ndarray, album: np.ndarray, timestamp: np.ndarray,
                is_organic: np.ndarray) -> dict[str, np.ndarray]:
    """The values :data:`CROSS_KEYS` name, one per sample, from its candidate's fields."""
    ts = np.asarray(timestamp, dtype=np.int64)
    return {"uid": np.asarray(uid, dtype=np.int64), "item_id": np.asarray(item, dtype=np.int64),
            "artist_id": np.asarray(artist, dtype=np.int64), "album_id": np.asarray(album, dtype=np.int64),
            "hour_of_day": (ts // 3600) % 24, "is_organic": np.asarray(is_organic, dtype=np.int64)}


def hash_crosses(anchor: Mapping[str, np.ndarray], features: Sequence[CrossFeature]) -> np.ndarray:
    """int64 ``[B, K]``: each sample's id in each of the ``K`` crosses' tables (:func:`anchor_keys`
    gives ``anchor``)."""
    b = len(anchor["uid"])
    out = np.empty((b, len(features)), dtype=np.int64)
    for j, f in enumerate(features):
        out[:, j] = (xxh64_int64([anchor[k] for k in f.keys], f.salt) % np.uint64(f.rows)).astype(np.int64)
    return out
