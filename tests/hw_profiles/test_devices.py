"""The table of compute devices: it validates, every accelerator an MLPerf DLRM result names is found
as what it is, a CPU's peak follows from its instruction sets, and a name not in it is one line."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from compliance.schemas import schema_errors
from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import DetectedHardware
from harness.hw_profiles.devices import (
    DeviceKind,
    accelerator_names,
    detected_cpu,
    find_accelerator,
    find_cpu,
    load_table,
    nic_gbps,
)

# every accelerator_model_name of the MLPerf Training DLRM results of rounds v0.7-v5.1 (168 run
# sets, mlcommons/training_results_v*), with its memory where the name alone does not tell, and the
# device it is
SUBMITTED = [
    ("NVIDIA A100-SXM4-40GB (400W)", "40 GB", "", "NVIDIA A100-SXM4-40GB"),
    ("NVIDIA A100-SXM4-40GB", "40 GB", "", "NVIDIA A100-SXM4-40GB"),
    ("NVIDIA A100", "40GB", "nf5488_pytorch", "NVIDIA A100-SXM4-40GB"),
    ("NVIDIA A100-SXM4-80GB", "80 GB", "", "NVIDIA A100-SXM4-80GB"),
    ("NVIDIA A100-SXM-80GB", "", "", "NVIDIA A100-SXM4-80GB"),
    ("NVIDIA A100-SXM4-80GB (500W)", "", "", "NVIDIA A100-SXM4-80GB"),
    ("NVIDIA A100-SXM4-80GB(400W)", "", "", "NVIDIA A100-SXM4-80GB"),
    ("NVIDIA A100-SXM-80GB CTS", "", "", "NVIDIA A100-SXM4-80GB"),
    ("NVIDIA A100-PCIE-40GB (250W)", "", "", "NVIDIA A100-PCIe-40GB"),
    ("NVIDIA A100-PCIe-40GB (250W)", "", "", "NVIDIA A100-PCIe-40GB"),
    ("NVIDIA A100-PCIe-80GB", "", "", "NVIDIA A100-PCIe-80GB"),
    ("NVIDIA A30", "", "", "NVIDIA A30"),
    ("NVIDIA A40", "", "", "NVIDIA A40"),
    ("NVIDIA V100-SXM3-32GB (450W)", "", "", "NVIDIA V100-SXM3-32GB"),
    ("NVIDIA H100-SXM5-80GB", "81559 MiB", "", "NVIDIA H100-SXM5-80GB"),
    ("NVIDIA H100-PCIe-80GB", "", "", "NVIDIA H100-PCIe-80GB"),
    ("NVIDIA H200-SXM5-141GB", "141 GB", "", "NVIDIA H200-SXM5-141GB"),
    ("NVIDIA H200-NVL-141GB", "", "", "NVIDIA H200-NVL-141GB"),
    ("NVIDIA Blackwell GPU (B200-SXM-180GB)", "183359 MiB", "", "NVIDIA B200-SXM-180GB"),
    ("NVIDIA Blackwell GPU (GB200)", "", "", "NVIDIA GB200"),
    ("NVIDIA Blackwell Ultra GPU (B300-SXM-270GB)", "", "", "NVIDIA B300-SXM-270GB"),
    ("NVIDIA L40", "", "", "NVIDIA L40"),
    ("NVIDIA L40S", "", "", "NVIDIA L40S"),
    ("TPU", "", "tpu-v4-128-TF", "Google TPU v4"),
    ("TPU-v4", "", "research-tpu-v4-256-TF", "Google TPU v4"),
    # as torch names the devices of a machine, and the shipped profiles
    ("NVIDIA H100 80GB HBM3", "", "", "NVIDIA H100-SXM5-80GB"),
    ("NVIDIA H200", "", "", "NVIDIA H200-SXM5-141GB"),
    ("Tesla V100-SXM2-16GB", "", "", "NVIDIA V100-SXM2"),
    ("AMD Instinct MI350X", "", "", "AMD Instinct MI350X"),
]


def test_the_table_validates_and_names_a_source_for_every_figure():
    from importlib import resources

    raw = yaml.safe_load(resources.files("harness.hw_profiles").joinpath("_devices.yaml").read_text())
    assert schema_errors(raw, "devices") == []
    table = load_table()
    assert len(table.accelerators) == len(raw["accelerators"]) and len(table.cpus) == len(raw["cpus"])
    for entry in (*table.accelerators, *table.cpus):
        assert entry.device.flops("fp32") > 0 and entry.device.memory_bw_bytes_per_s > 0
        assert all(len(text) > 10 for _, text in entry.device.sources)


def test_a_figure_without_a_source_is_refused():
    from importlib import resources

    raw = yaml.safe_load(resources.files("harness.hw_profiles").joinpath("_devices.yaml").read_text())
    del raw["accelerators"][0]["sources"]["memory"]
    assert any("memory" in e for e in schema_errors(raw, "devices"))


@pytest.mark.parametrize("name, memory, system, expected", SUBMITTED)
def test_every_submitted_accelerator_is_found_as_what_it_is(name, memory, system, expected):
    assert find_accelerator(name, memory=memory, system=system).name == expected


def test_an_unknown_accelerator_is_one_line_naming_the_known_ones():
    with pytest.raises(HarnessError) as err:
        find_accelerator("Foo Accelerator X9", memory="64 GB")
    assert err.value.category is ErrorCategory.NOT_FOUND and err.value.exit_code == 2
    assert "\n" not in str(err.value) and "'Foo Accelerator X9'" in str(err.value)
    assert all(name in str(err.value) for name in accelerator_names())


def test_peaks_follow_the_datasheets_and_fall_back_where_a_device_lacks_a_precision():
    h100, b200 = find_accelerator("NVIDIA H100-SXM5-80GB"), find_accelerator("NVIDIA B200")
    assert h100.flops("bf16") == 989e12 and b200.flops("bf16") == 2250e12
    assert h100.memory_bw_bytes_per_s == 3.35e12 and b200.kind is DeviceKind.GPU
    v100 = find_accelerator("Tesla V100-SXM2-16GB")
    assert v100.compute_precision("bf16") == "fp16" and v100.flops("bf16") == 125e12  # no bf16 units: fp16
    cpx = find_cpu("Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz")
    assert cpx is not None and cpx.flops("bf16") == pytest.approx(28 * 2.9e9 * 128)
    epyc = find_cpu("AMD EPYC 7742 64-Core Processor")
    assert epyc is not None and epyc.compute_precision("bf16") == "fp32"  # AVX2: no bf16 instructions
    assert find_cpu("Some Unknown CPU") is None


def test_this_machines_cpu_is_priced_from_its_instruction_sets():
    base = DetectedHardware(cpu_model="Test CPU", cpu_mhz=2500.0, logical_cpus=4, usable_cpus=4, physical_cores=4,
                            sockets=1, memory_bytes=2**34, cuda_devices=(), cuda_version=None, os="Linux",
                            python_version="3.11", torch_version="2", results_disk_path="/", results_disk_total_bytes=1,
                            results_disk_free_bytes=1)
    amx = detected_cpu(dataclasses.replace(base, cpu_isa_flags=("amx_bf16", "avx512_bf16", "avx512f", "fma")),
                       memory_bw_bytes_per_s=20e9, memory_source="measured")
    avx2 = detected_cpu(dataclasses.replace(base, cpu_isa_flags=("fma",)), memory_bw_bytes_per_s=20e9,
                        memory_source="measured")
    assert amx.flops("bf16") == pytest.approx(4 * 2.5e9 * 1024) and amx.flops("fp32") == pytest.approx(4 * 2.5e9 * 64)
    assert avx2.compute_precision("bf16") == "fp32" and avx2.flops("bf16") == pytest.approx(4 * 2.5e9 * 32)
    assert amx.kind is DeviceKind.CPU and amx.memory_bw_bytes_per_s == 20e9


@pytest.mark.parametrize("text, gbps", [
    ("Storage: 2x ConnectX-6 IB HDR 200Gb/sec, Management: 1x ConnectX-6 Ethernet 100Gb/Sec, "
     "Compute: 8x ConnectX-6 IB HDR 200Gb/Sec", 1600),
    ("Intel(R) Corporation Ethernet Controller E810-C for QSFP", 100),
    ("4x ConnectX-7 IB NDR 400Gb/s", 1600),
    ("ConnectX-6 25Gb/s Ethernet", 25),
    ("InfiniBand; Data bandwidth for GPU-PCIe: 504 GB/s; PCIe-NIC: 500 GB/s", None),
    ("", None),
])
def test_the_network_a_description_names(text, gbps):
    found = nic_gbps(text)
    assert (found[0] if found else None) == gbps
