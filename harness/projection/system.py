"""A system as the projection sees it: a profile (nodes, ranks, memory tiers, links: what the
planner reads) and the device each rank computes on (peak FLOP/s per precision, memory bandwidth).

A rank is one accelerator, or one node of a CPU-only system (all its sockets: as the profiles
count ranks). Its device comes from the table (``harness/hw_profiles/_devices.yaml``) by the
profile's accelerator, or by its host processor for a CPU-only profile; the ``local`` profile's CPU
is this machine's, from detection, with its memory bandwidth measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.detection import DetectedHardware, detect, measure_memory_bandwidth
from harness.hw_profiles.devices import Device, detected_cpu, find_accelerator, find_cpu
from harness.hw_profiles.profiles import LOCAL, Profile
from harness.projection.constants import DeviceClass

_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# What a copy measures of a server's memory bandwidth: the table's figures are the vendors' peaks
# (channels x transfer rate), a measured copy reaches about this share of them (STREAM's copy on
# Xeon and EPYC servers: 75-85% of the theoretical peak), so the machine present's measured figure
# is divided by it to be priced as the table's are.
MEASURED_COPY_FRACTION = 0.8


@dataclass(frozen=True)
class System:
    """A profile and the device of its ranks."""

    profile: Profile
    device: Device
    sockets_per_rank: int = 1  # a CPU-only system's rank is a node: its sockets

    @property
    def device_class(self) -> DeviceClass:
        return DeviceClass.of(self.device.kind)

    @property
    def ranks(self) -> int:
        return self.profile.world_size

    @property
    def ranks_per_node(self) -> int:
        return max(self.profile.accelerators_per_node, 1)

    def native_precision(self) -> str:
        """The lowest precision the device computes a DLRM's dense layers in: bf16 where it has
        bf16 units (fp16 where it has only fp16, as a V100), else fp32."""
        return self.device.compute_precision("bf16")

    def peak_flops(self, precision: str) -> float:
        """One rank's peak dense FLOP/s at ``precision`` (as the device computes it)."""
        return self.device.flops(precision) * self.sockets_per_rank

    @property
    def memory_bw_bytes_per_s(self) -> float:
        """One rank's memory bandwidth: its HBM, or a CPU node's DDR (every socket's)."""
        if self.device.kind.value == "cpu":
            return self.profile.ddr.bandwidth_bytes_per_s or self.device.memory_bw_bytes_per_s * self.sockets_per_rank
        return self.profile.hbm.bandwidth_bytes_per_s or self.device.memory_bw_bytes_per_s

    def describe(self) -> str:
        rank = (f"{self.sockets_per_rank} x {self.device.name} per node" if self.device_class is DeviceClass.CPU
                else self.device.name)
        return (f"{self.profile.name}: {self.profile.nodes} node(s) x {self.ranks_per_node} rank(s), each "
                f"{rank}")


def bytes_per_element(precision: str) -> int:
    return _BYTES[precision]


def system_for_profile(profile: Profile, *, detected: DetectedHardware | None = None,
                       memory_bw_bytes_per_s: float | None = None) -> System:
    """The system of ``profile``: its accelerator's device, or its host CPU's for a CPU-only profile
    (the ``local`` profile: this machine's CPU, its memory bandwidth measured unless given). One
    line when the device is not in the table (NOT_FOUND, exit 2)."""
    if not profile.is_cpu_only and profile.accelerator:
        device = find_accelerator(profile.accelerator, memory=f"{profile.hbm.capacity_bytes / 1e9:.0f} GB")
        return System(profile, device)
    if profile.name == LOCAL:
        detected = detected or detect()
        measured = memory_bw_bytes_per_s or measure_memory_bandwidth()
        peak = measured / MEASURED_COPY_FRACTION
        source = (f"measured: a copy on every usable core, {measured / 1e9:.1f} GB/s, taken as "
                  f"{MEASURED_COPY_FRACTION:.0%} of the peak ({peak / 1e9:.1f} GB/s)")
        device = detected_cpu(detected, memory_bw_bytes_per_s=peak, memory_source=source)
        # the measured figure, not the profile's conservative estimate, is this machine's memory
        profile = _with_ddr_bandwidth(profile, peak, source)
        return System(profile, device, sockets_per_rank=1)
    cpu = find_cpu(profile.host.processor_model)
    if cpu is None:
        raise HarnessError(f"profile {profile.name}: its host processor {profile.host.processor_model!r} is not in the "
                           f"table of devices (harness/hw_profiles/_devices.yaml)", ErrorCategory.NOT_FOUND)
    return System(profile, with_cores(cpu, profile.host.cores_per_socket), sockets_per_rank=profile.host.sockets)


def with_cores(cpu: Device, cores: int) -> Device:
    """A table CPU with the cores a profile states (a part of the same family with fewer or more
    cores, or a pre-release part): its peak FLOP/s scaled by the cores."""
    if cores <= 0 or cores == cpu.cores:
        return cpu
    scale = cores / cpu.cores
    sources = {**dict(cpu.sources), "peak_flops": f"{cpu.source('peak_flops')}, scaled to the {cores} cores stated"}
    return replace(cpu, peak_flops=tuple((p, f * scale) for p, f in cpu.peak_flops), cores=cores,
                   sources=tuple(sources.items()))


def _with_ddr_bandwidth(profile: Profile, bandwidth: float, source: str) -> Profile:
    data = profile.to_dict()
    data["ddr"]["bandwidth_bytes_per_s"] = bandwidth
    data["sources"]["ddr.bandwidth_bytes_per_s"] = source
    return Profile.from_dict(data, what=f"profile {profile.name}")
