"""Seeds. In the closed division the submitter may not choose them: they come from the OS."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from harness.errors import HarnessError


class SeedSource(enum.Enum):
    OS = "os_random"  # secrets.randbits: the operating system's randomness
    USER = "user_chosen"  # --seed: reproducible, and recorded as chosen


@dataclass(frozen=True)
class Seed:
    value: int
    source: SeedSource


def fresh_seed() -> Seed:
    """A new 31-bit seed from the operating system's randomness."""
    return Seed(secrets.randbits(31), SeedSource.OS)


def seeds_for_runs(indices: Sequence[int], chosen: Sequence[int]) -> dict[int, Seed]:
    """The seed of each run index.

    With no ``chosen`` seeds every run gets a fresh OS seed. With one, run ``i`` gets
    ``chosen[0] + i``; with several, run ``i`` gets ``chosen[i]`` and there must be one per run.
    """
    if not chosen:
        return {i: fresh_seed() for i in indices}
    if any(s < 0 or s >= 2**63 for s in chosen):
        raise HarnessError("a seed must be an integer in [0, 2**63)")
    if len(chosen) == 1:
        return {i: Seed(chosen[0] + i, SeedSource.USER) for i in indices}
    if max(indices, default=-1) >= len(chosen):
        raise HarnessError(f"{len(chosen)} seeds given but run {max(indices)} needs seed number {max(indices) + 1}")
    return {i: Seed(chosen[i], SeedSource.USER) for i in indices}
