"""Olympic scoring as MLPerf's result summarizer computes it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.rules.scoring import RunTime, olympic_score


def runs(minutes, converged=None):
    converged = converged or [True] * len(minutes)
    return [RunTime(0.0, m * 60000.0, c) for m, c in zip(minutes, converged)]


def test_drops_fastest_and_slowest():
    assert olympic_score(runs([5, 1, 3, 4, 2])).minutes == pytest.approx(3.0)


def test_one_non_converged_run_counts_as_the_slowest():
    s = olympic_score(runs([5, 1, 3, 4, 2], [True, True, True, True, False]))
    # converged sorted: 1 3 4 5; drop fastest (1), the non-converged one is the slowest dropped
    assert s.minutes == pytest.approx((3 + 4 + 5) / 3)
    assert s.non_converged_runs == 1


def test_two_non_converged_runs_invalidate_the_set():
    with pytest.raises(HarnessError, match="2 runs did not reach the target"):
        olympic_score(runs([1, 2, 3, 4, 5], [True, True, True, False, False]))


def test_one_run_is_counted_in_the_singular():
    with pytest.raises(HarnessError, match="^1 run leaves nothing to average"):
        olympic_score(runs([1]))
    with pytest.raises(HarnessError, match="^1 run did not reach the target; at most 0 may"):
        olympic_score(runs([1, 2], [True, False]), max_dropped=0)


def test_scaling_factor_multiplies():
    assert olympic_score(runs([1, 2, 3]), scaling_factor=1.5).minutes == pytest.approx(3.0)


@given(st.lists(st.floats(min_value=0.01, max_value=1000), min_size=3, max_size=12), st.randoms())
def test_score_does_not_depend_on_run_order(minutes, rnd):
    shuffled = list(minutes)
    rnd.shuffle(shuffled)
    assert olympic_score(runs(minutes)).minutes == pytest.approx(olympic_score(runs(shuffled)).minutes)
