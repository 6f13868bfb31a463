"""Train a DLRM whose tables and optimizer state are larger than this machine's memory, and the
same model shape scaled into memory.

    python bench/larger_than_memory.py [--rows 5200000] [--dim 64] [--ranks 4] [--steps 40] [--dir /tmp]

26 tables of ``--rows`` rows x ``--dim`` (row-wise Adagrad state), every shard on the SSD tier
(a file per shard under ``--dir``) behind a cache in memory of ``--cache-fraction`` of its rows,
planned over ``--ranks`` emulated ranks (gloo processes on this CPU, launched by torchrun) and
trained for ``--steps`` timed steps after ``--warmup``. No rank ever holds the model: each makes
its own shards from the seed a chunk at a time, straight into their files
(:class:`harness.reference.tiered.CachedShard`), and trains through its caches, whose misses
and write-backs go to the files row by row (:class:`harness.reference.tiered.SsdRows`: the
blocks each row lies on, at the device's queue depth, not the page cache).

Then the same shape (tables, dim, ranks, batch, steps, data) with ``--memory-rows`` rows a table
(default: as many as fill ``--memory-fraction`` of the memory), every shard resident in memory:
the rate a machine with the memory for it would reach.

It prints the model's bytes, the machine's memory, each rank's peak RSS, bytes held per tier
and cache hit rate, both training rates, and last two lines: ``model bytes / RAM: X`` and
``SSD tier / in memory: Y`` (the SSD run's samples/s over the in-memory run's). It checks first
that ``--dir`` has the disk space (one line and exit 1 if not), and removes its files when it
ends, also on an error, Ctrl-C or SIGTERM.
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


def profile_and_plan(args: argparse.Namespace, raw: dict[str, Any], *, ssd: bool) -> tuple[dict, dict]:
    """This machine seen as one node of ``--ranks`` ranks (its memory and disk shared by them),
    and the planner's plan with every table on the SSD tier behind its caches (``ssd``), or
    every table resident in memory (DDR, no cache)."""
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
    # on the SSD tier a row is a device read (and its write-back one more): a table split by
    # columns turns each row looked up into one read per column shard, so SSD shards keep whole
    # rows (table-, row- or table-row-wise); in memory the planner chooses among every type but
    # data-parallel (replicas are never tiered)
    allowed = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE) if ssd else \
        tuple(st for st in ShardingType if st is not ShardingType.DATA_PARALLEL)
    config = PlannerConfig(batch_size=args.batch, ssd_cache_fraction=args.cache_fraction,
                           tiers=tuple((t.name, (Tier.SSD if ssd else Tier.DDR,)) for t in tables),
                           sharding_types=tuple((t.name, allowed) for t in tables))
    return profile.to_dict(), plan_tables(tables, profile, config).to_dict()


# ---------------------------------------------------------------------------------- one rank
def device_traffic(stores: list[Any]) -> Any:
    """The bytes and transfers the stores' files moved so far (a tensor of two)."""
    import torch

    return torch.tensor([sum(getattr(s, "transfer_bytes", 0) for s in stores),
                         sum(getattr(s, "transfers", 0) for s in stores)], dtype=torch.float64)


