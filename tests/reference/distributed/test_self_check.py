"""The init self-check of sharded runs, on real gloo groups (4 ranks as 2 nodes x 2, torchrun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.reference.distributed.self_check import BOUND, failure
from harness.reference.planner.types import ShardingType
from harness.runsets.torchrun import FORKED_RANKS

DRIVER = Path(__file__).parent / "support" / "self_check_driver.py"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("self_check")
    proc = subprocess.run(
        [sys.executable, "-m", "harness.runsets.torchrun", "--standalone", "--nproc-per-node=4", *FORKED_RANKS,
         str(DRIVER), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


@pytest.mark.parametrize("plan", [*(t.value for t in ShardingType), "mixed"])
def test_the_self_check_passes_for_every_sharding_type(reports, plan):
    report = reports[plan]
    assert report["passed"] and report["max_loss_gap"] <= BOUND, report
    assert report["world_size"] == 4 and len(report["sharded_losses"]) == report["steps"] == 3
    expected = sorted(t.value for t in ShardingType) if plan == "mixed" else [plan]
    assert report["sharding_types"] == expected


def test_the_self_check_of_the_hstu_ranker_passes_on_its_mixed_plan(reports):
    report = reports["hstu_mixed"]
    assert report["passed"] and report["max_loss_gap"] <= BOUND, report
    # its 11 tables (3 sequence, uid, 7 crosses) dealt the 6 types in turn: every type
    assert report["sharding_types"] == sorted(t.value for t in ShardingType)


@pytest.mark.parametrize("model", ["broken", "hstu_broken"])
def test_the_self_check_catches_a_broken_collective(reports, model):
    """Rank 1's embeddings arrive as zeros in every forward all-to-all (the DLRM's pooled vectors;
    the HSTU ranker's row-sharded jagged event vectors and uid vectors): the check fails, and its
    error is one line with both figures."""
    report = reports[model]
    assert not report["passed"] and report["max_loss_gap"] > 10 * BOUND, report
    message = str(failure(report))
    assert "\n" not in message and message.startswith("self-check failed: the sharded probe's loss differs")
    step = [abs(a - b) for a, b in zip(report["sharded_losses"], report["one_process_losses"])]
    at = step.index(max(step))
    assert f"sharded {report['sharded_losses'][at]:.8f}" in message
    assert f"one process {report['one_process_losses'][at]:.8f}" in message
