"""Sharded training on real gloo process groups (torchrun) against single-process training.

The ranks run ``tests/reference/distributed/support/distributed_driver.py`` under torchrun
(``python -m harness.runsets.torchrun``); the single-process baseline runs the same driver without it
(the unsharded trainer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.reference.planner.types import ShardingType
from harness.rules.specs import load_benchmark
from harness.runsets.torchrun import FORKED_RANKS

DRIVER = Path(__file__).parent / "support" / "distributed_driver.py"
ROOT = Path(__file__).resolve().parents[3]
TYPES = [t.value for t in ShardingType]
STEPS, BATCH, SEED = 50, 512, 7
TABLES = 26


def run_driver(tmp: Path, name: str, world: int, plans: dict, *, steps: int = STEPS, nodes: int = 1,
               auc: bool = False, **extra) -> dict:
    """One job (plans trained in turn) in one launch: per plan, its results."""
    return run_jobs(tmp / name, world, {name: dict(plans=plans, steps=steps, nodes=nodes, auc=auc, **extra)})[name]


def run_jobs(tmp: Path, world: int, jobs: dict[str, dict]) -> dict[str, dict]:
    """Several jobs in one launch (one process, or one torchrun of ``world`` ranks): per job, per
    plan, its results. A launch costs seconds of start-up; the jobs share it."""
    tmp.mkdir(parents=True, exist_ok=True)
    specs = []
    for name, job in jobs.items():
        out = tmp / name
        out.mkdir()
        nodes = job.get("nodes", 1)
        specs.append({"out": str(out), "steps": STEPS, "batch": BATCH, "seed": SEED, "auc": False, **job,
                      "nodes": nodes, "per_node": world // nodes})
    (tmp / "jobs.json").write_text(json.dumps(specs))
    # torchrun, its ranks forked from one process that imported torch (harness.runsets.torchrun)
    launcher = [] if world == 1 else ["-m", "harness.runsets.torchrun", "--standalone", f"--nproc_per_node={world}",
                                      *FORKED_RANKS]
    proc = subprocess.run(
        [sys.executable, *launcher, str(DRIVER), str(tmp / "jobs.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {name: {plan: result(tmp / name, plan) for plan in job["plans"]} for name, job in jobs.items()}


def result(folder: Path, plan: str) -> dict:
    """What the driver wrote for ``plan``: its record, its tables after the last step (``weight``)
    and, where the job asked for them, before the first (``start``: ``weight``, ``dense_sha256``)."""
    got = {**json.loads((folder / f"{plan}.json").read_text()), "weight": torch.load(folder / f"{plan}.pt")}
    if (folder / f"{plan}.start.pt").exists():
        got["start"] = {**json.loads((folder / f"{plan}.start.json").read_text()),
                        "weight": torch.load(folder / f"{plan}.start.pt")}
    return got


# Sharded and single-process training differ only in the order of floating-point reductions (DDP
# sums the ranks' gradients, the loss is a mean of per-rank means), and a network with ReLUs and
# Adagrad's per-coordinate normalisation amplifies such differences exponentially, faster the
# larger the learning rate: at the benchmark's 0.015, 4 of 7 seeds tried (before and after the
# tables' initialisation became counter-based) leave 1e-5 within 50 steps, a property of the
# trajectory, not of the sharding. At 0.001 the model still learns (loss 0.68 -> 0.58 in 60
# steps) and every seed tried stays at rounding level (~1e-7), so the bound measures the
# sharding: a lost update of one shard moves the loss by 4e-4 within 50 steps (seen). (A wrong
# scale of the tables' gradients barely does: Adagrad's update hardly depends on it.)
EQUIVALENCE_HP = {"opt_base_learning_rate": 0.001}


FP16 = {"precision": "fp16", "frozen_dense": True, "hyperparameters": EQUIVALENCE_HP}
MIXED_DIMS = [(8, 16, 32)[t % 3] for t in range(26)]  # Neo's largest models mix dims 64 to 256
# the tables' types in turn, three tables each: every sharding type gets a table of every dimension
# (one plan, where a plan per type trained six times the steps for the same pairs of type and dim)
DIMS_PLAN = {"types": {"*": [t for t in TYPES for _ in range(3)]}}


@pytest.fixture(scope="module")
def ones(tmp_path_factory) -> dict:
    """Every single-process run the sharded ones are compared with, in one process."""
    one = {"single": {}}
    runs = run_jobs(tmp_path_factory.mktemp("ones"), 1, {
        "single": dict(plans=one, hyperparameters=EQUIVALENCE_HP, start=True),
        "other_seed": dict(plans=one, steps=0, seed=SEED + 1),
        "fp16": dict(plans=one, steps=20, start=True, **FP16),
        "dims": dict(plans=one, dims=MIXED_DIMS, hyperparameters=EQUIVALENCE_HP, start=True),
        **eval_split_jobs(one),
        "12t": dict(plans=one, **dlrm_12t_job(tmp_path_factory.mktemp("12t"))),
    })
    return {name: results["single"] for name, results in runs.items()}


@pytest.fixture(scope="module")
def single(ones) -> dict:
    return ones["single"]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """``sharded(world, nodes)``: every sharded run of that shape the tests below compare, in one
    torchrun launch (made on first use)."""
    launched: dict[tuple[int, int], dict] = {}

    def get(world: int, nodes: int) -> dict:
        if (world, nodes) not in launched:
            plans = every_type_and_mixed()
            fp16_plans = every_type_and_mixed()
            if world == 2:  # and every shard but the replicas' on the SSD tier, 16-bit rows behind 5% caches
                fp16_plans["ssd"] = {"types": {"*": [t for t in TYPES if t != "data_parallel"]},
                                     "ssd": {"cache_fraction": 0.05}}
            jobs = {  # each plan's weights before its first step too ("start"), and after its last
                "follow": dict(plans=plans, nodes=nodes, hyperparameters=EQUIVALENCE_HP, start=True),
                "fp16": dict(plans=fp16_plans, steps=20, nodes=nodes, **FP16),
                # dim-8 tables split in two for column-wise plans
                "dims": dict(plans={"mixed_dims": DIMS_PLAN}, nodes=nodes, dims=MIXED_DIMS, column_block=4,
                             hyperparameters=EQUIVALENCE_HP, start=True),
            }
            if world == 2:
                jobs["ssd"] = dict(plans=SSD_PLANS, steps=30, auc=True)
                jobs["quantized"] = dict(plans=QUANTIZED_PLANS, steps=20, auc=True, hyperparameters=EQUIVALENCE_HP)
            if (world, nodes) == (4, 2):
                jobs["twrw"] = dict(plans=TWRW_PLANS, nodes=2, hyperparameters=EQUIVALENCE_HP)
                jobs["12t"] = dict(plans={"mixed": {"types": {"*": TYPES}}},
                                   **dlrm_12t_job(tmp_path_factory.mktemp("12t")))
            launched[(world, nodes)] = run_jobs(tmp_path_factory.mktemp(f"w{world}n{nodes}"), world, jobs)
        return launched[(world, nodes)]

    return get


def every_type_and_mixed() -> dict:
    plans = {t: {"types": {"*": t}} for t in TYPES}
    plans["mixed"] = {"types": {"*": TYPES}}
    return plans


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_every_plan_starts_from_the_single_process_weights_bit_for_bit(ones, sharded, world, nodes):
    """No rank builds the whole model: each makes its shards from the seed, and they are the
    single-process model's weights exactly, whatever the plan and world size."""
    start = ones["single"]["start"]
    results = sharded(world, nodes)["follow"]
    for plan, got in results.items():
        assert torch.equal(got["start"]["weight"], start["weight"]), plan
        assert got["start"]["dense_sha256"] == start["dense_sha256"], plan
    assert not torch.equal(start["weight"], ones["other_seed"]["weight"])
    assert ones["other_seed"]["dense_sha256"] != start["dense_sha256"]


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_every_sharding_type_follows_single_process_training(single, sharded, world, nodes):
    results = sharded(world, nodes)["follow"]
    assert len(single["losses"]) == STEPS
    for plan, got in results.items():
        expected_types = TYPES if plan == "mixed" else [plan]
        assert sorted(got["types"]) == sorted(expected_types), plan
        assert len(got["losses"]) == STEPS
        gap = max(abs(a - b) for a, b in zip(single["losses"], got["losses"]))
        assert gap <= 1e-5, f"{plan} on {world} ranks: loss differs by {gap:.3g} from single-process training"
        # the tables too: every shard's rows were updated as the unsharded table's
        # (Adagrad's first steps amplify rounding differences of 1e-7 in the dense
        # gradients to ~1e-4 in the weights; a lost update would be >= 1e-2)
        assert float((single["weight"] - got["weight"]).abs().max()) < 5e-3, plan


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_tables_in_fp16_round_as_one_process_bit_for_bit_under_every_sharding_type(ones, sharded, world, nodes):
    """Tables stored in fp16 (dense layers in fp16, the loss scaled dynamically), every sharding
    type and a mixed plan (at 2 ranks also with the shards on the SSD tier behind caches): after
    20 steps every table value equals one process's, bit for bit.
    The dense part is frozen, so that every rank computes each sample's gradient as one process
    does (its all-reduce adds the ranks' dense gradients in another order, and training it would
    set the curves apart by rounding, as in fp32); what is compared is the tables' path: the
    all-to-alls in fp16, the sums per row in the global batch's order, the fp32 Adagrad, and the
    stochastic rounding of every updated value with the bits of (seed, step, table, row, column)."""
    start, single = ones["fp16"]["start"], ones["fp16"]
    moved = single["weight"] != start["weight"]
    assert int(moved.sum()) > single["weight"].numel() // 4  # the tables did train
    results = sharded(world, nodes)["fp16"]
    assert results["ssd" if world == 2 else "mixed"]["types"]
    for plan, got in results.items():
        differ = int((got["weight"] != single["weight"]).sum())
        assert differ == 0, f"{plan} on {world} ranks: {differ} table values differ from one process's"
        assert got["memory"]["ranks"][0]["held"], plan


