"""The HSTU ranker (``dlrmv4_synthetic``) sharded on real gloo process groups (torchrun) against one
process: its sequence tables (item, artist, album: one vector per event, the ranks' event counts
jagged) and its pooled contextual table (uid), under every sharding type and a mixed plan.

The ranks run ``tests/reference/distributed/support/distributed_driver.py`` (``"benchmark": "dlrmv4_synthetic"``), as
the DLRM's equivalence tests in ``test_sharded.py`` do; the same bound, at the same learning rate.
"""

from __future__ import annotations

import pytest
import torch

from tests.reference.distributed.test_sharded import TYPES, run_jobs

STEPS, BATCH = 50, 64
# the benchmark's recipe (Adam, row-wise Adagrad) at the equivalence tests' rate (test_sharded.py)
EQUIVALENCE_HP = {"opt_base_learning_rate": 0.001, "opt_sparse_base_learning_rate": 0.001}
BASE = {"benchmark": "dlrmv4_synthetic", "batch": BATCH}
# Row-wise Adagrad's column shards keep one accumulator per row of their own columns (FBGEMM's
# behaviour, documented in harness.reference.distributed.sharded): such plans follow one process
# with the elementwise optimizer, whose every value is its own
COLUMN_TYPES = ["column_wise", "table_column_wise"]
ROW_WHOLE = [t for t in TYPES if t not in COLUMN_TYPES]


def jobs(plans_rowwise: dict, plans_adagrad: dict, nodes: int = 1) -> dict:
    return {
        # each plan's weights before its first step too ("start"), and after its last
        "follow": dict(plans=plans_rowwise, steps=STEPS, nodes=nodes, hyperparameters=EQUIVALENCE_HP, start=True,
                       **BASE),
        "follow_adagrad": dict(plans=plans_adagrad, steps=STEPS, nodes=nodes, table_optimizer="adagrad",
                               hyperparameters={"opt_base_learning_rate": 0.001}, start=True, **BASE),
    }


@pytest.fixture(scope="module")
def ones(tmp_path_factory) -> dict:
    one = {"single": {}}
    every = jobs({}, {})
    every["follow"]["auc"] = True
    runs = run_jobs(tmp_path_factory.mktemp("hstu_ones"), 1, {
        **{name: {**job, "plans": one} for name, job in every.items()},
        "other_seed": dict(plans=one, steps=0, seed=8, **BASE),
    })
    return {name: results["single"] for name, results in runs.items()}


NOT_DP = [t for t in TYPES if t != "data_parallel"]
# the same plan in memory and with every shard on the SSD tier behind 5% caches, on 2 ranks
SSD_PLANS = {"memory": {"types": {"*": NOT_DP}},
             "ssd_lru": {"types": {"*": NOT_DP}, "ssd": {"cache_fraction": 0.05, "policy": "lru"}}}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    launched: dict[tuple[int, int], dict] = {}

    def get(world: int, nodes: int) -> dict:
        if (world, nodes) not in launched:
            rowwise = {t: {"types": {"*": t}} for t in ROW_WHOLE}
            adagrad = {t: {"types": {"*": t}} for t in COLUMN_TYPES}
            adagrad["mixed"] = {"types": {"*": ["column_wise", "row_wise", "table_row_wise", "data_parallel"]}}
            every = jobs(rowwise, adagrad, nodes)
            every["follow"]["auc"] = world == 2  # the sharded evaluation, once
            launched[(world, nodes)] = run_jobs(tmp_path_factory.mktemp(f"hstu_w{world}n{nodes}"), world, {
                **every,
                **({"ssd": dict(plans=SSD_PLANS, steps=20, auc=True, **BASE)} if world == 2 else {})})
        return launched[(world, nodes)]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_every_plan_of_the_hstu_tables_starts_from_the_single_process_weights_bit_for_bit(ones, sharded, world, nodes):
    start = ones["follow"]["start"]  # the benchmark's own recipe's; the elementwise Adagrad's starts the same
    assert torch.equal(ones["follow_adagrad"]["start"]["weight"], start["weight"])
    runs = sharded(world, nodes)
    results = {**runs["follow"], **runs["follow_adagrad"]}
    assert set(results) == {*TYPES, "mixed"}
    for plan, got in results.items():
        assert torch.equal(got["start"]["weight"], start["weight"]), plan
        assert got["start"]["dense_sha256"] == start["dense_sha256"], plan
    assert not torch.equal(start["weight"], ones["other_seed"]["weight"])


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_sharded_hstu_follows_single_process_training_under_every_sharding_type(ones, sharded, world, nodes):
    """50 steps of every sharding type (a mixed plan too: the contextual tables pooled, the others
    sequence tables) stay within 1e-5 of one process's loss, and the tables within rounding of its
    tables."""
    runs = sharded(world, nodes)
    for job in ("follow", "follow_adagrad"):
        single = ones[job]
        assert len(single["losses"]) == STEPS and single["losses"][-1] < single["losses"][0] - 0.02, job  # it learns
        for plan, got in runs[job].items():
            expected = sorted({"column_wise", "row_wise", "table_row_wise", "data_parallel"} if plan == "mixed"
                              else {plan})
            assert got["types"] == expected, plan
            gap = max(abs(a - b) for a, b in zip(single["losses"], got["losses"], strict=True))
            assert gap <= 1e-5, f"{plan} on {world} ranks: loss differs by {gap:.3g} from one process's"
            # Elementwise Adagrad divides each coordinate's step by its own gradient's size: a coordinate
            # whose gradient sums to rounding noise (two samples of a batch hashed to one row of a cross
            # table, cancelling) steps by up to the learning rate either way. Seen: one row of
            # user_x_artist and one of user_x_album at 3.3e-4 (lr 1e-3), in table-wise as in column-wise
            # plans; every other row within 6e-5. Row-wise Adagrad (one accumulator a row) has none.
            rows = (single["weight"] - got["weight"]).abs().view(-1, 32).amax(dim=1)
            assert int((rows >= 1e-4).sum()) <= (2 if job == "follow_adagrad" else 0), (plan, rows.topk(3))
            assert float(rows.max()) < EQUIVALENCE_HP["opt_sparse_base_learning_rate"], plan
            if got["auc"] is not None:  # every rank's scores of its labelled candidates, gathered
                assert abs(got["auc"] - single["auc"]) < 1e-4 and got["auc"] > 0.5, (plan, got["auc"], single["auc"])


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_every_rank_holds_what_the_plan_gives_it_in_each_tier(sharded, world, nodes):
    for plan, got in sharded(world, nodes)["follow"].items():
        ranks = got["memory"]["ranks"]
        assert [r["rank"] for r in ranks] == list(range(world)), plan
        for r in ranks:
            assert sum(r["held"].values()) > 0 and r["held"] == r["planned"], (plan, r)


