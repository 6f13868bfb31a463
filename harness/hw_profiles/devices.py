"""The table of compute devices (``_devices.yaml``): peak FLOP/s per precision, memory, links.

Two kinds of entry: accelerators (a GPU, a TPU chip: figures per device) and host CPUs (figures
per socket, FLOP/s from cores x base clock x FLOP per cycle of the precision's instructions). A
system description names its devices in free text ("NVIDIA A100-SXM4-80GB (400W)", "NVIDIA
Blackwell GPU (B200-SXM-180GB)", "TPU" on a system called "tpu-v4-128-TF"): :func:`find_accelerator`
and :func:`find_cpu` match the table's regular expressions against the name written in capitals
without punctuation (then against the name with the system's name, for a bare "TPU"). The
machine present is a CPU too: :func:`detected_cpu` builds its entry from ``/proc/cpuinfo``.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from compliance.schemas import validate
from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.detection import DetectedHardware

_TABLE = "_devices.yaml"
# the precisions a device computes, and what each falls back to where the device has no units for it
# (a V100 has no bf16: its mixed precision is fp16; a CPU without bf16 instructions computes in fp32; a
# TPU, whose matrix units take bf16 only, computes an fp32 model in bf16 passes)
_FALLBACK = {"fp8": ("fp8", "bf16", "fp16", "fp32"), "bf16": ("bf16", "fp16", "fp32"),
             "fp16": ("fp16", "bf16", "fp32"), "tf32": ("tf32", "fp32"), "fp32": ("fp32", "tf32", "bf16")}
# FLOP per cycle and core of each instruction set a CPU's /proc/cpuinfo flags name (_devices.yaml)
CPU_FLOPS_PER_CYCLE = (
    ("amx_bf16", {"bf16": 1024}),
    ("avx512_bf16", {"bf16": 128}),
    ("avx512f", {"fp32": 64}),
    ("fma", {"fp32": 32}),
)


class DeviceKind(enum.Enum):
    GPU = "gpu"
    TPU = "tpu"
    CPU = "cpu"


def normalised(text: str) -> str:
    """``text`` in capitals with everything but letters, digits and spaces removed, spaces single."""
    return " ".join(re.sub(r"[^A-Z0-9 ]", "", text.upper()).split())


def _key(*parts: str) -> str:
    """The matching key: each part in capitals without any character that is not a letter or a digit."""
    return " ".join(re.sub(r"[^A-Z0-9]", "", p.upper()) for p in parts if p)


@dataclass(frozen=True)
class Device:
    """One compute device of the table: per accelerator, or per CPU socket."""

    name: str
    kind: DeviceKind
    peak_flops: tuple[tuple[str, float], ...]  # (precision, FLOP/s), dense
    memory_bytes: float  # on the device (0: a CPU, whose memory is the host's)
    memory_bw_bytes_per_s: float
    links_bw_bytes_per_s: float  # to peers in the node, both directions
    scale_out_bw_bytes_per_s: float  # its share of the platform's NICs, both directions
    sources: tuple[tuple[str, str], ...]
    cores: int = 0  # a CPU socket's cores

    def compute_precision(self, precision: str) -> str:
        """The precision this device computes ``precision`` in: itself where it has units for it,
        else the nearest it has (a V100's bf16 is fp16; a CPU without bf16 instructions computes fp32)."""
        rates = dict(self.peak_flops)
        return next((p for p in _FALLBACK.get(precision, (precision, "fp32")) if p in rates), "fp32")

    def flops(self, precision: str) -> float:
        """Peak dense FLOP/s at the precision it computes ``precision`` in."""
        return dict(self.peak_flops).get(self.compute_precision(precision), 0.0)

    def source(self, key: str) -> str:
        return dict(self.sources).get(key, "not recorded")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind.value, "peak_flops": dict(self.peak_flops),
                "memory_bytes": self.memory_bytes, "memory_bw_bytes_per_s": self.memory_bw_bytes_per_s,
                "links_bw_bytes_per_s": self.links_bw_bytes_per_s,
                "scale_out_bw_bytes_per_s": self.scale_out_bw_bytes_per_s,
                **({"cores": self.cores} if self.cores else {}), "sources": dict(self.sources)}