@pytest.mark.slow
@pytest.mark.parametrize(("world", "nodes"), [(2, 1), (4, 2)])
def test_tables_of_several_dimensions_follow_single_process_training(ones, sharded, world, nodes):
    """Tables of dims 8, 16 and 32 (one fused weight per dimension, pooled vectors in feature
    order), in one plan that gives every sharding type tables of each dimension: it starts from
    the single-process weights and follows its training within 1e-5 on the loss over 50 steps."""
    types = DIMS_PLAN["types"]["*"]
    pairs = {(types[i % len(types)], dim) for i, dim in enumerate(MIXED_DIMS)}
    assert pairs == {(t, d) for t in TYPES for d in set(MIXED_DIMS)}  # every type with every dim
    start, single = ones["dims"]["start"], ones["dims"]
    results = sharded(world, nodes)["dims"]
    assert start["weight"].numel() == sum(r * d for r, d in zip(load_benchmark("dlrm_synthetic").dataset["table_rows"],
                                                                MIXED_DIMS))
    for plan, got in results.items():
        assert got["types"] == sorted(TYPES), plan
        assert torch.equal(got["start"]["weight"], start["weight"]), plan
        gap = max(abs(a - b) for a, b in zip(single["losses"], got["losses"]))
        assert len(got["losses"]) == STEPS and gap <= 1e-5, f"{plan} on {world} ranks, mixed dims: loss gap {gap:.3g}"
        assert float((single["weight"] - got["weight"]).abs().max()) < 5e-3, plan


