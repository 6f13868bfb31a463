"""`harness check` on logs, run sets and packages: verdicts, set rules, borrowing, hostile input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compliance.check import check_path
from harness.errors import HarnessError
from harness.submitters.borrowing import lender_from_logs

REFERENCE_RUNS = Path(__file__).resolve().parents[2] / "harness" / "rules" / "reference_runs" / "dlrm_synthetic"


def harness(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, check=False)


def rules_of(report, severity: str = "error") -> set[str]:
    return {f.rule.split(":")[-1] for f in report.all_findings if f.severity.value == severity}


def copy_set(dst: Path, n: int = 5, edit=None) -> Path:
    dst.mkdir(parents=True)
    for i, src in enumerate(sorted(REFERENCE_RUNS.glob("result_*.txt"))[:n]):
        text = src.read_text()
        (dst / f"result_{i}.txt").write_text(edit(text) if edit else text)
    return dst


# ---- verdicts and exit codes ---------------------------------------------------------------------

def test_real_package_passes_with_exit_0_and_json(shared_logs):
    proc = harness("check", str(shared_logs / "v4.1" / "Dell"), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdict"] == "pass" and report["ruleset"] == "training_4.1.0"
    [run_set] = report["run_sets"]
    assert len(run_set["runs"]) == 10 and all(r["verdict"] == "pass" for r in run_set["runs"])
    assert run_set["score_minutes"] == pytest.approx(3.742410, abs=1e-6)
    assert run_set["rcp"]["verdict"] == "pass"


def test_every_expected_score_of_the_shared_logs_is_reproduced(shared_logs):
    expected = {"v0.7": 3.330644, "v1.0": 71.553706, "v2.1": 1.8490666666666666, "v3.0": 4.255690011475988,
                "v3.1": 227.138063, "v4.0": 3.885548, "v4.1": 3.742410, "v5.0": 2.3691549248}
    for round_, score in expected.items():
        [package] = sorted((shared_logs / round_).iterdir())
        report = check_path(package)
        assert report.passed, [f.human() for f in report.all_findings if f.is_error]
        [run_set] = report.run_sets
        # the README gives six decimals where the source is the summarizer, all digits where official
        assert run_set.summary["score_minutes"] == pytest.approx(score, abs=1e-9 if len(str(score)) > 10 else 5e-7)


def test_a_tree_of_rounds_lists_every_package_with_its_verdict_and_score(shared_logs, tmp_path):
    """What the leaderboard takes, the checker takes: a round folder, or the whole tree of rounds."""
    expected = {"v0.7": 3.331, "v1.0": 71.554, "v2.1": 1.849, "v3.0": 4.256, "v3.1": 227.138, "v4.0": 3.886,
                "v4.1": 3.742, "v5.0": 2.369}
    proc = harness("check", str(shared_logs))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(expected) + 1 and lines[-1].endswith("8 pass, 0 fail; verdict: PASS")
    for line, (round_, score) in zip(lines, expected.items()):
        assert line.startswith(f"PASS  {shared_logs / round_}/") and line.endswith(f" {score:.3f} min"), line
    # a round folder; and a copy in which one package fails (two of a set's logs fail: one alone is
    # accepted under olympic scoring): one FAIL line, exit 1, the same as JSON
    shutil.copytree(shared_logs / "v4.1", tmp_path / "v4.1")
    shutil.copytree(shared_logs / "v4.1" / "Dell", tmp_path / "v4.1" / "Other")
    for name in ("result_0.txt", "result_1.txt"):
        log = next((tmp_path / "v4.1" / "Other" / "results").glob(f"*/dlrm_dcnv2/{name}"))
        log.write_text(log.read_text().replace('"key": "opt_weight_decay", "value": 0',
                                               '"key": "opt_weight_decay", "value": 0.1'))
    proc = harness("check", str(tmp_path / "v4.1"))
    assert proc.returncode == 1
    assert [line.split()[0] for line in proc.stdout.splitlines()[:2]] == ["PASS", "FAIL"]
    assert proc.stdout.splitlines()[-1].endswith("1 pass, 1 fail; verdict: FAIL")
    data = json.loads(harness("check", str(tmp_path / "v4.1"), "--json").stdout)
    assert (data["verdict"], data["packages_checked"], data["packages_failed"]) == ("fail", 2, 1)
    assert [p["verdict"] for p in data["packages"]] == ["pass", "fail"]
    assert data["packages"][0]["run_sets"][0]["score_minutes"] == pytest.approx(3.742410, abs=1e-6)


def test_a_failing_log_gives_file_line_findings_and_exit_1(shared_logs, tmp_path):
    log = shared_logs / "v4.1" / "Dell" / "results" / "XE9680x8H200-SXM-141GB" / "dlrm_dcnv2" / "result_0.txt"
    bad = tmp_path / "v4.1" / "result_0.txt"
    bad.parent.mkdir()
    bad.write_text(log.read_text().replace('"key": "opt_weight_decay", "value": 0', '"key": "opt_weight_decay", "value": 0.1'))
    proc = harness("check", str(bad))
    assert proc.returncode == 1
    line = next(n for n, t in enumerate(bad.read_text().splitlines(), 1) if "opt_weight_decay" in t)
    assert f"{bad}:{line}: error: opt_weight_decay value is 0.1, must equal 0" in proc.stdout
    assert "[training_4.1.0/closed_dlrm_dcnv2:opt_weight_decay.value]" in proc.stdout
    assert proc.stdout.rstrip().endswith("verdict: FAIL (1 errors, 0 warnings)")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make, code, says", [
    (lambda p: p / "missing", 2, "does not exist"),
    (lambda p: (p / "empty").mkdir() or p / "empty", 2, "nothing to check"),
    (lambda p: _write(p / "garbage.txt", os.urandom(5000)), 2, "no MLLOG lines (not an MLPerf log)"),
    (lambda p: os.symlink(p / "b", p / "a") or os.symlink(p / "a", p / "b") or p / "a", 2, "cannot read"),
])
def test_unusable_input_is_one_line_and_exit_2(tmp_path, make, code, says):
    proc = harness("check", str(make(tmp_path)))
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr
    assert "Traceback" not in proc.stderr


def test_broken_logs_fail_with_findings_not_tracebacks(tmp_path):
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(b"\x00\xff" * 3000 + b"\n:::MLLOG \xff\xfe{\n")
    truncated = tmp_path / "truncated.txt"
    truncated.write_text((REFERENCE_RUNS / "result_0.txt").read_text()[:5000])
    for path in (garbage, truncated):
        proc = harness("check", str(path), "--ruleset", "harness_1.0.0")
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr and "error: malformed MLLOG line" in proc.stdout


def test_a_2gb_line_is_reported_without_reading_it_into_memory(tmp_path):
    path = tmp_path / "result_0.txt"
    with open(path, "wb") as f:
        f.write(b"0: :::MLLOG {")
        f.truncate(2 * 1024**3 + 100)  # a sparse 2 GB line: costs no disk
        f.seek(0, os.SEEK_END)
        f.write(b"}\n")
    report = check_path(path, ruleset="6.0.0")
    [run] = report.runs
    assert not run.passed
    assert any("longer than" in f.message and f.line == 1 for f in run.check.findings)


def test_a_directory_named_like_a_result_log_is_an_error_finding(tmp_path):
    run_set = copy_set(tmp_path / "results" / "local" / "dlrm_synthetic")
    (run_set / "result_5.txt").mkdir()
    report = check_path(run_set)
    assert "run_set.not_a_file" in rules_of(report)


# ---- per-set rules -------------------------------------------------------------------------------

def test_set_rules_run_count_seeds_and_convergence(tmp_path):
    ten = check_path(copy_set(tmp_path / "ten", n=10))
    assert {"runs", "convergence"} <= rules_of(ten)  # 10 logs for a 5-run closed set; calibration runs never stop
    same_seed = copy_set(tmp_path / "dup")
    shutil.copy(same_seed / "result_0.txt", same_seed / "result_1.txt")
    assert "seeds.distinct" in rules_of(check_path(same_seed))
    assert "seeds.distinct" not in rules_of(ten)


def _stretched_stop(text: str, extra_ms: int) -> str:
    """The log with its run_stop record ``extra_ms`` later (its time to train that much longer)."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if '"key": "run_stop"' in line:
            record = json.loads(line.split(":::MLLOG ", 1)[1])
            record["time_ms"] += extra_ms
            lines[i] = ":::MLLOG " + json.dumps(record) + "\n"
    return "".join(lines)


