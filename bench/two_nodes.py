"""Neo's communication techniques where links are slow: two "nodes" joined by a limited link.

    sudo python bench/two_nodes.py                  # 1 Gbit/s between the nodes (root needed)
    sudo python bench/two_nodes.py --rate-mbit 500 --steps 6

Two network namespaces stand for two machines (:mod:`netns`: a veth pair whose bandwidth
``tc`` limits in both directions; inside each namespace the ranks talk over unlimited
loopback, much faster, as NVLink is to ZionEX's scale-out; measured: docs/performance.md,
"Figures behind the code's choices"). Each node runs
one ``torchrun`` launcher with 2 ranks (c10d rendezvous at node 0's veth address; gloo bound
to the veth interface; only the two veth addresses are used), and the ranks train the sharded
reference DLRM exactly as ``harness run --nnodes 2`` does
(:class:`~harness.reference.distributed.session.DistributedSession`, a rank's rank taken from
its node's rank). The namespaces are removed when the bench ends, also on an error or Ctrl-C.

The model is one whose embedding traffic dominates: ``dlrm_synthetic``'s 26 tables and data
at embedding dimension 64, the dot interaction, small MLPs, global batch 8192 (2048 per
rank). Every configuration trains ``--warmup`` + ``--steps`` steps from the same seed; the step
time is rank 0's median over the measured steps; the inter-node bytes per step are what every
rank's collectives counted over the slow link, summed, beside the planner's projection
(:mod:`harness.reference.planner.traffic`). The configurations differ from the base (every
table table-row-wise, fp32, overlap on) in one thing each:

- ``rw``: every table row-wise (its rows over all 4 ranks, so every row shard's partial
  vectors cross the link) against table-row-wise (rows over one node's ranks, vectors summed
  inside the node, once per sample across it);
- ``fp16``, ``int8``: the forward and backward all-to-alls' codec (the dense all-reduce stays fp32);
- ``no-overlap``: every collective waited for where it is issued (no overlap of the output
  all-to-alls with the bottom MLP and its backward, nor of the dense all-reduce with backward).

The last three lines are the ratios ``twrw/rw inter-node bytes``, ``fp16/fp32 step time`` and
``overlap/no-overlap step time``, each against its baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RANKS_PER_NODE = 2
BATCH = 8192
DIM = 64
PORT = 29470
CONFIGS = (  # name, sharding type of every table, forward/backward codec, overlap
    ("rw", "row_wise", "fp32", True),
    ("twrw", "table_row_wise", "fp32", True),
    ("fp16", "table_row_wise", "fp16", True),
    ("int8", "table_row_wise", "int8", True),
    ("no-overlap", "table_row_wise", "fp32", False),
)


def bench_spec() -> dict[str, Any]:
    from harness.rules.specs import load_benchmark

    raw = copy.deepcopy(load_benchmark("dlrm_synthetic").raw)
    raw["name"] = "two_nodes_bench"
    raw["model"].update({"embedding_dim": DIM, "bottom_mlp": [1024, 256, DIM], "top_mlp": [256, 64, 1],
                         "interaction": "dot"})
    for key in ("dcn_layers", "dcn_rank"):
        raw["model"].pop(key, None)
    return raw


def profile():
    from harness.hw_profiles import load_profile

    return dataclasses.replace(load_profile("zionex-2x8gpu"), accelerators_per_node=RANKS_PER_NODE)


def make_plan(sharding: str, codec: str) -> dict[str, Any]:
    from harness.reference.distributed.comm_codecs import Codec
    from harness.reference.planner import PlannerConfig, ShardingType, plan_tables
    from harness.reference.planner.models import tables_for_benchmark
    from harness.rules.specs import spec_from_dict

    tables = tables_for_benchmark(spec_from_dict(bench_spec(), what="the bench's benchmark"))
    config = PlannerConfig(batch_size=BATCH, comm_precision=Codec(codec),
                           sharding_types=tuple((t.name, (ShardingType(sharding),)) for t in tables))
    return plan_tables(tables, profile(), config).to_dict()


# --------------------------------------------------------------------------- one rank
def worker(job_path: str) -> None:
    """One rank (under torchrun in one namespace): train the job's configuration, rank 0 writes
    its step times and every rank's traffic."""
    import torch

    from harness.reference.distributed.session import DistributedSession
    from harness.reference.distributed.trainer import process_group
    from harness.reference.engine.run_config import RunConfig
    from harness.reference.engine.session import SessionHooks

    job = json.loads(Path(job_path).read_text())
    torch.set_num_threads(1)
    spec = bench_spec()
    hp = {**spec["reference_hyperparameters"], "global_batch_size": BATCH}
    config = RunConfig.offline(spec, hp, 1, who="bench", emulated=True, world_size=2 * RANKS_PER_NODE,
                               sharding_plan=job["plan"], comm={"forward": job["codec"], "backward": job["codec"]},
                               profile=profile(), overlap=job["overlap"], threads=1)

    class Clock(SessionHooks):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.last = time.perf_counter()

        def after_step(self, session, loss) -> bool:
            now = time.perf_counter()
            self.times.append(now - self.last)
            self.last = now
            return False

    with process_group(config):
        session = DistributedSession(config)
        clock = Clock()
        session.train(clock, eval_at=[], until=job["warmup"] + job["steps"], stop_at_target=False)
        report = session.comm_report()
        if session.rank == 0:
            Path(job["out"]).write_text(json.dumps({
                "step_s": clock.times[job["warmup"]:], "per_step": session.measured_per_step(report),
                "projection": session.comm_projection(), "steps": session.step_count,
            }))
        session.close()


