"""Bytes, time and final AUC of each embedding all-to-all codec, on the sharded DLRM, in one run.

    python bench/comm_codecs.py                      # 8 ranks, 256 steps, batch 2048
    python bench/comm_codecs.py --ranks 2 --steps 20 # a quick look

Run plainly, the script relaunches itself under ``torchrun`` (``--standalone``, one CPU
process per rank, gloo, one torch thread each); every rank runs the benchmark and rank 0
prints. The benchmark is ``dlrm_synthetic`` with its reference hyperparameters, seed 1, and
the planner's plan for ``zionex-8gpu`` (resized to ``--ranks`` ranks on one node) with every
table forced table-wise, so every table's pooled embeddings cross the all-to-all (left to
itself, the planner makes the small tables data-parallel and they never do).

For each codec (fp32 first: it is the baseline), a fresh
:class:`~harness.reference.distributed.trainer.DistributedTrainer` uses it for the forward
all-to-all (pooled embeddings) and the backward one (their gradients); the dense all-reduce
stays fp32, so the AUC difference is the embedding all-to-all codec's alone. Each trains
``--steps`` steps from the same seed and data, then evaluates the AUC on the whole eval split.
Columns:

- ``fwd/bwd B/a2a``: bytes one all-to-all puts on the wire, all ranks together (a rank's
  chunk to itself is not counted), from the trainer's ``CommStats`` over the training steps
  only (taken before evaluation, whose forward passes are all-to-alls too);
- ``train fwd/bwd ms``: milliseconds a rank waits in one of those all-to-alls while training,
  averaged over ranks; it includes waiting for slower ranks, so it is mostly skew here;
- ``micro ms``: the forward all-to-all alone, as ``ShardedEmbeddingCollection._start_pooled`` does
  its communication (encode a ``B_local x cols`` block per destination and shard, all-to-all,
  decode), on its own process group, after a barrier so skew is not counted (and another
  between encoding and sending, not counted): per repetition the slowest rank's time, median
  over the repetitions; ``wire ms`` is the all-to-all call alone (no encode or decode);
- ``x fp32`` columns: ratios against fp32 measured in the same run;
- ``AUC - fp32``: the codec's final AUC minus fp32's.

The absolute times of this machine (several processes sharing a few cores over gloo) are
noise; the ratios against fp32, measured in the same run, are the signal.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.hw_profiles import load_profile
from harness.reference.distributed.comm import BACKWARD, FORWARD, Comm, CommStats
from harness.reference.distributed.comm_codecs import Codec
from harness.reference.distributed.session import DistributedSession
from harness.reference.distributed.sharded import ShardedEmbeddingCollection
from harness.reference.distributed.trainer import PROCESS_GROUP_TIMEOUT
from harness.reference.engine.run_config import RunConfig
from harness.reference.planner import Plan, PlannerConfig, ShardingType, plan_tables
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.models import tables_for_benchmark
from harness.rules.specs import BenchmarkSpec, load_benchmark

BENCHMARK = "dlrm_synthetic"
PROFILE = "zionex-8gpu"
SEED = 1
CODECS = (Codec.FP32, Codec.FP16, Codec.BF16, Codec.FP8, Codec.INT8)  # fp32 first: the baseline


@dataclasses.dataclass(frozen=True)
class CodecResult:
    """What one codec's run measured (every figure already combined over the ranks)."""

    codec: Codec
    fwd_bytes: float  # per forward all-to-all, all ranks together
    bwd_bytes: float  # per backward all-to-all, all ranks together
    fwd_s: float  # seconds waited per forward all-to-all while training, mean over ranks
    bwd_s: float  # the same for the backward all-to-all
    micro_s: float  # encode + all-to-all + decode, slowest rank, median over repetitions
    wire_s: float  # the all-to-all call alone, slowest rank, median over repetitions
    auc: float


