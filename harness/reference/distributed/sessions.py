"""The session of one rank of a sharded run, of the run's model family: a DLRM's
(:class:`~harness.reference.distributed.session.DistributedSession`) or the HSTU ranker's
(:class:`~harness.reference.distributed.hstu.DistributedHSTUSession`)."""

from __future__ import annotations

from harness.reference.data.datasets import Samples
from harness.reference.distributed.hstu import DistributedHSTUSession
from harness.reference.distributed.session import DistributedSession
from harness.reference.engine.run_config import RunConfig
from harness.rules.specs import ModelFamily


def open_distributed_session(config: RunConfig, *, dataset: Samples | None = None,
                             batched: bool = True) -> DistributedSession:
    """The session of this rank (``batched``: the sharded collections' batched paths; False: per
    shard, the same values)."""
    if config.benchmark.family is ModelFamily.HSTU:
        return DistributedHSTUSession(config, dataset=dataset, batched=batched)
    return DistributedSession(config, dataset=dataset, batched=batched)