MIXED_NOT_DP = [t for t in TYPES if t != "data_parallel"]
# the same mixed plan (every type but data-parallel) in memory and with every shard on the SSD
# tier behind 5% caches (at least one batch's rows each), LRU and LFU, on 2 ranks
SSD_PLANS = {"memory": {"types": {"*": MIXED_NOT_DP}},
             "ssd_lru": {"types": {"*": MIXED_NOT_DP}, "ssd": {"cache_fraction": 0.05, "policy": "lru"}},
             "ssd_lfu": {"types": {"*": MIXED_NOT_DP}, "ssd": {"cache_fraction": 0.05, "policy": "lfu"}}}


@pytest.mark.slow
def test_shards_on_the_ssd_tier_train_bit_for_bit_as_in_memory(sharded):
    results = sharded(2, 1)["ssd"]
    memory = results["memory"]
    for name in ("ssd_lru", "ssd_lfu"):
        got = results[name]
        assert got["losses"] == memory["losses"], name  # bit for bit, every step
        assert got["auc"] == memory["auc"] and torch.equal(got["weight"], memory["weight"]), name
        cache = got["cache"]
        all_rows = sum(load_benchmark("dlrm_synthetic").dataset["table_rows"])
        assert cache["batches"] == 30 and cache["ranks"] == 2 and cache["memory_tables"] == []
        assert cache["rows"] > all_rows  # every row on the SSD, those of column-wise tables once per shard
        # the large shards did not fit their caches: rows went to the SSD and back
        assert 0 < cache["hit_rate"] < 1 and cache["ssd_bytes_read"] > 0 and cache["ssd_bytes_written"] > 0
        # the shards read each next batch's rows while the step before computed (all but the first)
        assert cache["read_ahead_shard_batches"] > 0


