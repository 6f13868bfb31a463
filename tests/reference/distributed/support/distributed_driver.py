"""Train the default benchmark's model for a few steps under given sharding plans; record the loss.

``python tests/reference/distributed/support/distributed_driver.py JOB.json`` trains in one process (the
unsharded :class:`~harness.reference.engine.session.TrainingSession`); under
``python -m harness.runsets.torchrun --nproc_per_node W --run-path ... JOB.json`` each rank trains its
shards (:class:`~harness.reference.distributed.session.DistributedSession`). Both train with
the session's own loop, as ``Trainer.run`` does.

JOB.json: ``{"out": DIR, "steps": N, "batch": GBS, "seed": S, "nodes": n, "per_node": a, ["auc": true, "overlap": false,
"eval_cache_bytes": 0, "hyperparameters": {...: changes to the benchmark's}, "dims": [one per table],
"rows": every table's rows, "no_teacher_cache": true, "full_build": true, "benchmark": a spec's name or file
(dlrmv4_synthetic: the HSTU ranker, its four tables planned as the DLRM's are), "table_optimizer": "adagrad"
(the benchmark's tables and dense part trained with elementwise Adagrad, see ADAGRAD),
"precision": "fp16", "frozen_dense": true (the dense optimizer never steps), "start": true (each plan's
weights before its first step written too, as ``DIR/NAME.start.pt`` and ``.start.json``),]
"plans": {NAME: {"types": {TABLE_OR_*: SHARDING_TYPE_OR_LIST}, "comm": {...}, "ssd": {...}, "overlap": b}, ...}}``
(a list of types is given to the tables in turn: a mixed plan; ``"ssd": {"cache_fraction": f,
"policy": p}`` moves the shards of every table that is not data-parallel to the SSD tier of
the same plan, behind caches). For each plan, rank 0 writes ``DIR/NAME.json`` (the global mean
loss of each step, the plan's sharding types, the bytes sent, the caches' figures) and
``DIR/NAME.pt`` (the whole tables after the last step).

JOB.json may also be a list of such jobs (each with its own ``out``, ``nodes`` and ``per_node``
for the same world size): one launch, one process group, the jobs in turn. A launch costs
seconds (torchrun, the ranks' imports, gloo), a job of a few plans about as much again: the
tests give one launch every job of a world size that can share it.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from harness.hw_profiles import load_profile
from harness.hw_profiles.profiles import bare_cpu_profile
from harness.process import detach_forked_rank, end_process
from harness.reference.data import synthetic
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks
from harness.reference.models.embeddings import (
    FusedEmbeddingCollection,
    SparseOptimizerConfig,
)
from harness.reference.planner import Plan, PlannerConfig, ShardingType, plan_tables
from harness.reference.planner.models import tables_for_benchmark
from harness.reference.runs import open_session
from harness.rules.specs import BenchmarkSpec, load_benchmark, spec_from_dict

# the DLRM's recipe (dlrm_synthetic's), which an HSTU job takes with "table_optimizer": "adagrad": row-wise
# Adagrad's column shards keep an accumulator per row of their own columns (as FBGEMM's do), so a
# column-sharded table follows one process only with the elementwise optimizer
ADAGRAD = {"opt_name": "adagrad", "opt_base_learning_rate": 0.015, "opt_adagrad_learning_rate_decay": 0,
           "opt_weight_decay": 0, "opt_adagrad_initial_accumulator_value": 0, "opt_adagrad_epsilon": 1.0e-8,
           "opt_learning_rate_warmup_steps": 0, "opt_learning_rate_decay_start_step": 0,
           "opt_learning_rate_decay_steps": 0, "gradient_accumulation_steps": 1}


_SPECS: dict[str, BenchmarkSpec] = {}


def benchmark(job: dict) -> BenchmarkSpec:
    """The default benchmark, its tables of the job's ``dims`` (one per table) and ``rows`` (every
    table) when it gives them (made once per process: validating a spec costs more than a plan's
    50 steps' collectives do, and each plan asks for it twice)."""
    key = json.dumps([job.get(k) for k in ("benchmark", "dims", "rows", "table_optimizer")])
    if key not in _SPECS:
        _SPECS[key] = _benchmark(job)
    return _SPECS[key]


def _benchmark(job: dict) -> BenchmarkSpec:
    spec = load_benchmark(job.get("benchmark", "dlrm_synthetic"))
    if "dims" not in job and "rows" not in job and "table_optimizer" not in job:
        return spec
    raw = copy.deepcopy(spec.raw)
    if job.get("table_optimizer") == "adagrad":  # elementwise Adagrad for the tables, and the dense part
        raw["model"]["embedding_optimizer"] = "adagrad"
        raw["reference_hyperparameters"] = {**ADAGRAD, "global_batch_size": spec.reference_hyperparameters["global_batch_size"]}
    if "dims" in job:
        raw["model"]["embedding_dims"] = list(job["dims"])
    if "rows" in job:
        raw["dataset"]["table_rows"] = [int(job["rows"])] * len(raw["dataset"]["table_rows"])
    return spec_from_dict(raw, what="the driver's benchmark")


def run_config(job: dict, world: int, plan: dict | None, comm: dict, tier: dict | None = None, *,
               overlap: bool = True) -> RunConfig:
    spec = benchmark(job)
    hp = {**spec.reference_hyperparameters, "global_batch_size": job["batch"], **job.get("hyperparameters", {})}
    if hp["opt_name"] != "adagrad":
        hp = {k: v for k, v in hp.items() if not k.startswith("opt_adagrad_")}
    profile = dataclasses.replace(bare_cpu_profile("test"), nodes=job.get("nodes", 1),
                                  accelerators_per_node=job.get("per_node", world))
    return RunConfig.offline(spec.raw, hp, job["seed"], who="test", emulated=True, world_size=world,
                             sharding_plan=Plan.from_dict(plan) if plan is not None else None, comm=comm, embedding_tier=tier, profile=profile,
                             overlap=overlap, precision=job.get("precision", "fp32"))


def on_ssd(plan: dict, ssd: dict, path: Path) -> tuple[dict, dict]:
    """``plan`` with the shards of its tables that are not data-parallel on the SSD tier, and
    the run config's tier setting."""
    plan = json.loads(json.dumps(plan))
    plan["config"]["ssd_cache_fraction"] = ssd["cache_fraction"]  # the executor sizes the caches from the plan
    for table in plan["tables"]:
        if table["sharding_type"] != "data_parallel":
            for shard in table["shards"]:
                shard["tier"] = "ssd"
    return plan, {"tier": "ssd", "path": str(path), "cache_fraction": ssd["cache_fraction"],
                  "policy": ssd.get("policy", "lru")}


def make_plan(job: dict, constraint: dict, world: int) -> dict:
    tables = tables_for_benchmark(benchmark(job))
    base = load_profile("zionex-8gpu")
    profile = dataclasses.replace(base, nodes=job["nodes"], accelerators_per_node=job["per_node"])
    types = []
    for i, t in enumerate(tables):
        wanted = constraint.get(t.name, constraint.get("*"))
        if isinstance(wanted, list):  # a mixed plan: the types in turn
            wanted = wanted[i % len(wanted)]
        if wanted:
            types.append((t.name, (ShardingType(wanted),)))
    config = PlannerConfig(batch_size=job["batch"], column_block=job.get("column_block", 8), sharding_types=tuple(types))
    plan = plan_tables(tables, profile, config)
    assert plan.world_size == world, (plan.world_size, world)
    return plan.to_dict()


def unsharded_tables(model) -> list[torch.Tensor]:
    """Every table of a one-process model: a DLRM's, or an HSTU ranker's (item, artist, album, uid)."""
    if hasattr(model, "contextual_embeddings"):
        return [*model.embeddings.table_weights(), *model.contextual_embeddings.table_weights()]
    return model.sparse_arch.embeddings.table_weights()


class LossRecorder(SessionHooks):
    """The global mean loss of every step: each rank keeps its own, and :meth:`finish` (a collective
    on every rank of a sharded run, once, not one per step) sums them."""

    def __init__(self, world: int):
        self.world, self.losses, self._local = world, [], []

    def after_step(self, session, loss: torch.Tensor) -> bool:
        self._local.append(loss.detach().double().reshape(1) / self.world)
        return False

    def finish(self) -> None:
        if not self._local:
            return
        total = torch.cat(self._local)
        if self.world > 1:
            dist.all_reduce(total)
        self.losses = total.tolist()


def main(job_path: str) -> None:
    jobs = json.loads(Path(job_path).read_text())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo")
    # what is here now (torch, the process group) lives as long as the process: the collection after
    # each plan need not walk it (a quarter of a second per plan and rank, on ranks sharing 2 cores)
    gc.freeze()
    for job in jobs if isinstance(jobs, list) else [jobs]:
        run_job(job, world)
    if world > 1:
        dist.destroy_process_group()


def run_job(job: dict, world: int) -> None:
    from harness.reference.distributed import session as distributed_session
    from harness.reference.engine import session as session_module

    out = Path(job["out"])
    # process-wide settings some jobs change, restored after each job
    saved = synthetic._MATERIALISE_LIMIT, session_module.EVAL_CACHE_BYTES, distributed_session.EVAL_CACHE_BYTES
    if job.get("no_teacher_cache"):  # the synthetic teacher's per-row values computed on the fly, not kept:
        synthetic._MATERIALISE_LIMIT = 0  # data-side memory that grows with the tables' rows
    if "eval_cache_bytes" in job:  # 0: the eval split is read again at every evaluation, as a large one is
        session_module.EVAL_CACHE_BYTES = distributed_session.EVAL_CACHE_BYTES = job["eval_cache_bytes"]
    try:
        run_plans(job, world, out)
    finally:
        synthetic._MATERIALISE_LIMIT, session_module.EVAL_CACHE_BYTES, distributed_session.EVAL_CACHE_BYTES = saved


def dense_sha256(session) -> str:
    return hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes()
                                   for p in session.dense_optimizer.param_groups[0]["params"])).hexdigest()


