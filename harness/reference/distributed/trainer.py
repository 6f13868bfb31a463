"""The MLPerf trainer of one rank of a sharded run (launched by torchrun).

The training is a :class:`~harness.reference.distributed.session.DistributedSession`'s; this
adds the sharded run's records to the trainer's log (the plan's fingerprint and sharding
types, the codecs, each collective's bytes, the SSD shards' caches summed over the ranks).
Only rank 0 writes the log.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.profiles import DeviceType
from harness.mllog import keys
from harness.reference.distributed.ranks import assign_rank
from harness.reference.distributed.self_check import failure, self_check
from harness.reference.distributed.session import DistributedSession
from harness.reference.distributed.sessions import open_distributed_session
from harness.reference.engine.mlperf_log import MLPerfLog
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.trainer import RunResult, Trainer

PROCESS_GROUP_TIMEOUT = datetime.timedelta(seconds=300)


class DistributedTrainer(Trainer):
    """The trainer of one rank of a sharded run (see the module docstring)."""

    def __init__(self, config: RunConfig, log: MLPerfLog | None = None, *,
                 progress: Callable[[dict], None] | None = None):
        super().__init__(config, log, progress=progress)
        if config.sharding_plan is None:
            raise HarnessError("a distributed run needs a sharding plan in its run config", ErrorCategory.BAD_INPUT)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def _log_init_start(self) -> None:
        super()._log_init_start()
        plan = self.config.sharding_plan
        types = {st.value: n for st, n in plan.sharding_type_counts().items()} if plan is not None else {}
        self.log.event(keys.HARNESS_SHARDING_PLAN, {"fingerprint": plan.fingerprint if plan is not None else "",
                                                    "sharding_types": types})
        self.log.event(keys.HARNESS_COMM_CODECS, self.codecs.to_names())
        self.log.event(keys.HARNESS_COMM_OVERLAP, bool(self.config.overlap))

    def open_session(self) -> DistributedSession:
        return open_distributed_session(self.config)

    def _init_checks(self) -> None:
        """The self-check of the collectives (inside init, before run_start; see
        :mod:`harness.reference.distributed.self_check`): the run stops in one line if it fails."""
        if not self.config.self_check or self.world_size == 1:
            return
        report = self_check(self.config)
        self.log.event(keys.HARNESS_SELF_CHECK, report)
        if not report["passed"]:
            raise failure(report)

    def _log_init_stop(self, session) -> None:
        if isinstance(session, DistributedSession):
            self.log.event(keys.HARNESS_COMM_PROJECTION, session.comm_projection())
        super()._log_init_stop(session)

    def _log_run_stop(self, result: RunResult, epoch_num: float) -> None:
        super()._log_run_stop(result, epoch_num)
        session = self.session
        if isinstance(session, DistributedSession) and result.reason_is_final():  # a collective
            report = session.comm_report()
            self.log.event(keys.HARNESS_COMM_STATS, {**report["ranks"][0], "total": report["total"],
                                                  "per_step": session.measured_per_step(report)})


@contextlib.contextmanager
def process_group(config: RunConfig) -> Iterator[None]:
    """The default process group of a torchrun-launched rank (gloo on the CPU, NCCL on GPUs), or of
    a one-rank run started without torchrun (a store in a temporary file)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != config.world_size:
        raise HarnessError(
            f"the run config is for {config.world_size} rank(s) but {world} were launched", ErrorCategory.BAD_INPUT
        )
    backend = "nccl" if config.profile.device_type is DeviceType.CUDA and not config.emulated else "gloo"
    with contextlib.ExitStack() as stack:
        if world == 1 and "MASTER_ADDR" not in os.environ:  # one rank, not launched by torchrun: a store of its own
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-pg-"))
            dist.init_process_group(backend=backend, store=dist.FileStore(os.path.join(tmp, "store"), 1), rank=0,
                                    world_size=1, timeout=PROCESS_GROUP_TIMEOUT)
        else:  # under a multi-node launch the rank is the launcher's node rank's (harness.reference.distributed.ranks)
            rank = assign_rank(world)
            placed: dict[str, Any] = {"rank": rank, "world_size": world} if rank is not None else {}
            dist.init_process_group(backend=backend, timeout=PROCESS_GROUP_TIMEOUT, **placed)
        yield
        # only after a clean end: after an error or an interrupt, collectives of other ranks may
        # still be pending and tearing the group down could wait for them; the worker exits instead
        dist.destroy_process_group()
