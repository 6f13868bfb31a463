"""A profile from a real MLPerf system description: what it states is read, the rest comes from the
table of devices, and each figure says which."""

from __future__ import annotations

import json

import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.from_system import parse_bytes, profile_from_system, profile_from_system_file


@pytest.mark.parametrize("text, expected", [
    ("2.048 TB", 2.048e12), ("81559 MiB", 81559 * 2**20), ("1536GB", 1536e9), ("80G", 80e9), ("N/A", None), ("", None),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


def test_a_gpu_system_from_its_description(shared_logs):
    profile = profile_from_system_file(shared_logs / "v4.1/Dell/systems/XE9680x8H200-SXM-141GB.json")
    assert (profile.nodes, profile.accelerators_per_node, profile.accelerator) == (1, 8, "NVIDIA H200-SXM5-141GB")
    assert profile.hbm.capacity_bytes == 141e9 and profile.hbm.bandwidth_bytes_per_s == 4.8e12
    assert profile.ddr.capacity_bytes == 2.048e12  # "2.048 TB", as described
    assert profile.ddr.bandwidth_bytes_per_s == pytest.approx(2 * 307.2e9)  # 2 x Xeon 8480+: the table's DDR5-4800
    assert profile.interconnect.intra_node_bw_bytes_per_s == 900e9
    assert "accelerator_model_name 'NVIDIA H200-SXM5-141GB'" in profile.source("accelerator")
    assert "Xeon Platinum 8480+" in profile.source("ddr.bandwidth_bytes_per_s")


def test_a_cpu_cluster_from_its_description(shared_logs):
    profile = profile_from_system_file(shared_logs / "v3.1/Intel/systems/4-nodes-SPR-pytorch.json")
    assert profile.is_cpu_only and profile.accelerator is None and profile.world_size == 4
    assert (profile.host.sockets, profile.host.cores_per_socket) == (2, 56)
    # its NIC, as the description names it: one 100 Gb/s E810 per node, full duplex
    assert profile.interconnect.scale_out_bw_bytes_per_s == 25e9
    assert "E810" in profile.source("interconnect.scale_out_bw_bytes_per_s")


def test_a_described_network_sets_each_accelerators_share(shared_logs):
    profile = profile_from_system_file(shared_logs / "v0.7/NVIDIA/systems/dgxa100_ngc20.06_merlin_hugectr.json")
    assert profile.interconnect.scale_out_bw_bytes_per_s == 50e9  # 8 x 200 Gb/s HDR for 8 GPUs


def test_an_undescribed_network_is_the_platforms(shared_logs):
    profile = profile_from_system_file(shared_logs / "v5.0/GigaComputing/systems/G893-SD1_hugectr.json")
    assert profile.accelerator == "NVIDIA B200-SXM-180GB"
    assert profile.interconnect.scale_out_bw_bytes_per_s == 100e9
    assert "DGX B200" in profile.source("interconnect.scale_out_bw_bytes_per_s")


def test_an_unknown_accelerator_or_cpu_is_one_line(tmp_path):
    base = {"system_name": "x", "number_of_nodes": "1", "host_processors_per_node": "2",
            "host_processor_model_name": "Intel(R) Xeon(R) Platinum 8480+"}
    with pytest.raises(HarnessError) as err:
        profile_from_system({**base, "accelerator_model_name": "Acme TensorBrick 7", "accelerators_per_node": "8"})
    assert err.value.exit_code == 2 and "Acme TensorBrick 7" in str(err.value)
    assert "NVIDIA H100-SXM5-80GB" in str(err.value)
    with pytest.raises(HarnessError) as err:
        profile_from_system({**base, "accelerator_model_name": "N/A", "accelerators_per_node": "0",
                             "host_processor_model_name": "Acme CPU 1"})
    assert err.value.category is ErrorCategory.NOT_FOUND and "Acme CPU 1" in str(err.value)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(HarnessError) as err:
        profile_from_system_file(bad)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    (tmp_path / "list.json").write_text(json.dumps([1]))
    with pytest.raises(HarnessError, match="not a JSON object"):
        profile_from_system_file(tmp_path / "list.json")