# table-row-wise without overlap; with it (the default) and row-wise are the 4-rank follow job's plans
TWRW_PLANS = {"sync": {"types": {"*": "table_row_wise"}, "overlap": False}}


@pytest.mark.slow
def test_table_row_wise_over_two_nodes_crosses_nodes_as_the_planner_projects(single, sharded):
    """2 nodes x 2 ranks, every table table-row-wise: the rows of each table on the ranks of one
    node, its outputs summed inside the node before crossing. Training follows single-process
    training within 1e-5 on the loss over 50 steps, with and without overlap (the same
    arithmetic: the same losses bit for bit), and the bytes every collective sent over the
    inter-node links equal the planner's projection exactly (per step, summed over the ranks)."""
    runs = sharded(4, 2)
    got, sync = runs["follow"]["table_row_wise"], runs["twrw"]["sync"]
    gap = max(abs(a - b) for a, b in zip(single["losses"], got["losses"]))
    assert len(got["losses"]) == STEPS and gap <= 1e-5, f"table-row-wise on 2 nodes: loss gap {gap:.3g}"
    assert got["losses"] == sync["losses"]
    traffic = got["traffic"]
    assert traffic["projection"]["nodes"] == 2 and traffic["projection"]["exact_inter_node"]["input_all_to_all"]
    for kind, measured in traffic["per_step"].items():
        projected = traffic["projection"]["per_step"][kind]["inter_node_bytes"]
        assert measured["inter_node_bytes"] == projected, (kind, measured, projected)
    forward = traffic["per_step"]["forward_all_to_all"]["inter_node_bytes"]
    dim = load_benchmark("dlrm_synthetic").raw["model"]["embedding_dim"]
    # each sample's vector of each table crosses once, from the node of the table: half the samples
    assert forward == BATCH // 2 * TABLES * dim * 4
    # row-wise shards every table over both nodes: each of the 4 row shards sends its partial vectors
    rw = runs["follow"]["row_wise"]["traffic"]["per_step"]["forward_all_to_all"]["inter_node_bytes"]
    assert rw == 4 * BATCH // 2 * TABLES * dim * 4 and forward / rw == 0.25


QUANTIZED_PLANS = {
    "fp32": {"types": {"*": TYPES}},
    "fp16": {"types": {"*": TYPES}, "comm": {"forward": "fp16", "backward": "fp16", "allreduce": "fp16"}},
    "quantized": {"types": {"*": TYPES}, "comm": {"forward": "int8", "backward": "fp8", "allreduce": "bf16"}},
}


