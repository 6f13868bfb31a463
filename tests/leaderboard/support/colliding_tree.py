"""The shared real MLPerf packages plus two copies of Dell's v4.1 system under other rounds (one
of them 8 nodes, so 64 accelerators): three entries whose system names collide, as NVIDIA's
v6.0 8-GPU and 64-GPU systems collide in their own system files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

COLLIDING_SYSTEM = "XE9680x8H200-SXM-141GB"


def colliding_tree(shared_logs: Path, root: Path) -> Path:
    """Copies (never the originals) of the shared logs under ``root``, plus the two collisions."""
    shutil.copytree(shared_logs, root)
    for round_name, nodes in (("v5.0", "8"), ("v4.0", "1")):
        copy = root / round_name / "DellCopy"
        shutil.copytree(root / "v4.1" / "Dell", copy)
        [desc] = (copy / "systems").glob("*.json")
        system = json.loads(desc.read_text())
        system["number_of_nodes"] = nodes
        desc.write_text(json.dumps(system, indent=1))
    return root
