"""`harness leaderboard` as a new user meets it: a folder without logs, and the terminal summary of
our own runs of one CPU machine (tests/leaderboard/support/cpu_tree.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.leaderboard.collect import build_leaderboard
from tests.leaderboard.support.cpu_tree import SYSTEM, cpu_tree

NO_LOGS = "no MLPerf result logs found (result_*.txt under results/<system>/<benchmark>/)"


def leaderboard(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "leaderboard", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_folder_without_logs_is_one_line_and_exit_2_and_the_board_is_kept(tmp_path: Path) -> None:
    (tmp_path / "empty" / "results").mkdir(parents=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("the last board")
    proc = leaderboard("empty", "-o", "site", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr == f"harness: error: empty: {NO_LOGS}\n" and proc.stdout == ""
    assert [p.name for p in site.iterdir()] == ["index.html"] and (site / "index.html").read_text() == "the last board"


def test_a_run_sets_own_folder_names_the_folder_to_give_instead(tmp_path: Path, monkeypatch) -> None:
    """What `harness report` takes is not a root of the leaderboard: the line says which folder is."""
    cpu_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    run_set = Path(f"results-fp32/reference/results/{SYSTEM}/tiny_synthetic")
    with pytest.raises(HarnessError) as err:
        build_leaderboard([run_set])
    assert err.value.exit_code == 2
    assert err.value.message == (f"{run_set}: {NO_LOGS}; {run_set} is a run set: give results-fp32/reference, "
                                 "the folder that holds its results/")


def test_the_summary_tells_our_runs_apart_and_counts_in_the_singular_where_there_is_one(tmp_path: Path) -> None:
    cpu_tree(tmp_path)
    both = leaderboard("results-bf16", "results-fp32", "-o", "site", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    lines = both.stdout.splitlines()
    assert lines[0] == "3 run sets in 2 benchmarks (2 ranked, 1 not ranked)"
    assert f"reference / {SYSTEM}: 0.2200 min (3/3 runs)" in lines[1]  # alone in its benchmark: the name
    assert f"reference / {SYSTEM} (bf16): 0.3200 min (3/3 runs)" in lines[2]
    assert f"reference / {SYSTEM} (fp32): no score (1/1 run)" in lines[3]
    one = leaderboard("results-fp32", "-o", "site-fp32", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines()[0] == "1 run set in 1 benchmark (0 ranked, 1 not ranked)"
    assert f"reference / {SYSTEM}: no score (1/1 run)" in one.stdout.splitlines()[1]
