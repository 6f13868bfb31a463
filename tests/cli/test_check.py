"""A log written by `harness run` passes `harness check` and, through the export, MLPerf's own checker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_harness_run_log_passes_harness_check_and_the_official_checker(tmp_path):
    proc = run("-m", "harness", "run", "--runs", "1", "--seed", "7", "--threads", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # one run of a five-run closed set, asked for: every log passes, the set is incomplete (exit 0)
    assert ("compliance (harness_1.0.0): 1/1 logs pass; run set incomplete (fewer runs than the benchmark "
            "requires, as asked): a closed dlrm_synthetic run set has exactly 5") in proc.stdout
    [log] = (tmp_path / "results").glob("*/results/*/dlrm_synthetic/result_0.txt")
    check = run("-m", "harness", "check", str(log), cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "(rule files: common, closed_common, closed_dlrm_synthetic)" in check.stdout

    export = run("-m", "harness", "rules", "export-mlperf", "exported", cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    official = run("-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", "6.0.0",
                   "--config", str(tmp_path / "exported" / "common.yaml"), str(log), cwd=tmp_path)
    assert official.returncode == 0, official.stdout + official.stderr
    assert "closed_dlrm_synthetic.yaml" in official.stdout + official.stderr

    lowered = tmp_path / "lowered" / "result_0.txt"
    lowered.parent.mkdir()
    text = log.read_text()
    lines = [ln for ln in text.splitlines(keepends=True) if '"key": "eval_accuracy"' not in ln]
    lowered.write_text("".join(lines))
    official = run("-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", "6.0.0",
                   "--config", str(tmp_path / "exported" / "common.yaml"), str(lowered), cwd=tmp_path)
    ours = run("-m", "harness", "check", str(lowered), "--ruleset", "harness_1.0.0", cwd=tmp_path)
    assert official.returncode == 1 and ours.returncode == 1