def relaunch(ranks: int) -> int:
    """Run this script under torchrun with ``ranks`` processes; their exit status."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
           str(Path(__file__).resolve()), *sys.argv[1:]]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.call(cmd, env=env)


def make_plan(spec: BenchmarkSpec, world: int, batch: int) -> dict[str, Any]:
    """The planner's plan for the profile resized to ``world`` ranks, every table table-wise."""
    tables = tables_for_benchmark(spec)
    profile = load_profile(PROFILE)
    if profile.world_size != world:
        profile = dataclasses.replace(profile, nodes=1, accelerators_per_node=world)
    config = PlannerConfig(batch_size=batch,
                           sharding_types=tuple((t.name, (ShardingType.TABLE_WISE,)) for t in tables))
    plan = plan_tables(tables, profile, config)
    if plan.world_size != world:
        raise RuntimeError(f"the plan is for {plan.world_size} ranks, not {world}")
    return plan.to_dict()


def run_config(spec: BenchmarkSpec, batch: int, world: int, plan: dict[str, Any], codec: Codec) -> RunConfig:
    hp = dict(spec.reference_hyperparameters)
    hp["global_batch_size"] = batch
    return RunConfig.offline(
        spec, hp, SEED, who="bench", profile=load_profile(PROFILE), emulated=True, threads=1, world_size=world,
        sharding_plan=Plan.from_dict(plan), comm=CommConfig(forward=codec, backward=codec, allreduce=Codec.FP32),
    )


def micro_all_to_all(coll: ShardedEmbeddingCollection, batch: int, reps: int,
                     warmup: int) -> tuple[float, float]:
    """Median seconds of the forward all-to-all alone: ``(encode + wire + decode, wire)``.

    Every rank encodes, for each of its shards and each destination, a ``batch x cols`` block
    of pooled vectors, sends them on a process group of its own, decodes what it receives
    into a ``batch x tables x dim`` tensor. A barrier precedes each repetition, and another
    the all-to-all, so that neither skew between ranks nor a slower rank's encoding counts as
    wire time (the second barrier's own time is not counted). The time of a repetition is its
    slowest rank's.
    """
    comm = Comm(dist.new_group(backend=None), CommStats())
    world, me = comm.world_size, comm.rank
    gen = torch.Generator().manual_seed(SEED * 1000 + me)
    partials = [0.05 * torch.randn(world * batch, s.cols, generator=gen) for s in coll.shards]
    bounds = [q * batch for q in range(world + 1)]
    recv = coll.pooled_sizes(batch)
    totals, wires = [], []
    for rep in range(warmup + reps):
        comm.barrier()
        t0 = time.perf_counter()
        chunks = coll.encode_pooled(partials, bounds)
        t1 = time.perf_counter()
        comm.barrier()  # a slower rank's encoding is not counted as wire time
        t2 = time.perf_counter()
        got = comm.all_to_all(chunks, recv, FORWARD)
        t3 = time.perf_counter()
        coll.decode_pooled(got, batch)
        t4 = time.perf_counter()
        if rep >= warmup:
            totals.append((t1 - t0) + (t4 - t2))
            wires.append(t3 - t2)
    slowest = torch.tensor([totals, wires], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=comm.group)
    dist.destroy_process_group(comm.group)
    return statistics.median(slowest[0].tolist()), statistics.median(slowest[1].tolist())