def rank_main(work: Path) -> None:
    import torch
    import torch.distributed as dist

    from harness.hw_profiles.profiles import Profile
    from harness.reference.distributed.session import DistributedSession
    from harness.reference.engine.run_config import RunConfig
    from harness.reference.engine.session import SessionHooks
    from harness.reference.planner import Plan

    job = json.loads((work / "job.json").read_text())
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    raw = job["benchmark"]
    hp = {**raw["reference_hyperparameters"], "global_batch_size": job["batch"]}
    config = RunConfig.offline(raw, hp, 1, who="bench", profile=Profile.from_dict(job["profile"]), emulated=True,
                               threads=1,
                               world_size=dist.get_world_size(), sharding_plan=Plan.from_dict(job["plan"]),
                               embedding_tier={"path": str(work / "tables"), "policy": job["policy"]}
                               if job["ssd"] else None)
    t0 = time.perf_counter()
    session = DistributedSession(config)  # every rank writes its shards' initial rows into their files
    dist.barrier()
    init_s = time.perf_counter() - t0
    stores = [c.store for c in session.model.sparse_arch.cached.values()]
    at_start = device_traffic(stores)

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
    moved = device_traffic(stores) - at_start
    dist.all_reduce(moved)  # what the drive moved for the rows while training (reads and write-backs), all ranks
    if rank == 0:
        modes = sorted({f"{getattr(s, 'mode', '')}, {getattr(s, 'reader', '')}" for s in stores})
        (work / "result.json").write_text(json.dumps(
            {"init_s": init_s, "train_s": train_s, "memory": memory, "cache": cache,
             "device_bytes": moved[0].item(), "transfers": moved[1].item(), "modes": modes}))
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------- the bench
def report(args: argparse.Namespace, result: dict[str, Any], plan: dict[str, Any], ram: int) -> None:
    """The SSD run: per rank and in all."""
    from harness.hw_profiles.profiles import format_bytes as fb

    ranks, cache = result["memory"]["ranks"], result["cache"]
    types: dict[str, int] = {}
    for t in plan["tables"]:
        types[t["sharding_type"]] = types.get(t["sharding_type"], 0) + 1
    print(f"plan: {', '.join(f'{n} {t}' for t, n in sorted(types.items()))}, every shard on the SSD tier; "
          f"files written in {result['init_s']:.0f} s (each rank its own shards, from the seed); rows moved "
          f"{'; '.join(result['modes'])}")
    print(f"{'RANK':>4} {'SSD HELD':>10} {'CACHE (DDR)':>12} {'PEAK RSS':>10} {'RSS: ANON':>10} {'FILE PAGES':>11} "
          f"{'HIT RATE':>9} {'ROWS READ':>10}")
    for r in ranks:
        c = r.get("caches", {}).get("ssd", {})
        print(f"{r['rank']:>4} {fb(r['peak']['ssd']):>10} {fb(r['peak']['ddr']):>12} {fb(r['peak_rss_bytes']):>10} "
              f"{fb(r.get('rss_anon_bytes', 0)):>10} {fb(r.get('rss_file_bytes', 0)):>11} "
              f"{c.get('hit_rate', 0):>9.3f} {fb(c.get('bytes_read', 0)):>10}")
    steps = args.warmup + args.steps
    rows_moved = cache["ssd_bytes_read"] + cache["ssd_bytes_written"]
    print(f"(ROWS READ counts the rows' bytes; the drive moved {result['device_bytes'] / max(rows_moved, 1):.2f}x "
          f"the rows' bytes read and written while training, {result['device_bytes'] / steps / 1e6:.1f} MB in "
          f"{result['transfers'] / steps:,.0f} transfers a step: the blocks each row lies on, and the blocks a "
          "write-back shares with other rows, read first)")
    samples = args.steps * args.batch
    print(f"all ranks: hit rate {cache['hit_rate']:.3f} (distinct rows {cache['unique_hit_rate']:.3f}); "
          f"{cache['ssd_bytes_read_per_step'] / 1e6:.1f} MB read and {cache['ssd_bytes_written_per_step'] / 1e6:.1f} "
          f"MB written per step; {samples / result['train_s']:,.0f} samples/s over the {args.steps} timed steps")
    held = sum(r["peak"]["ssd"] for r in ranks)
    rss = sum(r["peak_rss_bytes"] for r in ranks)
    anon = sum(r.get("rss_anon_bytes", 0) for r in ranks)
    print(f"model (weights + optimizer state): {fb(held)}; machine memory: {fb(ram)}; the ranks' peak RSS "
          f"together: {fb(rss)}, of which their own memory at the end: {fb(anon)}")


