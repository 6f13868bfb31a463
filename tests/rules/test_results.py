"""Scoring real MLPerf result trees: the expected scores of tests/data/mlperf-logs/README.md."""

import re
import shutil
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.rules.results import read_run_log, score_run_set
from tests.conftest import SHARED_LOGS

SHARED = SHARED_LOGS


def _expected_scores() -> list:
    """(run set dir, runs, score, decimals given) for each row of the README's table. Without
    the README, one placeholder case, which the ``shared_logs`` fixture fails with the reason
    (an empty parameter set would be skipped, and the missing logs go unnoticed)."""
    rows = []
    if not (SHARED / "README.md").is_file():
        return [pytest.param(None, 0, 0.0, 0, id="no-logs")]
    for line in (SHARED / "README.md").read_text().splitlines():
        m = re.match(r"\| (v[0-9.]+) \| (\S+) \| (\S+) \| (\S+) \| (\d+) \| ([0-9.]+) \|", line)
        if m:
            rnd, submitter, system, bench, runs, score = m.groups()
            decimals = len(score.split(".")[1])
            rows.append((SHARED / rnd / submitter / "results" / system / bench, int(runs), float(score), decimals))
    return rows


def test_the_readme_table_was_read(shared_logs):
    assert len(_expected_scores()) == 8


@pytest.mark.parametrize("run_set, runs, expected, decimals", _expected_scores(),
                         ids=lambda v: v.parts[-5] if isinstance(v, Path) else None)
def test_scores_of_real_mlperf_sets_equal_the_expected(shared_logs, run_set, runs, expected, decimals):
    stats = score_run_set(run_set)
    assert len(stats.runs) == runs
    # full-precision figures to 1e-9; figures the README rounds, to their last digit
    tolerance = 1e-9 if decimals >= 9 else 0.5 * 10**-decimals
    assert stats.score is not None and stats.score.minutes == pytest.approx(expected, abs=tolerance)
    assert stats.coefficient_of_variation is not None and stats.coefficient_of_variation >= 0
    lo, hi = stats.bootstrap_95
    minutes = [r.run_time(None).minutes * stats.scaling_factor for r in stats.runs]
    assert min(minutes) <= lo <= hi <= max(minutes)


def test_scaling_json_multiplies_the_score(shared_logs, tmp_path):
    src = SHARED / "v3.0" / "GIGABYTE" / "results" / "G593-SD0_hugectr" / "dlrm_dcnv2"
    dst = tmp_path / "set"
    shutil.copytree(src, dst)
    with_scaling = score_run_set(dst)
    (dst / "scaling.json").unlink()
    without = score_run_set(dst)
    assert with_scaling.scaling_factor == pytest.approx(1.0370762711864403)
    assert with_scaling.score.minutes == pytest.approx(without.score.minutes * 1.0370762711864403, rel=1e-12)
    assert without.score.minutes == pytest.approx(4.103546, abs=5e-7)


def test_a_non_converged_run_counts_as_the_slowest(shared_logs, tmp_path):
    src = SHARED / "v4.1" / "Dell" / "results" / "XE9680x8H200-SXM-141GB" / "dlrm_dcnv2"
    dst = tmp_path / "set"
    shutil.copytree(src, dst)
    runs = score_run_set(dst).runs
    minutes = {r.path.name: r.run_time(None).minutes for r in runs}
    fastest = min(minutes, key=minutes.get)
    path = dst / fastest
    path.write_text(path.read_text().replace('"status": "success"', '"status": "aborted"'))
    stats = score_run_set(dst)
    assert stats.score.non_converged_runs == 1 and stats.score.converged_runs == 9
    rest = sorted(m for name, m in minutes.items() if name != fastest)[1:]  # drop the fastest converged
    assert stats.score.minutes == pytest.approx(sum(rest) / len(rest), rel=1e-12)


def test_rank_prefixed_and_noise_lines_are_read(tmp_path):
    log = tmp_path / "result_0.txt"
    log.write_text(
        "some output\n"
        '0: :::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "INTERVAL_START", "key": "run_start", "value": null, "metadata": {}}\n'
        '0: :::MLLOG {"namespace": "", "time_ms": 61000, "event_type": "INTERVAL_END", "key": "run_stop", "value": null, "metadata": {"status": "success"}}\n'
    )
    run = read_run_log(log)
    assert run.run_time(None).minutes == pytest.approx(1.0) and run.converged(None)


def test_a_malformed_record_names_file_and_line(tmp_path):
    log = tmp_path / "result_0.txt"
    log.write_text('x\n:::MLLOG {"key": "run_start", "time_ms": 1}\n:::MLLOG {"key": oops}\n')
    with pytest.raises(HarnessError, match=r"result_0.txt:3: malformed MLLOG record"):
        read_run_log(log)


def test_a_log_with_only_train_step_time_has_a_throughput(shared_logs, tmp_path):
    # a real v4.1 log whose tracked_stats carry the step time instead of the throughput
    [src] = sorted((shared_logs / "v4.1").glob("*/results/*/*/result_0.txt"))[:1]
    original = read_run_log(src)
    gbs = original.values["global_batch_size"]
    lines = []
    for line in src.read_text(errors="replace").splitlines(keepends=True):
        if '"key": "tracked_stats"' in line:
            line = re.sub(r'"value": \{"throughput": [0-9.e+]+\}', '"value": {"train_step_time": 0.004}', line)
        lines.append(line)
    log = tmp_path / "result_0.txt"
    log.write_text("".join(lines))
    assert original.throughput is not None
    assert read_run_log(log).throughput == pytest.approx(gbs / 0.004)
