"""What one rank holds in each memory tier, against the tier's capacity: the plan, executed.

The planner places every shard on a tier within each rank's capacities (the profile's, scaled
down when emulated); the executor allocates each shard's memory through a :class:`TierLedger`
of its rank, which refuses an allocation that would exceed its tier's capacity (one line, a
HARDWARE error naming the tier, the rank and the figures) and keeps, per tier, the bytes held
and their peak. On a CPU, and in emulation, the tiers are separate allocations in host memory
and on disk; the ledger is what keeps them within the capacities the plan was made for. Runs log
the ledger's figures beside the plan's (``harness_memory``).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.profiles import format_bytes
from harness.hw_profiles.tiers import TIERS, Tier


def _fmt(n: int) -> str:
    return format_bytes(n)


@dataclass
class TierLedger:
    """Bytes held per tier by one rank. ``capacity``: bytes per tier (0: the rank has no such tier)."""

    capacity: dict[Tier, int]
    rank: int = 0
    held: dict[Tier, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    peak: dict[Tier, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))

    def __post_init__(self) -> None:
        self.capacity = {t: int(self.capacity.get(t, 0)) for t in TIERS}

    def has(self, tier: Tier) -> bool:
        return self.capacity[tier] > 0

    def fastest(self) -> Tier:
        """The fastest tier this rank has (where caches of slower tiers live)."""
        return next((t for t in TIERS if self.has(t)), Tier.DDR)

    def faster_than(self, tier: Tier) -> Tier | None:
        """The fastest tier above ``tier`` that this rank has, or None when ``tier`` is its fastest."""
        above = TIERS[: TIERS.index(tier)]
        return next((t for t in above if self.has(t)), None)

    def allocate(self, tier: Tier, nbytes: int, what: str) -> None:
        """Hold ``nbytes`` more in ``tier`` for ``what``; refuse if the tier's capacity would be exceeded."""
        after = self.held[tier] + int(nbytes)
        if after > self.capacity[tier]:
            raise HarnessError(
                f"rank {self.rank}: {what} needs {_fmt(nbytes)} of {tier.value.upper()}, but only "
                f"{_fmt(self.capacity[tier] - self.held[tier])} of its {_fmt(self.capacity[tier])} are left; the plan "
                "and the executor disagree on a size (a bug), or the profile changed since the plan was made",
                ErrorCategory.HARDWARE,
            )
        self.held[tier] = after
        self.peak[tier] = max(self.peak[tier], after)

    def release(self, tier: Tier, nbytes: int) -> None:
        self.held[tier] -= int(nbytes)

    def report(self) -> dict[str, Any]:
        """Capacity, held and peak bytes per tier, keyed by the tiers' names (JSON for the logs)."""
        return {name: {t.value: n for t, n in figures.items()}
                for name, figures in (("capacity", self.capacity), ("held", self.held), ("peak", self.peak))}


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux's ``ru_maxrss`` is in KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def rss_now() -> dict[str, int]:
    """This process's resident memory now, by kind (Linux ``/proc/self/status``): anonymous (its
    own allocations) and file-backed (pages of memory-mapped files it has touched, such as an SSD
    tier's table files: the page cache's, which the kernel writes back and drops under pressure).
    Empty where ``/proc`` is not available."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("RssAnon", "RssFile"):
                    out["rss_anon_bytes" if key == "RssAnon" else "rss_file_bytes"] = int(value.split()[0]) * 1024
    except OSError:
        return {}
    return out
