"""Detection of the machine actually present, and whether it can run a profile for real.

What is detected is what a run may claim in its system description; a profile whose hardware
is not found here can only be emulated (e.g. 8 gloo ranks on the CPU standing in for 8 GPUs).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from harness.hw_profiles.profiles import Profile

PROC_CPUINFO = Path("/proc/cpuinfo")
PROC_MEMINFO = Path("/proc/meminfo")
OS_RELEASE = Path("/etc/os-release")
SYS_CPU = Path("/sys/devices/system/cpu")

# The CPU flags (/proc/cpuinfo) of instructions that compute in bf16: Intel's AMX tiles and the
# AVX-512 BF16 dot products (Intel Cooper Lake and later, AMD Zen 4 and later).
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
# The CPU flags of the instruction sets that set a core's peak FLOP per cycle (the projection's
# table of devices, harness/hw_profiles/devices.py): the bf16 ones, AVX-512 and FMA.
ISA_CPU_FLAGS = (*BF16_CPU_FLAGS, "avx512f", "fma")

# A device reports a little more or less than its marketed decimal capacity (an "A100 40 GB"
# reports 40,536 MiB); it matches a profile's accelerator if it has at least this share of it.
DEVICE_MEMORY_TOLERANCE = 0.9


@dataclass(frozen=True)
class CudaDevice:
    """One CUDA device as torch reports it."""

    index: int
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int] | None = None  # (major, minor), as torch reports it; None: not known


@dataclass(frozen=True)
class CpuTopology:
    """What /proc/cpuinfo (or sysfs) says about the processors."""

    model_name: str | None
    mhz: float | None
    logical_cpus: int
    physical_cores: int | None
    sockets: int | None
    flags: frozenset[str] = frozenset()  # the first processor's ``flags`` (x86 instruction-set extensions)


@dataclass(frozen=True)
class DetectedHardware:
    """The machine present: host, memory, disk where results go, CUDA devices, software."""

    cpu_model: str
    cpu_mhz: float | None
    logical_cpus: int
    usable_cpus: int
    physical_cores: int
    sockets: int | None
    memory_bytes: int
    cuda_devices: tuple[CudaDevice, ...]
    cuda_version: str | None
    os: str
    python_version: str
    torch_version: str
    results_disk_path: str
    results_disk_total_bytes: int
    results_disk_free_bytes: int
    # the bf16 instruction sets among the CPU's flags (BF16_CPU_FLAGS): what a CPU run computes bf16 with
    cpu_bf16_flags: tuple[str, ...] = ()
    # the instruction sets among the CPU's flags that set its peak FLOP rate (ISA_CPU_FLAGS)
    cpu_isa_flags: tuple[str, ...] = ()

    @property
    def sockets_or_one(self) -> int:
        return self.sockets or 1

    @property
    def cores_per_socket(self) -> int:
        return max(self.physical_cores // self.sockets_or_one, 1)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values."""
        data = dataclasses.asdict(self)
        data["cuda_devices"] = [
            {**dataclasses.asdict(d), "compute_capability": list(d.compute_capability or ()) or None}
            for d in self.cuda_devices
        ]
        data["cpu_bf16_flags"] = list(self.cpu_bf16_flags)
        data["cpu_isa_flags"] = list(self.cpu_isa_flags)
        return data