def test_run_set_variation_over_the_bound_is_flagged(tmp_path):
    def stop_ok(text: str) -> str:
        return text.replace('"status": "aborted"', '"status": "success"')

    steady = check_path(copy_set(tmp_path / "steady", edit=stop_ok))
    assert steady.run_sets[0].summary["coefficient_of_variation"] < 0.3
    assert "variation" not in rules_of(steady, "warning")
    # one run's clock stretched by 10 minutes (the runs take about 20 s): the times spread far past CV 30%
    spread = copy_set(tmp_path / "spread", edit=stop_ok)
    (spread / "result_0.txt").write_text(_stretched_stop((spread / "result_0.txt").read_text(), 600_000))
    report = check_path(spread)
    assert report.run_sets[0].summary["coefficient_of_variation"] > 0.3
    [warning] = [f for f in report.all_findings if f.rule.endswith("run_set:variation")]
    assert warning.severity.value == "warning" and "over the benchmark's bound of 30%" in warning.message


# ---- borrowing -----------------------------------------------------------------------------------

def _borrower(tmp_path: Path, lender_dir: Path, **changes) -> Path:
    _, lender, fp, _ = lender_from_logs(lender_dir)
    claim = json.dumps({"lender": lender, "lender_fingerprint": fp})

    def edit(text: str) -> str:
        text = text.replace('"value": "calibration"', '"value": "borrower"')
        for key, (old, new) in changes.items():
            text = text.replace(f'"key": "{key}", "value": {old}', f'"key": "{key}", "value": {new}')
        first = text.index(":::MLLOG")
        record = ('{"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "harness_borrowed_from", '
                  f'"value": {claim}, "metadata": {{}}}}')
        return text[:first] + f":::MLLOG {record}\n" + text[first:]
    return copy_set(tmp_path / "borrower" / "results" / "sysB" / "dlrm_synthetic", edit=edit)


