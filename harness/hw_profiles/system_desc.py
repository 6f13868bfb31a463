"""The MLPerf system description (``systems/<system_name>.json``) of a run.

Filled from the profile and, for everything the run actually used, from the detected
hardware: a run never claims hardware it did not run on. An emulated run (the profile's
accelerators absent, its ranks run with gloo on this CPU) says so in ``hw_notes`` and in
every accelerator field.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from pathlib import Path
from typing import Any

import harness
from compliance.schemas import load_schema, validate
from harness.errors import ErrorCategory, HarnessError
from harness.files import write_atomic
from harness.hw_profiles.detection import (
    DetectedHardware,
    matching_devices,
    profile_present,
)
from harness.hw_profiles.profiles import LOCAL, Profile, format_bytes, format_rate

SCHEMA = "system_desc"

# The fields mlperf_logging's system_desc_checker requires, in the order submissions write them:
# the schema's (the bottom layer), which the checker's current round lists too (a test keeps
# them equal: compliance/system_fields/training.yaml).
SYSTEM_DESC_FIELDS: tuple[str, ...] = tuple(load_schema(SCHEMA)["required"])

EMULATED = "EMULATED"


def system_statuses() -> tuple[str, ...]:
    """The ``status`` values allowed (those of MLPerf Training rulesets >= 4.1)."""
    return tuple(load_schema(SCHEMA)["properties"]["status"]["enum"])


def system_name_for(profile: Profile, emulated: bool) -> str:
    """A filesystem-safe system name: ``local-cpu-2c``, ``local-1xnvidia-h200``, ``zionex-8gpu-emulated``."""
    if profile.name == LOCAL:
        if profile.accelerator is None:
            base = f"local-cpu-{profile.host.cores}c"
        else:
            base = f"local-{profile.accelerators_per_node}x{profile.accelerator}"
    else:
        base = profile.name
    name = f"{base}-emulated" if emulated else base
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9._-]+", "-", name.lower())).strip("-.")


def system_description(
    *,
    profile: Profile,
    detected: DetectedHardware,
    submitter: str,
    division: str,
    status: str,
    emulated: bool,
    system_name: str,
    nodes_available: int = 1,
) -> dict[str, Any]:
    """All 33 fields MLPerf requires, validated against ``system_desc.schema.json``.

    Raises HarnessError HARDWARE when ``emulated`` is false but the profile's hardware is not
    present (``nodes_available`` nodes take part, as in :func:`profile_present`).
    """
    present, reason = profile_present(profile, detected, nodes_available=nodes_available)
    if not emulated and not present:
        raise HarnessError(
            f"profile {profile.name} is not present on this machine ({reason}); "
            "run it emulated, or on the hardware it describes",
            ErrorCategory.HARDWARE,
        )
    if emulated:
        accelerators = _emulated_accelerator_fields(profile)
    elif profile.accelerator is None:
        accelerators = _cpu_only_accelerator_fields()
    else:
        accelerators = _detected_accelerator_fields(profile, detected)
    fields = {
        "submitter": submitter,
        "division": division,
        "status": status,
        "system_name": system_name,
        "number_of_nodes": "1" if emulated else str(profile.nodes),
        **_host_fields(detected),
        **accelerators,
        "cooling": "",
        "hw_notes": _hw_notes(profile, detected, emulated=emulated, present=present, reason=reason),
        **_software_fields(profile, detected, emulated=emulated),
    }
    desc = {key: fields[key] for key in SYSTEM_DESC_FIELDS}
    validate(desc, SCHEMA, what=f"system description {system_name!r}")
    return desc


def write_system_description(desc: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``desc`` as JSON to ``path`` atomically (a crash never leaves half a file)."""
    path = Path(path)
    write_atomic(path, json.dumps(desc, indent=4) + "\n")
    return path


def _host_fields(detected: DetectedHardware) -> dict[str, str]:
    """The host the run used: always what was detected."""
    return {
        "host_processors_per_node": str(detected.sockets_or_one),
        "host_processor_model_name": detected.cpu_model,
        "host_processor_core_count": str(detected.cores_per_socket),
        "host_processor_vcpu_count": str(detected.logical_cpus),
        "host_processor_frequency": f"{detected.cpu_mhz / 1000:.2f}GHz" if detected.cpu_mhz else "",
        "host_processor_caches": "",
        "host_processor_interconnect": "",
        "host_memory_capacity": format_bytes(detected.memory_bytes, binary=True),
        "host_storage_type": "",
        "host_storage_capacity": format_bytes(detected.results_disk_total_bytes, binary=True),
        "host_networking": "",
        "host_networking_topology": "",
        "host_memory_configuration": "",
    }


