"""Seeds: fresh from the OS and marked so, or chosen (one for the set, or one per run)."""

import pytest

from harness.errors import HarnessError
from harness.rules.seeds import SeedSource, seeds_for_runs


def test_os_seeds_are_fresh_and_marked():
    seeds = seeds_for_runs(range(10), ())
    assert len({s.value for s in seeds.values()}) == 10
    assert all(s.source is SeedSource.OS and 0 <= s.value < 2**31 for s in seeds.values())


def test_one_chosen_seed_numbers_the_runs():
    seeds = seeds_for_runs([2, 3], (40,))
    assert {i: s.value for i, s in seeds.items()} == {2: 42, 3: 43}
    assert all(s.source is SeedSource.USER for s in seeds.values())


def test_a_seed_list_needs_one_per_run():
    assert seeds_for_runs([0, 1], (7, 3))[1].value == 3
    with pytest.raises(HarnessError, match="2 seeds given but run 2"):
        seeds_for_runs([0, 1, 2], (7, 3))
