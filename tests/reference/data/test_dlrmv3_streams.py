"""DLRMv3's streaming synthetic data: the same request whoever makes it, the reference's laws
(base ratings, category patterns, labels, slot lengths, histories), nothing allocated in
proportion to the official 1e9 items or 5M users, and a spec section that refuses what it does not know."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.dlrmv3_streams import Split, StreamingGenerator, StreamingRequests, StreamingSpec

# avg items per slot = 40000 * 50 / 2000 / 10 = 100, as the official sizes give; timestamps 0..7 train, 8, 9 infer
TINY = {"seed": 11, "num_users": 2000, "num_items": 40000, "num_categories": 16, "num_timestamps": 10,
        "train_ratio": 0.8, "num_inference_candidates": 256, "max_num_candidates_inference": 256, "num_files": 10}


def tiny(**over: object) -> StreamingGenerator:
    return StreamingGenerator(StreamingSpec.from_section({**TINY, **over}))


def bad_input(fn) -> HarnessError:
    with pytest.raises(HarnessError) as info:
        fn()
    assert info.value.category is ErrorCategory.BAD_INPUT and "\n" not in str(info.value)
    return info.value


def rows(batch: StreamingRequests) -> list[StreamingRequests]:
    return [batch.row(i) for i in range(len(batch))]


def inference_pairs(g: StreamingGenerator, users: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(user, ts)`` of every request of users ``first .. first + users - 1``."""
    s = g.spec
    pairs = [(u, t) for t in range(s.train_timestamps, s.num_timestamps)
             for u in g.active_users(t, first, first + users)]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


# ---------------------------------------------------------------------------------- determinism
def test_a_request_is_the_same_in_any_order_and_any_batch():
    g = tiny()
    users, ts = inference_pairs(g, 12, first=50)
    together = rows(g.requests(users, ts))
    order = np.random.default_rng(0).permutation(len(users))
    shuffled = rows(g.requests(users[order], ts[order]))
    for i, j in enumerate(order):
        assert shuffled[i].equals(together[j]), (users[j], ts[j])
    fresh = tiny()  # another generator (another rank or thread): each request alone
    for i in np.flatnonzero(ts == 9):  # their histories hold timestamp 8's increment where the user was active
        assert fresh.requests(users[i:i + 1], ts[i:i + 1]).equals(together[i]), (users[i], ts[i])
    strangers = g.active_users(9, 0, 20)  # in other company, before and after them
    company = np.r_[strangers[:5], users, strangers[5:]]
    mixed = rows(g.requests(company, np.r_[np.full(5, 9), ts, np.full(len(strangers) - 5, 9)]))
    for k in range(len(users)):
        assert mixed[5 + k].equals(together[k]), (users[k], ts[k])


def test_training_and_eval_samples_are_the_same_in_any_batch():
    g = tiny()
    mine = rows(g.user_train_samples(7))
    assert [int(r.timestamps[0]) for r in mine] == [t for t in range(8) if g.active([7], [t])[0]]
    first, last = int(mine[0].timestamps[0]), int(mine[-1].timestamps[0])
    others = [u for u in range(100, 200) if g.active([u], [last])[0]][:2]
    again = rows(g.train_samples(np.r_[others[0], 7, others[1], 7], np.r_[last, last, last, first]))
    assert again[1].equals(mine[-1]) and again[3].equals(mine[0])
    ev = rows(g.eval_samples(np.r_[5, 7, 9]))
    assert ev[1].equals(g.eval_samples(np.r_[7]))
    assert ev[1].split is Split.EVAL and int(ev[1].candidate_lengths[0]) == g.spec.num_eval_candidates


def test_another_seed_makes_other_data():
    a, b = tiny(), tiny(seed=12)
    items = np.arange(0, 40000, 7)
    assert (a.item_base_ratings(items) != b.item_base_ratings(items)).mean() > 0.5
    assert (a.user_categories(np.arange(200)) != b.user_categories(np.arange(200))).any(axis=1).mean() > 0.9
    users = np.arange(100)
    assert (a.active(users, 8) != b.active(users, 8)).any()
    ra, rb = a.eval_samples(users[:4]), b.eval_samples(users[:4])
    assert not np.array_equal(ra.history_lengths, rb.history_lengths)
    assert not np.array_equal(ra.candidate_item_ids, rb.candidate_item_ids)