def train(args: argparse.Namespace, raw: dict[str, Any], *, ssd: bool, work: Path) -> tuple[dict, dict]:
    """One run of the ranks (torchrun); its result and plan. KeyboardInterrupt and the ranks' failure
    (RuntimeError) propagate, the ranks stopped."""
    profile, plan = profile_and_plan(args, raw, ssd=ssd)
    (work / "job.json").write_text(json.dumps({"benchmark": raw, "batch": args.batch, "steps": args.steps,
                                               "warmup": args.warmup, "policy": args.policy, "ssd": ssd,
                                               "profile": profile, "plan": plan}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ranks}",
           str(Path(__file__).resolve()), "--rank-work", str(work)]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    try:
        code = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
    if code != 0:
        raise RuntimeError(f"the ranks failed (exit {code})")
    return json.loads((work / "result.json").read_text()), plan


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
    ap.add_argument("--memory-rows", type=int, default=None,
                    help="rows per table of the in-memory run (default: --memory-fraction of the memory)")
    ap.add_argument("--memory-fraction", type=float, default=0.25)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the table files go")
    ap.add_argument("--rank-work", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_work is not None:
        rank_main(args.rank_work)
        return 0
    from harness.hw_profiles import detect
    from harness.hw_profiles.profiles import format_bytes as fb

    if not args.dir.is_dir():
        print(f"larger_than_memory: {args.dir} is not a folder (give --dir an existing folder for the table files)",
              file=sys.stderr)
        return 1
    need, free = model_bytes(args), shutil.disk_usage(args.dir).free
    if free < need * 1.05 + (1 << 30):
        print(f"larger_than_memory: {args.dir} has {free / 1e9:.1f} GB free; the model needs {need / 1e9:.1f} GB "
              "(give --dir on a larger disk, or fewer --rows)", file=sys.stderr)
        return 1
    ram = detect(results_dir=str(args.dir)).memory_bytes
    in_memory = argparse.Namespace(**{**vars(args), "rows": args.memory_rows or int(
        args.memory_fraction * ram // model_bytes(argparse.Namespace(**{**vars(args), "rows": 1})))})
    if in_memory.rows > args.rows:
        in_memory.rows = args.rows
    print(f"26 tables x {args.rows:,} rows x {args.dim} (row-wise Adagrad), {args.ranks} emulated ranks (gloo), "
          f"batch {args.batch}, {args.steps} timed steps after {args.warmup}, {args.cache_fraction:g} of every "
          f"shard's rows cached in memory ({args.policy}); model {need / 1e9:.1f} GB, memory {ram / 1e9:.1f} GB",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="harness-larger-than-memory-", dir=args.dir))

    def stop(signum: int, frame: Any) -> None:  # a SIGTERM cleans up as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        result, plan = train(args, spec_raw(args), ssd=True, work=work)
        report(args, result, plan, ram)
        shutil.rmtree(work / "tables", ignore_errors=True)
        for f in work.glob("tables*"):
            f.unlink()
        print(f"the same shape in memory: 26 tables x {in_memory.rows:,} rows, every shard resident (DDR), "
              f"model {fb(model_bytes(in_memory))}", flush=True)
        mem, _ = train(in_memory, spec_raw(in_memory), ssd=False, work=work)
        samples = args.steps * args.batch
        ssd_rate, mem_rate = samples / result["train_s"], samples / mem["train_s"]
        print(f"in memory: {mem_rate:,.0f} samples/s; on the SSD tier: {ssd_rate:,.0f} samples/s")
        held = sum(r["peak"]["ssd"] for r in result["memory"]["ranks"])
        print(f"model bytes / RAM: {held / ram:.2f}")
        print(f"SSD tier / in memory: {ssd_rate / mem_rate:.2f}")
        return 0
    except RuntimeError as err:
        print(f"larger_than_memory: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
