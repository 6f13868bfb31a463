"""Fixtures shared by the reference tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ssd_through_the_page_cache():
    """For tests that check what training on the SSD tier computes, not the drive's speed: the
    tier moves its rows through the page cache (HARNESS_SSD_DIRECT=0, inherited by the runs they
    start). O_DIRECT, at the drive's speed, is tested where a test asks for it (deleting the
    variable) and by the emulated and distributed SSD runs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_SSD_DIRECT", "0")
        yield
