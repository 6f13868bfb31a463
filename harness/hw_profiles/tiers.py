"""The memory tiers of a machine, fastest first: HBM per device, DDR and SSD per node.

The one spelling of a tier in code: profiles, the planner, the tiered executor and the run set
compare :class:`Tier` members; JSON and YAML carry the values (``"hbm"``, ``"ddr"``, ``"ssd"``),
written with ``.value`` and read back with ``Tier(s)``.
"""

from __future__ import annotations

import enum


class Tier(enum.Enum):
    """Memory tiers, fastest first: HBM per device, DDR and SSD per node."""

    HBM = "hbm"
    DDR = "ddr"
    SSD = "ssd"


TIERS: tuple[Tier, ...] = (Tier.HBM, Tier.DDR, Tier.SSD)  # fastest first