def test_borrowed_values_are_checked_against_the_lenders_logs(tmp_path):
    lender_dir = copy_set(tmp_path / "lender" / "results" / "local-cpu-2c" / "dlrm_synthetic")
    fine = _borrower(tmp_path / "a", lender_dir, global_batch_size=("2048", "4096"))
    assert "borrow" not in rules_of(check_path(fine, lenders=[lender_dir]))
    changed = _borrower(tmp_path / "b", lender_dir, opt_base_learning_rate=("0.015", "0.02"))
    report = check_path(changed, lenders=[lender_dir])
    assert "borrow" in rules_of(report)
    assert any("opt_base_learning_rate=0.02" in f.message and "lender" in f.message for f in report.all_findings)
    nowhere = check_path(fine, lenders=[tmp_path / "a"])
    assert any("cannot verify the borrow" in f.message for f in nowhere.all_findings)


def test_unknown_ruleset_is_refused(tmp_path):
    with pytest.raises(HarnessError, match="unknown rule set"):
        check_path(REFERENCE_RUNS / "result_0.txt", ruleset="7.7.7")


def test_an_aborted_run_is_reported_as_what_happened(shared_logs, tmp_path):
    # a real log whose run ended aborted, every AUC 0.5: the finding says so, with lines
    [src] = sorted((shared_logs / "v4.1").glob("*/results/*/*/result_0.txt"))
    lines = []
    for line in src.read_text().splitlines(keepends=True):
        if '"key": "eval_accuracy"' in line:
            record = json.loads(line.split(":::MLLOG ", 1)[1])
            record["value"] = 0.5
            line = ":::MLLOG " + json.dumps(record) + "\n"
        lines.append(line.replace('"status": "success"', '"status": "aborted"'))
    log = tmp_path / "v4.1" / "result_0.txt"
    log.parent.mkdir()
    log.write_text("".join(lines))
    stop_line = next(i for i, line in enumerate(lines, 1) if '"key": "run_stop"' in line)
    first_eval = next(i for i, line in enumerate(lines, 1) if '"key": "eval_accuracy"' in line)
    [finding] = [f for f in check_path(log).all_findings if f.rule.endswith("eval_accuracy.at_least_one")]
    assert f"the best is 0.5 at line {first_eval}" in finding.message
    assert f"the run ended run_stop status=aborted at line {stop_line}" in finding.message
