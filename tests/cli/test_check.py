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


@pytest.mark.parametrize("ruleset", [(), ("--ruleset", "6.0.0")])
def test_a_file_that_is_no_mlperf_log_is_one_line_and_exit_2(tmp_path, ruleset):
    """Empty, binary, any other text: no MLLOG line, said so, with or without --ruleset (not "cannot
    tell which rule set applies", not the rule set's every key "appears 0 times")."""
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 8)
    for name in ("empty.txt", "binary.bin"):
        proc = run("-m", "harness", "check", name, *ruleset, cwd=tmp_path)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == f"harness: error: {name}: no MLLOG lines (not an MLPerf log)\n"


def test_a_run_set_of_no_mlperf_logs_is_one_line_and_one_such_log_is_one_finding(tmp_path):
    run_set = tmp_path / "results" / "sys" / "dlrm_synthetic"
    run_set.mkdir(parents=True)
    for i in range(2):
        (run_set / f"result_{i}.txt").write_text("not a log\n")
    proc = run("-m", "harness", "check", str(run_set), "--ruleset", "harness_1.0.0", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"harness: error: {run_set}: no MLLOG lines in any of its 2 result_*.txt files "
                           "(not MLPerf logs)\n")
    reference = Path(__file__).resolve().parents[2] / "harness/rules/reference_runs/dlrm_synthetic/result_0.txt"
    (run_set / "result_1.txt").write_bytes(reference.read_bytes())
    proc = run("-m", "harness", "check", str(run_set), "--ruleset", "harness_1.0.0", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    findings = [line.strip() for line in proc.stdout.splitlines() if "/result_0.txt: " in line]
    assert findings == [f"{run_set}/result_0.txt: error: no MLLOG lines (not an MLPerf log) [harness_1.0.0/parse]"]
