"""A profile from an MLPerf system description (``systems/<system>.json``): the machine as its
submitter describes it, with the figures it does not state taken from the table of devices
(``_devices.yaml``), each figure's source saying which.

What a description states and is read: the node count, accelerators per node and their model
name and memory, the host processors (model, sockets, cores), the host memory, the network
cards (``host_networking``). What it never states (memory and link bandwidths, the accelerator's
FLOP/s) comes from the table. Descriptions write numbers as numbers or strings ("8", "2.048 TB",
"81559 MiB"); a field that cannot be read falls back to the table, or to a stated estimate.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.devices import Device, find_accelerator, find_cpu, nic_gbps
from harness.hw_profiles.profiles import Profile

# what a description's missing figures are taken to be, each named as an estimate in the sources
DEFAULT_SOCKET_DDR_BW = 204.8e9  # 8 channels of DDR4-3200
DEFAULT_NODE_DDR_BYTES = 1_000_000_000_000
DEFAULT_CPU_NODE_SCALE_OUT_BW = 25e9  # one 100 Gb/s NIC, both directions
_UNITS = {"TB": 1e12, "TIB": 2**40, "GB": 1e9, "G": 1e9, "GIB": 2**30, "MB": 1e6, "MIB": 2**20}
_NO_ACCELERATOR = {"", "N/A", "NA", "NONE", "0"}


def read_system_description(path: Path) -> dict[str, Any]:
    """The JSON object of a system description; one line when it cannot be read."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        raise HarnessError(f"system description {path} does not exist", ErrorCategory.NOT_FOUND) from None
    except (OSError, ValueError) as err:
        raise HarnessError(f"system description {path} is not readable JSON: {err}") from None
    if not isinstance(data, dict):
        raise HarnessError(f"system description {path} is not a JSON object")
    return data


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(float(str(value).strip()))
    except (TypeError, ValueError):
        return default


