"""`harness run --nnodes 2`: two launchers on this machine (loopback only), one run set.

Each launcher is its own `harness run` process in its own folder and process group, as on two
machines; they meet at 127.0.0.1:PORT (node 0's store) and run each run as one c10d torchrun
job of 2 + 2 ranks (gloo over loopback: GLOO_SOCKET_IFNAME=lo).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import alive, descendants, ranks_below
from tests.support.runs import FIXTURE, records

PROFILE = Path(__file__).parents[1] / "fixtures" / "two_nodes_2gpu.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(node: int, port: int, root: Path, *args: str) -> subprocess.Popen:
    """Node ``node``'s `harness run`, in ``root/node<node>``, as the leader of its own process group
    (so that the test can kill the whole "machine": launcher, torchrun and ranks)."""
    cwd = root / f"node{node}"
    cwd.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--profile", str(PROFILE), "--emulate", "--runs", "1",
         "--nnodes", "2", "--node-rank", str(node), "--rdzv-endpoint", f"127.0.0.1:{port}",
         # fp32 whatever this CPU computes natively: the bytes compared below are the same on every machine
         "--local-addr", "127.0.0.1", "--precision", "fp32", *args],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"},
    )


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_machine(proc)
        raise


def kill_machine(proc: subprocess.Popen) -> None:
    """What a node's death does: its launcher, its torchrun and its ranks end at once."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("harness: error:")]


