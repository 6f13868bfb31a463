"""The input pipeline of sharded training, on a real one-rank gloo process group in this process."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.distributed as dist

from harness.reference.data.synthetic import Batch
from harness.reference.distributed.comm import Comm, CommStats
from harness.reference.distributed.comm_codecs import CommConfig
from harness.reference.distributed.input_dist import InputDist
from harness.reference.distributed.session import pipelined
from harness.reference.distributed.sharded import ShardedEmbeddingCollection
from harness.reference.distributed.shardings import shardings_from_plan
from harness.reference.models.embeddings import FusedEmbeddingCollection, SparseOptimizerConfig
from harness.reference.planner import Plan

ROWS, DIM, POOLING = (7, 30, 5), 4, (1, 3, 2)


@pytest.fixture
def group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def collection(types: tuple[str, ...]) -> tuple[ShardedEmbeddingCollection, FusedEmbeddingCollection]:
    torch.manual_seed(0)
    full = FusedEmbeddingCollection(ROWS, DIM, POOLING, optimizer=SparseOptimizerConfig())
    tables = []
    for rows, st in zip(ROWS, types):
        if st == "column_wise":
            shards = [{"rank": 0, "row_offset": 0, "rows": rows, "col_offset": c, "cols": 2} for c in (0, 2)]
        else:
            shards = [{"rank": 0, "row_offset": 0, "rows": rows, "col_offset": 0, "cols": DIM}]
        tables.append({"name": f"t{len(tables)}", "rows": rows, "dim": DIM, "sharding_type": st, "shards": shards})
    shardings = shardings_from_plan(Plan.from_dict({"world_size": 1, "tables": tables}), ROWS, DIM, 1)
    stats = CommStats()
    coll = ShardedEmbeddingCollection(full, shardings, Comm(None, stats), Comm(None, stats), CommConfig())
    return coll, full


def batches(n: int) -> list[Batch]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        sparse = torch.cat([torch.randint(0, r, (4, p), generator=g) for r, p in zip(ROWS, POOLING)], dim=1)
        out.append(Batch(torch.rand(4, 13, generator=g), sparse, torch.zeros(4), POOLING))
    return out


class Recorder:
    """Records when the pipeline distributes a batch and when it starts sending its ids."""

    def __init__(self, coll: ShardedEmbeddingCollection, events: list[str]):
        self.coll, self.events = coll, events

    def distribute(self, sparse: torch.Tensor) -> InputDist:
        index = sum(e.startswith("lengths") for e in self.events)
        self.events.append(f"lengths {index}")
        ids = self.coll.distribute(sparse)
        start = ids.start_ids

        def start_ids() -> None:
            if ids._ids is None:
                self.events.append(f"ids {index}")
            start()

        ids.start_ids = start_ids  # type: ignore[method-assign]
        return ids


def test_the_next_batches_ids_are_in_flight_while_a_step_runs(group):
    coll, _ = collection(("table_wise", "table_wise", "table_wise"))
    events: list[str] = []
    for n, (batch, ids) in enumerate(pipelined(Recorder(coll, events), iter(batches(5)))):
        events.append(f"step {n}")
        coll(ids)
    # when step n runs, the ids of n + 1 have been sent and the lengths of n + 2
    for n in range(3):
        at = events.index(f"step {n}")
        assert f"ids {n + 1}" in events[:at] and f"lengths {n + 2}" in events[:at], events
    assert events.count("step 4") == 1 and events.index("ids 4") < events.index("step 4")


def test_stopping_early_waits_for_what_is_in_flight(group):
    coll, _ = collection(("table_wise", "table_wise", "table_wise"))
    items = pipelined(coll, iter(batches(6)))
    next(iter(items))
    items.close()  # must not hang nor leave work behind: the group is destroyed next
    # lengths of batches 0, 1, 2 and ids of 0, 1 before the first step; closing sends the ids
    # of 2 (every rank does the same) and waits for everything; nothing of batch 3 is sent
    assert coll.input_comm.stats.calls["input_all_to_all"] == 6


@pytest.mark.parametrize("types", [("table_wise",) * 3, ("column_wise",) * 3, ("data_parallel", "table_wise", "column_wise")])
def test_one_rank_sharded_lookup_and_update_equal_the_unsharded_tables(group, types):
    coll, full = collection(types)
    coll.train()
    full.train()
    for batch in batches(3):
        ours = coll(coll.distribute(batch.sparse))
        theirs = full(batch.sparse)
        assert torch.equal(ours, theirs)
        (ours * torch.arange(ours.numel()).view_as(ours)).sum().backward()
        (theirs * torch.arange(theirs.numel()).view_as(theirs)).sum().backward()
    assert torch.allclose(coll.full_weight(), full.weight.detach(), atol=1e-6)


def test_a_trained_steps_lookup_is_freed_without_the_cycle_collector(group):
    """A training step's pending lookup (its ids, buffers, and through the collection its process
    groups) dies with the step. The autograd function's context held it, and it held the
    function's output: a cycle through the autograd graph that Python's collector cannot see,
    which kept every step's lookup for the life of the process (seen: a rank's threads and
    descriptors growing with every session, 40% of a launch's CPU in the kernel)."""
    coll, _ = collection(("table_wise", "column_wise", "table_wise"))
    freed = []
    gc.disable()  # not even the cycle collector: the references must simply end
    try:
        for batch, ids in pipelined(coll, iter(batches(3))):
            pending = coll.start(ids)
            out = pending.wait()
            assert out.requires_grad  # the training path: through the autograd function
            (out.float() ** 2).sum().backward()
            coll.finish_backward()
            freed.append(weakref.ref(pending))
            del pending, out
        assert [ref() is None for ref in freed] == [True] * 3
    finally:
        gc.enable()