@pytest.mark.slow
def test_hstu_shards_on_the_ssd_tier_train_bit_for_bit_as_in_memory(sharded):
    """The sequence and uid tables' shards in files behind 5% caches (each held by the plan in the
    SSD tier, its cache in the rank's memory) train and evaluate exactly as in memory."""
    results = sharded(2, 1)["ssd"]
    memory, got = results["memory"], results["ssd_lru"]
    assert got["losses"] == memory["losses"] and got["auc"] == memory["auc"]
    assert torch.equal(got["weight"], memory["weight"])
    cache = got["cache"]
    assert cache["batches"] == 20 and cache["ranks"] == 2 and cache["memory_tables"] == []
    assert 0 < cache["hit_rate"] < 1 and cache["ssd_bytes_read"] > 0 and cache["ssd_bytes_written"] > 0
    for r in got["memory"]["ranks"]:  # the driver moved the planned shards to the SSD, their caches in HBM
        assert r["held"]["ssd"] == r["planned"]["hbm"] > 0 and 0 < r["held"]["hbm"] < r["held"]["ssd"], r


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_row_split_sequence_tables_send_only_the_vectors_of_the_ids_they_hold(sharded, world, nodes):
    """A row shard of a sequence table sends each event's vector only from the shard that holds its
    id (TorchRec's EmbeddingCollection; what the planner projects), not every shard's partial of
    every event: row-wise sends what table-wise does plus the contextual tables' row shards' partials
    (as projected),
    and on every link class no plan sends more than the planner's projection, which prices
    max_sequence_length events a sample (an upper bound: the streams' samples are shorter), nor
    less than a third of it. The two stages of table-row-wise tables over two nodes pass each
    vector on from its shard; the ids' lengths travel per sample (user), as the projection has them."""
    runs = sharded(world, nodes)
    follow = {**runs["follow_adagrad"], **runs["follow"]}  # the column types' plans train with elementwise Adagrad

    def sent(plan: str, kind: str, link: str = "") -> float:
        return sum(v for k, v in follow[plan]["traffic"]["per_step"][kind].items() if k.endswith(f"{link}_bytes"))

    def projected(plan: str, kind: str) -> float:
        return sum(follow[plan]["traffic"]["projection"]["per_step"][kind].values())

    for kind in ("forward_all_to_all", "backward_all_to_all"):
        # what row-wise sends beyond table-wise is the pooled contextual tables' partials (uid and the
        # 7 crosses: every row shard's partial of every sample), as the planner projects them
        extra = projected("row_wise", kind) - projected("table_wise", kind)
        assert sent("row_wise", kind) - sent("table_wise", kind) <= extra + 0.1 * sent("table_wise", kind), kind
    for plan in ("row_wise", "table_wise", "table_row_wise", "table_column_wise", "column_wise"):
        projection = follow[plan]["traffic"]["projection"]["per_step"]
        for kind in ("input_all_to_all", "forward_all_to_all", "backward_all_to_all"):
            for link in ("intra_node", "inter_node") if nodes > 1 else ("intra_node",):
                projected = projection[kind][f"{link}_bytes"]
                assert 0.3 * projected < sent(plan, kind, link) <= projected, (plan, kind, link, sent(plan, kind, link),
                                                                               projected)
