"""``harness profiles``: the table, ``show``, and one-line errors with exit code 2."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import click
import pytest
import torch
import yaml
from click.testing import CliRunner

from harness.cli.profiles import profiles
from harness.errors import HarnessError
from harness.hw_profiles import load_profile, profile_names


def _main(argv: list[str]) -> int:
    """``harness profiles ARGV`` through the real entry point when the whole CLI exists,
    else through a stand-in that handles errors exactly as ``harness.cli.main`` does."""
    if importlib.util.find_spec("harness.cli.run") is not None:
        from harness.cli import main

        return main(["profiles", *argv])
    try:
        profiles.main(args=argv, prog_name="harness profiles", standalone_mode=False)
    except HarnessError as err:
        click.echo(f"harness: error: {err}", err=True)
        return err.exit_code
    return 0


def test_table_lists_every_profile_and_presence() -> None:
    result = CliRunner().invoke(profiles, [])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:1] == ["NAME"] and "PRESENT" in lines[0] and "BACKEND" in lines[0]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == profile_names()
    assert rows["local"].rstrip().endswith("yes")
    assert "16 x 8" in rows["zionex-16x8gpu"] and "NVIDIA A100-SXM4-40GB" in rows["zionex-16x8gpu"]
    assert "40 GB" in rows["zionex-8gpu"] and "1.5 TB" in rows["zionex-8gpu"] and "nccl" in rows["zionex-8gpu"]
    if not torch.cuda.is_available():
        assert all(rows[name].rstrip().endswith("no") for name in profile_names()[1:])


def test_show_prints_the_whole_profile_as_yaml() -> None:
    result = CliRunner().invoke(profiles, ["show", "zionex-8gpu"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    assert docs == [load_profile("zionex-8gpu").to_dict()]
    assert result.output.rstrip().splitlines()[-1].startswith("# present on this machine: ")


def test_show_local_adds_what_was_detected() -> None:
    result = CliRunner().invoke(profiles, ["show", "local"])
    assert result.exit_code == 0, result.output
    profile, extra = yaml.safe_load_all(result.output)
    assert profile["name"] == "local"
    assert extra["detected"]["logical_cpus"] == os.cpu_count()
    assert profile["ddr"]["capacity_bytes"] == extra["detected"]["memory_bytes"]
    assert "# present on this machine: yes" in result.output


def test_show_accepts_a_profile_file(tmp_path: Path) -> None:
    data = load_profile("h200-1gpu").to_dict() | {"name": "mine"}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(profiles, ["show", str(path)])
    assert result.exit_code == 0, result.output
    assert next(yaml.safe_load_all(result.output))["name"] == "mine"


def test_unknown_name_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["show", "nope"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("harness: error: unknown profile 'nope'; known profiles: local, ")
    assert all(name in err for name in profile_names())


def test_a_misspelt_name_suggests_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["show", "dgx-h100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: error: unknown profile 'dgx-h100' (did you mean 'dgx-h100-8gpu'?); known profiles: "
                          f"{', '.join(profile_names())} (or give the path of a profile .yaml file)"), err


def test_invalid_profile_file_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = load_profile("zionex-8gpu").to_dict()
    del data["ddr"]["bandwidth_bytes_per_s"]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    assert _main(["show", str(path)]) == 2
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1
    assert "broken.yaml" in err and "ddr" in err and "bandwidth_bytes_per_s" in err
