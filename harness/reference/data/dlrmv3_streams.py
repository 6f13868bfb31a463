"""MLPerf Inference ``dlrm-v3``'s synthetic streaming data, as a library: any request of any user at
any timestamp, made on demand, the same whoever makes it.

The benchmark's data are written to CSV by the reference script
``recommendation/dlrm_v3/streaming_synthetic_data.py`` (``mlcommons/inference@b66003e1``; "the
generator" below, cited as ``gen:LINE``) and read back by ``recommendation/dlrm_v3/datasets/
synthetic_streaming.py`` ("the reader", ``read:LINE``). This module is both at once, without the files:
:class:`StreamingSpec` holds the generator's parameters, :class:`StreamingGenerator` makes the
requests and the training samples the reader yields.

**The data.** ``num_items`` items in ``num_categories`` categories, each a contiguous range of
``items_per_category`` ids, so an item's category is ``id // items_per_category`` (gen:72-77,
read:359). Each item has a base rating drawn once from ``item_rating_values`` with
``item_rating_probs`` (gen:87-90). Each of ``num_users`` users has ``categories_per_user`` distinct
categories in a random order (gen:287-290); the order decides how the user rates each of them.
Time runs over ``num_timestamps`` timestamps, the first ``train_timestamps = int(num_timestamps *
train_ratio)`` for training, the rest for inference (gen:318, :372-374).

**Slots.** A user's row of the reader holds ``num_timestamps + 2`` slots (read:195-198): slot 0 is
the base history (``t = -1``), slot ``1 + t`` is training timestamp ``t``, slot ``train_timestamps
+ 1`` the eval slot (``t = train_timestamps``), slot ``t + 2`` inference timestamp ``t``. The base
and eval slots always exist; the others only where the user is active, with probability
``user_sampling_ratio`` (gen:245-263). In each slot the user meets ``n`` items (gen:94-228): ``n``
is ``round(N(avg, avg // 4))`` at least ``num_eval_candidates + 1`` (gen:230-243, with ``avg =
int(num_items * avg_samples_per_item / num_users / num_timestamps)``, gen:69-71) in the base and
training slots, ``num_eval_candidates`` in the eval slot (gen:360), ``num_inference_candidates``
in an inference slot (gen:130). Each item is drawn in two steps:

* its category among the user's, with ``p_c = (alpha / k + count_c) / (alpha + sum count)`` where
  ``k = categories_per_user``, ``alpha`` is uniform in ``alpha_range`` for the slot and ``count_c``
  counts the user's items of category ``c`` in all earlier slots (a Polya urn: users keep to what
  they met; gen:132-144);
* its index, uniform among the category's first ``items_per_category * max(t + 1, 1) //
  num_timestamps`` items, so the catalogue grows with time (gen:145-153).

Its rating is ``(category rating + base rating) / 2`` (gen:201-208). The category rating follows
the pattern of the category's place ``i`` in the user's list: pattern 0 when ``i < k // 4``, 1 when
``i < k // 2``, 2 when ``i < k // 4 * 3``, else 3 (gen:154-157, :162-199). Pattern ``p`` draws level
``l`` of ``pattern_levels[p]`` with ``pattern_probs[p]`` and adds ``pattern_amplitude * cos((t +
pattern_phases[l]) * 2 pi / pattern_period)`` (gen:159-161: ``cos(t pi / 4)``, ``cos((t + 2) pi / 4)``,
``cos((t + 4) pi / 4)``): the taste for a category swings with time.

A base or training slot gives all its items to the user's history and ``num_eval_candidates`` of
them, in random order, as the slot's candidates (gen:209-215). The eval slot's candidates are its
items in random order, and it never enters a history (read:221-228). An inference slot's candidates
are all its items, and a random ``round(N(avg, avg // 4))`` of them (at least ``num_eval_candidates +
1``), in random order, enter the history of later timestamps (gen:216-221).

**A request** (:meth:`StreamingGenerator.requests`) is a user active at inference timestamp ``ts``:
its history is the items of slots ``0 .. train_timestamps`` and of the inference slots before
``ts`` (read:218-230), in slot order, truncated to its first ``max_seq_len -
max_num_candidates_inference - contextual_features`` items (read:337-339; ``dataset.py:330-338``);
its candidates are slot ``ts + 2``'s items (at most ``max_num_candidates_inference``). A **training
sample** (:meth:`StreamingGenerator.train_samples`) is a user active at training timestamp ``ts``:
its history is slots ``0 .. ts``, its candidates slot ``ts + 1``'s (read:203-210); the **eval
sample** (:meth:`StreamingGenerator.eval_samples`) of every user has slots ``0 .. train_timestamps``
as history and the eval slot's candidates (read:211-217). The training and eval histories are cut
to ``max_seq_len - max_num_candidates - contextual_features``. Each history item carries its rating,
category, action weight ``action_weights[int(rating) - 1]`` (read:344-346) and action timestamp 1
(the reader's ``get_timestamp_uih``, read:269-272); each candidate its rating, category and label
``rating >= label_threshold`` (read:347-349). The requests at a timestamp are its active users in
increasing id, as the reader's ``requests_per_ts.csv`` lists them (gen:441-446, :567-582):
:meth:`StreamingGenerator.active_users`.

**Where it differs.** (1) The reference draws from Python's ``random`` and numpy's global generator,
seeded once per file with ``seed + file_idx`` and run user after user (gen:420-421, :427-435), so a
user's data depend on the users before it in its file; here every draw is a pure function of
``(seed, user, slot, position)`` (or of the item id, for base ratings) through
:mod:`harness.reference.data.counter_rng`. The laws are the reference's; the values cannot be its,
bit for bit. (2) The reference draws all ``num_items`` base ratings into one array at start
(gen:87-90, 8 GB at 1e9 items); here an item's base rating is hashed from its id when asked for, so
nothing proportional to items or users is ever allocated. (3) One ``seed`` keys every stream (the
reference seeds the base ratings with 1001 and file ``i`` with ``1001 + i``). (4) An inference slot's
history increment is capped at ``num_inference_candidates`` (the reference's ``random.sample`` would
raise; at the official sizes, N(100, 25) never reaches 2048). (5) The catalogue bound is computed
in integers (``items_per_category * max(t + 1, 1) // num_timestamps``) where the reference takes
``int()`` of a float quotient: the same for every size where the float is exact, the official ones
included. (6) Ratings are returned as the generator's float64 values (what its CSV holds); the
reader's tensors cast them to int64 (``.long()``, read:385, :404), which the consumer does when it
builds tensors; action weights and labels are computed from the floats, as the reader does. Each
history item also carries ``history_source_timestamps`` (the timestamp that made it, ``-1`` for the
base history), which the reference's tensors do not. (7) The reference's files, offsets and
``num_files`` only locate a user's row; ``num_files`` is kept to name the files' users
(:meth:`StreamingGenerator.file_users`; the benchmark's ``sampled-streaming-100b`` set is file 0).

**Determinism.** counter_rng streams ``96 << 20`` + i (:data:`_S`; apart from synthetic.py's ``1 ..
7 << 20``, datasets.py's ``9 << 20``, embeddings.py's ``11 << 20`` and events.py's ``64 << 20`` + i).
Per user and slot the counter is ``user * slots + slot``; per item, that ``<< 24 | position``. A
batch generates its own (distinct) users' slots up to the last one it needs, vectorised over the
users, one slot after another (the urn's counts carry over); every reduction runs along one user,
so a request is the same in any batch, any order, on any rank or thread.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from harness.errors import ErrorCategory, HarnessError, closest
from harness.reference.data import counter_rng as rng
from harness.reference.data.jagged import exclusive_cumsum, ranges

# counter_rng streams, one per kind of random quantity (a range of this module's own)
_S = 96 << 20
(_S_USER_CATEGORY, _S_ACTIVE, _S_LENGTH, _S_ALPHA, _S_CATEGORY, _S_INDEX, _S_LEVEL, _S_PICK,
 _S_BASE_RATING) = (_S + i for i in range(9))

_POSITION_BITS = 24  # items of one user in one slot < 2**24: an item's counter is (user * slots + slot) << 24 | pos
_COUNTER_LIMIT = 1 << (64 - _POSITION_BITS)  # users * slots must stay below this
_MAX_NORMAL = 9.0  # counter_rng.normal never exceeds 8.6 in absolute value (53-bit uniforms)


class Split(enum.Enum):
    """What a batch's rows are: training samples, eval samples or inference requests."""

    TRAIN = "train"
    EVAL = "eval"
    INFERENCE = "inference"


