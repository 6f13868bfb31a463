"""Detection of the machine present, and whether a profile's hardware is here."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hw_profiles import CudaDevice, DetectedHardware, detect, load_profile, profile_present
from harness.hw_profiles.detection import accelerator_family, parse_cpuinfo, parse_meminfo

TWO_SOCKETS_HT = "\n\n".join(
    f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz\ncpu MHz\t\t: 2000.000\n"
    f"physical id\t: {i // 4}\ncore id\t\t: {(i // 2) % 2}\n"
    for i in range(8)
)
ARM_NO_TOPOLOGY = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n"

A100_40 = CudaDevice(index=0, name="NVIDIA A100-SXM4-40GB", memory_bytes=40536 * 2**20)
A100_80 = CudaDevice(index=0, name="NVIDIA A100-SXM4-80GB", memory_bytes=81251 * 2**20)
H100 = CudaDevice(index=0, name="NVIDIA H100 80GB HBM3", memory_bytes=81559 * 2**20)
H200 = CudaDevice(index=0, name="NVIDIA H200", memory_bytes=143771 * 2**20)
V100 = CudaDevice(index=0, name="Tesla V100-SXM2-16GB", memory_bytes=16160 * 2**20)
_CPU_ONLY = DetectedHardware(
    cpu_model="Test CPU",
    cpu_mhz=None,
    logical_cpus=2,
    usable_cpus=2,
    physical_cores=2,
    sockets=1,
    memory_bytes=2**30,
    cuda_devices=(),
    cuda_version=None,
    os="Linux",
    python_version=platform.python_version(),
    torch_version="2.13.0",
    results_disk_path="/",
    results_disk_total_bytes=2**40,
    results_disk_free_bytes=2**39,
)


@pytest.fixture(scope="module")
def detected() -> DetectedHardware:
    return detect()


def _with(detected: DetectedHardware, device: CudaDevice, count: int) -> DetectedHardware:
    devices = tuple(dataclasses.replace(device, index=i) for i in range(count))
    return dataclasses.replace(detected, cuda_devices=devices)


def test_detect_matches_the_os(detected: DetectedHardware) -> None:
    assert detected.logical_cpus == os.cpu_count()
    mem_kib = int(re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M).group(1))
    assert detected.memory_bytes == mem_kib * 1024
    assert 1 <= detected.physical_cores <= detected.logical_cpus
    assert 1 <= detected.usable_cpus <= detected.logical_cpus
    assert detected.sockets is None or 1 <= detected.sockets <= detected.physical_cores
    assert detected.cpu_model and detected.cpu_model != "unknown CPU"
    assert detected.python_version == platform.python_version()
    assert detected.torch_version == str(torch.__version__)
    assert bool(detected.cuda_devices) == torch.cuda.is_available()
    assert 0 < detected.results_disk_free_bytes <= detected.results_disk_total_bytes
    json.dumps(detected.to_dict())


def test_results_disk_is_the_nearest_existing_folder(tmp_path: Path) -> None:
    detected = detect(results_dir=tmp_path / "not" / "yet" / "made")
    assert detected.results_disk_path == str(tmp_path.resolve())


def test_parse_cpuinfo_counts_sockets_cores_and_threads() -> None:
    cpu = parse_cpuinfo(TWO_SOCKETS_HT)
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (8, 4, 2)
    assert cpu.model_name == "Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz"
    assert cpu.mhz == 2000.0


def test_parse_cpuinfo_without_topology_says_unknown() -> None:
    cpu = parse_cpuinfo(ARM_NO_TOPOLOGY)
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets, cpu.model_name, cpu.mhz) == (2, None, None, None, None)


def test_parse_meminfo() -> None:
    assert parse_meminfo("MemTotal:       24684092 kB\nMemFree: 1 kB\n") == 24684092 * 1024
    assert parse_meminfo("nothing here") is None


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200-SXM5-141GB", "H200"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_accelerator_family(model: str, family: str | None) -> None:
    assert accelerator_family(model) == family


def test_cpu_only_profile_is_always_present(detected: DetectedHardware) -> None:
    present, reason = profile_present(load_profile("local", detected=detected), detected)
    assert present and reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA devices")
def test_gpu_profile_is_absent_on_a_cpu_machine(detected: DetectedHardware) -> None:
    present, reason = profile_present(load_profile("zionex-8gpu"), detected)
    assert not present
    assert reason == "needs 8 x NVIDIA A100-SXM4-40GB per node; found no CUDA device"


@pytest.mark.parametrize(
    ("profile", "device", "count", "present"),
    [
        ("zionex-8gpu", A100_40, 8, True),
        ("zionex-8gpu", A100_40, 4, False),
        ("zionex-8gpu", A100_80, 8, True),  # more memory than the profile needs
        ("dgx-a100-8gpu", A100_40, 8, False),  # too little memory
        ("dgx-a100-8gpu", A100_80, 8, True),
        ("dgx-h100-8gpu", H100, 8, True),
        ("dgx-h100-8gpu", A100_80, 8, False),
        ("h200-1gpu", H200, 1, True),
        ("h200-1gpu", H100, 1, False),
        ("bigbasin-8gpu", V100, 8, True),
    ],
)
def test_profile_present_needs_enough_devices_of_the_model(
    detected: DetectedHardware, profile: str, device: CudaDevice, count: int, present: bool
) -> None:
    ok, reason = profile_present(load_profile(profile), _with(detected, device, count))
    assert ok is present
    if not present:
        assert reason.startswith("needs ") and f"{count} x {device.name}" in reason


def test_multi_node_profile_needs_its_nodes(detected: DetectedHardware) -> None:
    profile, here = load_profile("zionex-16x8gpu"), _with(detected, A100_40, 8)
    present, reason = profile_present(profile, here)
    assert not present and "16 nodes" in reason and "has 1" in reason
    assert profile_present(profile, here, nodes_available=16)[0]


@settings(max_examples=200, deadline=None)
@given(count=st.integers(0, 16), memory_mib=st.integers(1, 200_000), nodes=st.integers(1, 32))
def test_presence_is_exactly_enough_devices_with_enough_memory(count: int, memory_mib: int, nodes: int) -> None:
    profile = load_profile("zionex-16x8gpu")
    here = _with(_CPU_ONLY, dataclasses.replace(A100_40, memory_bytes=memory_mib * 2**20), count)
    expected = count >= 8 and memory_mib * 2**20 >= 0.9 * 40e9 and nodes >= 16
    assert profile_present(profile, here, nodes_available=nodes)[0] is expected

