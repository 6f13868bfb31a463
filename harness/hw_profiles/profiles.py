"""Hardware profiles: machines described as data, one YAML file each, checked by
``compliance/schemas/profile.schema.json`` at load time.

The special name ``local`` (the default) is not a file: it is built from detection of the
machine present, with conservative estimates (``_local.yaml``) for what cannot be measured.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

from compliance.schemas import schema_errors
from harness.errors import ErrorCategory, HarnessError, unknown_name
from harness.hw_profiles.detection import (
    CudaDevice,
    DetectedHardware,
    detect,
    device_matches,
)
from harness.hw_profiles.tiers import TIERS, Tier

LOCAL = "local"
DEFAULT_PROFILE = LOCAL
PROFILE_SUFFIX = ".yaml"
_LOCAL_ESTIMATES = "_local.yaml"
_GIB = 2**30


class CollectiveBackend(enum.Enum):
    NCCL = "nccl"
    GLOO = "gloo"


class DeviceType(enum.Enum):
    CUDA = "cuda"
    CPU = "cpu"


@dataclass(frozen=True)
class MemoryTier:
    """One memory tier: HBM per device, DDR and SSD per node."""

    capacity_bytes: int
    bandwidth_bytes_per_s: float

    @property
    def present(self) -> bool:
        return self.capacity_bytes > 0


@dataclass(frozen=True)
class HostSpec:
    """The host processors of one node."""

    processor_model: str
    sockets: int
    cores_per_socket: int

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


@dataclass(frozen=True)
class Interconnect:
    """Per-accelerator bandwidths, both directions together (as NVIDIA quotes NVLink)."""

    intra_node_bw_bytes_per_s: float
    scale_out_bw_bytes_per_s: float


@dataclass(frozen=True)
class Profile:
    """A machine (nodes of identical hardware) as the planner and the system description see it."""

    name: str
    description: str
    nodes: int
    accelerators_per_node: int
    accelerator: str | None
    hbm: MemoryTier
    ddr: MemoryTier
    ssd: MemoryTier
    host: HostSpec
    interconnect: Interconnect
    collective_backend: CollectiveBackend
    device_type: DeviceType
    sources: tuple[tuple[str, str], ...]

    @property
    def world_size(self) -> int:
        """Ranks of a run on this profile: one per accelerator, or one per node when CPU-only."""
        return self.nodes * max(self.accelerators_per_node, 1)

    @property
    def is_cpu_only(self) -> bool:
        return self.device_type is DeviceType.CPU

    @property
    def tiers(self) -> dict[Tier, MemoryTier]:
        return {Tier.HBM: self.hbm, Tier.DDR: self.ddr, Tier.SSD: self.ssd}

    def source(self, key: str) -> str:
        """Where figure ``key`` (e.g. ``"hbm.bandwidth_bytes_per_s"``) comes from."""
        return dict(self.sources).get(key) or dict(self.sources).get(key.split(".")[0], "not recorded")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data in the profile file's layout (it validates against the schema)."""
        return {
            "name": self.name,
            "description": self.description,
            "nodes": self.nodes,
            "accelerators_per_node": self.accelerators_per_node,
            "accelerator": self.accelerator,
            **{
                tier.value: {"capacity_bytes": t.capacity_bytes, "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s}
                for tier, t in self.tiers.items()
            },
            "host": {
                "processor_model": self.host.processor_model,
                "sockets": self.host.sockets,
                "cores_per_socket": self.host.cores_per_socket,
            },
            "interconnect": {
                "intra_node_bw_bytes_per_s": self.interconnect.intra_node_bw_bytes_per_s,
                "scale_out_bw_bytes_per_s": self.interconnect.scale_out_bw_bytes_per_s,
            },
            "collective_backend": self.collective_backend.value,
            "device_type": self.device_type.value,
            "sources": dict(self.sources),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, what: str = "profile") -> Profile:
        """Validate ``data`` against the profile schema and build the profile."""
        _check(data, what)
        return cls(
            name=data["name"],
            description=data["description"],
            nodes=data["nodes"],
            accelerators_per_node=data["accelerators_per_node"],
            accelerator=data["accelerator"],
            **{
                tier.value: MemoryTier(
                    capacity_bytes=data[tier.value]["capacity_bytes"],
                    bandwidth_bytes_per_s=float(data[tier.value]["bandwidth_bytes_per_s"]),
                )
                for tier in TIERS
            },
            host=HostSpec(**data["host"]),
            interconnect=Interconnect(
                intra_node_bw_bytes_per_s=float(data["interconnect"]["intra_node_bw_bytes_per_s"]),
                scale_out_bw_bytes_per_s=float(data["interconnect"]["scale_out_bw_bytes_per_s"]),
            ),
            collective_backend=CollectiveBackend(data["collective_backend"]),
            device_type=DeviceType(data["device_type"]),
            sources=tuple(data["sources"].items()),
        )


# the figures every profile names a source for (profile.schema.json's sources)
_SOURCED = ("accelerator", *(f"{t.value}.{f}" for t in TIERS for f in ("capacity_bytes", "bandwidth_bytes_per_s")),
            "host", "interconnect.intra_node_bw_bytes_per_s", "interconnect.scale_out_bw_bytes_per_s")


def bare_cpu_profile(name: str = LOCAL) -> Profile:
    """A one-node CPU profile with no figures (every capacity and bandwidth 0): what a run outside a
    run set (a bench, a test, ``harness infer``'s training) says of the machine it trains on, where
    nothing plans with the figures."""
    none = MemoryTier(capacity_bytes=0, bandwidth_bytes_per_s=0.0)
    return Profile(name=name, description="this machine's CPU (a run outside a run set)", nodes=1,
                   accelerators_per_node=0, accelerator=None, hbm=none, ddr=none, ssd=none,
                   host=HostSpec(processor_model="unknown", sockets=1, cores_per_socket=1),
                   interconnect=Interconnect(intra_node_bw_bytes_per_s=0.0, scale_out_bw_bytes_per_s=0.0),
                   collective_backend=CollectiveBackend.GLOO, device_type=DeviceType.CPU,
                   sources=tuple((key, "none: a run outside a run set states no figures") for key in _SOURCED))


def profile_names() -> list[str]:
    """``local`` first, then the shipped profiles in name order."""
    return [LOCAL, *sorted(_shipped_files())]


def list_profiles(*, detected: DetectedHardware | None = None) -> list[Profile]:
    """Every known profile, ``local`` (built from ``detected``, or detection now) first."""
    return [load_profile(name, detected=detected) for name in profile_names()]


def load_profile(name: str, *, detected: DetectedHardware | None = None) -> Profile:
    """The profile called ``name``, or the one in a ``.yaml`` file when ``name`` is a path.

    ``local`` is built from ``detected`` (detection runs now when it is not given).
    Raises HarnessError NOT_FOUND for an unknown name, BAD_INPUT for an invalid file.
    """
    if name == LOCAL:
        return local_profile(detected)
    if name.endswith((".yaml", ".yml")) and ("/" in name or Path(name).is_file()):
        return profile_from_file(Path(name))
    files = _shipped_files()
    if name not in files:
        raise unknown_name("profile", name, profile_names(), listed="known profiles",
                           hint=" (or give the path of a profile .yaml file)")
    return _load_shipped(name)


def profile_from_file(path: Path) -> Profile:
    """A profile from a user's YAML file (any name)."""
    if not path.is_file():
        raise HarnessError(f"profile file {path} does not exist", ErrorCategory.NOT_FOUND)
    return Profile.from_dict(_parse_yaml(path.read_text(), str(path)), what=f"profile {path}")


def local_profile(detected: DetectedHardware | None = None) -> Profile:
    """The machine present as a profile: detected capacities, conservative estimated bandwidths."""
    detected = detected or detect()
    estimates = _local_estimates()
    gpus = detected.cuda_devices
    data: dict[str, Any] = {
        "name": LOCAL,
        "description": f"{estimates['description']}: {_local_summary(detected)}",
        "nodes": 1,
        "accelerators_per_node": len(gpus),
        "accelerator": gpus[0].name if gpus else None,
        "hbm": {"capacity_bytes": min((d.memory_bytes for d in gpus), default=0), "bandwidth_bytes_per_s": 0},
        "ddr": {
            "capacity_bytes": detected.memory_bytes,
            "bandwidth_bytes_per_s": estimates["ddr"]["bandwidth_bytes_per_s"],
        },
        "ssd": {
            "capacity_bytes": detected.results_disk_free_bytes // _GIB * _GIB,
            "bandwidth_bytes_per_s": estimates["ssd"]["bandwidth_bytes_per_s"],
        },
        "host": {
            "processor_model": detected.cpu_model,
            "sockets": detected.sockets_or_one,
            "cores_per_socket": detected.cores_per_socket,
        },
        "interconnect": dict(estimates["interconnect"]["cuda" if gpus else "cpu"]),
        "collective_backend": "nccl" if gpus else "gloo",
        "device_type": "cuda" if gpus else "cpu",
        "sources": _local_sources(detected, estimates["sources"]),
    }
    if gpus:
        data["hbm"]["bandwidth_bytes_per_s"], data["sources"]["hbm.bandwidth_bytes_per_s"] = _hbm_bandwidth(
            data["accelerator"], data["hbm"]["capacity_bytes"], estimates
        )
    return Profile.from_dict(data, what=f"profile {LOCAL} (built from detection and {_LOCAL_ESTIMATES})")


def format_bytes(n: float, *, binary: bool = False) -> str:
    """'40 GB', '1.5 TB' (decimal, as vendors write) or '23.54 GiB' (binary, as the OS reports)."""
    base, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB")) if binary else (1000, ("B", "KB", "MB", "GB", "TB", "PB"))
    return _scaled(n, base, units)


def format_rate(bytes_per_s: float) -> str:
    """'1.555 TB/s', '25 GB/s'."""
    return _scaled(bytes_per_s, 1000, ("B/s", "KB/s", "MB/s", "GB/s", "TB/s", "PB/s"))


def _scaled(value: float, base: int, units: tuple[str, ...]) -> str:
    index = 0
    while abs(value) >= base and index < len(units) - 1:
        value /= base
        index += 1
    return f"{value:.4g} {units[index]}"


def _check(data: Any, what: str) -> None:
    errors = schema_errors(data, "profile")
    if not errors:
        return
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    hint = ""
    if re.search(r"'[0-9._]+[eE][+-]?[0-9]+' is not of type", errors[0]):
        hint = "; YAML reads 40e9 as a string: write 40_000_000_000 or 4.0e+10"
    raise HarnessError(f"{what} is invalid: {errors[0]}{more}{hint}", ErrorCategory.BAD_INPUT)


def _parse_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise HarnessError(f"{where}{line}: not valid YAML: {problem}", ErrorCategory.BAD_INPUT) from None


def _package_files() -> Traversable:
    return resources.files(__package__)


@functools.cache
def _shipped_files() -> dict[str, str]:
    """Shipped profile name -> file name; files starting with '_' are not profiles."""
    return {
        entry.name.removesuffix(PROFILE_SUFFIX): entry.name
        for entry in _package_files().iterdir()
        if entry.name.endswith(PROFILE_SUFFIX) and not entry.name.startswith("_")
    }


@functools.cache
def _load_shipped(name: str) -> Profile:
    file_name = _shipped_files()[name]
    data = _parse_yaml(_package_files().joinpath(file_name).read_text(), file_name)
    profile = Profile.from_dict(data, what=f"profile {file_name}")
    if profile.name != name:
        raise HarnessError(
            f"profile {file_name} is invalid: name: {profile.name!r} must equal the file name {name!r}",
            ErrorCategory.BAD_INPUT,
        )
    return profile


@functools.cache
def _local_estimates() -> dict[str, Any]:
    data = _parse_yaml(_package_files().joinpath(_LOCAL_ESTIMATES).read_text(), _LOCAL_ESTIMATES)
    needed = (
        ("description",),
        ("ddr", "bandwidth_bytes_per_s"),
        ("ssd", "bandwidth_bytes_per_s"),
        ("hbm", "bandwidth_bytes_per_s"),
        ("interconnect", "cpu"),
        ("interconnect", "cuda"),
        ("sources",),
    )
    for path in needed:
        node = data
        for key in path:
            if not isinstance(node, dict) or key not in node:
                raise HarnessError(
                    f"{_LOCAL_ESTIMATES} is invalid: missing {'.'.join(path)}", ErrorCategory.BAD_INPUT
                )
            node = node[key]
    return data


def _local_summary(detected: DetectedHardware) -> str:
    gpus = detected.cuda_devices
    accel = f", {len(gpus)} x {gpus[0].name}" if gpus else ", no CUDA device"
    return (
        f"{detected.cpu_model}, {detected.logical_cpus} logical CPUs, "
        f"{format_bytes(detected.memory_bytes, binary=True)} RAM{accel}"
    )


def _local_sources(detected: DetectedHardware, estimated: Mapping[str, str]) -> dict[str, str]:
    kind = "cuda" if detected.cuda_devices else "cpu"
    return {
        "accelerator": "detected: torch.cuda" if detected.cuda_devices else "detected: no CUDA device (CPU only)",
        "hbm.capacity_bytes": "detected: torch.cuda device memory" if detected.cuda_devices else "none: CPU only",
        "hbm.bandwidth_bytes_per_s": "none: CPU only",
        "ddr.capacity_bytes": "detected: MemTotal of /proc/meminfo",
        "ddr.bandwidth_bytes_per_s": estimated["ddr.bandwidth_bytes_per_s"],
        "ssd.capacity_bytes": (
            f"detected: free space of the disk holding {detected.results_disk_path}, "
            "rounded down to whole GiB"
        ),
        "ssd.bandwidth_bytes_per_s": estimated["ssd.bandwidth_bytes_per_s"],
        "host": "detected: /proc/cpuinfo",
        "interconnect.intra_node_bw_bytes_per_s": estimated[f"interconnect.{kind}.intra_node_bw_bytes_per_s"],
        "interconnect.scale_out_bw_bytes_per_s": estimated["interconnect.scale_out_bw_bytes_per_s"],
    }


def _hbm_bandwidth(accelerator: str, capacity_bytes: int, estimates: Mapping[str, Any]) -> tuple[float, str]:
    """A detected GPU's memory bandwidth: from the shipped profile of the same accelerator, else estimated."""
    device = CudaDevice(index=0, name=accelerator, memory_bytes=capacity_bytes)
    known = [
        p
        for p in (_load_shipped(name) for name in sorted(_shipped_files()))
        if p.accelerator is not None and device_matches(device, p.accelerator, p.hbm.capacity_bytes)
    ]
    if known:
        best = max(known, key=lambda p: p.hbm.capacity_bytes)
        return best.hbm.bandwidth_bytes_per_s, f"profile {best.name} (same accelerator): {best.source('hbm.bandwidth_bytes_per_s')}"
    return estimates["hbm"]["bandwidth_bytes_per_s"], estimates["sources"]["hbm.bandwidth_bytes_per_s"]
