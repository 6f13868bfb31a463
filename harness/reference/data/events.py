"""Users' event streams as a dataset for the HSTU ranker (``dlrmv4``): synthetic listening
histories with a planted sequential teacher, cut into samples and windows as MLPerf's reference
cuts Yambda. The cutting (:class:`EventStreams`: splits, windows, order, eval split, ranks' slices)
runs over any source of events: the generator here (:class:`SyntheticEventStreams`), Yambda's parquet
in :mod:`harness.reference.data.yambda`.

**The streams.** Each user listens to tracks; a track (``item``) belongs to one album and an
album to one artist (a fixed catalogue drawn from the seed). A user's events are listens, each
with a played ratio, in time order, and a ``LIKE`` event right after some of the well-played
listens. A listen's action is ``LISTEN_PLUS`` when more than 50% was played (Yambda's
``listen_plus``), else ``SKIP``. Time is cut into windows of ``window_seconds`` (one day, as the
reference's streaming windows): ``warmup_windows`` of history only, then ``train_windows``, then
the eval window.

**A sample** is one user's ``candidates`` consecutive listens in one window (one listen by
default, the reference's *anchor*), with that user's events before the first of them as its
history: everything the user did in earlier windows and earlier in the same window, the most
recent ``max_sequence_length - candidates`` events kept. The label of a candidate is its
``listen_plus``. One sample is one row of a batch, and so one unit of ``train_samples`` and of
``samples_count``.

**Order.** Train position ``p`` is the ``p``-th sample of the train users' samples in the train
windows, window after window, and within a window by the time of its first candidate (then user,
then ordinal); global batch ``k`` of epoch 0 holds positions ``[k * B, (k + 1) * B)``, so training
runs forward in time. Ranks, ``start`` and later epochs follow
:mod:`harness.reference.data.datasets`'s rules exactly (the same helpers), so the union over the
ranks never depends on the world size. The train split is the first ``train_samples`` of them; the
**eval window** is the window right after the last one the train split reaches, and the eval split
is the first ``eval_samples`` samples of the held-out users in it, in the same order.

**Held-out users.** A fraction ``eval_user_fraction`` of the users (chosen by a hash of the user
id, as the reference's ``train_split_percentage``) is never trained on: their samples exist only in
the eval split, scored with their own history. With fraction 0 every user is trained, and the eval
split is every user's samples in the eval window. Nothing of the eval window is in any training
sample, and with a holdout nothing of an eval user is either (the tests check both).

**Where it follows the reference** (``mlcommons/training``, ``recommendation_v4``,
``dlrm_v3/datasets/yambda.py`` and ``streaming_train_eval_loop`` under ``dlrm_v3/train/``): a sample is
an anchor listen labelled ``listen_plus``; the history is causal (the user's events strictly before
the anchor, across windows), truncated to its most recent events so that history and candidates fit
``max_sequence_length``; fixed-length windows trained in time order; a fixed eval set of held-out
users' anchors in the window just past training, the same set at every eval; each sample carries the
spec's ``cross_features``, hashed as the reference hashes them from its (first) candidate's uid, track,
artist, album, hour of day and ``is_organic`` (:mod:`harness.reference.data.crosses`; the generator
draws ``is_organic`` per listen, with ``organic_prob``, and the teacher ignores it).

**Where it differs.** (1) ``candidates`` may exceed one: the next listens of the same user, all
behind the same history (the reference repeats one target). (2) Within a window the reference reads
anchors user by user (optionally shuffled); we order them by time, which mixes users in a batch and
keeps "forward in time" literal. (3) The reference keeps up to ``history_length / 3`` events of each
of three pools (listen-plus, like, skip) interleaved; we keep the most recent events whatever their
kind (the action says which). (4) The reference requires a
minimum number of earlier events for an anchor; here the warm-up windows give every user a history,
and an empty one is allowed. (5) The reference deals a window's anchors to the ranks round-robin;
we give rank ``r`` the ``r``-th slice of each global batch (the harness's rule; the same union).
(6) The reference's threshold is ``played_ratio_pct >= 50``; ours is ``> 50`` as Yambda's
``listen_plus`` is defined (the generator never draws exactly 50). (7) Counts are what the
generator draws: ``train_samples`` and ``eval_samples`` must not exceed what the windows hold
(:meth:`SyntheticEventStreams.describe` says how many they hold).

**The teacher.** A listen's item comes from one of three moves: repeat a recent listen (its
distance geometric), a track of one of the user's ``favourites`` artists, or exploration (artists by
a Zipf law). The favourites drift: each slot is redrawn every ``drift_windows`` windows, at a phase
of its own. The probability that a listen is played beyond 50% is

    p = sigmoid(bias + favourite_weight * [artist is a current favourite]
                     + artist_recency_weight * sum_{d=1..K} decay**(d-1) * [artist of listen -d is this artist]
                     + repeat_weight * [the item is among the last K listens]
                     + quality[item] + user_bias[user])

with ``K = recency_events``. Everything in it but the latent favourites can be read off the
history (the favourites show as the artists the user keeps playing well and liking), so a sequential
model can learn it; ranking the eval candidates by ``p`` gives :meth:`SyntheticEventStreams.best_auc`,
the best AUC any model can expect.

**Determinism.** Every value is a pure function of the seed and of (user, window, ordinal) through
:mod:`harness.reference.data.counter_rng`; a batch generates only its own users' streams (all of
them at once, vectorised), so any rank makes exactly its slice and nothing depends on the world
size. Float reductions run along one user's row only, never across users, so the values do not
depend on which users share a batch.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import counter_rng as rng
from harness.reference.data.crosses import CrossFeature, anchor_keys, cross_features, hash_crosses
from harness.reference.data.datasets import eval_range, train_ranges
from harness.reference.data.event_batch import UNKNOWN_ACTION, EventBatch
from harness.reference.data.jagged import exclusive_cumsum, ranges
from harness.rules.auc import roc_auc


class EventFormat(enum.Enum):
    """Where event streams come from: the generator, or Yambda's parquet (:mod:`.yambda`)."""

    SYNTHETIC_EVENTS = "synthetic-events"
    YAMBDA_PARQUET = "yambda-parquet"