def run_codec(spec: BenchmarkSpec, config: RunConfig, codec: Codec, steps: int, reps: int,
              warmup: int) -> CodecResult:
    """Train ``steps`` steps with ``codec`` on the embedding all-to-alls; measure; evaluate."""
    world = dist.get_world_size()
    gbs = int(config.hyperparameters["global_batch_size"])
    session = DistributedSession(config)
    micro_s, wire_s = micro_all_to_all(session.embeddings, gbs // world, reps, warmup)
    done = session.train(eval_at=[], until=steps, stop_at_target=False).steps
    train_stats = session.comm_stats.to_dict()  # before evaluate: its forward passes are all-to-alls too
    auc = session.evaluate()

    fwd, bwd = train_stats[FORWARD], train_stats[BACKWARD]
    if fwd["calls"] != done or bwd["calls"] != done:
        raise RuntimeError(f"{done} steps but {fwd['calls']} forward and {bwd['calls']} backward all-to-alls")
    sums = torch.tensor([fwd["bytes"], bwd["bytes"], fwd["seconds"], bwd["seconds"]], dtype=torch.float64)
    dist.all_reduce(sums)
    fwd_bytes, bwd_bytes, fwd_s, bwd_s = sums.tolist()
    return CodecResult(codec, fwd_bytes / done, bwd_bytes / done, fwd_s / done / world, bwd_s / done / world,
                       micro_s, wire_s, auc)


def print_table(results: Sequence[CodecResult]) -> None:
    base = results[0]
    header = (f"{'codec':<6} {'fwd B/a2a':>11} {'bwd B/a2a':>11} {'B x fp32':>8} {'train fwd ms':>12} "
              f"{'train bwd ms':>12} {'micro ms':>9} {'wire ms':>8} {'t x fp32':>8} {'final AUC':>9} {'AUC - fp32':>10}")
    print(header)
    print("-" * len(header))
    for r in results:
        bytes_ratio = (r.fwd_bytes + r.bwd_bytes) / (base.fwd_bytes + base.bwd_bytes)
        print(f"{r.codec.value:<6} {r.fwd_bytes:>11,.0f} {r.bwd_bytes:>11,.0f} {bytes_ratio:>8.3f} "
              f"{r.fwd_s * 1e3:>12.2f} {r.bwd_s * 1e3:>12.2f} {r.micro_s * 1e3:>9.3f} {r.wire_s * 1e3:>8.3f} "
              f"{r.micro_s / base.micro_s:>8.2f} {r.auc:>9.5f} {r.auc - base.auc:>+10.5f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8, help="processes (ranks) torchrun starts (default 8)")
    ap.add_argument("--steps", type=int, default=256, help="training steps per codec (default 256: half an "
                    "epoch at batch 2048)")
    ap.add_argument("--batch", type=int, default=None, help="global batch size (default: the benchmark's "
                    "reference, 2048)")
    ap.add_argument("--reps", type=int, default=50, help="timed repetitions of the micro-benchmark (default 50)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed repetitions before them (default 5)")
    args = ap.parse_args()
    if "WORLD_SIZE" not in os.environ:
        sys.exit(relaunch(args.ranks))

    t_start = time.perf_counter()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=PROCESS_GROUP_TIMEOUT)
    try:
        world, rank = dist.get_world_size(), dist.get_rank()
        spec = load_benchmark(BENCHMARK)
        gbs = args.batch or int(spec.reference_hyperparameters["global_batch_size"])
        steps_per_epoch = spec.dataset["train_samples"] // gbs
        if gbs % world:
            raise SystemExit(f"global batch {gbs} is not divisible by the {world} ranks")
        if not 1 <= args.steps <= steps_per_epoch:
            raise SystemExit(f"--steps must be 1..{steps_per_epoch} (one epoch at batch {gbs})")
        plan = make_plan(spec, world, gbs)
        results = []
        for codec in CODECS:
            config = run_config(spec, gbs, world, plan, codec)
            results.append(run_codec(spec, config, codec, args.steps, args.reps, args.warmup))
            if rank == 0:
                print(f"  {codec.value}: done ({time.perf_counter() - t_start:.0f} s)", flush=True)
        if rank == 0:
            print(f"\n{spec.name}: {world} ranks (gloo, one CPU process and torch thread each; {PROFILE}'s plan "
                  f"resized to {world} ranks, all {len(plan['tables'])} tables table-wise), global batch {gbs} "
                  f"({gbs // world} per rank), {args.steps} training steps ({args.steps / steps_per_epoch:.2f} "
                  f"epoch), seed {SEED}, torch {torch.__version__}")
            print("codec on the forward and backward embedding all-to-alls; the dense all-reduce stays fp32, so "
                  "the AUC difference is the all-to-all codec's alone")
            print(f"bytes: per all-to-all, all ranks together, training steps only; train ms: wait per all-to-all, "
                  f"mean over ranks (includes skew); micro: forward all-to-all alone, slowest rank, median of "
                  f"{args.reps} after {args.warmup} warm-up, encode + wire + decode (wire: the call alone)\n")
            print_table(results)
            print("\nabsolute times on this machine are noise; the ratios against fp32 (same run) are the signal")
            print(f"wall time {time.perf_counter() - t_start:.0f} s", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
