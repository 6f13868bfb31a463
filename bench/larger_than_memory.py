"""Train a DLRM whose tables and optimizer state are larger than this machine's memory.

    python bench/larger_than_memory.py [--rows 5200000] [--dim 64] [--ranks 4] [--steps 40] [--dir /tmp]

26 tables of ``--rows`` rows x ``--dim`` (row-wise Adagrad state), every shard on the SSD tier
(a file per shard under ``--dir``) behind a cache in memory of ``--cache-fraction`` of its rows,
planned over ``--ranks`` emulated ranks (gloo processes on this CPU, launched by torchrun) and
trained for ``--steps`` timed steps after ``--warmup``. No rank ever holds the model: each makes
its own shards from the seed a chunk at a time, straight into their files
(:class:`harness.reference.tiered.CachedShard`), and trains through its caches.

It prints the model's bytes, the machine's memory, each rank's peak RSS, bytes held per tier
and cache hit rate, the training rate, and last ``model bytes / RAM: X``. It checks first that
``--dir`` has the disk space (one line and exit 1 if not), and removes its files when it ends,
also on an error, Ctrl-C or SIGTERM. The mapped files' pages are the page cache's (the kernel writes and
drops them as memory runs short); a rank's RSS counts those it has touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BENCHMARK = "dlrm_synthetic"


def spec_raw(args: argparse.Namespace) -> dict[str, Any]:
    from harness.rules.specs import load_benchmark

    raw = json.loads(json.dumps(load_benchmark(BENCHMARK).raw))
    raw["name"] = "larger_than_memory"
    raw["dataset"].update(table_rows=[args.rows] * 26, train_samples=(args.warmup + args.steps + 2) * args.batch,
                          eval_samples=4096, zipf_exponent=args.zipf)
    for key in ("best_auc", "formats"):
        raw["dataset"].pop(key, None)
    raw["model"].update(embedding_dim=args.dim, bottom_mlp=[128, args.dim], top_mlp=[128, 1],
                        embedding_optimizer="rowwise_adagrad")
    return raw


def model_bytes(args: argparse.Namespace) -> int:
    return 26 * args.rows * (args.dim + 1) * 4  # weights and one row-wise Adagrad accumulator per row


def profile_and_plan(args: argparse.Namespace, raw: dict[str, Any]) -> tuple[dict, dict]:
    """This machine seen as one node of ``--ranks`` ranks (its memory and disk shared by them),
    and the planner's plan with every table on the SSD tier behind its caches."""
    import dataclasses

    from harness.hw_profiles import detect, load_profile
    from harness.hw_profiles.profiles import MemoryTier
    from harness.reference.planner import PlannerConfig, ShardingType, Tier, plan_tables
    from harness.reference.planner.models import tables_for_benchmark
    from harness.rules.specs import spec_from_dict

    detected = detect(results_dir=str(args.dir))
    local = load_profile("local", detected=detected)
    free = shutil.disk_usage(args.dir).free
    profile = dataclasses.replace(local, name="local-emulated", accelerators_per_node=args.ranks,
                                  ssd=MemoryTier(int(free * 0.9), local.ssd.bandwidth_bytes_per_s or 1e9))
    tables = tables_for_benchmark(spec_from_dict(raw, what="the bench's benchmark"))
    allowed = tuple(st for st in ShardingType if st is not ShardingType.DATA_PARALLEL)
    config = PlannerConfig(batch_size=args.batch, ssd_cache_fraction=args.cache_fraction,
                           tiers=tuple((t.name, (Tier.SSD,)) for t in tables),
                           sharding_types=tuple((t.name, allowed) for t in tables))
    return profile.to_dict(), plan_tables(tables, profile, config).to_dict()


