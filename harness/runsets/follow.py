"""Following a multi-node run set: a follower node (``--node-rank`` > 0) is admitted by node 0,
then runs its share of the ranks of every run node 0 hands out. It writes nothing into the
results tree: node 0's global rank 0 writes each log, node 0's launcher the results."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.errors import ErrorCategory, HarnessError
from harness.process import interrupt_category, interrupt_reason
from harness.reference.engine.run_config import RunConfig
from harness.runsets.launch import NodeGroup
from harness.runsets.manifest import write_resumable
from harness.runsets.plan import RunSetPlan
from harness.runsets.reporter import Reporter, run_name
from harness.runsets.workers import remove_tables, run_worker, worker_failure


@dataclass(frozen=True)
class FollowerOutcome:
    """What a follower node did: the runs it took part in (their indices)."""

    runs: list[int]
    node: int
    nodes: int


def follow_run_set(plan: RunSetPlan, reporter: Reporter | None = None) -> FollowerOutcome:
    """A follower node's part of a multi-node run set: after node 0 admits it, its share of the
    ranks of every run node 0 hands out. It writes nothing into the results tree: the run
    configs and any SSD shard files live in a temporary folder, removed at the end."""
    reporter = reporter or Reporter()
    nodes = plan.request.nodes
    group = NodeGroup(nodes)
    done: list[int] = []
    index: int | None = None
    try:
        jobs = group.join(plan.fingerprint)
        reporter.message(f"node {nodes.rank} of {nodes.count}: admitted by node 0 at {nodes.endpoint}; "
                         f"{len(jobs)} run(s) to take part in")
        with tempfile.TemporaryDirectory(prefix=f"harness-node{nodes.rank}-") as tmp:
            for job, item in enumerate(jobs):
                index = int(item["index"])
                _follow_run(plan, group, reporter, Path(tmp), job, item)
                done.append(index)
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: this node's ranks have ended with it
        where = f"during {run_name(index)} on node {nodes.rank}" if index is not None else f"on node {nodes.rank}"
        raise HarnessError(f"{interrupt_reason(err)} {where}: its ranks here have stopped, node 0 keeps the run's "
                           f"log (this node writes none)", interrupt_category(err)) from None
    finally:
        group.done()
        group.close()
    return FollowerOutcome(done, nodes.rank, nodes.count)


def _follow_run(plan: RunSetPlan, group: NodeGroup, reporter: Reporter, tmp: Path, job: int,
                item: dict[str, Any]) -> None:
    """This node's ranks of one run (job ``job``, as node 0 handed it out); raises unless they and
    node 0 both say it ended well."""
    nodes = plan.request.nodes
    index = int(item["index"])
    config = _follower_config(plan, RunConfig.from_json(item["config"]), tmp, index)
    config_path = tmp / f"result_{index}.config.json"
    stderr_path = tmp / f"result_{index}.stderr.txt"
    write_resumable(config_path, config.to_json())
    reporter.message(f"{run_name(index)}: seed {config.seed}, ranks {nodes.rank * (plan.world_size // nodes.count)}"
                     f"..{(nodes.rank + 1) * (plan.world_size // nodes.count) - 1} here")
    code = run_worker(config_path, plan, job, stderr_path, lambda event: None)
    remove_tables(tmp, index)
    if code != 0:
        raise HarnessError(f"{run_name(index)} failed on node {nodes.rank}: {worker_failure(stderr_path)}",
                           ErrorCategory.RUN_FAILED)
    verdict = group.verdict(job)
    if not verdict["ok"]:
        raise HarnessError(f"{run_name(index)}: node 0 reports: {verdict['message']}", ErrorCategory.RUN_FAILED)
    reporter.message(f"{run_name(index)}: done on node {nodes.rank} (node 0 holds its log)")


def _follower_config(plan: RunSetPlan, config: RunConfig, tmp: Path, index: int) -> RunConfig:
    """Node 0's config of a run, with this node's own paths: no log (global rank 0 writes it),
    SSD shard files in ``tmp``, the data where this node has it (the same files: the run sets'
    fingerprints agree)."""
    tier = config.embedding_tier
    if tier is not None:
        tier = replace(tier, path=str((tmp / f"result_{index}.tables.bin").resolve()))
    return replace(config, log_path=os.devnull, progress=False, embedding_tier=tier, data=plan.data)
