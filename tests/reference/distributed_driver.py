"""Train the default benchmark's model for a few steps under given sharding plans; record the loss.

``python tests/reference/distributed_driver.py JOB.json`` trains in one process (the
unsharded :class:`~harness.reference.trainer.Trainer`); under
``python -m torch.distributed.run --nproc_per_node W ... JOB.json`` each rank trains its
shards (:class:`~harness.reference.distributed.trainer.DistributedTrainer`). Both use the
trainers' own pieces (``_model``, ``_train_items``, ``_loss``), as ``Trainer.run`` does.

JOB.json: ``{"out": DIR, "steps": N, "batch": GBS, "seed": S, "nodes": n, "per_node": a,
"plans": {NAME: {"types": {TABLE_OR_*: SHARDING_TYPE_OR_LIST}, "comm": {...}, "ssd": {...}}, ...}}``
(a list of types is given to the tables in turn: a mixed plan; ``"ssd": {"cache_fraction": f,
"policy": p}`` moves the shards of every table that is not data-parallel to the SSD tier of
the same plan, behind caches). For each plan, rank 0 writes ``DIR/NAME.json`` (the global mean
loss of each step, the plan's sharding types, the bytes sent, the caches' figures) and
``DIR/NAME.pt`` (the whole tables after the last step).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from harness.hw_profiles import load_profile
from harness.reference import synthetic
from harness.reference.planner import PlannerConfig, ShardingType, plan_tables
from harness.reference.planner.models import tables_for_benchmark
from harness.reference.trainer import RunConfig, Trainer
from harness.rules.specs import load_benchmark


def run_config(job: dict, world: int, plan: dict | None, comm: dict, tier: dict | None = None) -> RunConfig:
    spec = load_benchmark("dlrm_synthetic")
    hp = dict(spec.reference_hyperparameters)
    hp["global_batch_size"] = job["batch"]
    return RunConfig.offline(spec.raw, hp, job["seed"], who="test", emulated=True, world_size=world,
                             sharding_plan=plan, comm=comm, embedding_tier=tier)


def on_ssd(plan: dict, ssd: dict, path: Path) -> tuple[dict, dict]:
    """``plan`` with the shards of its tables that are not data-parallel on the SSD tier, and
    the run config's tier setting."""
    plan = json.loads(json.dumps(plan))
    for table in plan["tables"]:
        if table["sharding_type"] != "data_parallel":
            for shard in table["shards"]:
                shard["tier"] = "ssd"
    return plan, {"tier": "ssd", "path": str(path), "cache_fraction": ssd["cache_fraction"],
                  "policy": ssd.get("policy", "lru")}


def make_plan(job: dict, constraint: dict, world: int) -> dict:
    spec = load_benchmark("dlrm_synthetic")
    tables = tables_for_benchmark(spec)
    base = load_profile("zionex-8gpu")
    profile = dataclasses.replace(base, nodes=job["nodes"], accelerators_per_node=job["per_node"])
    types = []
    for i, t in enumerate(tables):
        wanted = constraint.get(t.name, constraint.get("*"))
        if isinstance(wanted, list):  # a mixed plan: the types in turn
            wanted = wanted[i % len(wanted)]
        if wanted:
            types.append((t.name, (ShardingType(wanted),)))
    config = PlannerConfig(batch_size=job["batch"], column_block=8, sharding_types=tuple(types))
    plan = plan_tables(tables, profile, config)
    assert plan.world_size == world, (plan.world_size, world)
    return plan.to_dict()


def main(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    out = Path(job["out"])
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    for name, entry in job["plans"].items():
        plan = make_plan(job, entry.get("types", {}), world) if world > 1 else None
        tier = None
        if entry.get("ssd") and plan is not None:
            plan, tier = on_ssd(plan, entry["ssd"], out / f"{name}.tables.bin")
        config = run_config(job, world, plan, entry.get("comm", {}), tier)
        if world > 1:
            from harness.reference.distributed.trainer import DistributedTrainer

            trainer: Trainer = DistributedTrainer(config)
        else:
            trainer = Trainer(config)
        model, dense_opt = trainer._model()
        data = trainer._data()
        order = synthetic.EpochOrder.from_seed(config.seed, config.benchmark["dataset"]["train_samples"])
        loss_fn = torch.nn.BCEWithLogitsLoss()
        items = trainer._train_items(data, order, job["batch"], model)
        losses = []
        for step, item in enumerate(items):
            loss = trainer.train_step(model, dense_opt, loss_fn, item)
            total = loss.double().reshape(1) / world
            if world > 1:
                dist.all_reduce(total)
            losses.append(float(total[0]))
            if step + 1 == job["steps"]:
                break
        items.close()
        weight = model.sparse_arch.full_weight() if world > 1 else model.sparse_arch.embeddings.weight.detach()
        auc = trainer.evaluate(model, data) if job.get("auc") else None
        cache = trainer.cache_report() if tier is not None else None  # type: ignore[attr-defined]
        if rank == 0:
            types = sorted({t["sharding_type"] for t in plan["tables"]}) if plan else ["unsharded"]
            stats = trainer.stats.to_dict() if world > 1 else {}  # type: ignore[attr-defined]
            (out / f"{name}.json").write_text(json.dumps(
                {"losses": losses, "types": types, "auc": auc, "stats": stats, "world": world, "cache": cache}
            ))
            torch.save(weight.clone(), out / f"{name}.pt")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
