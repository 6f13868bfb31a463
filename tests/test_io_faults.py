"""The machine's own faults under `harness run`: a disk that fills up during a run set, a results
folder that cannot be written. Real faults: a small tmpfs mounted by the test (as root, as CI
runs), filled with a file while the set runs; a read-only mount. Each gives one line, exit 5, no
traceback, no temporary file, the finished logs intact, and `--resume` completes the set once
the cause is gone."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_runsets import harness, records, result_dir, start_harness, write_spec


def _mount(target: Path, *options: str) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(target)],
                          capture_output=True, check=False).returncode == 0


@contextlib.contextmanager
def tmpfs(target: Path, *options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``target`` for the test's duration (skipped where mounting is not allowed)."""
    if os.geteuid() != 0 or shutil.which("mount") is None or not _mount(target, *options):
        pytest.skip("needs root and mount (a tmpfs); CI runs as root")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp-" in p.name]


def _fill(disk: Path) -> Path:
    """Write a file until the filesystem is full."""
    filler = disk / "filler.bin"
    chunk = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
    return filler


@pytest.mark.slow
def test_a_disk_that_fills_up_during_a_set_is_one_line_and_resume_completes_it(tmp_path):
    # run 0 converges at once; run 1 is long, so that the disk fills while it runs
    spec = write_spec(tmp_path, **{"dataset.train_samples": 2_000_000, "quality.target": 0.51})
    root = tmp_path / "root"
    with tmpfs(root / "results", "size=16m"):
        proc = start_harness("run", "--benchmark", str(spec), "--runs", "2", "--seed", "1", "--threads", "1", cwd=root)
        staging = root / "results" / ".harness" / "reference"
        deadline, finished = time.time() + 240, None
        while time.time() < deadline and proc.poll() is None:
            staged = list(staging.glob("*/tiny_synthetic/result_1.txt"))
            if staged and "run_start" in staged[0].read_text():
                finished = result_dir(root) / "result_0.txt"
                break
            time.sleep(0.2)
        assert finished is not None and finished.is_file(), proc.communicate()[1][-2000:]
        before = finished.read_bytes()
        filler = _fill(root / "results")
        _, err = proc.communicate(timeout=240)
        last = err.strip().splitlines()[-1]
        assert proc.returncode == 5, err[-3000:]
        assert "Traceback" not in err and last.startswith("harness: error: run 2 (result_1.txt) stopped by an I/O fault: ")
        assert "No space left on device" in last and "--resume" in last and "the 1 finished run(s) are in" in last
        assert finished.read_bytes() == before and not _leftovers(root)
        [kept] = staging.glob("*/tiny_synthetic/result_1.failed-*.txt")  # the incomplete log, kept aside
        assert kept.stat().st_size > 0
        filler.unlink()
        resumed = harness("run", "--benchmark", str(spec), "--runs", "2", "--seed", "1", "--threads", "1", "--resume",
                          cwd=root, timeout=600)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert finished.read_bytes() == before
        assert [r for r in records(result_dir(root) / "result_1.txt") if r["key"] == "run_stop"][0]["metadata"][
            "status"] == "success"
        assert not _leftovers(root)


@pytest.mark.slow
def test_a_results_folder_that_cannot_be_written_is_one_line_and_nothing_is_left(tmp_path):
    spec = write_spec(tmp_path)
    root = tmp_path / "root"
    with tmpfs(root / "results", "size=16m", "ro"):
        proc = harness("run", "--benchmark", str(spec), "--runs", "1", "--threads", "1", cwd=root)
        assert proc.returncode == 5, proc.stderr[-2000:]
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("harness: error: results/") and "Read-only file system" in line, line  # the path as given
        assert "Traceback" not in proc.stderr and not list((root / "results").rglob("*"))
        # once the folder is writable, the same command runs the set
        subprocess.run(["mount", "-o", "remount,rw", str(root / "results")], check=True)
        again = harness("run", "--benchmark", str(spec), "--runs", "1", "--threads", "1", cwd=root)
        assert again.returncode == 0, again.stderr[-2000:]
        assert (result_dir(root) / "result_0.txt").is_file() and not _leftovers(root)


def test_an_export_or_a_leaderboard_into_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, shared_logs):
    """Other writers: `harness data export` and `harness leaderboard` into a tmpfs too small for
    them fail in one line (exit 5) and leave nothing of theirs behind."""
    spec = write_spec(tmp_path)
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        export = harness("data", "export", "--benchmark", str(spec), "--format", "criteo-tsv", "--days", "2",
                         str(disk / "data"), cwd=tmp_path)
        assert export.returncode == 5, export.stderr[-2000:]
        [line] = export.stderr.strip().splitlines()
        assert line.startswith("harness: error: ") and "No space left on device" in line and "Traceback" not in line
        assert not list(disk.iterdir())  # neither the data folder nor its temporary sibling
        board = harness("leaderboard", str(shared_logs), "-o", str(disk / "site"), cwd=tmp_path)
        assert board.returncode == 5, board.stderr[-2000:]
        assert board.stderr.strip().splitlines()[-1].startswith("harness: error: ") and "Traceback" not in board.stderr
        assert not [p for p in disk.rglob("*") if ".tmp" in p.name]


@pytest.mark.slow
def test_an_ssd_tier_too_large_for_its_disk_is_one_line_before_training(tmp_path):
    """The SSD tier's file is allocated when it is made: a disk that holds the logs but not the
    tables fails there in one line naming the file (not with a SIGBUS when a write through the map
    finds no block), the file is removed, and once the disk is larger the same command runs."""
    spec = write_spec(tmp_path, **{"dataset.table_rows": [20_000] * 26})  # ~25 MB of rows and state
    root = tmp_path / "root"
    # a profile's SSD capacity (this machine's own is the free space of the results' disk, which
    # the planner would refuse before anything runs: exit 3)
    args = ("run", "--benchmark", str(spec), "--runs", "1", "--threads", "1", "--embedding-tier", "ssd",
            "--profile", "h200-1gpu", "--emulate")
    with tmpfs(root / "results", "size=4m"):
        proc = harness(*args, cwd=root)
        assert proc.returncode == 5, proc.stderr[-3000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr and last.startswith("harness: error: run 1 (result_0.txt) stopped by "
                                                                   "an I/O fault: "), last
        assert "result_0.tables.bin" in last and "No space left on device" in last and "the same command starts it" in last
        assert not list((root / "results").rglob("*.tables.bin*")) and not _leftovers(root)
        subprocess.run(["mount", "-o", "remount,size=64m", str(root / "results")], check=True)
        again = harness(*args, cwd=root)
        assert again.returncode == 0, again.stderr[-2000:]
        assert (result_dir(root) / "result_0.txt").is_file() and not list((root / "results").rglob("*.tables.bin*"))