class Action(enum.IntEnum):
    """What a user did with an event: the rows of the action table."""

    UNKNOWN = UNKNOWN_ACTION  # a candidate: what the model predicts
    LISTEN_PLUS = 1  # played more than 50%
    SKIP = 2  # played 50% or less
    LIKE = 3


LISTEN_PLUS_PCT = 50.0

# counter_rng streams, one per kind of random quantity (a range apart from synthetic.py's)
_S = 64 << 20
(_S_ALBUM_OWNER, _S_ITEM_OWNER, _S_ARTIST_RANK, _S_QUALITY, _S_USER_BIAS, _S_SPLIT, _S_COUNT, _S_GAP, _S_MODE,
 _S_SLOT, _S_EXPLORE, _S_ALBUM, _S_ITEM, _S_DISTANCE, _S_PHASE, _S_FAVOURITE, _S_LABEL, _S_PLAYED,
 _S_LIKE, _S_ORGANIC) = (_S + i for i in range(20))

_ORDINAL_BITS = 24  # listens per user < 2**24 (the content's counter is user << 24 | ordinal)
_SLOT_BITS = 16  # listens per user and window < 2**16 (the time gaps' counter)


# ---------------------------------------------------------------------------------- spec
@dataclass(frozen=True)
class EventTeacherSpec:
    """The planted listener: how tracks are chosen and how likely each is played beyond 50%."""

    favourites: int = 3  # favourite-artist slots per user
    drift_windows: float = 4.0  # a slot's artist is redrawn every this many windows
    repeat_prob: float = 0.25  # a listen repeats a recent one
    favourite_prob: float = 0.45  # else a track of a current favourite; the rest explores
    repeat_mean_distance: float = 3.0  # how many listens back a repeat reaches, on average
    artist_zipf: float = 0.9  # exploration's (and favourites') law over artists
    recency_events: int = 16  # K: the listens the teacher looks back at
    recency_decay: float = 0.8
    bias: float = -0.9
    favourite_weight: float = 1.5
    artist_recency_weight: float = 0.8
    repeat_weight: float = 0.8
    item_quality_std: float = 0.5
    user_bias_std: float = 0.5
    like_prob: float = 0.15  # a well-played listen of a favourite is liked (a third as often otherwise)
    organic_prob: float = 0.6  # a listen is organic (Yambda's is_organic: not from a recommendation); no effect on p

    def __post_init__(self) -> None:
        if self.favourites < 1 or self.recency_events < 1 or self.drift_windows <= 0:
            raise HarnessError("event teacher: favourites and recency_events must be >= 1, drift_windows > 0",
                               ErrorCategory.BAD_INPUT)
        if not (0 <= self.repeat_prob and 0 <= self.favourite_prob and self.repeat_prob + self.favourite_prob <= 1):
            raise HarnessError("event teacher: repeat_prob and favourite_prob must be >= 0 and sum to <= 1",
                               ErrorCategory.BAD_INPUT)
        if (self.repeat_mean_distance <= 0 or self.artist_zipf <= 0 or not 0 <= self.like_prob <= 1
                or not 0 <= self.organic_prob <= 1):
            raise HarnessError("event teacher: repeat_mean_distance and artist_zipf must be > 0, like_prob and "
                               "organic_prob in [0, 1]", ErrorCategory.BAD_INPUT)