@pytest.mark.slow
def test_quantized_communication_is_deterministic_and_counted(sharded, tmp_path):
    """Same seed, world size and codecs: the same losses, tables and AUC, bit for bit, in two launches.
    Bytes sent follow the codecs' sizes exactly."""
    first = sharded(2, 1)["quantized"]
    again = run_driver(tmp_path, "b", 2, {"quantized": QUANTIZED_PLANS["quantized"]}, steps=20, auc=True,
                       hyperparameters=EQUIVALENCE_HP)
    assert first["quantized"]["losses"] == again["quantized"]["losses"]
    assert first["quantized"]["auc"] == again["quantized"]["auc"] is not None
    assert torch.equal(first["quantized"]["weight"], again["quantized"]["weight"])
    # the codecs are really applied: quantized training is close to, but not exactly, fp32 training
    # (at the equivalence learning rate, so that the gap is the codecs', not chaos amplifying them)
    gap = max(abs(a - b) / a for a, b in zip(first["fp32"]["losses"], first["quantized"]["losses"]))
    print(f"largest relative loss gap, int8/fp8/bf16 against fp32: {gap:.2e}")
    assert 0 < gap < 0.01
    fp32, fp16 = first["fp32"]["stats"], first["fp16"]["stats"]
    for kind in ("forward_all_to_all", "backward_all_to_all", "dense_all_reduce", "replica_all_reduce"):
        assert fp32[kind]["bytes"] > 0
        assert fp16[kind]["bytes"] * 2 == fp32[kind]["bytes"], kind
    # int8 rows carry a scale and a bias: (cols + 8) bytes per row of cols values
    q, calls = first["quantized"]["stats"]["forward_all_to_all"], fp32["forward_all_to_all"]["calls"]
    assert q["calls"] == calls
    assert q["bytes"] < fp32["forward_all_to_all"]["bytes"] / 2
    assert fp32["input_all_to_all"]["bytes"] == first["quantized"]["stats"]["input_all_to_all"]["bytes"]


def eval_split_jobs(plans: dict) -> dict:
    return {"kept": dict(plans=plans, steps=5, auc=True, batch=510),
            "streamed": dict(plans=plans, steps=5, auc=True, batch=510, eval_cache_bytes=0)}


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 3])
def test_an_eval_split_too_large_to_keep_is_read_again_and_scores_the_same(ones, tmp_path, world):
    """A large eval split (Criteo 1TB's) is streamed at every evaluation instead of kept in memory;
    the AUC is the same, bit for bit (3 ranks: eval parts of unequal size)."""
    plans = {"mixed": {"types": {"*": TYPES}}} if world > 1 else {"single": {}}
    if world == 1:
        kept, streamed = {"single": ones["kept"]}, {"single": ones["streamed"]}
    else:
        runs = run_jobs(tmp_path, world, eval_split_jobs(plans))
        kept, streamed = runs["kept"], runs["streamed"]
    for name in plans:
        assert kept[name]["auc"] == streamed[name]["auc"] and 0.5 < kept[name]["auc"] < 1, name
        assert kept[name]["losses"] == streamed[name]["losses"]


@pytest.mark.slow
def test_each_ranks_memory_is_its_share_of_the_model(tmp_path):
    """At 4 ranks (real torchrun, gloo), every rank's peak RSS is within 1.2x of what it holds of
    the tables (its shards and their optimizer state: the ledger's bytes) plus the overhead of the
    same run on a tiny model (Python, torch, gloo, batches: independent of the model). The path that
    built the whole tables on every rank first (``full_build``) exceeds that bound on every rank.
    The three jobs share one launch, in this order: a rank's peak RSS only grows, so each job's
    peak is at least the one before's; the tiny model's comes first, and the whole-tables job's
    peak exceeds the bound only if its own does (the job before it stays within it, asserted)."""
    # the generator's teacher cache is data-side; the peak is reached by the first update, 4 steps
    # (not 20) measure it
    job = {"plans": {"rw": {"types": {"*": "row_wise"}}}, "no_teacher_cache": True, "steps": 4}
    runs = run_jobs(tmp_path, 4, {"tiny": {**job, "rows": 100}, "big": {**job, "rows": 200_000},
                                  "old": {**job, "rows": 200_000, "full_build": True}})
    tiny, big, old = (runs[name]["rw"]["memory"]["ranks"] for name in ("tiny", "big", "old"))
    overhead = max(r["peak_rss_bytes"] for r in tiny)
    table_bytes = 26 * 200_000 * 16 * 4 * 2  # weights and Adagrad state: 666 MB, a quarter per rank
    for r in big:
        held = sum(r["peak"].values())
        assert held == table_bytes // 4, r  # row-wise: an even share of every table
        assert r["peak_rss_bytes"] <= 1.2 * held + overhead, (r["rank"], r["peak_rss_bytes"], held, overhead)
    for r in old:
        assert r["peak_rss_bytes"] > 1.2 * sum(r["peak"].values()) + overhead, r


