"""`harness report` end to end: the page and the summary over the shared tree; its errors; the line
`harness run` ends with."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.report.support.report_tree import SCRIPT_FOLDER, SCRIPT_SYSTEM, Tree


def report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "report", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.slow
def test_the_report_of_a_tree_is_one_page_and_a_summary(tree: Tree, tmp_path: Path) -> None:
    proc = report(str(tree.root), "-o", str(tmp_path / "site"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.splitlines()[0] == f"3 run set(s) under {tree.root}"
    assert re.search(r"step, rank 3: P50 [\d.]+ ms, P90 [\d.]+ ms, P99 [\d.]+ ms", out)
    assert f"profiler trace: {tree.root / '.harness'}" in out
    assert re.search(r"collectives: [\d.]+ [KM]?B per step, all ranks' sent \(planner's projection", out)
    assert re.search(r"cache over SSD: hit rate \d+\.\d%", out)
    assert "lacks: per-step timing and its breakdown by phase (the log has no harness_step_phases record)" in out
    assert out.splitlines()[-1] == f"report: {tmp_path / 'site' / 'index.html'}"
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.count('<section class="runset"') == 3
    assert "<script" not in page and SCRIPT_SYSTEM not in page and SCRIPT_FOLDER not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched


@pytest.mark.slow
def test_the_default_output_is_report_in_the_working_folder_not_the_results_tree(tree: Tree, tmp_path: Path) -> None:
    """Not inside the run set: a submission package's check flags a folder it does not expect."""
    proc = report(str(tree.sharded), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report" / "index.html").is_file() and not (tree.sharded / "report").exists()
    assert proc.stdout.splitlines()[-1] == "report: report/index.html"


@pytest.mark.slow
def test_harness_run_ends_by_naming_the_report_command(tree: Tree) -> None:
    stdout = (tree.root.parent / "sharded.stdout").read_text().splitlines()
    assert stdout[-2] == f"report:      harness report {tree.sharded} -o report   (then open report/index.html)"
    assert stdout[-1].startswith("leaderboard: harness leaderboard")


@pytest.mark.parametrize("make", ["empty", "missing", "file"])
def test_a_path_with_no_logs_is_exit_2_in_one_line_naming_it(tmp_path: Path, make: str) -> None:
    path = tmp_path / "here"
    if make == "empty":
        (path / "results").mkdir(parents=True)
    elif make == "file":
        path.write_text("not a folder")
    proc = report(str(path), cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.startswith("harness: error: ") and str(path) in err and "\n" not in err and "Traceback" not in err


GARBAGE = {"result_0.txt": "hello\nthis is not a log\n", "result_1.txt": ""}
MLPERF_LOG = "v4.1/Dell/results/XE9680x8H200-SXM-141GB/dlrm_dcnv2/result_0.txt"


def test_a_folder_of_files_that_are_not_logs_is_exit_2_naming_them_and_writes_nothing(tmp_path: Path) -> None:
    """It was exit 0 and a page of "2 runs, 0 reached the target"."""
    folder = tmp_path / "logs"
    folder.mkdir()
    for name, text in GARBAGE.items():
        (folder / name).write_text(text)
    proc = report(str(folder), "-o", str(tmp_path / "site"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    err = proc.stderr.strip()
    assert err.startswith(f"harness: error: {folder}: no MLPerf result logs") and "\n" not in err, err
    assert "result_0.txt, result_1.txt have no :::MLLOG line" in err and "Traceback" not in err
    assert proc.stdout == "" and not (tmp_path / "site").exists() and not (tmp_path / "report").exists()


def test_files_that_are_not_logs_are_named_in_one_line_and_left_out(tmp_path: Path, shared_logs: Path) -> None:
    """Beside a real log (and in a folder of their own) they are no runs: one line names them all."""
    root = tmp_path / "results"
    for folder in ("set", "junk"):
        (root / folder).mkdir(parents=True)
    (root / "set" / "result_0.txt").write_bytes((shared_logs / MLPERF_LOG).read_bytes())
    (root / "set" / "result_1.txt").write_text("not a log\n")
    (root / "junk" / "result_0.txt").write_text("")
    proc = report(str(root), "-o", str(tmp_path / "site"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"1 run set(s) under {root}", "not logs (no :::MLLOG line), left out: junk/result_0.txt"]
    assert lines[2].startswith("results / dlrm_dcnv2: 1 runs, 1 reached the target")
    assert "  not logs (no :::MLLOG line), left out: result_1.txt" in lines
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.count('class="note not-logs"') == 2 and "1 runs, 1 reached the target" in page