def _bad(what: str) -> HarnessError:
    return HarnessError(f"{StreamingSpec.KIND} data set: {what}", ErrorCategory.BAD_INPUT)


# ---------------------------------------------------------------------------------- spec
@dataclass(frozen=True)
class StreamingSpec:
    """The generator's parameters: a benchmark spec's ``dataset`` section of ``kind: dlrmv3_streaming``.

    Every default is the reference's official value (``gen`` = ``recommendation/dlrm_v3/
    streaming_synthetic_data.py``, ``read`` = ``recommendation/dlrm_v3/datasets/synthetic_streaming.py``,
    ``configs`` = ``recommendation/dlrm_v3/configs.py``, all at ``mlcommons/inference@b66003e1``)."""

    seed: int = 1001  # gen:514 (seed=1001, + file_idx at gen:420-421); base ratings: gen:87
    num_users: int = 5_000_000  # gen:637
    num_items: int = 1_000_000_000  # gen:638
    num_categories: int = 128  # gen:639
    categories_per_user: int = 4  # gen:640
    num_timestamps: int = 100  # gen:641
    avg_samples_per_item: int = 50  # gen:642
    num_eval_candidates: int = 32  # gen:643
    num_inference_candidates: int = 2048  # gen:644
    train_ratio: float = 0.9  # gen:645
    user_sampling_ratio: float = 0.7  # gen:646
    num_files: int = 100  # gen:636
    alpha_range: tuple[int, int] = (1, 500)  # gen:78 (random.randint's bounds, both included: gen:132)
    item_rating_values: tuple[float, ...] = (5.0, 4.0, 3.0, 2.0, 1.0)  # gen:89
    item_rating_probs: tuple[float, ...] = (0.2, 0.25, 0.25, 0.2, 0.1)  # gen:89
    # the four patterns' levels and their probabilities: gen:167-171, :176-180, :185-189, :194-198
    pattern_levels: tuple[tuple[float, ...], ...] = ((4.5, 4.0), (4.5, 4.0, 3.5), (3.5, 3.0, 2.5), (2.5, 2.0, 1.5))
    pattern_probs: tuple[tuple[float, ...], ...] = ((0.8, 0.2), (0.1, 0.8, 0.1), (0.1, 0.8, 0.1), (0.1, 0.8, 0.1))
    pattern_amplitude: float = 0.5  # gen:168 (the 0.5 of "4.5 + 0.5 * cos1"), and each level after it
    pattern_phases: tuple[float, ...] = (0.0, 2.0, 4.0)  # gen:159-161: cos1, cos2, cos3 shift t by 0, 2, 4
    pattern_period: float = 8.0  # gen:159-161: cos(t * pi / 4), a period of 8 timestamps
    label_threshold: float = 3.5  # read:347-349
    action_weights: tuple[int, ...] = (1, 2, 4, 8, 16)  # configs:76
    max_seq_len: int = 16384  # generative_recommenders/modules/dlrm_hstu.py:66 (not overridden by configs)
    contextual_features: int = 1  # configs:78 ({"user_id": 1})
    max_num_candidates: int = 32  # configs:105 (training and eval)
    max_num_candidates_inference: int = 2048  # configs:106

    KIND: ClassVar[str] = "dlrmv3_streaming"

    @classmethod
    def from_section(cls, dataset: Mapping[str, Any]) -> StreamingSpec:
        """The spec of a benchmark's ``dataset`` section (lists become tuples); unknown keys are refused."""
        if dataset.get("kind", cls.KIND) != cls.KIND:
            raise _bad(f"kind {dataset.get('kind')!r} is not {cls.KIND!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(dataset) - known - {"kind"})
        if unknown:
            hint = closest(unknown[0], known)
            raise _bad(f"unknown keys {unknown}" + (f" (did you mean {hint!r}?)" if hint else "")
                       + f"; known: {sorted(known)}")
        values = {k: _tupled(v) for k, v in dataset.items() if k != "kind"}
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            raise _bad(str(err).replace("\n", " ")) from None

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise _bad(what)

        for name in ("num_users", "num_items", "num_categories", "categories_per_user", "num_timestamps",
                     "avg_samples_per_item", "num_eval_candidates", "num_inference_candidates", "num_files",
                     "max_seq_len", "max_num_candidates", "max_num_candidates_inference"):
            need(int(getattr(self, name)) >= 1, f"{name} must be >= 1")
        need(self.contextual_features >= 0, "contextual_features must be >= 0")
        need(self.categories_per_user <= self.num_categories <= self.num_items,
             "need categories_per_user <= num_categories <= num_items")
        need(self.items_per_category >= self.num_timestamps,
             "num_items // num_categories must be >= num_timestamps: the first timestamps draw from the first "
             "items_per_category * (t + 1) // num_timestamps items of a category (gen:145-148)")
        need(0.0 < self.train_ratio < 1.0 and 0 <= self.train_timestamps < self.num_timestamps,
             "train_ratio must leave at least one inference timestamp: 0 < int(num_timestamps * train_ratio) "
             "< num_timestamps")
        need(0.0 <= self.user_sampling_ratio <= 1.0, "user_sampling_ratio must lie in [0, 1]")
        need(len(self.alpha_range) == 2 and 1 <= self.alpha_range[0] <= self.alpha_range[1],
             "alpha_range is [lo, hi] with 1 <= lo <= hi")
        _check_law(self.item_rating_values, self.item_rating_probs, "item_rating")
        need(len(self.pattern_levels) == 4 and len(self.pattern_probs) == 4,
             "pattern_levels and pattern_probs need the reference's four patterns (by quarter of a user's categories)")
        for p, (levels, probs) in enumerate(zip(self.pattern_levels, self.pattern_probs)):
            _check_law(levels, probs, f"pattern {p}")
        need(len(self.pattern_phases) >= max(len(v) for v in self.pattern_levels),
             "pattern_phases needs a phase for each level of the longest pattern")
        need(self.pattern_period > 0, "pattern_period must be > 0")
        low, high = self.rating_bounds
        need(low >= 1.0 and int(high) <= len(self.action_weights),
             f"ratings span [{low}, {high}]: action_weights[int(rating) - 1] needs ratings >= 1 and "
             f"{int(high)} action weights")
        need(self.max_seq_len > max(self.max_num_candidates, self.max_num_candidates_inference)
             + self.contextual_features, "max_seq_len leaves no room for a history")
        need(self.avg_seq_len_per_timestamp >= 1,
             "num_items * avg_samples_per_item / num_users / num_timestamps must be >= 1 (the mean items per slot)")
        longest = max(self.num_inference_candidates, self.avg_seq_len_per_timestamp
                      + _MAX_NORMAL * self.seq_len_std, self.num_eval_candidates + 1)
        need(longest < 1 << _POSITION_BITS, f"a slot may hold {longest:.0f} items; at most {1 << _POSITION_BITS}")
        need(self.num_users * self.slots < _COUNTER_LIMIT, "num_users * (num_timestamps + 2) must be < 2**40")

    # ------------------------------------------------------------------ derived values
    @property
    def items_per_category(self) -> int:
        """Ids per category (gen:72): category ``c`` holds ids ``c * items_per_category`` up to the next one's."""
        return self.num_items // self.num_categories

    @property
    def avg_seq_len_per_timestamp(self) -> int:
        """The mean items a user meets per slot (gen:69-71): 100 at the official sizes."""
        return int(self.num_items * self.avg_samples_per_item / self.num_users / self.num_timestamps)

    @property
    def seq_len_std(self) -> int:
        """The standard deviation of a slot's length (gen:239): ``avg // 4``."""
        return self.avg_seq_len_per_timestamp // 4

    @property
    def min_seq_len(self) -> int:
        """The shortest base or training slot (gen:79): one more than the candidates it gives."""
        return self.num_eval_candidates + 1

    @property
    def train_timestamps(self) -> int:
        """Training timestamps ``0 .. train_timestamps - 1`` (gen:318); inference is the rest (gen:372-374)."""
        return int(self.num_timestamps * self.train_ratio)

    @property
    def slots(self) -> int:
        """Slots per user (read:195-198): base, the training timestamps, eval, the inference timestamps."""
        return self.num_timestamps + 2

    @property
    def eval_slot(self) -> int:
        return self.train_timestamps + 1

    @property
    def rating_bounds(self) -> tuple[float, float]:
        """The lowest and highest rating the generator can make."""
        amp = abs(self.pattern_amplitude)
        levels = [v for lv in self.pattern_levels for v in lv]
        return ((min(levels) - amp + min(self.item_rating_values)) / 2,
                (max(levels) + amp + max(self.item_rating_values)) / 2)

    def max_history(self, split: Split) -> int:
        """The longest history a row of ``split`` keeps (``dataset.py:330-338``): the first items are kept."""
        cap = self.max_num_candidates_inference if split is Split.INFERENCE else self.max_num_candidates
        return self.max_seq_len - cap - self.contextual_features

    def max_candidates(self, split: Split) -> int:
        """The most candidates a row of ``split`` keeps (read:340)."""
        return self.max_num_candidates_inference if split is Split.INFERENCE else self.max_num_candidates

    def slot_of(self, ts: int | np.ndarray, split: Split) -> np.ndarray:
        """The slot holding timestamp ``ts``'s candidates for a row of ``split`` (read:209, :216, :229)."""
        t = np.asarray(ts, dtype=np.int64)
        if split is Split.TRAIN:
            return t + 1
        if split is Split.EVAL:
            return np.full_like(t, self.eval_slot)
        return t + 2

    def slot_time(self, slot: int) -> int:
        """The timestamp ``t`` that a slot's items are made at (``-1`` for the base history)."""
        if slot == 0:
            return -1
        return slot - 1 if slot <= self.eval_slot else slot - 2


def _tupled(v: Any) -> Any:
    """A YAML list as a (nested) tuple, so a spec from a file equals one built in code."""
    return tuple(_tupled(x) for x in v) if isinstance(v, list | tuple) else v


def _check_law(values: tuple[float, ...], probs: tuple[float, ...], name: str) -> None:
    if len(values) < 1 or len(values) != len(probs):
        raise _bad(f"{name}: values and probabilities must be as many, at least one")
    if min(probs) < 0 or abs(math.fsum(probs) - 1.0) > 1e-9:
        raise _bad(f"{name}: probabilities must be >= 0 and sum to 1 (they sum to {math.fsum(probs)})")


# ---------------------------------------------------------------------------------- helpers
def _u64(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _thresholds(probs: tuple[float, ...], width: int) -> np.ndarray:
    """The inverse CDF's cut points of a law, padded with +inf to ``width - 1`` entries:
    ``(u >= cuts).sum()`` is the index drawn by a uniform ``u``."""
    cuts = np.full(width - 1, np.inf)
    cuts[: len(probs) - 1] = np.cumsum(probs)[:-1]
    return cuts


# ---------------------------------------------------------------------------------- a batch
@dataclass(frozen=True, eq=False)
class StreamingRequests:
    """Rows of one split, jagged: row ``r``'s history is ``history_*[h[r]:h[r + 1]]`` with ``h =
    history_offsets()``, its candidates ``candidate_*[c[r]:c[r + 1]]`` with ``c = candidate_offsets()``.

    ``B`` rows, ``H = history_lengths.sum()``, ``C = candidate_lengths.sum()``; ids and integers are
    int64, ratings float64. A row's fields are the reader's keys (read:351-405): ``user_id``
    (``users``), ``item_id``, ``item_rating``, ``action_timestamp``, ``item_weights``, ``item_category_id``,
    ``dummy_query_time`` (``query_times``); ``item_candidate_id``, ``item_candidate_rating``,
    ``item_action_weights`` (``candidate_labels``), ``item_candidate_category_id``."""

    split: Split
    users: np.ndarray  # [B]
    timestamps: np.ndarray  # [B]: the row's timestamp (EVAL: train_timestamps)
    history_lengths: np.ndarray  # [B]
    history_item_ids: np.ndarray  # [H]
    history_ratings: np.ndarray  # [H] float64 (the reader's tensors hold int(rating))
    history_category_ids: np.ndarray  # [H]: item id // items_per_category
    history_action_weights: np.ndarray  # [H]: action_weights[int(rating) - 1]
    history_action_timestamps: np.ndarray  # [H]: 1, as the reader's get_timestamp_uih
    history_source_timestamps: np.ndarray  # [H]: the timestamp that made each item (-1: base); not in the reader
    query_times: np.ndarray  # [B]: max(action timestamps), 0 for an empty history (dummy_query_time)
    candidate_lengths: np.ndarray  # [B]
    candidate_item_ids: np.ndarray  # [C]
    candidate_ratings: np.ndarray  # [C] float64
    candidate_category_ids: np.ndarray  # [C]
    candidate_labels: np.ndarray  # [C]: int(rating >= label_threshold)

    def __len__(self) -> int:
        return len(self.users)

    def history_offsets(self) -> np.ndarray:
        """``[B + 1]``: where each row's history starts, and the end."""
        return np.concatenate([[0], np.cumsum(self.history_lengths)]).astype(np.int64)

    def candidate_offsets(self) -> np.ndarray:
        """``[B + 1]``: where each row's candidates start, and the end."""
        return np.concatenate([[0], np.cumsum(self.candidate_lengths)]).astype(np.int64)

    def row(self, i: int) -> StreamingRequests:
        """Row ``i`` alone, as a batch of one."""
        h, c = self.history_offsets(), self.candidate_offsets()
        hs, cs, rs = slice(h[i], h[i + 1]), slice(c[i], c[i + 1]), slice(i, i + 1)
        values: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "split":
                values[f.name] = v
            elif f.name.startswith("history_") and f.name != "history_lengths":
                values[f.name] = v[hs]
            elif f.name.startswith("candidate_") and f.name != "candidate_lengths":
                values[f.name] = v[cs]
            else:
                values[f.name] = v[rs]
        return StreamingRequests(**values)

    def equals(self, other: StreamingRequests) -> bool:
        """The same rows, field for field, dtypes included."""
        def same(a: Any, b: Any) -> bool:
            if isinstance(a, np.ndarray):
                return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
            return bool(a == b)
        return all(same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))


@dataclass
class _Store:
    """The slots a batch made, per (slot, distinct user): history parts and candidates, flat."""

    hist_len: np.ndarray  # [S, U]
    hist_off: np.ndarray  # [S, U] into the flat history arrays
    hist_item: np.ndarray
    hist_rating: np.ndarray
    hist_t: np.ndarray
    cand_len: np.ndarray  # [S, U]: only where a row wants that slot's candidates
    cand_off: np.ndarray
    cand_item: np.ndarray
    cand_rating: np.ndarray


# ---------------------------------------------------------------------------------- the generator
class StreamingGenerator:
    """The reference's synthetic streaming data set, made on demand (see the module's docstring).

    Nothing it holds or allocates grows with ``num_items`` or ``num_users``: a batch costs about its
    users' slots up to the latest one it needs (at the official sizes ~7k history items and 2048
    candidates per inference request)."""

    def __init__(self, spec: StreamingSpec | None = None):
        self.spec = spec if spec is not None else StreamingSpec()
        s = self.spec
        self._keys = {stream: rng.key(s.seed, stream) for stream in range(_S, _S + 9)}
        self._base_cuts = _thresholds(s.item_rating_probs, len(s.item_rating_probs))
        self._base_values = np.asarray(s.item_rating_values, dtype=np.float64)
        width = max(len(v) for v in s.pattern_levels)
        self._level_cuts = np.stack([_thresholds(p, width) for p in s.pattern_probs])  # [4, width - 1]
        self._levels = np.zeros((4, width))
        for p, lv in enumerate(s.pattern_levels):
            self._levels[p, : len(lv)] = lv
        k = s.categories_per_user
        place = np.arange(k)  # the pattern of each place in a user's category list (gen:154-157, :162-199)
        self._place_pattern = np.where(place < k // 4, 0, np.where(place < k // 2, 1, np.where(place < k // 4 * 3,
                                                                                                 2, 3)))

    # ------------------------------------------------------------------ pure functions of ids
    def item_base_ratings(self, item_ids: np.ndarray) -> np.ndarray:
        """Each item's base rating (gen:87-90), a pure function of ``(seed, item id)``: float64."""
        u = rng.uniform(self._keys[_S_BASE_RATING], _u64(item_ids))
        return self._base_values[np.searchsorted(self._base_cuts, u, side="right")]

    def category_levels(self, t: int) -> np.ndarray:
        """``[4, L]``: each pattern's category ratings at timestamp ``t`` (gen:159-199; padding beyond a
        pattern's levels is never drawn). Computed as the reference's floats: ``level + amp * cos(x)``."""
        s = self.spec
        cos = [math.cos((t + phase) * math.pi * 2 / s.pattern_period) for phase in s.pattern_phases]
        return self._levels + s.pattern_amplitude * np.asarray(cos[: self._levels.shape[1]])[None, :]

    def user_categories(self, users: np.ndarray) -> np.ndarray:
        """``[U, categories_per_user]``: each user's distinct categories in their random order (gen:287-290)."""
        users = _u64(users).ravel()
        k, n = self.spec.categories_per_user, self.spec.num_categories
        chosen = np.zeros((len(users), 0), dtype=np.int64)
        for j in range(k):  # an ordered sample without replacement: draw among the n - j left, skip the taken
            r = np.floor(rng.uniform(self._keys[_S_USER_CATEGORY], users * np.uint64(k) + np.uint64(j))
                         * (n - j)).astype(np.int64)
            for col in np.sort(chosen, axis=1).T:
                r += r >= col
            chosen = np.concatenate([chosen, r[:, None]], axis=1)
        return chosen

    def active(self, users: np.ndarray, ts: np.ndarray | int) -> np.ndarray:
        """Whether each user has a request (inference) or a sample (training) at timestamp ``ts`` (gen:245-263)."""
        s = self.spec
        u, t = np.broadcast_arrays(np.asarray(users, dtype=np.int64), np.asarray(ts, dtype=np.int64))
        if t.size and (t.min() < 0 or t.max() >= s.num_timestamps):
            raise _bad(f"timestamps lie in [0, {s.num_timestamps})")
        slot = np.where(t < s.train_timestamps, t + 1, t + 2)
        return self._active_slot(_u64(u) * np.uint64(s.slots) + _u64(slot))

    def _active_slot(self, counter: np.ndarray) -> np.ndarray:
        return rng.uniform(self._keys[_S_ACTIVE], counter) < self.spec.user_sampling_ratio

    def active_users(self, ts: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The users in ``[start, stop)`` with a request (or training sample) at ``ts``, in increasing id:
        the reader's ``requests_per_ts.csv`` row (gen:441-446, :567-582). Costs ``stop - start``."""
        stop = self.spec.num_users if stop is None else stop
        if not 0 <= start <= stop <= self.spec.num_users:
            raise _bad(f"users lie in [0, {self.spec.num_users})")
        users = np.arange(start, stop, dtype=np.int64)
        return users[self.active(users, ts)]

    def file_users(self, file_idx: int) -> range:
        """The users of the reference's CSV file ``file_idx`` (gen:418-419); file 0 is the benchmark's
        ``sampled-streaming-100b`` set (``recommendation/dlrm_v3/utils.py:408-420``)."""
        per_file = self.spec.num_users // self.spec.num_files
        if not 0 <= file_idx < self.spec.num_files:
            raise _bad(f"files are 0 .. {self.spec.num_files - 1}")
        return range(file_idx * per_file, (file_idx + 1) * per_file)

    # ------------------------------------------------------------------ batches
    def requests(self, users: np.ndarray, ts: np.ndarray | int) -> StreamingRequests:
        """Inference requests of ``users`` at timestamps ``ts`` (broadcast; ``train_timestamps <= ts <
        num_timestamps``), each user active there: histories and ``num_inference_candidates`` candidates."""
        return self._batch(Split.INFERENCE, users, ts)

    def train_samples(self, users: np.ndarray, ts: np.ndarray | int) -> StreamingRequests:
        """Training samples of ``users`` at timestamps ``ts`` (broadcast; ``0 <= ts < train_timestamps``),
        each user active there: histories and ``num_eval_candidates`` candidates."""
        return self._batch(Split.TRAIN, users, ts)

    def eval_samples(self, users: np.ndarray) -> StreamingRequests:
        """The eval sample of each user: its history through training and the eval slot's candidates."""
        users = np.asarray(users, dtype=np.int64).ravel()
        return self._batch(Split.EVAL, users, np.full(len(users), self.spec.train_timestamps))

    def user_train_samples(self, user: int) -> StreamingRequests:
        """All of ``user``'s training samples, in time order (the timestamps where it is active)."""
        ts = np.arange(self.spec.train_timestamps, dtype=np.int64)
        ts = ts[self.active(np.full(len(ts), user), ts)]
        return self._batch(Split.TRAIN, np.full(len(ts), user, dtype=np.int64), ts)

    def _batch(self, split: Split, row_users: np.ndarray | int, row_ts: np.ndarray | int) -> StreamingRequests:
        s = self.spec
        users, ts = (np.ascontiguousarray(a, dtype=np.int64).ravel() for a in
                     np.broadcast_arrays(np.asarray(row_users, dtype=np.int64), np.asarray(row_ts, dtype=np.int64)))
        if users.size and (users.min() < 0 or users.max() >= s.num_users):
            raise _bad(f"users lie in [0, {s.num_users})")
        lo, hi = {Split.TRAIN: (0, s.train_timestamps), Split.EVAL: (s.train_timestamps, s.train_timestamps + 1),
                  Split.INFERENCE: (s.train_timestamps, s.num_timestamps)}[split]
        if ts.size and (ts.min() < lo or ts.max() >= hi):
            raise _bad(f"{split.value} timestamps lie in [{lo}, {hi})")
        if split is not Split.EVAL and users.size:
            idle = ~self.active(users, ts)
            if idle.any():
                i = int(np.argmax(idle))
                raise _bad(f"user {users[i]} has no {split.value} row at timestamp {ts[i]} (inactive there: "
                           f"{int(idle.sum())} of {len(users)} rows; see active_users)")
        target = s.slot_of(ts, split)
        distinct, inverse = np.unique(users, return_inverse=True)
        last = np.full(len(distinct), -1, dtype=np.int64)
        np.maximum.at(last, inverse, target)
        wanted = np.zeros((s.slots, len(distinct)), dtype=bool)
        wanted[target, inverse] = True
        store = self._slots(distinct, last, wanted)
        return self._assemble(split, users, ts, inverse, target, store)

    # ------------------------------------------------------------------ the slots
    def _lengths(self, counter: np.ndarray) -> np.ndarray:
        """A slot's Gaussian length (gen:230-243): ``round(N(avg, avg // 4))``, at least ``min_seq_len``."""
        s = self.spec
        x = s.avg_seq_len_per_timestamp + s.seq_len_std * rng.normal(self._keys[_S_LENGTH], counter)
        return np.maximum(np.rint(x).astype(np.int64), s.min_seq_len)

    def _slots(self, users: np.ndarray, last: np.ndarray, wanted: np.ndarray) -> _Store:
        """Slots ``0 .. last[u]`` of each distinct user, in order (the urn's counts carry from one to the next)."""
        s = self.spec
        n_users, n_slots = len(users), s.slots
        cats = self.user_categories(users)
        counts = np.zeros((n_users, s.categories_per_user), dtype=np.int64)
        hist_len = np.zeros((n_slots, n_users), dtype=np.int64)
        hist_off = np.zeros((n_slots, n_users), dtype=np.int64)
        cand_len, cand_off = np.zeros_like(hist_len), np.zeros_like(hist_off)
        hist: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        cand: list[tuple[np.ndarray, np.ndarray]] = []
        hist_total = cand_total = 0
        for slot in range(int(last.max()) + 1 if n_users else 0):
            t = s.slot_time(slot)
            counter = _u64(users) * np.uint64(n_slots) + np.uint64(slot)
            live = last >= slot
            inference, eval_ = slot > s.eval_slot, slot == s.eval_slot
            if slot > 0 and not eval_:
                live &= self._active_slot(counter)
            if inference:
                n = np.where(live, s.num_inference_candidates, 0)
            elif eval_:
                n = np.where(live, s.num_eval_candidates, 0)
            else:
                n = np.where(live, self._lengths(counter), 0)
            row, item, rating, item_counter = self._draw(counter, cats, counts, n, t)
            want = wanted[slot]
            if inference:  # candidates: all; history: a random subset (gen:216-221)
                keep = np.minimum(self._lengths(counter), s.num_inference_candidates) * live
                h_sel = self._pick(row, n, item_counter, keep)
                c_sel = np.flatnonzero(want[row])
            elif eval_:  # candidates: all, in random order; no history (read:221-228)
                h_sel = np.zeros(0, dtype=np.int64)
                c_sel = self._pick(row, n, item_counter, n * want)
            else:  # history: all; candidates: a random num_eval_candidates of them (gen:209-215)
                h_sel = np.arange(len(item), dtype=np.int64)
                c_sel = self._pick(row, n, item_counter, np.where(want, s.num_eval_candidates, 0))
            h_len = np.bincount(row[h_sel], minlength=n_users)
            hist_len[slot], hist_off[slot] = h_len, hist_total + exclusive_cumsum(h_len)
            hist.append((item[h_sel], rating[h_sel], np.full(len(h_sel), t, dtype=np.int64)))
            hist_total += len(h_sel)
            c_len = np.bincount(row[c_sel], minlength=n_users)
            cand_len[slot], cand_off[slot] = c_len, cand_total + exclusive_cumsum(c_len)
            cand.append((item[c_sel], rating[c_sel]))
            cand_total += len(c_sel)

        def flat(parts: list[Any], i: int, dtype: Any) -> np.ndarray:
            return np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype=dtype)

        return _Store(hist_len, hist_off, flat(hist, 0, np.int64), flat(hist, 1, np.float64), flat(hist, 2, np.int64),
                      cand_len, cand_off, flat(cand, 0, np.int64), flat(cand, 1, np.float64))

    def _draw(self, counter: np.ndarray, cats: np.ndarray, counts: np.ndarray, n: np.ndarray,
              t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``n[u]`` items of each user at timestamp ``t`` (gen:132-208), flat, user after user:
        ``(row, item id, rating, item counter)``. Adds the items' categories to ``counts``."""
        s = self.spec
        n_users, k = cats.shape
        row = np.repeat(np.arange(n_users, dtype=np.int64), n)
        pos = np.arange(len(row), dtype=np.int64) - exclusive_cumsum(n)[row]
        item_counter = (counter[row] << np.uint64(_POSITION_BITS)) | _u64(pos)
        lo, hi = s.alpha_range
        alpha = lo + np.floor(rng.uniform(self._keys[_S_ALPHA], counter) * (hi - lo + 1))
        p = (alpha[:, None] / k + counts) / (alpha + counts.sum(axis=1))[:, None]
        cuts = np.cumsum(p, axis=1)[:, :-1]
        place = (rng.uniform(self._keys[_S_CATEGORY], item_counter)[:, None] >= cuts[row]).sum(axis=1)
        counts += np.bincount(row * k + place, minlength=n_users * k).reshape(n_users, k)
        end = s.items_per_category * max(t + 1, 1) // s.num_timestamps
        index = np.floor(rng.uniform(self._keys[_S_INDEX], item_counter) * end).astype(np.int64)
        item = cats[row, place] * s.items_per_category + index
        pattern = self._place_pattern[place]
        level = (rng.uniform(self._keys[_S_LEVEL], item_counter)[:, None] >= self._level_cuts[pattern]).sum(axis=1)
        rating = (self.category_levels(t)[pattern, level] + self.item_base_ratings(item)) / 2
        return row, item, rating, item_counter

    def _pick(self, row: np.ndarray, n: np.ndarray, item_counter: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """A random ``keep[u]`` of each user's ``n[u]`` items, in random order (``random.sample``): their
        flat indices, user after user."""
        order = np.lexsort((rng.uniform(self._keys[_S_PICK], item_counter), row))
        rank = np.arange(len(order), dtype=np.int64) - exclusive_cumsum(n)[row[order]]
        return order[rank < keep[row[order]]]

    # ------------------------------------------------------------------ rows
    def _assemble(self, split: Split, users: np.ndarray, ts: np.ndarray, inverse: np.ndarray, target: np.ndarray,
                  store: _Store) -> StreamingRequests:
        """Each row's history (slots before its target but the eval slot, cut to the split's cap) and
        the target slot's candidates (read:203-230)."""
        s = self.spec
        slots = np.arange(s.slots)
        r, sl = np.nonzero((slots[None, :] < target[:, None]) & (slots[None, :] != s.eval_slot))
        seg_len, seg_off = store.hist_len[sl, inverse[r]], store.hist_off[sl, inverse[r]]
        before = exclusive_cumsum(seg_len)
        before -= before[np.searchsorted(r, r, side="left")]  # items of the row's earlier slots
        seg_len = np.clip(s.max_history(split) - before, 0, seg_len)
        h = ranges(seg_off, seg_len)
        history_lengths = np.bincount(r, weights=seg_len, minlength=len(users)).astype(np.int64)
        c_len = np.minimum(store.cand_len[target, inverse], s.max_candidates(split))
        c = ranges(store.cand_off[target, inverse], c_len)
        h_item, h_rating, c_item, c_rating = store.hist_item[h], store.hist_rating[h], store.cand_item[c], \
            store.cand_rating[c]
        weights = np.asarray(s.action_weights, dtype=np.int64)
        return StreamingRequests(
            split=split, users=users, timestamps=ts, history_lengths=history_lengths,
            history_item_ids=h_item, history_ratings=h_rating,
            history_category_ids=h_item // s.items_per_category,
            history_action_weights=weights[h_rating.astype(np.int64) - 1],
            history_action_timestamps=np.ones(len(h), dtype=np.int64),
            history_source_timestamps=store.hist_t[h],
            query_times=(history_lengths > 0).astype(np.int64),
            candidate_lengths=c_len, candidate_item_ids=c_item, candidate_ratings=c_rating,
            candidate_category_ids=c_item // s.items_per_category,
            candidate_labels=(c_rating >= s.label_threshold).astype(np.int64))