def dlrm_12t_spec(path: Path, rows_scale: float = 1e-6, min_rows: int = 200) -> Path:
    """A synthetic benchmark of the dlrm-12t model's shape (harness/reference/models/dlrm-12t.yaml:
    1,000 tables, dims 64 to 256, their pooling), its rows scaled down to fit here
    (at least ``min_rows``: a table of a row or two starts with weights of +-1, which this model's
    174,080 pooled values per sample turn into logits far from 0)."""
    import yaml

    from harness.reference.planner.models import load_model

    tables = load_model("dlrm-12t")
    raw = yaml.safe_load(yaml.safe_dump(load_benchmark("dlrm_synthetic").raw))
    raw["name"] = "dlrm_12t_scaled"
    raw["dataset"].update(table_rows=[max(min_rows, round(t.rows * rows_scale)) for t in tables],
                          pooling=[int(t.pooling) for t in tables], train_samples=64 * 40, eval_samples=512)
    raw["dataset"].pop("best_auc", None)
    raw["dataset"].pop("formats", None)
    # elementwise Adagrad, not the model's row-wise: with row-wise Adagrad a column shard keeps its own
    # accumulator per row (as FBGEMM's do), so column-wise training differs from one process by design
    raw["model"].update(embedding_dims=[t.dim for t in tables], bottom_mlp=[32, 16], top_mlp=[32, 1], dcn_layers=1,
                        dcn_rank=8, embedding_optimizer="adagrad")
    raw["eval"]["batch_size"] = 256
    path.write_text(yaml.safe_dump(raw))
    return path


def dlrm_12t_job(folder: Path) -> dict:
    """The 12t-shaped model's job: 5 steps of 64 samples, one node (its loss falls from 0.76 to
    0.52 in them; each step of its 1,000 tables costs seconds on 4 ranks of 2 cores)."""
    spec = dlrm_12t_spec(folder / "dlrm_12t_scaled.yaml")
    # Adagrad's first steps move every weight by the learning rate, and the top MLP sees 174,080
    # inputs: the logit moves by about width x rate, so the rate is scaled down by the width
    return {"benchmark": str(spec), "batch": 64, "steps": 5, "nodes": 1,
            "hyperparameters": {"opt_base_learning_rate": 1e-5}}


@pytest.mark.slow
def test_the_12t_models_shape_trains_on_emulated_ranks(ones, sharded):
    """1,000 tables of five dimensions (64 to 256) and pooling up to 30 ids, every sharding type in
    turn: trained 5 steps on 4 emulated ranks as in one process (within 1e-5 on the loss), from the
    same weights, the loss falling."""
    single, got = ones["12t"], sharded(4, 2)["12t"]["mixed"]
    assert sorted(got["types"]) == sorted(TYPES)  # every sharding type, in turn over the 1,000 tables
    losses = got["losses"]
    assert len(losses) == 5 and all(0.3 < loss < 1.5 for loss in losses) and losses[-1] < losses[0], losses
    gap = max(abs(a - b) for a, b in zip(single["losses"], got["losses"]))
    assert gap <= 1e-5, gap
    assert float((single["weight"] - got["weight"]).abs().max()) < 5e-3
    assert sum(sum(r["peak"].values()) for r in got["memory"]["ranks"]) > 0