def detect(*, results_dir: str | os.PathLike[str] = "results") -> DetectedHardware:
    """Detect the machine present; ``results_dir`` is where results go (its disk is measured)."""
    cpu = parse_cpuinfo(_read_text(PROC_CPUINFO))
    topology = _with_sysfs_fallback(cpu)
    logical = os.cpu_count() or topology.logical_cpus or 1
    devices, cuda_version, torch_version = _cuda_devices()
    disk_path = _existing_ancestor(Path(results_dir))
    disk = shutil.disk_usage(disk_path)
    return DetectedHardware(
        cpu_model=topology.model_name or platform.processor() or platform.machine() or "unknown CPU",
        cpu_mhz=topology.mhz,
        logical_cpus=logical,
        usable_cpus=_usable_cpus(logical),
        physical_cores=topology.physical_cores or logical,
        sockets=topology.sockets,
        memory_bytes=parse_meminfo(_read_text(PROC_MEMINFO)) or _sysconf_memory_bytes(),
        cuda_devices=devices,
        cuda_version=cuda_version,
        os=_os_string(),
        python_version=platform.python_version(),
        torch_version=torch_version,
        results_disk_path=str(disk_path),
        results_disk_total_bytes=disk.total,
        results_disk_free_bytes=disk.free,
        cpu_bf16_flags=tuple(f for f in BF16_CPU_FLAGS if f in topology.flags),
        cpu_isa_flags=tuple(f for f in ISA_CPU_FLAGS if f in topology.flags),
    )


def parse_cpuinfo(text: str) -> CpuTopology:
    """Model name, clock, logical CPUs, physical cores, sockets and flags from /proc/cpuinfo text.

    Counts that the text does not determine (no ``physical id``/``core id``, as on many ARM
    machines and some VMs) are ``None``.
    """
    blocks = [_fields(block) for block in re.split(r"\n\s*\n", text) if "processor" in block]
    model = next((b["model name"] for b in blocks if b.get("model name")), None)
    mhz = next((_float(b["cpu MHz"]) for b in blocks if "cpu MHz" in b), None)
    packages = {b["physical id"] for b in blocks if "physical id" in b}
    cores = {(b["physical id"], b["core id"]) for b in blocks if "physical id" in b and "core id" in b}
    flags = next((b["flags"] for b in blocks if "flags" in b), "")
    return CpuTopology(
        model_name=model,
        mhz=mhz,
        logical_cpus=len(blocks),
        physical_cores=len(cores) or None,
        sockets=len(packages) or None,
        flags=frozenset(flags.split()),
    )


def parse_meminfo(text: str) -> int | None:
    """``MemTotal`` of /proc/meminfo text, in bytes (the file says kB and means KiB)."""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def accelerator_family(model_name: str) -> str | None:
    """The chip family in a model name: 'NVIDIA A100-SXM4-40GB' -> 'A100', 'Tesla V100...' -> 'V100'."""
    match = re.search(r"(?<![A-Z0-9])([A-Z]{1,2}\d{2,3})(?![0-9])", model_name.upper())
    return match.group(1) if match else None


def device_matches(device: CudaDevice, accelerator: str, hbm_capacity_bytes: int) -> bool:
    """Whether ``device`` is (at least) the accelerator a profile names: same family, enough memory."""
    family = accelerator_family(accelerator)
    if family is None:
        return device.name.strip().lower() == accelerator.strip().lower()
    same_family = re.search(rf"(?<![A-Z0-9]){family}(?![0-9])", device.name.upper()) is not None
    return same_family and device.memory_bytes >= DEVICE_MEMORY_TOLERANCE * hbm_capacity_bytes


def matching_devices(profile: Profile, detected: DetectedHardware) -> tuple[CudaDevice, ...]:
    """The detected CUDA devices that are the accelerator ``profile`` names."""
    if profile.accelerator is None:
        return ()
    return tuple(
        d for d in detected.cuda_devices if device_matches(d, profile.accelerator, profile.hbm.capacity_bytes)
    )


