"""The factories that choose between the one-process engine and its distributed subclasses, one
level above both (a base module never imports its own subclass): the session of one rank, and
one training run in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist

from harness.reference.data.datasets import Samples
from harness.reference.distributed.sessions import open_distributed_session
from harness.reference.distributed.trainer import DistributedTrainer, process_group
from harness.reference.engine.mlperf_log import MLPerfLog
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import TrainingSession
from harness.reference.engine.trainer import RunResult, Trainer


def open_session(config: RunConfig, *, dataset: Samples | None = None) -> TrainingSession:
    """The session of one rank: a :class:`TrainingSession`, or, for a run with a plan (sharded,
    or one rank with its tables placed on tiers; inside its process group), a ``DistributedSession``."""
    if config.world_size == 1 and config.sharding_plan is None:
        return TrainingSession(config, dataset=dataset)
    return open_distributed_session(config, dataset=dataset)


def run_from_config(config: RunConfig) -> RunResult:
    """Run one training run in this process (one rank of it when ``config.world_size > 1``,
    launched by torchrun); rank 0 writes the log and reports progress. A one-rank run with a
    plan (its tables placed on tiers) runs the sharded collection on a one-rank process group:
    the same code as a sharded run."""
    if config.world_size == 1 and config.sharding_plan is None:
        return _run(Trainer, config, rank=0)
    with process_group(config):
        return _run(DistributedTrainer, config, rank=dist.get_rank())


def _run(trainer: type[Trainer], config: RunConfig, *, rank: int) -> RunResult:
    log = MLPerfLog(Path(config.log_path), enabled=rank == 0)

    def progress(event: dict) -> None:
        if config.progress and rank == 0:
            print("HARNESS_PROGRESS " + json.dumps(event), flush=True)

    try:
        return trainer(config, log, progress=progress).run()
    finally:
        log.close()