@dataclass(frozen=True)
class EventStreamSpec:
    """A benchmark spec's ``dataset`` section of ``kind: event_streams``.

    Keys (``EventStreamSpec.from_section``): ``seed``; the tables ``users``, ``item_rows``,
    ``artist_rows``, ``album_rows`` (``item_rows >= album_rows >= artist_rows``) and ``actions``
    (rows of the action table, at least ``len(Action)``); the timeline ``warmup_windows`` (history
    only), ``train_windows``, ``window_seconds``; ``user_samples_per_window: [lo, hi]`` (each
    user's samples in each window, uniform, ``candidates`` listens each); ``candidates`` per sample;
    ``max_sequence_length`` (history plus candidates); ``eval_user_fraction`` (users held out of
    training); ``train_samples`` and ``eval_samples`` (the splits' sizes); ``teacher``
    (:class:`EventTeacherSpec`'s fields); ``cross_features`` (hashed crosses each sample carries:
    :func:`~harness.reference.data.crosses.cross_features`).
    """

    seed: int
    users: int
    item_rows: int
    artist_rows: int
    album_rows: int
    train_windows: int
    train_samples: int
    eval_samples: int
    max_sequence_length: int = 128
    candidates: int = 1
    warmup_windows: int = 4
    window_seconds: int = 86400
    user_samples_per_window: tuple[int, int] = (0, 8)
    eval_user_fraction: float = 0.1
    actions: int = len(Action)
    teacher: EventTeacherSpec = EventTeacherSpec()
    cross_features: tuple[CrossFeature, ...] = ()

    KIND = "event_streams"

    @classmethod
    def from_section(cls, dataset: Mapping[str, Any]) -> EventStreamSpec:
        """The spec of a benchmark's ``dataset`` section; unknown keys are refused."""
        if dataset.get("kind") != cls.KIND:
            raise HarnessError(f"not an event-stream data set: kind {dataset.get('kind')!r}", ErrorCategory.BAD_INPUT)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(dataset) - known - {"kind"})
        if unknown:
            raise HarnessError(f"event_streams data set: unknown keys {unknown} (known: {sorted(known)})",
                               ErrorCategory.BAD_INPUT)
        values = {k: v for k, v in dataset.items() if k != "kind"}
        teacher = values.pop("teacher", {}) or {}
        bad = sorted(set(teacher) - {f.name for f in fields(EventTeacherSpec)})
        if bad:
            raise HarnessError(f"event_streams teacher: unknown keys {bad}", ErrorCategory.BAD_INPUT)
        if "user_samples_per_window" in values:
            values["user_samples_per_window"] = tuple(values["user_samples_per_window"])
        values["cross_features"] = cross_features(dataset)
        try:
            return cls(**values, teacher=EventTeacherSpec(**teacher))
        except TypeError as err:
            raise HarnessError(f"event_streams data set: {err}", ErrorCategory.BAD_INPUT) from None

    @property
    def windows(self) -> int:
        """All windows: warm-up, train, and the one after them (the latest possible eval window)."""
        return self.warmup_windows + self.train_windows + 1

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise HarnessError(f"event_streams data set: {what}", ErrorCategory.BAD_INPUT)

        need(self.users >= 1 and self.artist_rows >= 1, "users and artist_rows must be >= 1")
        need(self.item_rows >= self.album_rows >= self.artist_rows,
             "every artist needs an album and every album a track: item_rows >= album_rows >= artist_rows")
        need(self.actions >= len(Action), f"actions must be >= {len(Action)}: the ids {[a.name for a in Action]}")
        need(self.train_windows >= 1 and self.warmup_windows >= 0, "train_windows >= 1, warmup_windows >= 0")
        need(self.candidates >= 1 and self.max_sequence_length > self.candidates,
             "candidates >= 1 and max_sequence_length > candidates (room for a history)")
        lo, hi = self.user_samples_per_window
        need(0 <= lo <= hi and hi >= 1, "user_samples_per_window is [lo, hi] with 0 <= lo <= hi, hi >= 1")
        listens = hi * self.candidates
        need(listens + 1 < 1 << _SLOT_BITS and 2 * (listens + 1) < self.window_seconds,
             f"{listens} listens a window do not fit: lower user_samples_per_window or candidates, or widen "
             "window_seconds")
        need(listens * self.windows < 1 << _ORDINAL_BITS, "too many listens per user: fewer windows or samples")
        need(0.0 <= self.eval_user_fraction < 1.0, "eval_user_fraction must lie in [0, 1)")
        need(self.train_samples >= 1 and self.eval_samples >= 1, "train_samples and eval_samples must be >= 1")


