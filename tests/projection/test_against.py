"""The projection held against the real MLPerf results of the shared logs: the summary line, each
run set within what the constants were fitted to, and constants off by 2x caught."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness.projection.against import Comparison, compare_tree, summarize
from harness.projection.constants import DeviceClass, load_constants
from harness.projection.train_time import project
from harness.rules.specs import load_benchmark

LINE = re.compile(r"^projected / measured: median \|error\| \d+%, worst \d+\.\d\dx, rank correlation (-?\d\.\d\d|n/a) "
                  r"over \d+ run sets \(\d+ not projected\)$")
# what the fit leaves (docs/projection.md): accelerator run sets within these ratios, and the CPU ones
# (their three constants fitted on them and this machine's run) closer still
HOLD = {DeviceClass.ACCELERATOR: (0.8, 1.25), DeviceClass.CPU: (0.93, 1.07)}


@pytest.fixture(scope="module")
def comparisons(shared_logs) -> list[Comparison]:
    return compare_tree(shared_logs)


def _again(comparisons: list[Comparison], constants) -> list[Comparison]:
    """The same run sets projected with other constants (the plans, which do not depend on them, kept)."""
    out = []
    for c in comparisons:
        p = c.projection
        assert p is not None
        again = project(load_benchmark(p.benchmark), p.system, batch_size=p.batch_size, precision=p.precision,
                        constants=constants, plan=p.plan)
        out.append(Comparison(c.label, c.path, c.benchmark, c.measured_minutes, again))
    return out


def _held(comparisons: list[Comparison]) -> list[str]:
    """The run sets outside their class's hold."""
    out = []
    for c in comparisons:
        low, high = HOLD[c.projection.system.device_class]  # type: ignore[union-attr]
        if not low <= c.ratio <= high:  # type: ignore[operator]
            out.append(f"{c.label}: {c.ratio:.3f}")
    return out


def test_the_shared_logs_meet_the_issues_bar(comparisons):
    summary = summarize(comparisons)
    assert (summary.projected, summary.not_projected) == (8, 0)
    assert summary.median_error <= 0.20 and summary.worst <= 2.0 and summary.rank_correlation >= 0.9
    assert dict(summary.rank_correlations).keys() == {"dlrm", "dlrm_dcnv2"}
    assert LINE.match(summary.line()), summary.line()


def test_every_run_set_is_within_what_the_constants_were_fitted_to(comparisons):
    assert _held(comparisons) == []
    summary = summarize(comparisons)
    assert summary.median_error <= 0.12 and summary.worst <= 1.25


# every constant the shared logs determine, off by 2x either way, moves a run set out of its hold: the
# accelerators' four and their link efficiency (set from nccl-tests, not fitted, but it shows), the CPUs'
# two and the stream efficiency they share with the accelerators. Not here: an accelerator's operation
# (its fit sits at the range's floor, 1 us: 139 operations are 0.1 ms of a 3.5 ms step) and a CPU's
# (20 us, set, not fitted), and a CPU's links (a few percent of a CPU cluster's step).
MATERIAL = [(DeviceClass.ACCELERATOR, f) for f in
            ("gemm_efficiency", "memory_efficiency", "gather_efficiency", "link_efficiency")] + \
           [(DeviceClass.CPU, f) for f in ("gemm_efficiency", "memory_efficiency", "gather_efficiency")]


@pytest.mark.parametrize("factor", [2.0, 0.5])
@pytest.mark.parametrize("device_class, field", MATERIAL)
def test_a_constant_off_by_2x_is_caught(comparisons, device_class, field, factor):
    base = load_constants()
    broken = base.with_class(device_class, base.of(device_class).scaled(**{field: factor}))
    assert _held(_again(comparisons, broken)) != []


def test_a_run_set_of_a_benchmark_the_harness_does_not_know_is_listed_with_its_reason(shared_logs, tmp_path):
    """A run set that is not a DLRM the harness knows is listed with its reason and counted."""
    root = tmp_path / "tree"
    shutil.copytree(shared_logs / "v4.1", root / "v4.1")
    other = root / "v4.1" / "Dell" / "results" / "XE9680x8H200-SXM-141GB" / "resnet"
    other.mkdir()
    log = Path(shared_logs / "v4.1/Dell/results/XE9680x8H200-SXM-141GB/dlrm_dcnv2/result_0.txt").read_text()
    (other / "result_0.txt").write_text(log.replace('"value": "dlrm_dcnv2"', '"value": "resnet"'))
    found = compare_tree(root)
    assert [c.benchmark for c in found] == ["dlrm_dcnv2", "resnet"]
    assert found[1].projection is None and "'resnet' is not one the harness knows" in found[1].reason
    assert summarize(found).line().endswith("over 1 run sets (1 not projected)")


def test_a_harness_run_on_this_machine_is_projected_as_local(tmp_path):
    """Run sets `harness run` wrote here (the reference runs' logs, which trained on past the target to
    log the whole curve, marked successful; under a system description of the local profile as the
    harness writes it) are projected on this machine's CPU, measured; a description of another CPU
    that is in no table is listed as not projected."""
    import json
    from importlib import resources

    from harness.hw_profiles import detect, load_profile
    from harness.hw_profiles.system_desc import system_description
    from harness.projection.against import ThisMachine

    detected = detect()
    desc = system_description(profile=load_profile("local", detected=detected), detected=detected,
                              submitter="reference", division="closed", status="Available on-premise", emulated=False,
                              system_name="here")
    package = tmp_path / "reference"
    for system, description in (("here", desc), ("elsewhere", {**desc, "host_processor_core_count": "999"})):
        (package / "systems").mkdir(parents=True, exist_ok=True)
        (package / "systems" / f"{system}.json").write_text(json.dumps(description))
        run_set = package / "results" / system / "dlrm_synthetic"
        run_set.mkdir(parents=True)
        logs = resources.files("harness.rules").joinpath("reference_runs", "dlrm_synthetic")
        for i in range(5):
            text = logs.joinpath(f"result_{i}.txt").read_text()
            (run_set / f"result_{i}.txt").write_text(text.replace('"status": "aborted"', '"status": "success"'))
    elsewhere, here = compare_tree(tmp_path, here=ThisMachine(detected))
    assert here.projection is not None and here.projection.system.profile.name == "local"
    assert here.projection.system.device.name == detected.cpu_model
    assert "measured" in here.projection.system.profile.source("ddr.bandwidth_bytes_per_s")
    assert elsewhere.projection is None and "not in the table" in elsewhere.reason
