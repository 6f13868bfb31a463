"""A results tree for the report's tests, made once per test session (shared by the xdist workers
through a lock): real run sets written by ``harness run`` on the smallest settings, and a copy of a
real MLPerf log.

- ``sharded``: the tiny benchmark on an emulated 2 nodes x 2 GPUs profile (4 gloo ranks; bf16, whatever
  this CPU computes natively, so that 16-bit tables' replicas are gathered): comm stats with both link
  classes beside the planner's projection, memory per rank, plan, codecs, every rank's step phases, and a
  profiler trace (``--trace``) of its 4 ranks.
- ``cached``: the tiny benchmark on this machine's profile (one rank), two runs, two tables on the SSD tier
  behind an LRU cache: cache hit rates, SSD bytes; ``--no-step-phases``: no step phases (the page must say so).
- ``mlperf``: a copy of a real MLPerf v4.1 dlrm_dcnv2 log under a system folder and name full of
  HTML metacharacters.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "tests" / "fixtures" / "tiny_benchmark.yaml"
TWO_NODES = REPO / "tests" / "fixtures" / "two_nodes_2gpu.yaml"
SCRIPT_SYSTEM = '<script>alert("x")</script> & co'  # the system's name in its description
SCRIPT_FOLDER = '<script>alert("y")<script> & co'  # its folder (a name cannot hold "/")
MLPERF_LOG = Path("v4.1/Dell/results/XE9680x8H200-SXM-141GB/dlrm_dcnv2/result_0.txt")
PHASES = ("data_wait", "embedding_forward", "dense_forward", "dense_backward", "embedding_backward", "optimizer",
          "input_all_to_all", "forward_all_to_all", "backward_all_to_all", "dense_all_reduce",
          "replica_all_reduce")  # harness.reference.timing.phases.PHASES, written out: the record's order is its schema


@dataclass(frozen=True)
class Tree:
    root: Path  # the results tree (three run sets below it)
    sharded: Path  # each: a run set folder
    cached: Path
    mlperf: Path


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})


def make_tree(base: Path, shared_logs: Path) -> Tree:
    """The three run sets below ``base/results`` (skipped when already there: made once)."""
    results = base / "results"
    package = results / "reference" / "results"
    sharded = package / "two-nodes-2gpu-emulated" / "tiny_synthetic"
    mlperf_pkg = results / "v4.1" / "Dell"
    mlperf = mlperf_pkg / "results" / SCRIPT_FOLDER / "dlrm_dcnv2"
    if (base / "done").is_file():
        return Tree(results, sharded, _local(package), mlperf)
    base.mkdir(parents=True, exist_ok=True)
    proc = harness("run", "--benchmark", str(TINY), "--profile", str(TWO_NODES), "--emulate", "--runs", "1",
                   "--seed", "3", "--threads", "1", "--trace", "--precision", "bf16", "--results", str(results),
                   cwd=base)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (base / "sharded.stdout").write_text(proc.stdout)
    proc = harness("run", "--benchmark", str(TINY), "--runs", "2", "--seed", "5", "--threads", "1", "--no-step-phases",
                   "--embedding-tier", "ssd", "--ssd-tables", "3,5", "--cache-fraction", "0.1",
                   "--results", str(results), cwd=base)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    mlperf.mkdir(parents=True)
    shutil.copyfile(shared_logs / MLPERF_LOG, mlperf / "result_0.txt")
    (mlperf_pkg / "systems").mkdir()
    (mlperf_pkg / "systems" / f"{SCRIPT_FOLDER}.json").write_text(json.dumps(
        {"submitter": "Dell & <b>friends</b>", "system_name": SCRIPT_SYSTEM, "accelerator_model_name": "H200"}))
    (base / "done").write_text("")
    return Tree(results, sharded, _local(package), mlperf)


def _local(package: Path) -> Path:
    """The one-rank run set (its system is this machine's: ``local-cpu-<cores>c``)."""
    [local] = [p for p in package.glob("*/tiny_synthetic") if p.parent.name != "two-nodes-2gpu-emulated"]
    return local


@pytest.fixture(scope="session")
def tree(tmp_path_factory: pytest.TempPathFactory, shared_logs: Path, worker_id: str) -> Tree:
    """The tree, made by the first xdist worker that asks and reused by the others."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # shared by this session's workers
    with FileLock(str(root / "report-tree.lock")):
        return make_tree(root / "report-tree", shared_logs)