def _cpu_only_accelerator_fields() -> dict[str, str]:
    return {
        "accelerators_per_node": "0",
        "accelerator_model_name": "N/A",
        "accelerator_host_interconnect": "",
        "accelerator_frequency": "",
        "accelerator_on-chip_memories": "",
        "accelerator_memory_configuration": "",
        "accelerator_memory_capacity": "N/A",
        "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "",
    }


def _detected_accelerator_fields(profile: Profile, detected: DetectedHardware) -> dict[str, str]:
    """The accelerators found: their reported name and memory. The interconnect is not claimed:
    detection cannot tell an NVLink board from a PCIe card."""
    device = matching_devices(profile, detected)[0]
    return {
        **_cpu_only_accelerator_fields(),
        "accelerators_per_node": str(profile.accelerators_per_node),
        "accelerator_model_name": device.name,
        "accelerator_memory_capacity": f"{device.memory_bytes // 2**20} MiB",
    }


def _emulated_accelerator_fields(profile: Profile) -> dict[str, str]:
    """The profile's accelerators, each field marked EMULATED. One emulated accelerator per rank,
    all on the one host that ran them (so a 16-node profile is 1 node x 128 here)."""
    if profile.accelerator is None:
        return _cpu_only_accelerator_fields()
    ic = profile.interconnect
    return {
        "accelerators_per_node": str(profile.world_size),
        "accelerator_model_name": f"{profile.accelerator} ({EMULATED} by gloo ranks on CPU)",
        "accelerator_host_interconnect": "",
        "accelerator_frequency": "",
        "accelerator_on-chip_memories": "",
        "accelerator_memory_configuration": (
            f"{EMULATED} in host memory (profile: {format_rate(profile.hbm.bandwidth_bytes_per_s)} per device)"
        ),
        "accelerator_memory_capacity": f"{format_bytes(profile.hbm.capacity_bytes)} ({EMULATED})",
        "accelerator_interconnect": (
            f"{EMULATED}: gloo on one host (profile: {format_rate(ic.intra_node_bw_bytes_per_s)} intra-node, "
            f"{format_rate(ic.scale_out_bw_bytes_per_s)} scale-out per accelerator)"
        ),
        "accelerator_interconnect_topology": (
            f"{EMULATED}: profile {profile.nodes} node(s) x {profile.accelerators_per_node}"
        ),
    }


def _hw_notes(profile: Profile, detected: DetectedHardware, *, emulated: bool, present: bool, reason: str) -> str:
    if emulated:
        note = f"{EMULATED}: profile {profile.name} run on {detected.cpu_model} with {profile.world_size} gloo ranks"
        if profile.accelerator is not None:
            hardware = f"{profile.nodes} node(s) x {profile.accelerators_per_node} x {profile.accelerator}"
            note += f"; the profile's hardware ({hardware}) was not used" + ("" if present else f": {reason}")
        return note
    if profile.accelerator is None:
        return f"profile {profile.name}: CPU only, {detected.logical_cpus} logical CPUs detected"
    return f"profile {profile.name}: {reason} (detected); interconnect not verified"


def _software_fields(profile: Profile, detected: DetectedHardware, *, emulated: bool) -> dict[str, Any]:
    backend = "gloo" if emulated else profile.collective_backend.value
    stack = {
        "python_version": detected.python_version,
        "torch_version": detected.torch_version,
        "collective_backend": backend,
        "harness_version": harness.__version__,
        "mlperf_logging_version": _version("mlperf-logging"),
    }
    if detected.cuda_version and not emulated:
        stack["cuda_version"] = detected.cuda_version
    return {
        "framework": f"PyTorch {detected.torch_version}",
        "other_software_stack": stack,
        "operating_system": detected.os,
        "sw_notes": f"dlrm-harness {harness.__version__}; {profile.world_size} {backend} rank(s)",
    }


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
