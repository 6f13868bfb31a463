"""Yambda's events as published (Hugging Face ``yandex/yambda``: ``flat/<scale>/`` or
``sequential/<scale>/`` and the mappings at the dataset's root; the reference's ``raw/<size>/`` and
``shared_metadata/``; or one folder of everything), read through pyarrow and cut into samples exactly as
:mod:`harness.reference.data.events` cuts the generator's streams.

The files themselves (their layout, the one pass that checks them and the memory-mapped
columns it writes) are :mod:`harness.reference.data.yambda_store`'s.

**Samples** are those of the module :mod:`harness.reference.data.events`: a user's ``candidates``
consecutive listens in one window with the user's events before the first of them as history (its
latest ``max_sequence_length - candidates``), labelled ``played_ratio_pct > 50``; train windows in
time order, within a window by the first candidate's time; the eval split is the held-out users'
samples in the window after the last one the train split reaches. The same code
(:class:`~harness.reference.data.events.EventStreams`) cuts them, so an export of the generator
(``harness data export``) trains exactly as the generator.

**The timeline.** A benchmark of ``kind: event_streams`` (an export of the generator) brings its
own: windows of ``window_seconds`` from time 0, ``warmup_windows`` of history only, then
``train_windows``. Yambda itself (``kind: yambda``, ``dlrmv4``) is split as the reference splits it
(``mlcommons/training`` ``recommendation_v4``: ``preprocess_public_data.py``'s global temporal
split, the streaming loop of ``dlrm_v3/datasets/yambda.py`` and ``train/gin/yambda_5b.gin``): the
last day (``test_seconds`` before the latest event) is the test day, training ends ``gap_seconds``
(30 minutes) before it, and nothing of the gap or the test day is ever read; one-day windows count
from the first listen of the ``train_days`` (300) before that; windows from ``warmup_windows``
(the reference's ``start_ts``, 150) on are trained, ``train_windows`` (149) of them; ``eval_user_fraction``
(0.1: the reference's ``train_split_percentage`` of 0.9) of the users are held out.

**Where it differs from the reference.** (1) The reference preprocesses the parquet into sessions
and a flat cache with polars (about 190 GB of RAM at 5B); we stream the published files straight
into memory-mapped columns. (2) Only listens and likes enter histories, as the reference's three
pools (listen-plus, like, skip); dislikes, unlikes and undislikes are validated and counted, not
used. (3) ``listen_plus`` is ``played_ratio_pct > 50`` (Yambda's definition; the reference uses
``>= 50``), a null ratio counts as 0 (as the reference). (4) Held-out users are drawn by the
harness's counter-based hash of ``(seed, uid)`` (the reference: a salted SplitMix64 of the uid), and
the eval window is the one after the last the train split reaches (the reference: a fixed window,
299). (5) An item missing from a mapping gets artist or album 0, and an item listed twice keeps its
last row (as the reference). The cross features are the reference's: each sample's ids hashed from its
candidate's ``uid``, item, artist, album, hour of day and ``is_organic``
(:mod:`harness.reference.data.crosses`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.reference.data.crosses import CrossFeature, cross_features
from harness.reference.data.event_batch import UNKNOWN_ACTION, EventBatch
from harness.reference.data.events import (
    Action,
    EventFormat,
    EventStreams,
    EventStreamSpec,
    held_out_users,
)

__all__ = ["YambdaEventStreams", "YambdaSpec", "bounds_of", "open_yambda", "spec_of"]

from harness.reference.data.yambda_store import (
    DEFAULT_MEMORY_BUDGET,
    Bounds,
    YambdaStore,
    bad_input,
    batch_rows,
    build_store,
    find_layout,
    map_column,
)


# --------------------------------------------------------------------------- the spec of kind: yambda
@dataclass(frozen=True)
class YambdaSpec:
    """A ``dataset`` section of ``kind: yambda`` (dlrmv4): the tables and splits it states, and the
    reference's timeline where it states none (see the module's docstring)."""

    users: int
    item_rows: int
    artist_rows: int
    album_rows: int
    train_samples: int
    eval_samples: int
    max_sequence_length: int
    candidates: int = 1
    scale: str | None = None  # the Yambda scale a dataset root is read at (50m, 500m, 5b)
    seed: int = 0
    eval_user_fraction: float = 0.1
    window_seconds: int = 86400
    warmup_windows: int = 150
    train_windows: int = 149
    train_days: int = 300
    gap_seconds: int = 1800
    test_seconds: int = 86400
    actions: int = len(Action)
    cross_features: tuple[CrossFeature, ...] = ()

    KIND = "yambda"

    @classmethod
    def from_section(cls, dataset: Mapping[str, Any]) -> YambdaSpec:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(dataset) - known - {"kind", "formats"})
        if dataset.get("kind") != cls.KIND or unknown:
            raise bad_input(f"yambda data set: kind {dataset.get('kind')!r}, unknown keys {unknown} "
                       f"(known: {sorted(known)})")
        values = {k: v for k, v in dataset.items() if k in known}
        values["cross_features"] = cross_features(dataset)
        try:
            return cls(**values)
        except TypeError as err:
            raise bad_input(f"yambda data set: {err}") from None


# --------------------------------------------------------------------------- the data set
@dataclass(frozen=True)
class Timeline:
    """Windows of ``window_seconds`` from ``origin``; ``windows`` of them can hold samples. Events
    from ``end`` on (the reference's gap and test day) are never read."""

    origin: int
    window_seconds: int
    windows: int
    train: range
    end: int | None = None


class YambdaEventStreams(EventStreams):
    """Yambda's events (or an export of the generator in its layout) as a data set of
    :class:`EventBatch`: the samples of :class:`~harness.reference.data.events.EventStreams`."""

    format = EventFormat.YAMBDA_PARQUET

    def __init__(self, store: YambdaStore, timeline: Timeline, *, bounds: Bounds, actions: int, candidates: int,
                 max_sequence_length: int, seed: int, eval_user_fraction: float, train_samples: int,
                 eval_samples: int, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET, kind: str = "event_streams",
                 crosses: tuple[CrossFeature, ...] = ()):
        self.store, self.timeline, self.kind, self.crosses = store, timeline, kind, crosses
        self.users, self.item_rows, self.artist_rows, self.album_rows = (
            bounds.users, bounds.item_rows, bounds.artist_rows, bounds.album_rows)
        self.actions, self.candidates, self.max_sequence_length = actions, candidates, max_sequence_length
        self.chunk_rows = batch_rows(memory_budget_bytes)
        self._key_windows = timeline.windows + 2  # 0: before the origin, 1..windows, then after them
        self.listen_key = self._listen_keys()
        train_users, eval_users = held_out_users(seed, bounds.users, eval_user_fraction)
        self._cut(train_users=train_users, eval_users=eval_users, train_windows=timeline.train,
                  train_samples=train_samples, eval_samples=eval_samples)

    def _listen_keys(self) -> np.ndarray:
        """``uid * (windows + 2) + slot`` of each listen (slot 0 before the origin, ``w + 1`` in
        window ``w``, then after): sorted, since the events are in (uid, timestamp) order. Kept in the
        store's folder beside the columns, made a chunk at a time."""
        t, st = self.timeline, self.store
        path = st.folder / f"listen_key_{t.origin}_{t.window_seconds}_{t.windows}_{t.end}.bin"
        n = len(st.listen_pos)
        if not path.is_file():
            tmp = path.with_suffix(f".partial-{os.getpid()}")
            with open(tmp, "wb") as f:
                for a in range(0, n, self.chunk_rows):
                    pos = np.asarray(st.listen_pos[a:a + self.chunk_rows])
                    ts = np.asarray(st.timestamp[pos])
                    slot = np.clip((ts - t.origin) // t.window_seconds + 1, 0, t.windows + 1)
                    if t.end is not None:
                        slot = np.where(ts >= t.end, t.windows + 1, slot)
                    f.write((np.asarray(st.uid[pos]).astype(np.int64) * self._key_windows + slot).tobytes())
            os.replace(tmp, path)
        return map_column(path, np.int64, n)

    def _listen_range(self, users: np.ndarray, window: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        key = users.astype(np.int64) * self._key_windows + np.asarray(window) + 1
        return np.searchsorted(self.listen_key, key), np.searchsorted(self.listen_key, key + 1)

    def _more_samples_hint(self, name: str) -> str:
        t = self.timeline
        trained = (f"windows {t.train.start}-{t.train.stop - 1} trained" if len(t.train) else
                   f"none from window {t.train.start} (warmup_windows) on to train")
        return (f"the data at {self.store.meta['root']} hold {t.windows} windows of {t.window_seconds} s, {trained}: "
                f"lower {name}_samples, or give a larger Yambda scale (50m, 500m, 5b)")

    # ------------------------------------------------------------------ the source's answers
    def _window_sizes(self, users: np.ndarray, windows: tuple[int, ...]) -> list[int]:
        """One pass over the listens' keys, a chunk at a time: each (user, window) run's samples."""
        member = np.zeros(self.users, dtype=bool)
        member[users] = True
        totals = np.zeros(self._key_windows, dtype=np.int64)
        carry_key, carry_n = -1, 0
        n, k = len(self.listen_key), self.candidates
        for a in range(0, n, self.chunk_rows):
            keys = np.asarray(self.listen_key[a:a + self.chunk_rows])
            starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
            run_keys, run_n = keys[starts], np.diff(np.append(starts, len(keys)))
            if run_keys[0] == carry_key:
                run_n[0] += carry_n
            elif carry_n:
                run_keys, run_n = np.append(carry_key, run_keys), np.append(carry_n, run_n)
            carry_key, carry_n = int(run_keys[-1]), int(run_n[-1])
            self._add_runs(totals, member, run_keys[:-1], run_n[:-1], k)
        if carry_n:
            self._add_runs(totals, member, np.array([carry_key]), np.array([carry_n]), k)
        return [int(totals[w + 1]) for w in windows]

    def _add_runs(self, totals: np.ndarray, member: np.ndarray, keys: np.ndarray, n: np.ndarray, k: int) -> None:
        uid, slot = keys // self._key_windows, keys % self._key_windows
        np.add.at(totals, slot[member[uid]], (n // k)[member[uid]])

    def _anchors(self, users: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
        k = self.candidates
        lo, hi = self._listen_range(users, window)
        n = (hi - lo) // k
        users, lo, n = users[n > 0], lo[n > 0], n[n > 0]
        uid = np.repeat(users, n)
        ordinal = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        anchor_ts = np.asarray(self.store.timestamp[np.asarray(self.store.listen_pos[np.repeat(lo, n) + ordinal * k])])
        order = np.lexsort((ordinal, uid, anchor_ts))
        return uid[order], ordinal[order]

    def _gather(self, uid: np.ndarray, window: np.ndarray, ordinal: np.ndarray) -> tuple[EventBatch, None]:
        st, k, b = self.store, self.candidates, len(uid)
        lo, _ = self._listen_range(uid, window)
        candidate_listens = (lo + ordinal * k)[:, None] + np.arange(k)[None, :]
        candidates = np.asarray(st.listen_pos[candidate_listens.ravel()])  # event positions, sample after sample
        anchor = candidates[::k]
        history = np.minimum(anchor - st.user_start[uid], self.max_sequence_length - k)
        lengths = np.stack([history, np.full(b, k)], axis=1).ravel()
        first = np.stack([anchor - history, np.zeros(b, dtype=np.int64)], axis=1).ravel()
        is_candidate = np.repeat(np.tile([False, True], b), lengths)
        start = np.repeat(np.cumsum(lengths) - lengths, lengths)
        position = np.repeat(first, lengths) + np.arange(int(lengths.sum())) - start
        position[is_candidate] = candidates
        item = np.asarray(st.item[position]).astype(np.int64)
        action = np.asarray(st.action[position]).astype(np.int64)
        labels = action[is_candidate] == Action.LISTEN_PLUS
        action[is_candidate] = UNKNOWN_ACTION
        target = np.asarray(st.item[anchor]).astype(np.int64)  # each sample's first candidate: its crosses' keys
        batch = EventBatch(
            uid=torch.from_numpy(uid.astype(np.int64)),
            history_lengths=torch.from_numpy(history.astype(np.int64)),
            candidate_lengths=torch.full((b,), k, dtype=torch.int64),
            item=torch.from_numpy(item),
            artist=torch.from_numpy(st.item_artist[item]),
            album=torch.from_numpy(st.item_album[item]),
            action=torch.from_numpy(action),
            timestamp=torch.from_numpy(np.asarray(st.timestamp[position]).astype(np.int64)),
            labels=torch.from_numpy(labels.astype(np.float32)),
            label_mask=torch.ones(len(labels), dtype=torch.bool),
            cross=self._cross(uid, {"item": target, "artist": st.item_artist[target], "album": st.item_album[target],
                                    "timestamp": np.asarray(st.timestamp[anchor]),
                                    "organic": np.asarray(st.organic[anchor])}),
        )
        return batch, None

    # ------------------------------------------------------------------ the Dataset protocol
    def describe(self) -> dict[str, Any]:
        t, m = self.timeline, self.store.meta
        return {
            "format": self.format.value, "path": m["root"], "layout": m["layout"], "events": m["counts"],
            "users": self.users, "users_seen": m["users_seen"], "train_users": len(self.train_users),
            "eval_users": len(self.eval_users), "train_samples": self.train_samples,
            "eval_samples": self.eval_samples, "train_samples_available": int(self._train.first[-1]),
            "eval_samples_available": int(self._eval.first[-1]), "window_seconds": t.window_seconds,
            "origin": t.origin, "train_windows": [self._train.windows[0], self.eval_window - 1],
            "eval_window": self.eval_window, "candidates": self.candidates,
            "max_sequence_length": self.max_sequence_length, "tables": self.tables,
        }

    def manifest(self) -> dict[str, Any]:
        """What a run's worker reopens the data from: its files' names and sizes (checked, not read
        again; the run's fingerprint takes them, so a copy elsewhere is the same data)."""
        files = [{"name": e["name"], "bytes": e["bytes"]} for e in self.store.meta["files"]]
        return {"format": self.format.value, "root": self.store.meta["root"], "files": files}


# --------------------------------------------------------------------------- opening
def _timeline_of(spec: EventStreamSpec | YambdaSpec, store: YambdaStore) -> Timeline:
    if isinstance(spec, EventStreamSpec):  # the generator's own (an export)
        return Timeline(0, spec.window_seconds, spec.windows,
                        range(spec.warmup_windows, spec.warmup_windows + spec.train_windows))
    m = store.meta
    if m["t_max"] < 0 or m["listen_t_min"] >= 2**62:
        raise bad_input(f"{m['root']}: no listens: nothing to cut samples from")
    test_start = m["t_max"] + 1 - spec.test_seconds
    end = test_start - spec.gap_seconds
    origin = max(int(m["listen_t_min"]), end - spec.train_days * 86400)
    windows = max(1, -(-(end - origin) // spec.window_seconds))
    return Timeline(origin, spec.window_seconds, windows,
                    range(spec.warmup_windows, min(windows, spec.warmup_windows + spec.train_windows)), end)


def spec_of(dataset: Mapping[str, Any]) -> EventStreamSpec | YambdaSpec:
    """A ``dataset`` section as the reader takes it: ``kind: event_streams`` (an export of the generator)
    or ``kind: yambda`` (Yambda itself; another kind is refused in one line)."""
    if dataset.get("kind") == EventStreamSpec.KIND:
        return EventStreamSpec.from_section(dataset)
    return YambdaSpec.from_section(dataset)


def bounds_of(spec: EventStreamSpec | YambdaSpec) -> Bounds:
    """The spec's tables: every id read must lie below them."""
    return Bounds(spec.users, spec.item_rows, spec.artist_rows, spec.album_rows)


def open_yambda(dataset: Mapping[str, Any], path: Path | str, *, manifest: Mapping[str, Any] | None = None,
                cache_dir: Path | str | None = None, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                progress: Callable[[str], None] | None = None, scale: str | None = None) -> YambdaEventStreams:
    """The Yambda files at ``path`` as the data set a benchmark's ``dataset`` section (``kind:
    event_streams`` for an export of the generator, ``kind: yambda`` for Yambda itself) describes,
    validated against it. ``path`` is a folder of events or a dataset's root, read at ``scale`` (None:
    the spec's ``scale``; see :func:`~harness.reference.data.yambda_store.find_layout`). With
    ``manifest``, the files must be the ones it names (same sizes)."""
    spec = spec_of(dataset)
    layout = find_layout(path, scale=scale if scale is not None else getattr(spec, "scale", None))
    if manifest is not None:
        now = {e["name"]: e["bytes"] for e in layout.entries()}
        where = {p.name: p for p in layout.files()}  # a mapping may lie above the events
        for entry in manifest["files"]:
            if now.get(entry["name"]) != entry["bytes"]:
                raise bad_input(f"{where.get(entry['name'], layout.root / entry['name'])}: changed since it was "
                                f"validated (was {entry['bytes']} bytes, now {now.get(entry['name'], 'missing')})")
    bounds = bounds_of(spec)
    store = build_store(layout, bounds, cache_dir=cache_dir, memory_budget_bytes=memory_budget_bytes,
                        progress=progress)
    return YambdaEventStreams(
        store, _timeline_of(spec, store), bounds=bounds, actions=spec.actions, candidates=spec.candidates,
        max_sequence_length=spec.max_sequence_length, seed=spec.seed, eval_user_fraction=spec.eval_user_fraction,
        train_samples=spec.train_samples, eval_samples=spec.eval_samples, memory_budget_bytes=memory_budget_bytes,
        kind=str(dataset.get("kind")), crosses=spec.cross_features)