def write_weights(session, world: int, rank: int, stem: Path) -> None:
    """Every table, whole and flat (``STEM.pt``), and the dense part's digest (``STEM.json``): rank 0
    writes what every rank's shards make (a collective on a sharded run)."""
    weight = session.table_weights() if world > 1 else unsharded_tables(session.model)
    dense = dense_sha256(session)
    if rank == 0:
        torch.save(torch.cat([w.flatten() for w in weight]), f"{stem}.pt")
        Path(f"{stem}.json").write_text(json.dumps({"dense_sha256": dense}))


def run_plans(job: dict, world: int, out: Path) -> None:
    rank = dist.get_rank() if world > 1 else 0
    for name, entry in job["plans"].items():
        plan = None
        if world > 1:  # rank 0 plans, as the run set's parent does; the ranks take its plan (planning
            # the 12t-shaped model's 1,000 tables takes seconds: four ranks doing it took four times the CPU)
            made = [make_plan(job, entry.get("types", {}), world) if rank == 0 else None]
            dist.broadcast_object_list(made, src=0)
            plan = made[0]
        tier = None
        if entry.get("ssd") and plan is not None:
            plan, tier = on_ssd(plan, entry["ssd"], out / f"{name}.tables.bin")
        config = run_config(job, world, plan, entry.get("comm", {}), tier,
                            overlap=entry.get("overlap", job.get("overlap", True)))
        if job.get("full_build"):  # the path before per-rank materialisation: the whole tables on every rank first
            whole = FusedEmbeddingCollection(config.benchmark.raw["dataset"]["table_rows"],
                                             config.benchmark.raw["model"]["embedding_dim"],
                                             config.benchmark.raw["dataset"]["pooling"], optimizer=SparseOptimizerConfig())
            del whole
        session = open_session(config)
        if job.get("frozen_dense"):  # the dense part never steps: every rank computes the same per-sample
            session.dense_optimizer.step = lambda *args, **kwargs: None  # gradients as one process does
        if job.get("start"):  # the weights before the first step too: a plan's own start, without a
            write_weights(session, world, rank, out / f"{name}.start")  # session of its own to make it
        losses = LossRecorder(world)
        session.train(losses, eval_at=[], until=job["steps"], stop_at_target=False)
        losses.finish()
        memory = session.memory_report()  # before anything below gathers whole tables
        traffic = None
        if world > 1:  # the training steps' traffic, every rank's, and the planner's projection of it
            report = session.comm_report()
            traffic = {"total": report["total"], "per_step": session.measured_per_step(report),
                       "projection": session.comm_projection()}
        weight = session.table_weights() if world > 1 else unsharded_tables(session.model)
        auc = session.evaluate() if job.get("auc") else None
        cache = session.cache_report() if tier is not None else None
        dense = dense_sha256(session)
        if rank == 0:
            types = sorted({t["sharding_type"] for t in plan["tables"]}) if plan else ["unsharded"]
            stats = session.comm_stats.to_dict() if world > 1 else {}  # type: ignore[attr-defined]
            (out / f"{name}.json").write_text(json.dumps(
                {"losses": losses.losses, "types": types, "auc": auc, "stats": stats, "world": world, "cache": cache,
                 "dense_sha256": dense, "memory": memory, "traffic": traffic}
            ))
            torch.save(torch.cat([w.flatten() for w in weight]), out / f"{name}.pt")  # every table, flat
        if world > 1:  # the next plan's session makes groups of its own
            session.destroy_groups()
        else:
            session.close()
        del session
        gc.collect()


if __name__ == "__main__":
    detach_forked_rank()
    main(sys.argv[1])
    end_process(0)  # no module teardown per rank (seconds, on ranks that share two cores)