# ---------------------------------------------------------------------------------- the reference's laws
def test_base_ratings_follow_the_reference_probabilities():
    g = StreamingGenerator()  # the official sizes: ids anywhere in [0, 1e9)
    n = 200_000
    ids = np.random.default_rng(1).integers(0, g.spec.num_items, n)
    r = g.item_base_ratings(ids)
    assert np.array_equal(r, g.item_base_ratings(ids))  # a pure function of the id
    assert set(np.unique(r)) <= set(g.spec.item_rating_values)
    for value, p in zip(g.spec.item_rating_values, g.spec.item_rating_probs):
        freq = float((r == value).mean())
        assert abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n), (value, freq, p)


def test_labels_are_exactly_rating_at_least_3_5():
    g = tiny()
    users, ts = inference_pairs(g, 30)
    b = g.requests(users, ts)
    assert np.array_equal(b.candidate_labels, (b.candidate_ratings >= 3.5).astype(np.int64))
    assert b.candidate_labels.dtype == np.int64 and 0.1 < b.candidate_labels.mean() < 0.9
    # at t = 4, cos(t pi / 4) = -1 exactly: pattern 0's first level is 4.0, so a base rating of 3 gives 3.5 exactly
    users = g.active_users(4, 0, 200)
    tr = g.train_samples(users, 4)
    assert np.array_equal(tr.candidate_labels, (tr.candidate_ratings >= 3.5).astype(np.int64))
    assert (tr.candidate_labels[tr.candidate_ratings == 3.5] == 1).sum() > 0
    below = tr.candidate_ratings[tr.candidate_ratings < 3.5]
    assert (tr.candidate_labels[tr.candidate_ratings == below.max()] == 0).all()


