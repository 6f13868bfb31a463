"""The fastest precision a machine computes natively: the default precision of a run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from harness.hw_profiles import CudaDevice, DetectedHardware, detect, load_profile, local_profile, native_precision
from harness.hw_profiles.detection import BF16_CPU_FLAGS, parse_cpuinfo
from harness.hw_profiles.numerics import cpu_native_precision
from harness.rules.precision import parse_precision
from tests.hw_profiles.test_detection import _CPU_ONLY

ZEN4_FLAGS = "fpu vme sse sse2 avx avx2 avx512f avx512dq avx512_bf16 avx512_vnni"
SAPPHIRE_RAPIDS_FLAGS = "fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
SKYLAKE_FLAGS = "fpu sse sse2 avx avx2 avx512f avx512dq avx512_vnni"


def cpuinfo(flags: str, cpus: int = 2) -> str:
    return "\n\n".join(f"processor\t: {i}\nmodel name\t: Some CPU\nflags\t\t: {flags}\n" for i in range(cpus))


def cpu_with(flags: str) -> DetectedHardware:
    """This test machine, as detection would see it with a /proc/cpuinfo of these flags."""
    topology = parse_cpuinfo(cpuinfo(flags))
    return dataclasses.replace(_CPU_ONLY, cpu_bf16_flags=tuple(f for f in BF16_CPU_FLAGS if f in topology.flags))


@pytest.mark.parametrize(("flags", "expected"), [
    (ZEN4_FLAGS, ("bf16", "native AVX512-BF16 on this CPU")),
    (SAPPHIRE_RAPIDS_FLAGS, ("bf16", "native AMX-BF16 on this CPU")),
    (SKYLAKE_FLAGS, ("fp32", "no native bf16 on this CPU")),  # AVX-512 without its BF16 instructions
    ("", ("fp32", "no native bf16 on this CPU")),  # an ARM machine's cpuinfo has no x86 flags
])
def test_a_cpu_computes_bf16_natively_only_with_its_bf16_instructions(flags, expected):
    assert parse_cpuinfo(cpuinfo(flags)).flags == frozenset(flags.split())
    detected = cpu_with(flags)
    assert cpu_native_precision(detected) == expected
    assert native_precision(load_profile("local", detected=detected), detected) == expected


@pytest.mark.parametrize(("profile", "expected"), [
    ("zionex-8gpu", ("bf16", "A100 computes bf16 natively (compute capability 8.0)")),
    ("zionex-16x8gpu", ("bf16", "A100 computes bf16 natively (compute capability 8.0)")),
    ("dgx-a100-8gpu", ("bf16", "A100 computes bf16 natively (compute capability 8.0)")),
    ("dgx-h100-8gpu", ("bf16", "H100 computes bf16 natively (compute capability 9.0)")),
    ("h200-1gpu", ("bf16", "H200 computes bf16 natively (compute capability 9.0)")),
    ("bigbasin-8gpu", ("fp16", "V100 has no bf16 units (compute capability 7.0): fp16 with loss scaling")),
    ("mi350x-8gpu", ("bf16", "MI350 computes bf16 natively (CDNA 4 matrix cores)")),
])
def test_a_gpu_profile_runs_bf16_from_ampere_and_fp16_with_loss_scaling_before(profile, expected):
    for flags in (ZEN4_FLAGS, SKYLAKE_FLAGS):  # the host CPU does not decide a GPU run
        assert native_precision(load_profile(profile), cpu_with(flags)) == expected
    assert parse_precision(expected[0]).loss_scaling is (expected[0] == "fp16")


@pytest.mark.parametrize("profile", ["zionex-8gpu", "bigbasin-8gpu", "h200-1gpu"])
def test_an_emulated_profile_runs_at_this_cpus_native_precision(profile):
    assert native_precision(load_profile(profile), cpu_with(ZEN4_FLAGS), emulated=True) == (
        "bf16", "native AVX512-BF16 on this CPU")
    assert native_precision(load_profile(profile), cpu_with(SKYLAKE_FLAGS), emulated=True) == (
        "fp32", "no native bf16 on this CPU")


def test_a_detected_gpu_is_judged_by_the_compute_capability_torch_reports():
    rtx = CudaDevice(index=0, name="NVIDIA GeForce RTX 4090", memory_bytes=24 * 2**30, compute_capability=(8, 9))
    here = dataclasses.replace(cpu_with(SKYLAKE_FLAGS), cuda_devices=(rtx,))
    assert native_precision(local_profile(here), here) == (
        "bf16", "NVIDIA GeForce RTX 4090 computes bf16 natively (compute capability 8.9)")
    t4 = dataclasses.replace(rtx, name="Tesla T4", memory_bytes=15 * 2**30, compute_capability=(7, 5))
    here = dataclasses.replace(here, cuda_devices=(t4,))
    assert native_precision(local_profile(here), here) == (
        "fp16", "Tesla T4 has no bf16 units (compute capability 7.5): fp16 with loss scaling")
    unknown = dataclasses.replace(t4, compute_capability=None)  # neither reported nor in the table
    here = dataclasses.replace(here, cuda_devices=(unknown,))
    assert native_precision(local_profile(here), here) == ("fp32", "no native bf16 or fp16 known for Tesla T4")


def test_detection_reads_this_machines_bf16_flags():
    detected = detect()
    flags = parse_cpuinfo(Path("/proc/cpuinfo").read_text()).flags
    assert detected.cpu_bf16_flags == tuple(f for f in BF16_CPU_FLAGS if f in flags)
    data = detected.to_dict()
    assert yaml.safe_load(yaml.safe_dump(data))["cpu_bf16_flags"] == list(detected.cpu_bf16_flags)