@dataclass(frozen=True)
class _Entry:
    device: Device
    patterns: tuple[re.Pattern[str], ...]

    def matches(self, key: str) -> bool:
        return any(p.search(key) for p in self.patterns)


@dataclass(frozen=True)
class Nic:
    pattern: re.Pattern[str]
    gbps: float
    source: str


@dataclass(frozen=True)
class Table:
    accelerators: tuple[_Entry, ...]
    cpus: tuple[_Entry, ...]
    nics: tuple[Nic, ...]


def _accelerator(raw: Mapping[str, Any]) -> Device:
    return Device(
        name=raw["name"], kind=DeviceKind(raw["kind"]),
        peak_flops=tuple((k, float(v)) for k, v in raw["peak_flops"].items()),
        memory_bytes=float(raw["memory_bytes"]), memory_bw_bytes_per_s=float(raw["memory_bw_bytes_per_s"]),
        links_bw_bytes_per_s=float(raw["links_bw_bytes_per_s"]),
        scale_out_bw_bytes_per_s=float(raw["scale_out_bw_bytes_per_s"]), sources=tuple(raw["sources"].items()),
    )


def cpu_device(name: str, *, cores: int, ghz: float, flops_per_cycle: Mapping[str, float], memory_bw_bytes_per_s: float,
               links_bw_bytes_per_s: float, sources: Mapping[str, str]) -> Device:
    """A CPU socket as a device: peak FLOP/s = cores x clock x FLOP per cycle, per precision."""
    rates = {p: cores * ghz * 1e9 * f for p, f in flops_per_cycle.items()}
    sources = {**sources, "peak_flops": f"{cores} cores x {ghz:g} GHz x FLOP per cycle "
                                        f"({', '.join(f'{p} {f:g}' for p, f in flops_per_cycle.items())})"}
    return Device(name=name, kind=DeviceKind.CPU, peak_flops=tuple(rates.items()), memory_bytes=0.0,
                  memory_bw_bytes_per_s=memory_bw_bytes_per_s, links_bw_bytes_per_s=links_bw_bytes_per_s,
                  scale_out_bw_bytes_per_s=0.0, sources=tuple(sources.items()), cores=cores)


def _cpu(raw: Mapping[str, Any]) -> Device:
    return cpu_device(raw["name"], cores=int(raw["cores"]), ghz=float(raw["base_ghz"]),
                      flops_per_cycle=raw["flops_per_cycle"], memory_bw_bytes_per_s=float(raw["memory_bw_bytes_per_s"]),
                      links_bw_bytes_per_s=float(raw["links_bw_bytes_per_s"]), sources=raw["sources"])


def _patterns(raw: Mapping[str, Any], what: str) -> tuple[re.Pattern[str], ...]:
    try:
        return tuple(re.compile(p) for p in raw["match"])
    except re.error as err:
        raise HarnessError(f"{_TABLE}: {what} {raw['name']!r} has a bad match pattern: {err}") from None


@functools.cache
def load_table() -> Table:
    """The shipped table, validated against ``devices.schema.json``."""
    try:
        raw = yaml.safe_load(resources.files(__package__).joinpath(_TABLE).read_text())
    except yaml.YAMLError as err:
        raise HarnessError(f"{_TABLE} is not valid YAML: {err}") from None
    validate(raw, "devices", what=_TABLE)
    return Table(
        accelerators=tuple(_Entry(_accelerator(a), _patterns(a, "accelerator")) for a in raw["accelerators"]),
        cpus=tuple(_Entry(_cpu(c), _patterns(c, "cpu")) for c in raw["cpus"]),
        nics=tuple(Nic(re.compile(n["match"]), float(n["gbps"]), n["source"]) for n in raw["nics"]),
    )


def accelerator_names() -> list[str]:
    return [e.device.name for e in load_table().accelerators]


