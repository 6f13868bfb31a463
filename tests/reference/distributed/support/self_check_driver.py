"""The init self-check on real gloo groups: ``python -m harness.runsets.torchrun --nproc-per-node 4
--run-path --start-method=forkserver tests/reference/distributed/support/self_check_driver.py OUT_DIR``.

On the 2-node x 2-rank test profile, for every sharding type and a mixed plan of the default
benchmark (and a mixed plan of the HSTU ranker's tables, ``dlrmv4_synthetic``), each rank runs
:func:`~harness.reference.distributed.self_check.self_check` as a run's init does; then once more
for each model with a deliberately broken collective (the pooled embeddings that
rank 1 sends in every forward all-to-all arrive as zeros). Rank 0 writes ``OUT_DIR/NAME.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from harness.hw_profiles import load_profile
from harness.process import detach_forked_rank
from harness.reference.distributed import comm
from harness.reference.distributed.self_check import self_check
from harness.reference.engine.run_config import RunConfig
from harness.reference.planner import PlannerConfig, ShardingType, plan_tables
from harness.reference.planner.models import tables_for_benchmark
from harness.rules.specs import load_benchmark

PROFILE = Path(__file__).resolve().parents[3] / "fixtures" / "two_nodes_2gpu.yaml"
TYPES = [t.value for t in ShardingType]


def config(types: list[str], benchmark: str = "dlrm_synthetic") -> RunConfig:
    spec = load_benchmark(benchmark)
    profile = load_profile(str(PROFILE))
    tables = tables_for_benchmark(spec)
    plan = plan_tables(tables, profile, PlannerConfig(
        batch_size=2048, column_block=8, sharding_types=tuple((t.name, (ShardingType(types[i % len(types)]),))
                                              for i, t in enumerate(tables))))
    return RunConfig.offline(spec.raw, dict(spec.reference_hyperparameters), 7, who="test", emulated=True,
                             world_size=4, sharding_plan=plan, profile=profile)


def broken_forward() -> None:
    """Every forward all-to-all's chunk from group rank 1 arrives as zeros."""
    wait = comm.PendingAllToAll.wait

    def lossy(self):
        chunks = wait(self)
        if self._kind == comm.FORWARD and len(chunks) > 1:
            chunks[1].zero_()
        return chunks

    comm.PendingAllToAll.wait = lossy


def main(out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    plans = {t: [t] for t in TYPES}
    plans["mixed"] = TYPES
    results = {name: self_check(config(types)) for name, types in plans.items()}
    # the HSTU ranker's 11 tables dealt every sharding type in turn
    results["hstu_mixed"] = self_check(config(TYPES, "dlrmv4_synthetic"))
    broken_forward()
    results["broken"] = self_check(config(["table_wise"]))
    results["hstu_broken"] = self_check(config(["row_wise"], "dlrmv4_synthetic"))  # its jagged event vectors
    if dist.get_rank() == 0:
        for name, report in results.items():
            (Path(out) / f"{name}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    detach_forked_rank()
    main(sys.argv[1])