# ---------------------------------------------------------------------------------- helpers
def _zipf_rank(u: np.ndarray, n: int, s: float) -> np.ndarray:
    """Ranks in [0, n) with P(r) ~ (r + 1) ** -s (the inverse of the continuous law's CDF)."""
    if abs(s - 1.0) < 1e-12:
        x = np.power(float(n + 1), u)
    else:
        x = np.power(1.0 + u * (float(n + 1) ** (1.0 - s) - 1.0), 1.0 / (1.0 - s))
    return np.clip(np.floor(x).astype(np.int64) - 1, 0, n - 1)


def _u64(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


class Catalogue:
    """Artists own albums, albums own tracks, each a contiguous range of ids; artists' popularity
    ranks are a seeded permutation; each track has a quality (the teacher's item effect)."""

    def __init__(self, seed: int, *, artist_rows: int, album_rows: int, item_rows: int, quality_std: float):
        self.artist_rows, self.album_rows, self.item_rows = artist_rows, album_rows, item_rows
        self.album_artist, self.album_first, self.album_count = self._own(seed, _S_ALBUM_OWNER, artist_rows, album_rows)
        self.item_album, self.item_first, self.item_count = self._own(seed, _S_ITEM_OWNER, album_rows, item_rows)
        self.item_artist = self.album_artist[self.item_album]
        self.artist_by_rank = np.argsort(rng.uniform(rng.key(seed, _S_ARTIST_RANK), np.arange(artist_rows)),
                                         kind="stable").astype(np.int64)
        self.quality = quality_std * rng.normal(rng.key(seed, _S_QUALITY), np.arange(item_rows))

    @staticmethod
    def _own(seed: int, stream: int, owners: int, owned: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each owner gets one, the rest are spread uniformly: ``(owner of each, first of each owner, count)``."""
        extra = np.floor(rng.uniform(rng.key(seed, stream), np.arange(owned - owners)) * owners).astype(np.int64)
        count = 1 + np.bincount(extra, minlength=owners).astype(np.int64)
        return np.repeat(np.arange(owners), count), exclusive_cumsum(count), count

    def artist(self, u: np.ndarray, zipf: float) -> np.ndarray:
        return self.artist_by_rank[_zipf_rank(u, self.artist_rows, zipf)]

    def track(self, artist: np.ndarray, u_album: np.ndarray, u_item: np.ndarray) -> np.ndarray:
        """A track of ``artist``: an album uniformly, then a track of it uniformly."""
        album = self.album_first[artist] + np.floor(u_album * self.album_count[artist]).astype(np.int64)
        return self.item_first[album] + np.floor(u_item * self.item_count[album]).astype(np.int64)


@dataclass(frozen=True)
class UserStreams:
    """Some users' streams through one window. Listens are flat, user after user, in time order;
    ``events`` are the same listens with the likes inserted (the history's events)."""

    uid: np.ndarray  # [U]
    window_first_listen: np.ndarray  # [U, windows + 1]: flat index of each window's first listen of each user
    listen: dict[str, np.ndarray]  # item, artist, album, timestamp, played_ratio, listen_plus, probability, organic
    listen_event: np.ndarray  # [L]: each listen's index in ``events``
    user_first_event: np.ndarray  # [U + 1]
    events: dict[str, np.ndarray]  # item, artist, album, action, timestamp, organic (a like: its listen's)


# ---------------------------------------------------------------------------------- the data set
@dataclass(frozen=True)
class _Split:
    users: np.ndarray  # the users whose samples the split holds
    windows: tuple[int, ...]  # the windows it reads, in order
    first: np.ndarray  # [len(windows) + 1]: position of each window's first sample, and the end
    samples: int


def held_out_users(seed: int, users: int, eval_user_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """``(train_users, eval_users)``: a fraction ``eval_user_fraction`` of the users, chosen by a hash
    of ``(seed, uid)``, is held out of training; with 0, every user is also an eval user."""
    everyone = np.arange(users, dtype=np.int64)
    held_out = rng.uniform(rng.key(seed, _S_SPLIT), everyone) < eval_user_fraction
    return everyone[~held_out], (everyone[held_out] if eval_user_fraction > 0 else everyone)


class EventStreams:
    """Samples cut from users' event streams, whatever makes the events: the splits, the windows,
    the train order, the eval split and the ranks' slices, as the module's docstring defines them.

    A subclass is an event source: it says how many samples users have in a window
    (:meth:`_window_sizes`), which they are in time order (:meth:`_anchors`) and what a sample holds
    (:meth:`_gather`), and calls :meth:`_cut` once it can answer. The generator
    (:class:`SyntheticEventStreams`) and Yambda's parquet (:mod:`harness.reference.data.yambda`) are the
    two sources: the same events give the same batches, bit for bit."""

    format: EventFormat
    reshuffles = True
    kind = "event_streams"  # the spec's data set kind, as messages name it
    users: int
    item_rows: int
    artist_rows: int
    album_rows: int
    actions: int
    candidates: int
    max_sequence_length: int
    crosses: tuple[CrossFeature, ...] = ()  # the cross features every sample carries (EventBatch.cross)

    def _cut(self, *, train_users: np.ndarray, eval_users: np.ndarray, train_windows: range, train_samples: int,
             eval_samples: int) -> None:
        """The splits: the train users' samples of ``train_windows`` in order, and the eval users'
        samples of the window after the last one the train split reaches."""
        self.train_users, self.eval_users = train_users, eval_users
        self._tables: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._train = self._split(train_users, train_windows, train_samples, "train")
        last = self._train.windows[int(np.searchsorted(self._train.first, train_samples - 1, side="right")) - 1]
        self.eval_window = last + 1
        self._eval = self._split(eval_users, [self.eval_window], eval_samples, "eval")
        self.train_samples, self.eval_samples = train_samples, eval_samples

    # ------------------------------------------------------------------ what a source answers
    def _window_sizes(self, users: np.ndarray, windows: tuple[int, ...]) -> list[int]:
        """How many samples ``users`` have in each of ``windows``."""
        raise NotImplementedError

    def _anchors(self, users: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
        """``(uid, ordinal)`` of ``users``' samples in ``window``, ordered by the time of the first
        candidate, then user, then ordinal."""
        raise NotImplementedError

    def _gather(self, uid: np.ndarray, window: np.ndarray, ordinal: np.ndarray) -> tuple[EventBatch, np.ndarray | None]:
        """The batch of the samples ``(uid, window, ordinal)``, and each candidate's probability under
        the planted teacher where the source has one (None otherwise)."""
        raise NotImplementedError

    def _cross(self, uid: np.ndarray, anchor: Mapping[str, np.ndarray]) -> torch.Tensor:
        """``EventBatch.cross`` of samples whose first candidates have the fields ``anchor`` (``item``,
        ``artist``, ``album``, ``timestamp``, ``organic``): the reference's hash of each cross's keys."""
        keys = anchor_keys(uid=uid, item=anchor["item"], artist=anchor["artist"], album=anchor["album"],
                           timestamp=anchor["timestamp"], is_organic=anchor["organic"])
        return torch.from_numpy(hash_crosses(keys, self.crosses))

    @property
    def tables(self) -> dict[str, int]:
        """The rows of each embedding table the model needs."""
        return {"item": self.item_rows, "artist": self.artist_rows, "album": self.album_rows, "uid": self.users,
                "action": self.actions}

    # ------------------------------------------------------------------ the cutting
    def _split(self, users: np.ndarray, windows: Any, samples: int, name: str) -> _Split:
        windows = tuple(windows)
        first = np.concatenate([[0], np.cumsum(self._window_sizes(users, windows))]).astype(np.int64)
        if samples > first[-1]:
            raise HarnessError(
                f"{self.kind}: {name}_samples = {samples:,} but the {name} windows hold {int(first[-1]):,} samples "
                f"of {len(users):,} users; {self._more_samples_hint(name)}", ErrorCategory.BAD_INPUT)
        return _Split(users, windows, first, samples)

    def _more_samples_hint(self, name: str) -> str:
        """How to get more samples than the windows hold (what the message of a too short split says)."""
        return f"lower {name}_samples or raise users, train_windows or user_samples_per_window"

    def _window_table(self, split: _Split, window: int) -> tuple[np.ndarray, np.ndarray]:
        """``(uid, ordinal)`` of the window's samples of the split's users, by time of the first candidate."""
        key = ("train" if split is self._train else "eval", window)
        if key not in self._tables:
            table = self._anchors(split.users, window)
            if len(self._tables) >= 4:  # one pass reads the windows in order: a few suffice
                del self._tables[next(iter(self._tables))]
            self._tables[key] = table
        return self._tables[key]

    def _locate(self, split: _Split, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(uid, window, ordinal)`` of the split's samples at ``positions``."""
        slot = np.searchsorted(split.first, positions, side="right") - 1
        uid, window, ordinal = (np.empty(len(positions), dtype=np.int64) for _ in range(3))
        for s in np.unique(slot):
            at = slot == s
            table_uid, table_ordinal = self._window_table(split, split.windows[s])
            row = positions[at] - split.first[s]
            uid[at], ordinal[at], window[at] = table_uid[row], table_ordinal[row], split.windows[s]
        return uid, window, ordinal

    def samples(self, split: str, positions: np.ndarray) -> EventBatch:
        """The samples at ``positions`` of split ``"train"`` or ``"eval"``, in that order."""
        batch, _ = self._samples(self._train if split == "train" else self._eval, np.asarray(positions, dtype=np.int64))
        return batch

    def _samples(self, split: _Split, positions: np.ndarray) -> tuple[EventBatch, np.ndarray | None]:
        return self._gather(*self._locate(split, positions))

    # ------------------------------------------------------------------ the Dataset protocol
    def train_batches(self, batch_size: int, *, epoch: int = 0, seed: int = 0, rank: int = 0,
                      world_size: int = 1, start: int = 0) -> Iterator[EventBatch]:
        """This rank's slice of each global batch of ``epoch``, from global batch ``start`` on."""
        for lo, hi in train_ranges(self.train_samples, batch_size, epoch=epoch, seed=seed, rank=rank,
                                   world_size=world_size, start=start):
            yield self.samples("train", np.arange(lo, hi, dtype=np.int64))

    def eval_batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Iterator[EventBatch]:
        """This rank's contiguous part of the eval split, in batches of ``batch_size``."""
        lo, hi = eval_range(self.eval_samples, rank, world_size)
        for a in range(lo, hi, batch_size):
            yield self.samples("eval", np.arange(a, min(a + batch_size, hi), dtype=np.int64))


class SyntheticEventStreams(EventStreams):
    """Synthetic event streams as a data set: train and eval batches of :class:`EventBatch`,
    the tables' sizes the model needs, and the planted teacher's AUC."""

    format = EventFormat.SYNTHETIC_EVENTS

    def __init__(self, dataset: Mapping[str, Any] | EventStreamSpec):
        self.spec = dataset if isinstance(dataset, EventStreamSpec) else EventStreamSpec.from_section(dataset)
        s, t = self.spec, self.spec.teacher
        self.catalogue = Catalogue(s.seed, artist_rows=s.artist_rows, album_rows=s.album_rows,
                                   item_rows=s.item_rows, quality_std=t.item_quality_std)
        self.users, self.item_rows, self.artist_rows = s.users, s.item_rows, s.artist_rows
        self.album_rows, self.actions = s.album_rows, s.actions
        self.candidates, self.max_sequence_length = s.candidates, s.max_sequence_length
        self.crosses = s.cross_features
        self._keys = {stream: rng.key(s.seed, stream) for stream in range(_S, _S + 20)}
        train_users, eval_users = held_out_users(s.seed, s.users, s.eval_user_fraction)
        self._cut(train_users=train_users, eval_users=eval_users,
                  train_windows=range(s.warmup_windows, s.warmup_windows + s.train_windows),
                  train_samples=s.train_samples, eval_samples=s.eval_samples)
        self._best_auc: float | None = None

    # ------------------------------------------------------------------ timeline
    def user_samples(self, uids: np.ndarray, windows: np.ndarray) -> np.ndarray:
        """How many samples user ``uids[i]`` has in window ``windows[i]`` (``candidates`` listens each)."""
        lo, hi = self.spec.user_samples_per_window
        c = _u64(uids) * np.uint64(self.spec.windows) + _u64(windows)
        return lo + np.floor(rng.uniform(self._keys[_S_COUNT], c) * (hi - lo + 1)).astype(np.int64)

    def listen_times(self, uids: np.ndarray, windows: np.ndarray, listens: np.ndarray) -> np.ndarray:
        """The times of ``listens[i]`` listens of user ``uids[i]`` in window ``windows[i]``, flat, pair
        after pair: uniform order statistics over the window, at least 2 s apart (room for a like)."""
        width = int(listens.max()) + 1 if len(listens) else 1
        col = np.arange(width, dtype=np.int64)
        pair = (_u64(uids) * np.uint64(self.spec.windows) + _u64(windows)) << np.uint64(_SLOT_BITS)
        gaps = -np.log1p(-rng.uniform(self._keys[_S_GAP], pair[:, None] + _u64(col)[None, :]))
        gaps = np.where(col[None, :] <= listens[:, None], gaps, 0.0)
        cum = np.cumsum(gaps, axis=1)  # along one pair's row only: exact whatever else is in the batch
        frac = cum / cum[np.arange(len(listens)), listens][:, None]
        span = (self.spec.window_seconds - 2 * listens)[:, None]
        ts = windows[:, None] * self.spec.window_seconds + 2 * col[None, :] + np.floor(span * frac).astype(np.int64)
        return ts[col[None, :] < listens[:, None]]

    def _window_sizes(self, users: np.ndarray, windows: tuple[int, ...]) -> list[int]:
        return [int(self.user_samples(users, np.full(len(users), w)).sum()) for w in windows]

    def _anchors(self, users: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
        n = self.user_samples(users, np.full(len(users), window))
        users, n = users[n > 0], n[n > 0]
        k = self.candidates
        ts = self.listen_times(users, np.full(len(users), window), n * k)
        uid, ordinal = np.repeat(users, n), ranges(np.zeros(len(n)), n)
        anchor_ts = ts[np.repeat(exclusive_cumsum(n * k), n) + ordinal * k]
        order = np.lexsort((ordinal, uid, anchor_ts))
        return uid[order], ordinal[order]

    # ------------------------------------------------------------------ streams and teacher
    def favourite_artists(self, uids: np.ndarray, timestamps: np.ndarray) -> np.ndarray:
        """``[favourites, N]``: each favourite slot's artist of user ``uids[i]`` at ``timestamps[i]``."""
        t, s = self.spec.teacher, self.spec
        period = t.drift_windows * s.window_seconds
        out = np.empty((t.favourites, len(uids)), dtype=np.int64)
        for slot in range(t.favourites):
            user_slot = _u64(uids) * np.uint64(t.favourites) + np.uint64(slot)
            phase = rng.uniform(self._keys[_S_PHASE], user_slot) * period
            epoch = np.floor((timestamps + phase) / period).astype(np.int64)
            u = rng.uniform(self._keys[_S_FAVOURITE], (user_slot << np.uint64(20)) + _u64(epoch))
            out[slot] = self.catalogue.artist(u, t.artist_zipf)
        return out

    def streams(self, uids: np.ndarray, last_window: int) -> UserStreams:
        """Users ``uids``' streams through window ``last_window``, generated together."""
        s, t, cat = self.spec, self.spec.teacher, self.catalogue
        uids = np.asarray(uids, dtype=np.int64)
        nw = last_window + 1
        pair_uid, pair_window = np.repeat(uids, nw), np.tile(np.arange(nw, dtype=np.int64), len(uids))
        listens = self.user_samples(pair_uid, pair_window) * s.candidates
        ts = self.listen_times(pair_uid, pair_window, listens)
        per_user = listens.reshape(len(uids), nw)
        user_first = exclusive_cumsum(per_user.sum(axis=1))
        window_first = user_first[:, None] + np.concatenate(
            [np.zeros((len(uids), 1), dtype=np.int64), np.cumsum(per_user, axis=1)], axis=1)
        uid = np.repeat(pair_uid, listens)
        index = np.arange(len(uid), dtype=np.int64)
        ordinal = index - np.repeat(user_first, per_user.sum(axis=1))
        c = (_u64(uid) << np.uint64(_ORDINAL_BITS)) | _u64(ordinal)
        u = {stream: rng.uniform(self._keys[stream], c) for stream in
             (_S_MODE, _S_SLOT, _S_EXPLORE, _S_ALBUM, _S_ITEM, _S_DISTANCE, _S_LABEL, _S_PLAYED, _S_LIKE,
              _S_ORGANIC)}

        # the moves: repeat a recent listen, play a favourite, or explore
        favourites = self.favourite_artists(uid, ts)
        repeat = (u[_S_MODE] < t.repeat_prob) & (ordinal > 0)
        favourite = ~repeat & (u[_S_MODE] < t.repeat_prob + t.favourite_prob)
        slot = np.minimum(np.floor(u[_S_SLOT] * t.favourites).astype(np.int64), t.favourites - 1)
        artist = np.where(favourite, favourites[slot, index], cat.artist(u[_S_EXPLORE], t.artist_zipf))
        fresh = cat.track(artist, u[_S_ALBUM], u[_S_ITEM])
        distance = 1 + np.floor(-np.log1p(-u[_S_DISTANCE]) * t.repeat_mean_distance).astype(np.int64)
        source = np.where(repeat, index - np.minimum(distance, ordinal), index)
        while True:  # follow repeats of repeats to the fresh draw (pointer doubling)
            nxt = source[source]
            if np.array_equal(nxt, source):
                break
            source = nxt
        item = fresh[source]
        artist, album = cat.item_artist[item], cat.item_album[item]

        # the teacher
        recency = np.zeros(len(uid))
        seen = np.zeros(len(uid), dtype=bool)
        for d in range(1, t.recency_events + 1):
            back = np.maximum(index - d, 0)
            valid = ordinal >= d
            recency += (t.recency_decay ** (d - 1)) * (valid & (artist[back] == artist))
            seen |= valid & (item[back] == item)
        is_favourite = (favourites == artist[None, :]).any(axis=0)
        user_bias = np.repeat(t.user_bias_std * rng.normal(self._keys[_S_USER_BIAS], uids), per_user.sum(axis=1))
        logit = (t.bias + t.favourite_weight * is_favourite + t.artist_recency_weight * recency
                 + t.repeat_weight * seen + cat.quality[item] + user_bias)
        probability = 1.0 / (1.0 + np.exp(-logit))
        listen_plus = u[_S_LABEL] < probability
        played = np.where(listen_plus, LISTEN_PLUS_PCT + 0.5 + (100.0 - LISTEN_PLUS_PCT - 0.5) * u[_S_PLAYED],
                          LISTEN_PLUS_PCT * u[_S_PLAYED]).astype(np.float32)
        like = listen_plus & (u[_S_LIKE] < np.where(is_favourite, t.like_prob, t.like_prob / 3))
        organic = (u[_S_ORGANIC] < t.organic_prob).astype(np.int64)

        # events: each listen, then its like if any (one second later, before the next listen)
        copies = 1 + like.astype(np.int64)
        listen_event = exclusive_cumsum(copies)
        source_listen = np.repeat(index, copies)
        is_like = np.arange(int(copies.sum())) - np.repeat(listen_event, copies) == 1
        action = np.where(is_like, Action.LIKE, np.where(listen_plus[source_listen], Action.LISTEN_PLUS, Action.SKIP))
        events_before = np.concatenate([[0], np.cumsum(copies)]).astype(np.int64)
        return UserStreams(
            uid=uids,
            window_first_listen=window_first,
            listen={"item": item, "artist": artist, "album": album, "timestamp": ts, "played_ratio": played,
                    "listen_plus": listen_plus, "probability": probability, "organic": organic},
            listen_event=listen_event,
            user_first_event=events_before[np.append(user_first, len(index))],
            events={"item": item[source_listen], "artist": artist[source_listen], "album": album[source_listen],
                    "action": action.astype(np.int64), "timestamp": ts[source_listen] + is_like,
                    "organic": organic[source_listen]},
        )

    # ------------------------------------------------------------------ samples
    def _gather(self, uid: np.ndarray, window: np.ndarray, ordinal: np.ndarray) -> tuple[EventBatch, np.ndarray]:
        users, row = np.unique(uid, return_inverse=True)
        st = self.streams(users, int(window.max()) if len(window) else 0)
        k = self.candidates
        anchor = st.window_first_listen[row, window] + ordinal * k  # the first candidate's listen
        end = st.listen_event[anchor]
        history = np.minimum(end - st.user_first_event[row], self.max_sequence_length - k)
        n_events = len(st.events["item"])
        starts = np.stack([end - history, n_events + anchor], axis=1).ravel()
        lengths = np.stack([history, np.full(len(uid), k)], axis=1).ravel()
        gather = ranges(starts, lengths)
        candidates = ranges(anchor, np.full(len(uid), k))

        def column(name: str, candidate_value: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.concatenate([st.events[name], candidate_value])[gather].astype(np.int64))

        listen = st.listen
        batch = EventBatch(
            uid=torch.from_numpy(uid),
            history_lengths=torch.from_numpy(history.astype(np.int64)),
            candidate_lengths=torch.full((len(uid),), k, dtype=torch.int64),
            item=column("item", listen["item"]),
            artist=column("artist", listen["artist"]),
            album=column("album", listen["album"]),
            action=column("action", np.full(len(listen["item"]), UNKNOWN_ACTION)),
            timestamp=column("timestamp", listen["timestamp"]),
            labels=torch.from_numpy(listen["listen_plus"][candidates].astype(np.float32)),
            label_mask=torch.ones(len(candidates), dtype=torch.bool),
            cross=self._cross(uid, {k: listen[k][anchor] for k in ("item", "artist", "album", "timestamp", "organic")}),
        )
        return batch, listen["probability"][candidates]

    # ------------------------------------------------------------------ the teacher's AUC
    def best_auc(self) -> float:
        """AUC on the eval split of ranking its candidates by the teacher's true probability."""
        if self._best_auc is None:
            labels, probs = [], []
            for a in range(0, self.eval_samples, 4096):
                positions = np.arange(a, min(a + 4096, self.eval_samples), dtype=np.int64)
                # _samples, written out: this class's _gather types p (the teacher's probabilities) not None
                batch, p = self._gather(*self._locate(self._eval, positions))
                labels.append(batch.labels.numpy())
                probs.append(p)
            self._best_auc = roc_auc(np.concatenate(labels), np.concatenate(probs))
        return self._best_auc

    def describe(self) -> dict[str, Any]:
        s = self.spec
        return {
            "format": self.format.value, "seed": s.seed, "users": s.users, "train_users": int(len(self.train_users)),
            "eval_users": int(len(self.eval_users)), "train_samples": self.train_samples,
            "eval_samples": self.eval_samples, "train_samples_available": int(self._train.first[-1]),
            "eval_samples_available": int(self._eval.first[-1]), "window_seconds": s.window_seconds,
            "train_windows": [self._train.windows[0], self.eval_window - 1], "eval_window": self.eval_window,
            "candidates": s.candidates, "max_sequence_length": s.max_sequence_length, "tables": self.tables,
        }


def open_event_streams(dataset: Mapping[str, Any]) -> SyntheticEventStreams:
    """The event-stream data set a benchmark spec's ``dataset`` section describes (the generator)."""
    return SyntheticEventStreams(dataset)