def test_items_and_ratings_are_made_as_the_reference_makes_them():
    g = tiny()
    s = g.spec
    users = np.arange(40)
    b = g.eval_samples(users)
    cats = g.user_categories(users)
    assert all(len(set(c)) == s.categories_per_user for c in cats.tolist()) and cats.max() < s.num_categories
    row = np.repeat(np.arange(len(users)), b.history_lengths)
    ids, t = b.history_item_ids, b.history_source_timestamps
    assert np.array_equal(b.history_category_ids, ids // s.items_per_category)
    place = np.argmax(cats[row] == b.history_category_ids[:, None], axis=1)
    assert (cats[row, place] == b.history_category_ids).all()  # every item is of one of its user's categories
    assert (ids % s.items_per_category < s.items_per_category * np.maximum(t + 1, 1) // s.num_timestamps).all()
    pattern = np.select([place < 1, place < 2, place < 3], [0, 1, 2], 3)  # k = 4: one category per pattern
    category_rating = 2 * b.history_ratings - g.item_base_ratings(ids)
    for tt in np.unique(t):
        levels = g.category_levels(int(tt))
        for p, allowed in enumerate(s.pattern_levels):
            got = category_rating[(t == tt) & (pattern == p)]
            assert np.isclose(got[:, None], levels[p, :len(allowed)][None, :], atol=1e-9).any(axis=1).all(), (tt, p)
    apart = np.array([np.diff(np.sort(g.category_levels(int(x))[1])).min() > 1e-6 for x in range(-1, 10)])
    ones = (pattern == 1) & apart[t + 1]  # pattern 1 where its levels differ (at t = 4 and 6 two coincide)
    mid = ones & np.isclose(category_rating, np.array([g.category_levels(int(x))[1, 1] for x in t]))
    p_mid = s.pattern_probs[1][1]
    assert abs(mid.sum() / ones.sum() - p_mid) < 5 * np.sqrt(p_mid * (1 - p_mid) / ones.sum())
    assert np.array_equal(b.history_action_weights,
                          np.asarray(s.action_weights)[b.history_ratings.astype(np.int64) - 1])
    assert (b.history_action_timestamps == 1).all() and (b.query_times == 1).all()


def test_history_and_candidate_lengths_are_as_the_spec_says():
    g = tiny()
    s = g.spec
    users, ts = inference_pairs(g, 60)
    b = g.requests(users, ts)
    assert (b.candidate_lengths == s.num_inference_candidates).all()
    h, c = b.history_offsets(), b.candidate_offsets()
    by_user = {}
    for i, (u, t) in enumerate(zip(users.tolist(), ts.tolist())):
        src = b.history_source_timestamps[h[i]:h[i + 1]]
        assert (np.diff(src) >= 0).all() and src[0] == -1 and src[-1] < t  # slot order, causal
        parts = np.bincount(src + 1)
        parts = parts[parts > 0]
        assert (parts >= s.min_seq_len).all()  # base and training slots; inference increments too
        trained = np.unique(src[(src >= 0) & (src < s.train_timestamps)])
        assert np.array_equal(trained, [x for x in range(s.train_timestamps) if g.active([u], [x])[0]])
        by_user.setdefault(u, []).append((t, b.history_item_ids[h[i]:h[i + 1]], src,
                                          b.candidate_item_ids[c[i]:c[i + 1]]))
    both = [v for v in by_user.values() if len(v) == 2]
    assert both
    for (t0, ids0, _, cand0), (_, ids1, src1, _) in both:  # the history grows by part of the earlier candidates
        assert np.array_equal(ids1[:len(ids0)], ids0)
        grown = ids1[len(ids0):]
        assert np.array_equal(src1[len(ids0):], np.full(len(grown), t0))
        assert s.min_seq_len <= len(grown) <= s.num_inference_candidates and np.isin(grown, cand0).all()
    base = g.eval_samples(np.arange(400)).history_lengths  # mean: base + 0.7 * 8 training slots of 100 items
    expect, se = 100 * (1 + 0.7 * s.train_timestamps), 150 / np.sqrt(400)
    assert abs(base.mean() - expect) < 5 * se, (base.mean(), expect)
    tr = g.user_train_samples(2)
    assert (tr.candidate_lengths == s.num_eval_candidates).all()
    th, tc = tr.history_offsets(), tr.candidate_offsets()
    last = len(tr) - 1
    for i in range(last):  # a training slot's candidates are part of its items, in the later histories
        t = int(tr.timestamps[i])
        later = tr.history_item_ids[th[last]:th[last + 1]][tr.history_source_timestamps[th[last]:th[last + 1]] == t]
        assert len(later) >= s.min_seq_len and np.isin(tr.candidate_item_ids[tc[i]:tc[i + 1]], later).all()


def test_histories_keep_their_first_items_up_to_the_cap():
    whole = tiny()
    cap = 500
    cut = tiny(max_seq_len=cap + 256 + 1)  # the history's cap: max_seq_len - candidates - contextual features
    users, ts = inference_pairs(whole, 6)
    a, b = whole.requests(users, ts), cut.requests(users, ts)
    assert (a.history_lengths > cap).all() and (b.history_lengths == cap).all()
    ha, hb = a.history_offsets(), b.history_offsets()
    for i in range(len(users)):
        assert np.array_equal(b.history_item_ids[hb[i]:hb[i + 1]], a.history_item_ids[ha[i]:ha[i] + cap])
    assert np.array_equal(a.candidate_item_ids, b.candidate_item_ids)


def test_an_official_size_request_allocates_nothing_proportional_to_items_or_users():
    g = StreamingGenerator()
    assert g.spec.num_items == 1_000_000_000 and g.spec.num_users == 5_000_000
    users = np.array([4_999_999, 123_456, 7])
    ts = np.array([99, 95, 90])
    active = g.active(users, ts)
    users = np.where(active, users, g.active_users(99, 1000, 1100)[:3])
    ts = np.where(active, ts, 99)
    tracemalloc.start()
    try:
        b = g.requests(users, ts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # a whole item or user table would be 40 MB at the least
    assert (b.candidate_lengths == 2048).all() and (b.history_lengths > 5000).all()
    assert b.candidate_item_ids.max() < g.spec.num_items
    assert list(g.file_users(0))[-1] == 49_999  # sampled-streaming-100b: the first file's 50,000 users


# ---------------------------------------------------------------------------------- the spec and its misuse
def test_the_spec_section_defaults_to_the_reference_and_refuses_unknown_keys():
    assert StreamingSpec.from_section({}) == StreamingSpec()
    assert StreamingSpec.from_section({"kind": "dlrmv3_streaming"}).train_timestamps == 90
    spec = StreamingSpec()
    assert (spec.avg_seq_len_per_timestamp, spec.seq_len_std, spec.items_per_category) == (100, 25, 7_812_500)
    assert spec.max_history(Split.INFERENCE) == 14335
    listed = StreamingSpec.from_section({"pattern_levels": [[4.5, 4.0], [4.5, 4.0, 3.5], [3.5, 3.0, 2.5],
                                                            [2.5, 2.0, 1.5]], "alpha_range": [1, 500]})
    assert listed == spec
    err = bad_input(lambda: StreamingSpec.from_section({"num_user": 10}))
    assert "num_user" in str(err) and "num_users" in str(err)
    bad_input(lambda: StreamingSpec.from_section({"kind": "event_streams"}))
    bad_input(lambda: StreamingSpec.from_section({"item_rating_probs": [0.5, 0.5, 0.5, 0.2, 0.1]}))
    bad_input(lambda: StreamingSpec.from_section({"num_users": "many"}))


def test_rows_that_do_not_exist_are_refused_and_active_users_lists_the_requests():
    g = tiny()
    listed = g.active_users(9, 0, 500)
    assert np.array_equal(listed, np.flatnonzero(g.active(np.arange(500), 9)))
    assert abs(len(listed) / 500 - 0.7) < 0.07
    idle = np.setdiff1d(np.arange(500), listed)[0]
    bad_input(lambda: g.requests([idle], 9))
    bad_input(lambda: g.requests([int(listed[0])], 7))  # a training timestamp
    bad_input(lambda: g.train_samples([int(listed[0])], 8))  # an inference timestamp
    bad_input(lambda: g.requests([g.spec.num_users], 9))


def test_the_twin_follows_the_distributions_the_scripts_parameters_imply():
    """Activity, slot lengths, categories and ratings over many users against what the reference
    script's parameters imply: a user active at a timestamp with probability user_sampling_ratio
    (gen:245-263), N(avg, avg // 4) items a slot (gen:230-243), categories_per_user distinct categories
    spread evenly over the catalogue (gen:287-290), and the label rate of a timestamp the mixture of the
    four patterns' levels (one category each, the urn symmetric over them) and the base ratings."""
    g = tiny()
    s = g.spec
    users = np.arange(s.num_users)
    active = np.stack([g.active(users, t) for t in range(s.num_timestamps)])
    p = s.user_sampling_ratio
    assert abs(active.mean() - p) < 5 * np.sqrt(p * (1 - p) / active.size)
    b = g.eval_samples(users[:300])
    src = b.history_source_timestamps
    row = np.repeat(np.arange(len(b)), b.history_lengths)
    sizes = np.bincount(row * (s.num_timestamps + 1) + src + 1)
    sizes = sizes[sizes > 0]  # one slot's items: mean avg, std avg // 4 (clipped far below: min 33)
    avg, std = s.avg_seq_len_per_timestamp, s.seq_len_std
    assert abs(sizes.mean() - avg) < 5 * std / np.sqrt(sizes.size) and abs(sizes.std() - std) < 0.1 * std
    cats = g.user_categories(users)
    counts = np.bincount(cats.reshape(-1), minlength=s.num_categories)
    expect = users.size * s.categories_per_user / s.num_categories
    assert counts.min() > expect - 5 * np.sqrt(expect) and counts.max() < expect + 5 * np.sqrt(expect)
    for t in (s.train_timestamps, s.num_timestamps - 1):
        req = g.requests(*inference_pairs_at(g, t, 400))
        levels = g.category_levels(t)
        rate = 0.0
        for pattern, probs in enumerate(s.pattern_probs):
            for level, pl in enumerate(probs):
                for base, pb in zip(s.item_rating_values, s.item_rating_probs):
                    rate += 0.25 * pl * pb * float((levels[pattern, level] + base) / 2 >= s.label_threshold)
        got = req.candidate_labels.mean()
        assert abs(got - rate) < 0.02, (t, got, rate)  # ~200k candidates of ~280 users: urn noise dominates


def inference_pairs_at(g: StreamingGenerator, t: int, users: int) -> tuple[np.ndarray, int]:
    return g.active_users(t, 0, users), t