# ---------------------------------------------------------------------------------- one rank
def rank_main(work: Path) -> None:
    import torch
    import torch.distributed as dist

    from harness.reference.distributed.session import DistributedSession
    from harness.reference.engine.run_config import RunConfig
    from harness.reference.engine.session import SessionHooks

    job = json.loads((work / "job.json").read_text())
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    raw = job["benchmark"]
    hp = {**raw["reference_hyperparameters"], "global_batch_size": job["batch"]}
    config = RunConfig.offline(raw, hp, 1, who="bench", profile=job["profile"], emulated=True, threads=1,
                               world_size=dist.get_world_size(), sharding_plan=job["plan"],
                               embedding_tier={"path": str(work / "tables"), "policy": job["policy"]})
    t0 = time.perf_counter()
    session = DistributedSession(config)  # every rank writes its shards' initial rows into their files
    dist.barrier()
    init_s = time.perf_counter() - t0

    class Clock(SessionHooks):
        start: float | None = None

        def after_step(self, s: Any, loss: torch.Tensor) -> bool:
            if s.step_count == job["warmup"]:
                dist.barrier()
                self.start = time.perf_counter()
            return False

    clock = Clock()
    session.train(clock, eval_at=[], until=job["warmup"] + job["steps"], stop_at_target=False)
    dist.barrier()
    train_s = time.perf_counter() - (clock.start or time.perf_counter())
    memory = session.memory_report()
    cache = session.cache_report()
    if rank == 0:
        (work / "result.json").write_text(json.dumps(
            {"init_s": init_s, "train_s": train_s, "memory": memory, "cache": cache}))
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------- the bench
def report(args: argparse.Namespace, work: Path, plan: dict[str, Any], ram: int) -> None:
    from harness.hw_profiles.profiles import format_bytes as fb

    result = json.loads((work / "result.json").read_text())
    ranks, cache = result["memory"]["ranks"], result["cache"]
    types: dict[str, int] = {}
    for t in plan["tables"]:
        types[t["sharding_type"]] = types.get(t["sharding_type"], 0) + 1
    print(f"plan: {', '.join(f'{n} {t}' for t, n in sorted(types.items()))}, every shard on the SSD tier; "
          f"files written in {result['init_s']:.0f} s (each rank its own shards, from the seed)")
    print(f"{'RANK':>4} {'SSD HELD':>10} {'CACHE (DDR)':>12} {'PEAK RSS':>10} {'RSS: ANON':>10} {'FILE PAGES':>11} "
          f"{'HIT RATE':>9} {'ROWS READ':>10}")
    for r in ranks:
        c = r.get("caches", {}).get("ssd", {})
        print(f"{r['rank']:>4} {fb(r['peak']['ssd']):>10} {fb(r['peak']['ddr']):>12} {fb(r['peak_rss_bytes']):>10} "
              f"{fb(r.get('rss_anon_bytes', 0)):>10} {fb(r.get('rss_file_bytes', 0)):>11} "
              f"{c.get('hit_rate', 0):>9.3f} {fb(c.get('bytes_read', 0)):>10}")
    print("(peak RSS counts the table files' pages a rank touched through its memory map: the page cache's, "
          "written back and dropped by the kernel; RSS: ANON is the rank's own memory at the end; ROWS READ counts "
          "the rows' bytes, while the drive reads the 4 KB page each row lies on)")
    samples = args.steps * args.batch
    print(f"all ranks: hit rate {cache['hit_rate']:.3f} (distinct rows {cache['unique_hit_rate']:.3f}); "
          f"{cache['ssd_bytes_read_per_step'] / 1e6:.1f} MB read and {cache['ssd_bytes_written_per_step'] / 1e6:.1f} "
          f"MB written per step; {samples / result['train_s']:,.0f} samples/s over the {args.steps} timed steps")
    held = sum(r["peak"]["ssd"] for r in ranks)
    rss = sum(r["peak_rss_bytes"] for r in ranks)
    anon = sum(r.get("rss_anon_bytes", 0) for r in ranks)
    print(f"model (weights + optimizer state): {fb(held)}; machine memory: {fb(ram)}; the ranks' peak RSS "
          f"together: {fb(rss)}, of which their own memory at the end: {fb(anon)}")
    print(f"model bytes / RAM: {held / ram:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_200_000, help="rows per table (26 tables)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=40, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--cache-fraction", type=float, default=0.01)
    ap.add_argument("--policy", choices=["lru", "lfu"], default="lru")
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the table files go")
    ap.add_argument("--rank-work", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_work is not None:
        rank_main(args.rank_work)
        return 0
    from harness.hw_profiles import detect

    need, free = model_bytes(args), shutil.disk_usage(args.dir).free
    if free < need * 1.05 + (1 << 30):
        print(f"larger_than_memory: {args.dir} has {free / 1e9:.1f} GB free; the model needs {need / 1e9:.1f} GB "
              "(give --dir on a larger disk, or fewer --rows)", file=sys.stderr)
        return 1
    ram = detect(results_dir=str(args.dir)).memory_bytes
    raw = spec_raw(args)
    print(f"26 tables x {args.rows:,} rows x {args.dim} (row-wise Adagrad), {args.ranks} emulated ranks (gloo), "
          f"batch {args.batch}, {args.steps} timed steps after {args.warmup}, {args.cache_fraction:g} of every "
          f"shard's rows cached in memory ({args.policy}); model {need / 1e9:.1f} GB, memory {ram / 1e9:.1f} GB",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="harness-larger-than-memory-", dir=args.dir))
    proc = None

    def stop(signum: int, frame: Any) -> None:  # a SIGTERM cleans up as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        profile, plan = profile_and_plan(args, raw)
        (work / "job.json").write_text(json.dumps({"benchmark": raw, "batch": args.batch, "steps": args.steps,
                                                   "warmup": args.warmup, "policy": args.policy,
                                                   "profile": profile, "plan": plan}))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ranks}",
               str(Path(__file__).resolve()), "--rank-work", str(work)]
        proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
        code = proc.wait()
        if code != 0:
            print(f"larger_than_memory: the ranks failed (exit {code})", file=sys.stderr)
            return 1
        report(args, work, plan, ram)
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
