"""A rank's place in a multi-node launch: the launcher (:mod:`harness.runsets.launch`) gives each of its
workers its node's rank in :data:`NODE_RANK_ENV`; the worker makes its global rank from it.
"""

from __future__ import annotations

import os

from harness.errors import HarnessError

NODE_RANK_ENV = "HARNESS_NODE_RANK"  # the launcher's --node-rank, read by every worker of its node


def assign_rank(world_size: int) -> int | None:
    """This worker's global rank under a multi-node launch (``node rank x ranks per node +
    LOCAL_RANK``, also written to ``RANK`` and ``GROUP_RANK``), or None when torchrun's is used."""
    node = os.environ.get(NODE_RANK_ENV)
    if node is None:
        return None
    local, per_node = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    rank = int(node) * per_node + local
    if not 0 <= rank < world_size:
        raise HarnessError(f"node rank {node} x {per_node} ranks per node is outside a world of {world_size}")
    os.environ["RANK"], os.environ["GROUP_RANK"] = str(rank), node
    return rank
