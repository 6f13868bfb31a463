"""The MLPerf system description: 33 fields, accepted by the official checker, honest about emulation."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import (
    SYSTEM_DESC_FIELDS,
    CudaDevice,
    DetectedHardware,
    Profile,
    detect,
    load_profile,
    local_profile,
    system_description,
    system_name_for,
    system_statuses,
    write_system_description,
)

RDI = "Research, Development, or Internal (RDI)"
ACCELERATOR_TEXT_FIELDS = (
    "accelerator_model_name",
    "accelerator_memory_configuration",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
)


@pytest.fixture(scope="module")
def detected() -> DetectedHardware:
    return detect()


@pytest.fixture(scope="module")
def local(detected: DetectedHardware) -> Profile:
    return local_profile(detected)


def _desc(profile: Profile, detected: DetectedHardware, *, emulated: bool, **overrides: str) -> dict:
    args = {
        "submitter": "reference",
        "division": "closed",
        "status": RDI,
        "system_name": system_name_for(profile, emulated),
    } | overrides
    return system_description(profile=profile, detected=detected, emulated=emulated, **args)


def _official_check(desc: dict, tmp_path: Path) -> bool:
    path = write_system_description(desc, tmp_path / "systems" / f"{desc['system_name']}.json")
    valid, name, _, _ = check_system_desc(str(path), "training", "6.0.0")
    assert name == desc["system_name"]
    return valid


def test_local_description_has_exactly_the_33_fields(local: Profile, detected: DetectedHardware) -> None:
    desc = _desc(local, detected, emulated=False)
    assert len(SYSTEM_DESC_FIELDS) == 33
    from compliance.systems import REQUIRED_FIELDS

    assert SYSTEM_DESC_FIELDS == REQUIRED_FIELDS  # the schema's, and the checker's current round's
    assert list(desc) == list(SYSTEM_DESC_FIELDS)


def test_official_checker_accepts_local(local: Profile, detected: DetectedHardware, tmp_path: Path) -> None:
    assert _official_check(_desc(local, detected, emulated=False), tmp_path)


def test_official_checker_accepts_emulated_zionex(detected: DetectedHardware, tmp_path: Path) -> None:
    assert _official_check(_desc(load_profile("zionex-8gpu"), detected, emulated=True), tmp_path)


def test_official_checker_requires_every_one_of_our_fields(
    local: Profile, detected: DetectedHardware, tmp_path: Path
) -> None:
    desc = _desc(local, detected, emulated=False)
    for field in SYSTEM_DESC_FIELDS:
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps({k: v for k, v in desc.items() if k != field}))
        assert check_system_desc(str(path), "training", "6.0.0")[0] is False, field


def test_every_status_the_checker_allows_is_accepted(local: Profile, detected: DetectedHardware, tmp_path: Path) -> None:
    assert len(system_statuses()) == 4
    for status in system_statuses():
        assert _official_check(_desc(local, detected, emulated=False, status=status), tmp_path)


def test_local_description_is_what_was_detected(local: Profile, detected: DetectedHardware) -> None:
    desc = _desc(local, detected, emulated=False)
    assert desc["host_processor_model_name"] == detected.cpu_model
    assert desc["host_processor_vcpu_count"] == str(detected.logical_cpus)
    assert desc["number_of_nodes"] == "1"
    assert desc["framework"] == f"PyTorch {detected.torch_version}"
    assert "EMULATED" not in json.dumps(desc)
    if not detected.cuda_devices:
        assert (desc["accelerators_per_node"], desc["accelerator_model_name"]) == ("0", "N/A")


def test_emulated_run_says_so_everywhere(detected: DetectedHardware) -> None:
    zionex = load_profile("zionex-8gpu")
    desc = _desc(zionex, detected, emulated=True)
    assert desc["hw_notes"].startswith(f"EMULATED: profile zionex-8gpu run on {detected.cpu_model} with 8 gloo ranks")
    assert desc["system_name"] == "zionex-8gpu-emulated"
    for field in ACCELERATOR_TEXT_FIELDS:
        assert "EMULATED" in desc[field], field
    assert zionex.accelerator in desc["accelerator_model_name"]
    assert "40 GB" in desc["accelerator_memory_capacity"]
    # the host is the one the run used, not the profile's 4-socket Cooper Lake
    assert desc["host_processor_model_name"] == detected.cpu_model
    assert desc["host_processors_per_node"] == str(detected.sockets or 1)
    assert desc["other_software_stack"]["collective_backend"] == "gloo"


def test_emulated_multi_node_profile_ran_on_one_node(detected: DetectedHardware) -> None:
    desc = _desc(load_profile("zionex-16x8gpu"), detected, emulated=True)
    assert (desc["number_of_nodes"], desc["accelerators_per_node"]) == ("1", "128")
    assert "with 128 gloo ranks" in desc["hw_notes"] and "16 node(s) x 8" in desc["hw_notes"]


def test_never_claims_hardware_not_present(detected: DetectedHardware) -> None:
    if detected.cuda_devices:
        pytest.skip("this machine has CUDA devices")
    with pytest.raises(HarnessError) as err:
        _desc(load_profile("zionex-8gpu"), detected, emulated=False)
    assert err.value.category is ErrorCategory.HARDWARE
    assert "not present" in err.value.message


def test_real_gpu_run_claims_the_detected_devices(detected: DetectedHardware, tmp_path: Path) -> None:
    a100 = CudaDevice(index=0, name="NVIDIA A100-SXM4-40GB", memory_bytes=40536 * 2**20)
    here = dataclasses.replace(
        detected, cuda_devices=tuple(dataclasses.replace(a100, index=i) for i in range(8)), cuda_version="12.4"
    )
    desc = _desc(load_profile("zionex-8gpu"), here, emulated=False)
    assert (desc["accelerators_per_node"], desc["accelerator_model_name"]) == ("8", "NVIDIA A100-SXM4-40GB")
    assert desc["accelerator_memory_capacity"] == "40536 MiB"
    assert desc["accelerator_interconnect"] == ""  # NVLink is not detectable, so not claimed
    assert desc["other_software_stack"]["cuda_version"] == "12.4"
    assert "EMULATED" not in json.dumps(desc)
    assert _official_check(desc, tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [("status", "onprem", "status"), ("division", "preview", "division"), ("system_name", "a/b", "system_name")],
)
def test_bad_values_are_rejected(local: Profile, detected: DetectedHardware, field: str, value: str, needle: str) -> None:
    with pytest.raises(HarnessError, match=needle) as err:
        _desc(local, detected, emulated=False, **{field: value})
    assert err.value.category is ErrorCategory.BAD_INPUT


def test_system_names_are_filesystem_safe(local: Profile, detected: DetectedHardware) -> None:
    if not detected.cuda_devices:
        assert system_name_for(local, False) == f"local-cpu-{local.host.cores}c"
    assert system_name_for(load_profile("zionex-8gpu"), True) == "zionex-8gpu-emulated"
    assert system_name_for(load_profile("dgx-h100-8gpu"), False) == "dgx-h100-8gpu"
    gpu_local = local_profile(
        dataclasses.replace(detected, cuda_devices=(CudaDevice(0, "NVIDIA H200", 143771 * 2**20),))
    )
    assert system_name_for(gpu_local, False) == "local-1xnvidia-h200"
    for name in ("local-cpu-2c", system_name_for(gpu_local, True)):
        assert re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name)


def test_write_is_complete_json_and_leaves_no_temporary(local: Profile, detected: DetectedHardware, tmp_path: Path) -> None:
    desc = _desc(local, detected, emulated=False)
    path = write_system_description(desc, tmp_path / "systems" / "x.json")
    assert json.loads(path.read_text()) == desc
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]
