"""The sharded DLRM's training step with its batched embedding paths against the per-shard ones, in one run.

    python bench/sharded_step.py                    # 4 ranks, 40 steps a plan, batch 512
    python bench/sharded_step.py --ranks 2 --steps 20

Run plainly, the script relaunches itself under torchrun (``--standalone``, one CPU process and
torch thread per rank, gloo, the ranks forked as ``harness run`` forks them); every rank runs the
benchmark and rank 0 prints. The model is ``dlrm_synthetic``'s, with the planner's plan for
``--ranks`` ranks on one node with every table of one sharding type, for each type, and a plan
mixing them (the types in turn over the tables), as the equivalence tests train them.

For each plan, two sessions train the same steps from the same seed, one after the other, and
then again (A, B, A, B: a drift of the machine's speed falls on both): one with the sharded
collection's ``batched=False`` (the baseline: every shard's ids bucketed by a mask of their
own, its pooled vectors and gradients encoded one by one, its update one call), one with the
batched paths (one search routes every table's ids, a rank's shards' vectors cross as one
matrix, fp32 shards of one width live in one weight and update in one call). Both give the same
losses and tables bit for bit, which the script checks. Printed per plan: the milliseconds of a
step (the slowest rank's time for the timed steps, after ``--warmup`` steps, over the steps; the
better of the two rounds) and the ratio of the batched step to the per-shard one.

The absolute times of this machine (several processes sharing a few cores over gloo) are noise;
the ratios, measured in the same run, are the signal.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from harness.hw_profiles import load_profile
from harness.hw_profiles.profiles import bare_cpu_profile
from harness.reference.distributed.sessions import open_distributed_session
from harness.reference.distributed.trainer import PROCESS_GROUP_TIMEOUT
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks
from harness.reference.planner import Plan, PlannerConfig, ShardingType, plan_tables
from harness.reference.planner.models import tables_for_benchmark
from harness.rules.specs import BenchmarkSpec, load_benchmark
from harness.runsets.torchrun import FORKED_RANKS

BENCHMARK = "dlrm_synthetic"
SEED = 7


def relaunch(ranks: int) -> int:
    cmd = [sys.executable, "-m", "harness.runsets.torchrun", "--standalone", f"--nproc_per_node={ranks}",
           *FORKED_RANKS, str(Path(__file__).resolve()), *sys.argv[1:]]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.call(cmd, env=env)


def make_plan(spec: BenchmarkSpec, world: int, batch: int, types: list[ShardingType]) -> Plan:
    tables = tables_for_benchmark(spec)
    profile = dataclasses.replace(load_profile("zionex-8gpu"), nodes=1, accelerators_per_node=world)
    wanted = tuple((t.name, (types[i % len(types)],)) for i, t in enumerate(tables))
    return plan_tables(tables, profile, PlannerConfig(batch_size=batch, column_block=8, sharding_types=wanted))


class Clock(SessionHooks):
    """The seconds of the steps after the first ``warmup``, and each step's loss."""

    def __init__(self, warmup: int):
        self.warmup, self.losses, self.start, self.seconds = warmup, [], None, 0.0

    def after_step(self, session, loss: torch.Tensor) -> bool:
        self.losses.append(float(loss))
        if len(self.losses) == self.warmup:
            self.start = time.perf_counter()
        elif len(self.losses) > self.warmup:
            self.seconds = time.perf_counter() - self.start
        return False


def train(spec: BenchmarkSpec, plan: Plan, batch: int, steps: int, warmup: int, per_shard: bool
          ) -> tuple[float, list[float], torch.Tensor]:
    """Seconds a step (the slowest rank's), the losses, and the whole tables after training."""
    hp = {**spec.reference_hyperparameters, "global_batch_size": batch}
    profile = dataclasses.replace(bare_cpu_profile("bench"), accelerators_per_node=plan.world_size)
    config = RunConfig.offline(spec.raw, hp, SEED, who="bench", emulated=True, world_size=plan.world_size,
                               sharding_plan=plan, profile=profile, overlap=True)
    session = open_distributed_session(config, batched=not per_shard)
    clock = Clock(warmup)
    session.train(clock, eval_at=[], until=warmup + steps, stop_at_target=False)
    slowest = torch.tensor([clock.seconds / steps], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    tables = torch.cat([t.flatten() for t in session.table_weights()])
    session.close()
    return float(slowest[0]), clock.losses, tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4, help="processes (ranks) torchrun starts (default 4)")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per session (default 40)")
    ap.add_argument("--warmup", type=int, default=5, help="steps before the timed ones (default 5)")
    ap.add_argument("--batch", type=int, default=512, help="global batch size (default 512)")
    args = ap.parse_args()
    if "WORLD_SIZE" not in os.environ:
        sys.exit(relaunch(args.ranks))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=PROCESS_GROUP_TIMEOUT)
    world, rank = dist.get_world_size(), dist.get_rank()
    spec = load_benchmark(BENCHMARK)
    plans = {t.value: [t] for t in ShardingType}
    plans["mixed"] = list(ShardingType)
    rows = []
    for name, types in plans.items():
        plan = make_plan(spec, world, args.batch, types)
        best = {True: float("inf"), False: float("inf")}
        seen: dict[bool, tuple[list[float], torch.Tensor]] = {}
        for _ in range(2):
            for per_shard in (True, False):
                seconds, losses, tables = train(spec, plan, args.batch, args.steps, args.warmup, per_shard)
                best[per_shard] = min(best[per_shard], seconds)
                seen[per_shard] = (losses, tables)
        same = seen[True][0] == seen[False][0] and torch.equal(seen[True][1], seen[False][1])
        rows.append((name, best[True], best[False], same))
        if rank == 0:
            print(f"  {name}: done", flush=True)
    if rank == 0:
        print(f"\n{spec.name}: {world} ranks (gloo, one CPU process and torch thread each), global batch {args.batch}, "
              f"{args.steps} timed steps after {args.warmup}, the better of two rounds, torch {torch.__version__}\n")
        print(f"{'plan':<18} {'per-shard ms':>12} {'batched ms':>11} {'batched / per-shard':>20}  same losses and tables")
        for name, base, new, same in rows:
            print(f"{name:<18} {base * 1e3:>12.1f} {new * 1e3:>11.1f} {new / base:>20.2f}  {'yes' if same else 'NO'}")
        total_base, total_new = sum(r[1] for r in rows), sum(r[2] for r in rows)
        print(f"{'all plans':<18} {total_base * 1e3:>12.1f} {total_new * 1e3:>11.1f} {total_new / total_base:>20.2f}")
        print("\nabsolute times on this machine are noise; the ratios (same run) are the signal")
    dist.destroy_process_group()
    if not all(r[3] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
