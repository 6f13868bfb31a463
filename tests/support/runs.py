"""``harness run`` as the tests drive it: the tiny benchmark (``tests/fixtures/tiny_benchmark.yaml``) and
a copy of it with changes, the command in a subprocess (to its end, or in the background to be
signalled), its logs' records, its results folder, a folder of submitter configs in place of the
shipped one, and a run set made of the shipped reference logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_benchmark.yaml"


def harness(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def start_harness(*args: str, cwd: Path) -> subprocess.Popen:
    """`harness ...` as a background process, for tests that signal it while it runs."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if ":::MLLOG " in line:
            out.append(json.loads(line.split(":::MLLOG ", 1)[1]))
    return out


def result_dir(root: Path, benchmark: str = "tiny_synthetic") -> Path:
    dirs = list((root / "results" / "reference" / "results").glob(f"*/{benchmark}"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def wait_for_run_start(root: Path, benchmark: str = "tiny_synthetic", timeout: float = 240) -> Path:
    """Wait until run 0 of a set under ``root`` has logged ``run_start``; return the staging folder."""
    staging = root / "results" / ".harness" / "reference"
    deadline = time.time() + timeout
    while time.time() < deadline:
        staged = list(staging.glob(f"*/{benchmark}/result_0.txt"))
        if staged and "run_start" in staged[0].read_text():
            break
        time.sleep(0.2)
    return staging


def write_spec(tmp_path: Path, **changes) -> Path:
    spec = yaml.safe_load(FIXTURE.read_text())
    for dotted, value in changes.items():
        node = spec
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def submitters(tmp_path, monkeypatch):
    """A folder of submitter configs in place of the shipped one; write(org, precision) adds one."""
    import harness.submitters as subs

    root = tmp_path / "submitters"
    monkeypatch.setattr(subs, "submitters_root", lambda: root)

    def write(org: str, precision: dict) -> Path:
        path = root / org / "tiny_synthetic.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"submitter": org, "benchmark": "tiny_synthetic", "hyperparameters": {},
                                        "precision": precision}))
        return path

    return write


def _reference_set(dst: Path, runs: int) -> Path:
    src = Path(__file__).resolve().parents[2] / "harness" / "rules" / "reference_runs" / "dlrm_synthetic"
    dst.mkdir(parents=True)
    for i, log in enumerate(sorted(src.glob("result_*.txt"))[:runs]):
        (dst / f"result_{i}.txt").write_text(log.read_text().replace('"status": "aborted"', '"status": "success"'))
    return dst