@pytest.mark.slow
def test_two_launchers_train_one_run_and_only_node_0_writes_results(tmp_path):
    port = free_port()
    follower = launch(1, port, tmp_path, "--seed", "11")
    leader = launch(0, port, tmp_path, "--seed", "11")
    _, err0 = finish(leader, 600)
    out1, err1 = finish(follower, 120)
    assert leader.returncode == 0, err0[-3000:]
    assert follower.returncode == 0, err1[-3000:]
    assert "node 1 of 2: took part in 1 run(s)" in out1
    assert not (tmp_path / "node1" / "results").exists()  # the follower wrote nothing of the results
    logs = list((tmp_path / "node0" / "results" / "reference" / "results").glob("*/dlrm_synthetic/result_*.txt"))
    assert len(logs) == 1, logs
    recs = records(logs[0])
    stop = [r for r in recs if r["key"] == "run_stop"][-1]
    assert stop["metadata"]["status"] == "success", stop
    first = {r["key"]: r["value"] for r in reversed(recs)}
    assert first["harness_nodes"] == {"nodes": 2, "ranks_per_node": 2, "launchers": 2, "rendezvous": "c10d"}
    assert first["data_parallelism"] == 4 and first["seed"] == 11
    # every rank took part: each one's memory report came back to rank 0
    assert [r["rank"] for r in first["harness_memory"]["ranks"]] == [0, 1, 2, 3]
    # what crossed between the two launchers' ranks is what the planner projected (this plan's
    # tables are table-wise and data-parallel: every kind's inter-node bytes are exact)
    projection, measured = first["harness_comm_projection"], first["harness_comm_stats"]["per_step"]
    assert all(projection["exact_inter_node"].values())
    for kind, bytes_ in projection["per_step"].items():
        assert measured[kind]["inter_node_bytes"] == bytes_["inter_node_bytes"], kind
    assert measured["forward_all_to_all"]["inter_node_bytes"] > 0
    assert projection["seconds_per_step"] > 0 and first["harness_comm_overlap"] is True
    # the collectives proved themselves at init, across the two launchers
    assert first["harness_self_check"]["passed"] and first["harness_self_check"]["world_size"] == 4
    check = subprocess.run([sys.executable, "-m", "harness", "check", str(logs[0])], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout


def start_long_two_node_run(tmp_path: Path) -> tuple[subprocess.Popen, subprocess.Popen, Path]:
    """Two launchers of a run far from its end (4M samples, a target it cannot reach), once node 0's
    log says run_start: the leader, the follower, and node 0's staging folder."""
    spec = tmp_path / "long.yaml"
    spec.write_text(FIXTURE.read_text().replace("train_samples: 32768", "train_samples: 4000000")
                    .replace("target: 0.6", "target: 0.99"))
    port = free_port()
    follower = launch(1, port, tmp_path, "--benchmark", str(spec))
    leader = launch(0, port, tmp_path, "--benchmark", str(spec))
    staging = tmp_path / "node0" / "results" / ".harness" / "reference"
    deadline = time.time() + 300
    while time.time() < deadline:
        staged = list(staging.glob("*/tiny_synthetic/result_0.txt"))
        if staged and "run_start" in staged[0].read_text():
            break
        assert leader.poll() is None, leader.communicate()[1][-3000:]
        time.sleep(0.2)
    return leader, follower, staging


@pytest.mark.slow
def test_a_node_that_dies_ends_the_run_on_the_other_with_run_stop_aborted(tmp_path):
    leader, follower, staging = start_long_two_node_run(tmp_path)
    time.sleep(3)
    ranks = ranks_below(follower.pid)
    assert len(ranks) == 2, ranks  # node 1's two ranks
    kill_machine(follower)  # node 1 dies: its launcher, torchrun and ranks
    killed = time.time()
    _, err0 = finish(leader, 120)
    assert time.time() - killed < 60, "node 0 took more than 60 s to notice that node 1 died"
    assert leader.returncode == 1, err0[-3000:]
    errors = error_lines(err0)
    assert len(errors) == 1 and "run 1 (result_0.txt) failed" in errors[0] and "Traceback" not in err0, err0[-3000:]
    [failed] = staging.glob("*/tiny_synthetic/result_0.failed-*.txt")
    [stop] = [r for r in records(failed) if r["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "aborted"
    assert not list(staging.parent.glob("results/*/tiny_synthetic/result_*.txt"))


def test_launchers_that_planned_different_run_sets_are_refused_before_anything_is_written(tmp_path):
    port = free_port()
    follower = launch(1, port, tmp_path, "--comm-forward", "fp16")
    leader = launch(0, port, tmp_path)
    _, err0 = finish(leader, 300)
    _, err1 = finish(follower, 60)
    assert leader.returncode == 2 and follower.returncode == 2, (err0[-2000:], err1[-2000:])
    [e0], [e1] = error_lines(err0), error_lines(err1)
    assert "node(s) 1 planned another run set" in e0
    assert e1.startswith("harness: error: node 0 refused the run set: node(s) 1 planned another run set")
    assert not (tmp_path / "node0" / "results").exists() and not (tmp_path / "node1" / "results").exists()


def test_a_multi_node_launch_is_checked_against_the_profile(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--profile", "zionex-8gpu", "--emulate", "--nnodes", "2",
         "--node-rank", "1", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [("harness: error: profile zionex-8gpu has one node; --nnodes 2 needs a "
                                         "profile of 2 nodes (e.g. zionex-2x8gpu)")]
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--nnodes", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "--nnodes > 1 needs --rdzv-endpoint HOST:PORT" in proc.stderr


@pytest.mark.slow
def test_sigterm_to_both_launchers_keeps_the_interrupted_log_and_ends_every_rank(tmp_path):
    """What a batch scheduler does to a two-node job: SIGTERM to each node's launcher (not to its
    ranks). Each launcher passes it on; node 0 keeps the interrupted log under its interrupted name
    with ``run_stop aborted`` saying so, both exit 143 in one line, and no rank is left behind."""
    leader, follower, staging = start_long_two_node_run(tmp_path)
    time.sleep(2)
    ranks = descendants(leader.pid) + descendants(follower.pid)
    for proc in (leader, follower):
        proc.send_signal(signal.SIGTERM)
    _, err0 = finish(leader, 120)
    _, err1 = finish(follower, 120)
    assert (leader.returncode, follower.returncode) == (143, 143), err0[-3000:] + err1[-3000:]
    for err in (err0, err1):
        assert "Traceback" not in err and len(error_lines(err)) == 1, err[-3000:]
        assert error_lines(err)[0].startswith("harness: error: interrupted by SIGTERM"), err[-3000:]
    assert "during run 1 (result_0.txt)" in error_lines(err0)[0] and "the same command starts it again" in error_lines(err0)[0]
    assert "during run 1 (result_0.txt) on node 1" in error_lines(err1)[0]
    [kept] = staging.glob("*/tiny_synthetic/result_0.interrupted-*.txt")
    [stop] = [r for r in records(kept) if r["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "aborted" and stop["metadata"]["reason"] == "interrupted by SIGTERM"
    time.sleep(1)
    assert ranks and not alive(ranks)
