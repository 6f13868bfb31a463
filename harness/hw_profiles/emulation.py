"""Emulating a profile on the machine present: its ranks as gloo processes on the CPU.

An emulated run keeps the profile's topology (nodes, ranks per node: what the planner's
table-row-wise and table-column-wise options and its link model see) and scales its memory
capacities down, all tiers by one factor, so that every rank's share fits this host: the
plan keeps the profile's proportions between HBM, DDR and SSD. Bandwidths are left as the
profile states them, so ``harness plan`` projections still speak of the real machine. The
factor is recorded in the run's log (``harness_emulation_scale``); the run is labelled
emulated in its log, its system name and its system description.
"""

from __future__ import annotations

import dataclasses

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.detection import DetectedHardware
from harness.hw_profiles.profiles import MemoryTier, Profile, format_bytes

HOST_SHARE = 0.5  # of this host's memory, for the emulated ranks' tables
RANK_OVERHEAD_BYTES = 600 * 2**20  # one rank process: Python, torch, gloo buffers, with margin (measured: docs/performance.md)


def emulated_profile(profile: Profile, detected: DetectedHardware, *, hosts: int = 1) -> tuple[Profile, float]:
    """``profile`` with its tier capacities scaled to this host, and the scale factor (<= 1).
    With ``hosts`` > 1 (one launcher per node of the profile), this host runs one node's ranks.

    Raises a HARDWARE error when this host cannot hold the profile's rank processes at all.
    """
    ranks = profile.world_size // hosts
    overhead = ranks * RANK_OVERHEAD_BYTES
    if overhead > detected.memory_bytes * 0.8:
        raise HarnessError(
            f"emulating {profile.name} runs {ranks} rank processes, which need about {format_bytes(overhead)} "
            f"of memory; this machine has {format_bytes(detected.memory_bytes)}. Emulate a smaller profile "
            "(e.g. zionex-8gpu instead of zionex-16x8gpu)",
            ErrorCategory.HARDWARE,
        )
    accelerators = profile.nodes * max(profile.accelerators_per_node, 0)
    memory = (profile.hbm.capacity_bytes * accelerators + profile.ddr.capacity_bytes * profile.nodes) / hosts
    budget = max(detected.memory_bytes * HOST_SHARE - overhead, 0)
    scale = min(1.0, budget / memory) if memory > 0 else 1.0

    def scaled(tier: MemoryTier) -> MemoryTier:
        return MemoryTier(int(tier.capacity_bytes * scale), tier.bandwidth_bytes_per_s)

    return dataclasses.replace(profile, hbm=scaled(profile.hbm), ddr=scaled(profile.ddr), ssd=scaled(profile.ssd)), scale
