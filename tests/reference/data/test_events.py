"""Synthetic event streams as a data set: the same batches whatever the world size, causal
histories, no leakage of the eval window or the held-out users, exact resume, a learnable teacher."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.event_batch import UNKNOWN_ACTION, EventBatch
from harness.reference.data.events import Action, EventStreamSpec, SyntheticEventStreams

TINY = {
    "kind": "event_streams", "seed": 7, "users": 256, "item_rows": 3000, "artist_rows": 60, "album_rows": 300,
    "warmup_windows": 2, "train_windows": 3, "user_samples_per_window": [0, 4], "train_samples": 1100,
    "eval_samples": 96, "eval_user_fraction": 0.25, "max_sequence_length": 24,
}


def tiny(**over) -> SyntheticEventStreams:
    return SyntheticEventStreams({**TINY, **over})


def cat(batches) -> dict[str, torch.Tensor]:
    batches = list(batches)
    return {f.name: torch.cat([getattr(b, f.name) for b in batches]) for f in fields(EventBatch)}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def per_user(batch: EventBatch):
    """``(uid, history slice, candidate slice, label slice)`` of each user of the batch."""
    off = batch.offsets().tolist()
    first_label = [0, *torch.cumsum(batch.candidate_lengths, 0).tolist()]
    for u in range(batch.users):
        h = int(batch.history_lengths[u])
        yield (int(batch.uid[u]), slice(off[u], off[u] + h), slice(off[u] + h, off[u + 1]),
               slice(first_label[u], first_label[u + 1]))


def test_the_union_over_ranks_is_the_one_process_batch_whatever_the_world_size():
    ds = tiny()
    one = [cat([b]) for b in ds.train_batches(12, start=40)][:6]
    for world in (2, 3):
        ranks = [ds.train_batches(12, rank=r, world_size=world, start=40) for r in range(world)]
        for k, parts in zip(range(6), zip(*ranks)):
            assert same(cat(parts), one[k]), (world, k)
    whole = cat(ds.eval_batches(32))
    for world in (2, 3):
        assert same(cat(b for r in range(world) for b in ds.eval_batches(32, rank=r, world_size=world)), whole)


def test_every_batch_is_consistent_and_the_splits_have_their_sizes():
    ds = tiny()
    train = list(ds.train_batches(16))
    assert len(train) == ds.train_samples // 16
    for b in train + list(ds.eval_batches(16)):
        b.check()
        assert int(b.history_lengths.max()) <= ds.max_sequence_length - ds.candidates
    assert sum(b.users for b in ds.eval_batches(16)) == ds.eval_samples
    json.dumps(ds.describe())


def test_deterministic_per_seed_and_different_across_seeds():
    a, b, c = (cat(tiny(seed=s).train_batches(32, start=5)) for s in (7, 7, 8))
    assert same(a, b)
    assert not torch.equal(a["item"][:100], c["item"][:100])


def test_histories_are_causal_and_in_time_order_and_candidates_carry_no_action():
    for k in (1, 3):
        ds = tiny(candidates=k, user_samples_per_window=[0, 2], train_samples=500, eval_samples=40)
        for b in list(ds.train_batches(16))[::5] + list(ds.eval_batches(16)):
            assert torch.all(b.candidate_lengths == k)
            for _, hist, cand, _ in per_user(b):
                ts = b.timestamp[hist]
                assert torch.all(ts[1:] > ts[:-1]), "history not strictly in time order"
                assert torch.all(b.timestamp[cand][1:] > b.timestamp[cand][:-1])
                if len(ts):
                    assert int(ts[-1]) < int(b.timestamp[cand][0]), "a history event at or after its candidate"
                assert torch.all(b.action[hist] != UNKNOWN_ACTION) and torch.all(b.action[cand] == UNKNOWN_ACTION)


def test_training_runs_forward_in_time_window_after_window():
    ds = tiny()
    first = torch.cat([b.timestamp[b.offsets()[:-1] + b.history_lengths] for b in ds.train_batches(16)])
    assert torch.all(first[1:] >= first[:-1])
    window = first // ds.spec.window_seconds
    assert int(window[0]) == ds.spec.warmup_windows and int(window[-1]) == ds.eval_window - 1


def test_no_eval_window_event_and_no_held_out_user_is_ever_trained_on():
    ds = tiny()
    start = ds.eval_window * ds.spec.window_seconds
    held_out = set(ds.eval_users.tolist())
    assert held_out and not held_out & set(ds.train_users.tolist())
    for b in ds.train_batches(16):
        assert int(b.timestamp.max()) < start
        assert not held_out & set(b.uid.tolist())
    for b in ds.eval_batches(16):
        assert set(b.uid.tolist()) <= held_out
        first = b.timestamp[b.offsets()[:-1] + b.history_lengths]
        assert torch.all(first >= start) and torch.all(first < start + ds.spec.window_seconds)


def test_a_history_is_the_latest_events_of_the_users_own_stream_and_shows_the_labels_already_given():
    ds = tiny()
    b = next(ds.train_batches(64, start=10))
    st = ds.streams(b.uid.unique().numpy(), ds.eval_window)
    row = {u: i for i, u in enumerate(st.uid.tolist())}
    for uid, hist, cand, label in per_user(b):
        lo, hi = st.user_first_event[row[uid]], st.user_first_event[row[uid] + 1]
        ts, item, action = (torch.from_numpy(st.events[k][lo:hi]) for k in ("timestamp", "item", "action"))
        before = int((ts < b.timestamp[cand][0]).sum())
        n = hist.stop - hist.start
        assert n == min(before, ds.max_sequence_length - ds.candidates)
        assert torch.equal(b.item[hist], item[before - n:before])
        assert torch.equal(b.action[hist], action[before - n:before])
        # the candidate is the stream's next event, and its label what the stream shows it was (played > 50%)
        assert int(item[before]) == int(b.item[cand][0])
        assert (int(action[before]) == Action.LISTEN_PLUS) == bool(b.labels[label][0])


def test_start_resumes_exactly():
    ds = tiny()
    every = [cat([b]) for b in ds.train_batches(24)]
    for k, b in enumerate(ds.train_batches(24, start=17)):
        assert same(cat([b]), every[17 + k])
    later = [cat([b]) for b in ds.train_batches(24, rank=1, world_size=2, start=30)]
    assert same(later[0], cat([next(ds.train_batches(24, rank=1, world_size=2, start=30))]))
    assert len(later) == len(every) - 30


def test_later_epochs_reorder_whole_batches():
    ds = tiny()
    first = {bytes(b.item.numpy()) for b in ds.train_batches(48)}
    second = [bytes(b.item.numpy()) for b in ds.train_batches(48, epoch=1, seed=3)]
    assert set(second) == first and second != [bytes(b.item.numpy()) for b in ds.train_batches(48)]


def recency_heuristic(b: EventBatch) -> np.ndarray:
    """A candidate's score from its history alone: recent plays of its artist, and of the track itself."""
    scores = []
    for _, hist, cand, _ in per_user(b):
        artist, item = b.artist[hist].numpy(), b.item[hist].numpy()
        weight = 0.85 ** np.arange(len(artist))[::-1]
        for c in range(cand.start, cand.stop):
            scores.append((weight * (artist == int(b.artist[c]))).sum() + 2.0 * (item[-16:] == int(b.item[c])).any())
    return np.asarray(scores)


def test_the_teacher_is_learnable_from_the_history_and_its_auc_is_known():
    ds = tiny(users=2048, eval_samples=1000, train_samples=4000)
    best = ds.best_auc()
    assert 0.72 < best < 0.9
    b = ds.samples("eval", np.arange(ds.eval_samples))
    heuristic = roc_auc_score(b.labels.numpy(), recency_heuristic(b))
    assert 0.6 < heuristic < best
    assert 0.3 < float(b.labels.mean()) < 0.8


def test_the_spec_is_checked_with_a_fix_in_the_message():
    with pytest.raises(HarnessError, match="unknown keys") as err:
        tiny(histroy=3)
    assert err.value.category is ErrorCategory.BAD_INPUT
    with pytest.raises(HarnessError, match="lower train_samples"):
        tiny(train_samples=10**6)
    with pytest.raises(HarnessError, match="item_rows >= album_rows"):
        tiny(album_rows=10)
    with pytest.raises(HarnessError, match="not an event-stream"):
        EventStreamSpec.from_section({**TINY, "kind": "synthetic"})
    ds = tiny()
    assert ds.tables == {"item": 3000, "artist": 60, "album": 300, "uid": 256, "action": len(Action)}
