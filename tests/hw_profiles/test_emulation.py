"""Emulating a profile here: its topology kept, every tier's capacity scaled by one factor to fit
this host (the emulated runs themselves: tests/cli/test_run.py)."""

from __future__ import annotations

from harness.hw_profiles import Tier, detect, emulated_profile, load_profile


def test_emulation_keeps_the_topology_and_scales_every_tier_by_one_factor():
    real = load_profile("zionex-8gpu")
    scaled, factor = emulated_profile(real, detect())
    assert 0 < factor < 1
    assert (scaled.nodes, scaled.accelerators_per_node, scaled.world_size) == (1, 8, 8)
    for tier in Tier:
        assert scaled.tiers[tier].capacity_bytes == int(real.tiers[tier].capacity_bytes * factor)
        assert scaled.tiers[tier].bandwidth_bytes_per_s == real.tiers[tier].bandwidth_bytes_per_s
    memory = 8 * scaled.hbm.capacity_bytes + scaled.ddr.capacity_bytes
    assert memory <= detect().memory_bytes / 2