def cpu_names() -> list[str]:
    return [e.device.name for e in load_table().cpus]


def find_accelerator(name: str, *, memory: str = "", system: str = "") -> Device:
    """The table's device for an accelerator named ``name`` (``memory``: its capacity as a system
    description writes it, which tells an 80 GB part from a 40 GB one; ``system``: the system's name,
    tried when the name alone matches nothing, for a bare "TPU"). One line naming the known
    accelerators when none matches (NOT_FOUND, exit 2)."""
    entries = load_table().accelerators
    for key in (_key(name, memory), _key(name, memory, system)):
        found = next((e.device for e in entries if e.matches(key)), None)
        if found is not None:
            return found
    raise HarnessError(f"accelerator {name!r} is not in the table of accelerators "
                       f"(harness/hw_profiles/{_TABLE}); known: {', '.join(accelerator_names())}",
                       ErrorCategory.NOT_FOUND)


def find_cpu(name: str) -> Device | None:
    """The table's socket for a host processor named ``name``, or None."""
    key = _key(name)
    return next((e.device for e in load_table().cpus if e.matches(key)), None)


def nic_gbps(text: str) -> tuple[float, str] | None:
    """The scale-out line rate a system description's ``host_networking`` names, in Gb/s per node
    (``8x ConnectX-6 ... 200Gb/sec``: 8 x 200), and where it comes from; None when it names none."""
    best: tuple[float, str] | None = None
    for part in re.split(r"[,;+]", text.upper()):  # "Storage: 2x ..., Compute: 8x ...": the largest fabric
        if "PCIE" in part.replace("-", "") and not any(n.pattern.search(_key(part)) for n in load_table().nics):
            continue  # a bus inside the node ("GPU-PCIe: 504 GB/s"), not a network card
        nic = next((n for n in load_table().nics if n.pattern.search(_key(part)) or n.pattern.search(part)), None)
        stated = re.search(r"(\d+)\s*G(?:B/S|BPS|BE|B)", part)  # a rate the text states wins over the card's
        if stated:
            gbps, source = float(stated.group(1)), f"{stated.group(1)} Gb/s as stated"
        elif nic is not None:
            gbps, source = nic.gbps, nic.source
        else:
            continue
        count = re.search(r"(\d+)\s*X\b", part)
        n = int(count.group(1)) if count else 1
        if best is None or n * gbps > best[0]:
            best = (n * gbps, f"host_networking {text.strip()!r}: {n} x {source}")
    return best


def detected_cpu(detected: DetectedHardware, *, memory_bw_bytes_per_s: float, memory_source: str) -> Device:
    """This machine's CPU as a device (all its usable cores, as one socket): the clock of
    ``/proc/cpuinfo``, the FLOP per cycle of the instruction sets its flags name, the memory
    bandwidth given (measured by the caller)."""
    flags = set(detected.cpu_isa_flags)
    per_cycle: dict[str, float] = {}
    for flag, rates in CPU_FLOPS_PER_CYCLE:
        if flag in flags:
            for precision, rate in rates.items():
                per_cycle.setdefault(precision, rate)
    per_cycle.setdefault("fp32", 16)  # SSE only: two 128-bit units
    cores = max(1, min(detected.physical_cores, detected.usable_cpus))
    ghz = (detected.cpu_mhz or 2000.0) / 1000
    named = find_cpu(detected.cpu_model)
    return cpu_device(
        detected.cpu_model, cores=cores, ghz=ghz, flops_per_cycle=per_cycle,
        memory_bw_bytes_per_s=memory_bw_bytes_per_s, links_bw_bytes_per_s=0.0,
        sources={"cores": f"detected: {cores} usable core(s) at {ghz:g} GHz (/proc/cpuinfo), flags "
                          f"{', '.join(f for f, _ in CPU_FLOPS_PER_CYCLE if f in flags) or 'none of AMX/AVX-512/FMA'}"
                          + (f"; the table's {named.name}" if named else ""),
                 "memory": memory_source, "links": "one process: none"},
    )