def parse_bytes(text: Any) -> float | None:
    """``"2.048 TB"``, ``"81559 MiB"``, ``"1536GB"``, ``"80G"`` -> bytes (the first amount named); None."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(TIB|TB|GIB|GB|G|MIB|MB)\b", str(text or "").upper())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")
    return slug or "system"


def system_accelerator(desc: dict[str, Any]) -> Device | None:
    """The accelerator a description names (None for a CPU-only system); one line naming the known
    accelerators when it is not in the table."""
    name = str(desc.get("accelerator_model_name", "")).strip()
    if _int(desc.get("accelerators_per_node")) == 0 or name.upper() in _NO_ACCELERATOR:
        return None
    return find_accelerator(name, memory=str(desc.get("accelerator_memory_capacity", "")),
                            system=str(desc.get("system_name", "")))


def profile_from_system(desc: dict[str, Any], *, what: str = "system description") -> Profile:
    """The profile of the machine a system description describes (see the module)."""
    nodes = max(1, _int(desc.get("number_of_nodes"), 1))
    accelerator = system_accelerator(desc)
    per_node = _int(desc.get("accelerators_per_node")) if accelerator else 0
    sockets = max(1, _int(desc.get("host_processors_per_node"), 1))
    cpu_name = str(desc.get("host_processor_model_name", "")).strip() or "unknown host processor"
    cpu = find_cpu(cpu_name)
    if accelerator is None and cpu is None:
        raise HarnessError(f"{what}: a CPU-only system whose processor {cpu_name!r} is not in the table of "
                           f"devices (harness/hw_profiles/_devices.yaml)", ErrorCategory.NOT_FOUND)
    sources: dict[str, str] = {}
    ddr_bytes = parse_bytes(desc.get("host_memory_capacity"))
    sources["ddr.capacity_bytes"] = (f"{what}: host_memory_capacity {desc.get('host_memory_capacity')!r}" if ddr_bytes
                                     else "not stated: estimate (1 TB per node)")
    ddr_bw = (cpu.memory_bw_bytes_per_s if cpu else DEFAULT_SOCKET_DDR_BW) * sockets
    sources["ddr.bandwidth_bytes_per_s"] = (f"{cpu.name}: {cpu.source('memory')}, x {sockets} socket(s)" if cpu else
                                            f"processor not in the table: estimate (8 channels DDR4-3200) x {sockets}")
    hbm_bytes = parse_bytes(desc.get("accelerator_memory_capacity")) if accelerator else 0
    if accelerator:
        sources["hbm.capacity_bytes"] = (f"{what}: accelerator_memory_capacity" if hbm_bytes
                                         else f"{accelerator.name}: {accelerator.source('memory')}")
        sources["hbm.bandwidth_bytes_per_s"] = f"{accelerator.name}: {accelerator.source('memory')}"
    else:
        sources["hbm.capacity_bytes"] = sources["hbm.bandwidth_bytes_per_s"] = "none: CPU only"
    scale_out, sources["interconnect.scale_out_bw_bytes_per_s"] = _scale_out(desc, accelerator, per_node)
    data = {
        "name": _slug(str(desc.get("system_name") or "system")),
        "description": f"{desc.get('system_name', 'system')} ({desc.get('submitter', 'unknown submitter')}), "
                       f"from its system description",
        "nodes": nodes,
        "accelerators_per_node": per_node,
        "accelerator": accelerator.name if accelerator else None,
        "hbm": {"capacity_bytes": int(hbm_bytes or (accelerator.memory_bytes if accelerator else 0)),
                "bandwidth_bytes_per_s": accelerator.memory_bw_bytes_per_s if accelerator else 0},
        "ddr": {"capacity_bytes": int(ddr_bytes or DEFAULT_NODE_DDR_BYTES), "bandwidth_bytes_per_s": ddr_bw},
        "ssd": {"capacity_bytes": 0, "bandwidth_bytes_per_s": 0},
        "host": {"processor_model": cpu_name, "sockets": sockets,
                 "cores_per_socket": max(1, _int(desc.get("host_processor_core_count"), cpu.cores if cpu else 1))},
        "interconnect": {"intra_node_bw_bytes_per_s": accelerator.links_bw_bytes_per_s if accelerator else 0,
                         "scale_out_bw_bytes_per_s": scale_out},
        "collective_backend": "nccl" if accelerator else "gloo",
        "device_type": "cuda" if accelerator else "cpu",
        "sources": {
            "accelerator": f"{what}: accelerator_model_name {desc.get('accelerator_model_name')!r}, "
                           f"{per_node} per node, {nodes} node(s)",
            "ssd.capacity_bytes": "not read: the projection does not place tables on the SSD of a described system",
            "ssd.bandwidth_bytes_per_s": "not read",
            "host": f"{what}: host_processor_model_name, host_processors_per_node, host_processor_core_count",
            "interconnect.intra_node_bw_bytes_per_s": (
                f"{accelerator.name}: {accelerator.source('links')}" if accelerator else "one rank per node: none"),
            **sources,
        },
    }
    return Profile.from_dict(data, what=what)


def _scale_out(desc: dict[str, Any], accelerator: Device | None, per_node: int) -> tuple[float, str]:
    """Each accelerator's share of its node's NICs (both directions), and its source."""
    stated = nic_gbps(str(desc.get("host_networking", "")))
    if stated:
        node_bytes = stated[0] * 1e9 / 8 * 2
        return node_bytes / max(per_node, 1), stated[1]
    if accelerator:
        return accelerator.scale_out_bw_bytes_per_s, f"{accelerator.name}: {accelerator.source('scale_out')}"
    return DEFAULT_CPU_NODE_SCALE_OUT_BW, "not stated: estimate (one 100 Gb/s NIC per node)"


def profile_from_system_file(path: Path) -> Profile:
    """:func:`profile_from_system` of the description at ``path``."""
    return profile_from_system(read_system_description(path), what=f"system description {path}")