# --------------------------------------------------------------------------- the bench
def run_config(net: Any, k: int, name: str, sharding: str, codec: str, overlap: bool, args: argparse.Namespace,
               tmp: Path) -> dict[str, Any]:
    job = {"plan": make_plan(sharding, codec), "codec": codec, "overlap": overlap, "warmup": args.warmup,
           "steps": args.steps, "out": str(tmp / f"{name}.json")}
    (tmp / f"{name}.job.json").write_text(json.dumps(job))
    procs, logs = [], []
    for node in (0, 1):
        env = {**os.environ, "GLOO_SOCKET_IFNAME": net.interface(node), "HARNESS_NODE_RANK": str(node),
               "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--nproc-per-node={RANKS_PER_NODE}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint={net.addresses[0]}:{PORT}", f"--rdzv-id=two-nodes-{k}",
                f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}", f"--local-addr={net.addresses[node]}",
                "--max-restarts=0", str(Path(__file__).resolve()), "--worker", str(tmp / f"{name}.job.json")]
        logs.append(open(tmp / f"{name}.node{node}.err", "w"))  # noqa: SIM115  (closed below)
        procs.append(net.popen(node, argv, env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=logs[-1]))
    codes = [proc.wait(timeout=args.timeout) for proc in procs]
    for log in logs:
        log.close()
    for node, code in enumerate(codes):
        if code != 0:
            err = (tmp / f"{name}.node{node}.err").read_text(errors="replace").strip().splitlines()
            raise SystemExit(f"two_nodes: configuration {name}, node {node} failed: "
                             f"{next((ln for ln in reversed(err) if 'Error' in ln), err[-1] if err else '?')}")
    return json.loads((tmp / f"{name}.json").read_text())


def total(per_step: dict[str, dict[str, float]], link: str) -> float:
    return sum(v[f"{link}_bytes"] for v in per_step.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate-mbit", type=float, default=1000.0, help="the link between the nodes, each way")
    parser.add_argument("--steps", type=int, default=8, help="measured steps per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the measured ones")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a configuration may take")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    from netns import NetnsError, TwoNodeNetwork

    print(f"two nodes x {RANKS_PER_NODE} ranks, {args.rate_mbit:g} Mbit/s each way between them; batch {BATCH}, "
          f"26 tables of dim {DIM}; {args.warmup} + {args.steps} steps per configuration", flush=True)
    results: dict[str, dict[str, Any]] = {}
    try:
        with TwoNodeNetwork(rate_mbit=args.rate_mbit) as net, tempfile.TemporaryDirectory(prefix="two-nodes-") as t:
            print(f"nodes {net.namespaces[0]} ({net.addresses[0]}) and {net.namespaces[1]} ({net.addresses[1]})",
                  flush=True)
            print(f"{'config':<11} {'sharding':<15} {'codec':<5} {'overlap':<7} {'step ms':>8} "
                  f"{'inter MB/step':>13} {'projected':>9} {'intra MB/step':>13}", flush=True)
            for k, (name, sharding, codec, overlap) in enumerate(CONFIGS):
                r = results[name] = run_config(net, k, name, sharding, codec, overlap, args, Path(t))
                r["step"] = statistics.median(r["step_s"])
                r["inter"], r["intra"] = total(r["per_step"], "inter_node"), total(r["per_step"], "intra_node")
                projected = total(r["projection"]["per_step"], "inter_node")
                print(f"{name:<11} {sharding:<15} {codec:<5} {'on' if overlap else 'off':<7} {r['step'] * 1e3:8.1f} "
                      f"{r['inter'] / 1e6:13.2f} {projected / 1e6:9.2f} {r['intra'] / 1e6:13.2f}", flush=True)
    except NetnsError as err:
        print(f"two_nodes: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("two_nodes: interrupted; the namespaces were removed", file=sys.stderr)
        return 130
    base = results["twrw"]
    print(f"int8/fp32 step time: {results['int8']['step'] / base['step']:.3f}")
    print(f"fp16/fp32 inter-node bytes: {results['fp16']['inter'] / base['inter']:.3f}")
    print(f"twrw/rw step time: {base['step'] / results['rw']['step']:.3f}")
    print(f"twrw/rw inter-node bytes: {base['inter'] / results['rw']['inter']:.3f}")
    print(f"fp16/fp32 step time: {results['fp16']['step'] / base['step']:.3f}")
    print(f"overlap/no-overlap step time: {base['step'] / results['no-overlap']['step']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