def profile_present(profile: Profile, detected: DetectedHardware, *, nodes_available: int = 1) -> tuple[bool, str]:
    """Whether the machine present can run ``profile`` for real, and a one-line reason.

    A CPU-only profile is always present. An accelerator profile needs, on this node, at least
    ``accelerators_per_node`` devices of its model, and ``nodes`` nodes in all; detection sees
    one machine, so a multi-node run says how many nodes take part (``nodes_available``, e.g.
    torchrun's ``--nnodes``).
    """
    if profile.accelerator is None or profile.accelerators_per_node == 0:
        return True, "CPU-only profile: runs on any machine"
    wanted = f"{profile.accelerators_per_node} x {profile.accelerator}"
    found = matching_devices(profile, detected)
    if len(found) < profile.accelerators_per_node:
        return False, f"needs {wanted} per node; found {_describe_devices(detected.cuda_devices)}"
    if profile.nodes > nodes_available:
        return False, (
            f"needs {profile.nodes} nodes of {wanted}; this run has {nodes_available} "
            "(launch torchrun on every node and pass the node count)"
        )
    return True, f"{wanted} present" + (f" on each of {profile.nodes} nodes" if profile.nodes > 1 else "")


def _describe_devices(devices: Iterable[CudaDevice]) -> str:
    names: dict[str, int] = {}
    for device in devices:
        names[device.name] = names.get(device.name, 0) + 1
    if not names:
        return "no CUDA device"
    return ", ".join(f"{count} x {name}" for name, count in names.items())


def _fields(block: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _with_sysfs_fallback(cpu: CpuTopology) -> CpuTopology:
    """Fill sockets and physical cores from sysfs topology when /proc/cpuinfo lacks them."""
    if cpu.sockets is not None and cpu.physical_cores is not None:
        return cpu
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    for topology in SYS_CPU.glob("cpu[0-9]*/topology"):
        package = _read_text(topology / "physical_package_id").strip()
        core = _read_text(topology / "core_id").strip()
        if package and core:
            packages.add(package)
            cores.add((package, core))
    return dataclasses.replace(
        cpu,
        sockets=cpu.sockets or (len(packages) or None),
        physical_cores=cpu.physical_cores or (len(cores) or None),
    )


def _usable_cpus(logical: int) -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return logical


def usable_cpus() -> int:
    """The logical CPUs this process may run on (its affinity; the machine's count where unknown)."""
    return _usable_cpus(os.cpu_count() or 1)


def _sysconf_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


# the device nodes a GPU driver makes (NVIDIA; ROCm's kfd; WSL's dxg): without any, torch sees no
# GPU, and detection need not import torch (1-2 s of a command's start-up) to learn so
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def _cuda_devices() -> tuple[tuple[CudaDevice, ...], str | None, str]:
    if not any(os.path.exists(node) for node in GPU_DEVICE_NODES):
        return (), None, version("torch")
    import torch  # torch: only where a GPU's device node is present (1-2 s of a command's start-up)

    if not torch.cuda.is_available():
        return (), None, str(torch.__version__)
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append(CudaDevice(index=index, name=str(props.name), memory_bytes=int(props.total_memory),
                                  compute_capability=(int(props.major), int(props.minor))))
    return tuple(devices), str(torch.version.cuda), str(torch.__version__)


def _existing_ancestor(path: Path) -> Path:
    path = path.expanduser().resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _os_string() -> str:
    pretty = None
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', _read_text(OS_RELEASE), re.MULTILINE)
    if match:
        pretty = match.group(1)
    kernel = f"{platform.system()} {platform.release()}".strip()
    return f"{pretty}, kernel {kernel}" if pretty else kernel or sys.platform


def measure_memory_bandwidth(*, threads: int | None = None, megabytes: int = 128, repeats: int = 5) -> float:
    """This machine's memory bandwidth, measured: each of ``threads`` threads (default: the usable
    CPUs) copies its own ``megabytes`` array at once (numpy releases the GIL), the best of
    ``repeats``, read and written bytes counted, in bytes/s. About a second; the projection of the
    ``local`` profile asks for it, because no table knows a virtual machine's share of its host."""
    threads = threads or usable_cpus()
    n = megabytes * 2**20 // 8
    sources = [np.ones(n) for _ in range(threads)]
    targets = [np.empty(n) for _ in range(threads)]
    best = float("inf")
    for _ in range(repeats):
        workers = [threading.Thread(target=np.copyto, args=(targets[i], sources[i])) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - start)
    return threads * 2 * n * 8 / best
