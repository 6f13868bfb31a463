"""Profiles: shipped YAML files load and validate, bad files fail with the field named, local is detected."""

from __future__ import annotations

import dataclasses
import shutil
from importlib import resources
from pathlib import Path

import pytest
import torch
import yaml

from compliance.schemas import schema_errors
from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import (
    DEFAULT_PROFILE,
    LOCAL,
    CollectiveBackend,
    CudaDevice,
    DetectedHardware,
    DeviceType,
    detect,
    format_bytes,
    format_rate,
    list_profiles,
    load_profile,
    local_profile,
    profile_names,
)

SHIPPED = ["bigbasin-8gpu", "dgx-a100-8gpu", "dgx-h100-8gpu", "h200-1gpu", "mi350x-8gpu", "zionex-16x8gpu",
           "zionex-2x8gpu", "zionex-8gpu"]


@pytest.fixture(scope="module")
def detected() -> DetectedHardware:
    return detect()


def _shipped_yaml(name: str) -> dict:
    return yaml.safe_load(resources.files("harness.hw_profiles").joinpath(f"{name}.yaml").read_text())


def _write(tmp_path: Path, data: dict, name: str = "custom.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _fake_detected(detected: DetectedHardware, *devices: CudaDevice) -> DetectedHardware:
    return dataclasses.replace(detected, cuda_devices=tuple(devices), cuda_version="12.4")


def test_profile_names_are_local_then_shipped() -> None:
    assert profile_names() == [LOCAL, *SHIPPED]
    assert DEFAULT_PROFILE == LOCAL


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_loads_and_round_trips(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.device_type is DeviceType.CUDA
    assert profile.collective_backend is CollectiveBackend.NCCL
    assert schema_errors(profile.to_dict(), "profile") == []
    assert type(profile).from_dict(profile.to_dict()) == profile
    assert profile.world_size == profile.nodes * profile.accelerators_per_node


@pytest.mark.parametrize("name", SHIPPED)
def test_every_figure_has_a_source_and_estimates_say_so(name: str) -> None:
    sources = dict(load_profile(name).sources)
    for key in ("hbm", "ddr", "ssd"):
        assert f"{key}.capacity_bytes" in sources and f"{key}.bandwidth_bytes_per_s" in sources
    for key, text in sources.items():
        if "estimate" in text:
            assert "not public: estimate" in text, f"{name} {key}: an estimate must say so plainly"


def test_zionex_figures_follow_the_neo_paper() -> None:
    z = load_profile("zionex-8gpu")
    assert (z.nodes, z.accelerators_per_node, z.world_size) == (1, 8, 8)
    assert z.accelerator == "NVIDIA A100-SXM4-40GB"
    assert z.hbm.capacity_bytes == 40 * 10**9
    assert z.hbm.bandwidth_bytes_per_s == pytest.approx(1.555e12)
    assert z.ddr.capacity_bytes == 1.5e12
    assert (z.host.sockets, "Cooper Lake" in z.host.processor_model) == (4, True)
    assert z.interconnect.intra_node_bw_bytes_per_s == 600e9
    assert z.interconnect.scale_out_bw_bytes_per_s == 2 * 200e9 / 8  # 200 Gb/s full duplex per GPU
    assert "Mudigere" in z.source("ddr.capacity_bytes")


def test_zionex_16_nodes_is_16_zionex_nodes() -> None:
    one, many = load_profile("zionex-8gpu"), load_profile("zionex-16x8gpu")
    assert (many.nodes, many.world_size) == (16, 128)
    same = ("accelerators_per_node", "accelerator", "hbm", "ddr", "ssd", "host", "interconnect", "device_type")
    assert all(getattr(one, field) == getattr(many, field) for field in same)


def test_other_shipped_figures() -> None:
    bb = load_profile("bigbasin-8gpu")
    assert (bb.accelerator, bb.hbm.capacity_bytes, bb.host.sockets) == ("Tesla V100-SXM2-16GB", 16 * 10**9, 2)
    assert "6138" in bb.host.processor_model and "Naumov" in bb.source("accelerator")
    assert load_profile("dgx-h100-8gpu").interconnect.intra_node_bw_bytes_per_s == 900e9
    assert load_profile("dgx-a100-8gpu").hbm.capacity_bytes == 80 * 10**9
    h200 = load_profile("h200-1gpu")
    assert (h200.world_size, h200.hbm.capacity_bytes) == (1, 141 * 10**9)
    mi350x = load_profile("mi350x-8gpu")  # the dlrmv4 reference's hardware
    assert (mi350x.world_size, mi350x.hbm.capacity_bytes, mi350x.hbm.bandwidth_bytes_per_s) == (8, 288e9, 8e12)
    assert mi350x.interconnect.intra_node_bw_bytes_per_s == 7 * 153.6e9  # 7 Infinity Fabric links
    assert "MI350X datasheet" in mi350x.source("hbm.capacity_bytes")


def test_profiles_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        load_profile("zionex-8gpu").nodes = 2  # type: ignore[misc]


def test_missing_hbm_capacity_is_rejected_naming_file_and_field(tmp_path: Path) -> None:
    data = _shipped_yaml("zionex-8gpu")
    del data["hbm"]["capacity_bytes"]
    path = _write(tmp_path, data, "broken.yaml")
    with pytest.raises(HarnessError) as err:
        load_profile(str(path))
    assert err.value.category is ErrorCategory.BAD_INPUT
    assert "broken.yaml" in err.value.message
    assert "hbm" in err.value.message and "'capacity_bytes' is a required property" in err.value.message


def test_missing_top_level_field_is_named(tmp_path: Path) -> None:
    data = _shipped_yaml("bigbasin-8gpu")
    del data["interconnect"]
    with pytest.raises(HarnessError, match="'interconnect' is a required property") as err:
        load_profile(str(_write(tmp_path, data)))
    assert err.value.category is ErrorCategory.BAD_INPUT


def test_yaml_float_written_as_40e9_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    text = resources.files("harness.hw_profiles").joinpath("zionex-8gpu.yaml").read_text()
    path.write_text(text.replace("capacity_bytes: 40_000_000_000", "capacity_bytes: 40e9"))
    with pytest.raises(HarnessError, match=r"hbm/capacity_bytes: '40e9' is not of type 'integer'.*40_000_000_000"):
        load_profile(str(path))


def test_cpu_profile_with_accelerators_is_rejected(tmp_path: Path) -> None:
    data = _shipped_yaml("zionex-8gpu")
    data["device_type"] = "cpu"
    with pytest.raises(HarnessError, match="accelerator") as err:
        load_profile(str(_write(tmp_path, data)))
    assert err.value.category is ErrorCategory.BAD_INPUT


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nnodes: [1,\n")
    with pytest.raises(HarnessError, match=r"bad\.yaml:\d+: not valid YAML") as err:
        load_profile(str(path))
    assert err.value.category is ErrorCategory.BAD_INPUT


def test_unknown_name_lists_the_known_names() -> None:
    with pytest.raises(HarnessError) as err:
        load_profile("zionex-9000gpu")
    assert err.value.category is ErrorCategory.NOT_FOUND
    assert "zionex-9000gpu" in err.value.message
    assert all(name in err.value.message for name in profile_names())


def test_the_local_estimates_file_is_not_a_profile() -> None:
    with pytest.raises(HarnessError) as err:
        load_profile("_local")
    assert err.value.category is ErrorCategory.NOT_FOUND


def test_missing_profile_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as err:
        load_profile(str(tmp_path / "nope.yaml"))
    assert err.value.category is ErrorCategory.NOT_FOUND


def test_a_user_file_may_have_any_name(tmp_path: Path) -> None:
    data = _shipped_yaml("dgx-h100-8gpu") | {"name": "my-cluster"}
    assert load_profile(str(_write(tmp_path, data, "anything.yaml"))).name == "my-cluster"


def test_local_profile_describes_this_machine(detected: DetectedHardware) -> None:
    local = load_profile(LOCAL, detected=detected)
    assert schema_errors(local.to_dict(), "profile") == []
    assert local.ddr.capacity_bytes == detected.memory_bytes
    assert local.host.processor_model == detected.cpu_model
    assert local.host.cores_per_socket == detected.cores_per_socket
    free = shutil.disk_usage(detected.results_disk_path).free
    assert abs(local.ssd.capacity_bytes - free) < 2 * 2**30
    assert local.ddr.bandwidth_bytes_per_s > 0 and "not public: estimate" in local.source("ddr.bandwidth_bytes_per_s")
    assert "detected" in local.source("ddr.capacity_bytes")
    if not torch.cuda.is_available():
        assert (local.device_type, local.collective_backend) == (DeviceType.CPU, CollectiveBackend.GLOO)
        assert (local.accelerators_per_node, local.accelerator, local.world_size) == (0, None, 1)
        assert local.hbm.capacity_bytes == 0


def test_list_profiles_puts_local_first(detected: DetectedHardware) -> None:
    names = [p.name for p in list_profiles(detected=detected)]
    assert names == profile_names()


def test_local_with_a_known_gpu_borrows_its_memory_bandwidth(detected: DetectedHardware) -> None:
    a100 = CudaDevice(index=0, name="NVIDIA A100-SXM4-40GB", memory_bytes=40536 * 2**20)
    local = local_profile(_fake_detected(detected, a100, dataclasses.replace(a100, index=1)))
    assert (local.device_type, local.collective_backend) == (DeviceType.CUDA, CollectiveBackend.NCCL)
    assert (local.accelerators_per_node, local.accelerator) == (2, "NVIDIA A100-SXM4-40GB")
    assert local.hbm.capacity_bytes == 40536 * 2**20
    assert local.hbm.bandwidth_bytes_per_s == pytest.approx(1.555e12)
    assert "zionex" in local.source("hbm.bandwidth_bytes_per_s")


def test_local_with_an_unknown_gpu_uses_the_conservative_estimate(detected: DetectedHardware) -> None:
    local = local_profile(_fake_detected(detected, CudaDevice(index=0, name="Tesla T4", memory_bytes=15 * 2**30)))
    assert local.hbm.bandwidth_bytes_per_s == 300e9
    assert "not public: estimate" in local.source("hbm.bandwidth_bytes_per_s")


def test_units_are_formatted_as_mlperf_writes_them() -> None:
    assert format_bytes(40 * 10**9) == "40 GB"
    assert format_bytes(1.5e12) == "1.5 TB"
    assert format_bytes(24 * 2**30, binary=True) == "24 GiB"
    assert format_rate(1.555e12) == "1.555 TB/s"
    assert format_rate(0) == "0 B/s"
