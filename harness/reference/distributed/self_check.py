"""The init-time self-check of a sharded run: its collectives, proven on the machine in use.

Before ``run_start`` (inside MLPerf's init), every rank trains a small *probe* of the run's
model for a few steps on the real process groups, sharded as the run's plan shards it (each
table of the probe gets its table's sharding type, planned for the same profile, so the same
collectives run: the input, output and backward all-to-alls, both stages of the hierarchy, the
replicas' and DDP's all-reduces), and the same steps in one process on its own (the unsharded
model, the whole global batch). The run goes on only if the global mean loss of every step
agrees within the equivalence bound of ``tests/reference/distributed/test_sharded.py`` (1e-5 at
learning rate 0.001, where sharded and single-process training differ only in the order of
float sums); else it stops with both figures in one line. The log records that the check ran
and its figures (``harness_self_check``).

The probe: the run's embedding dimensions, pooling, MLPs, interaction and embedding optimizer;
at most ``PROBE_ROWS`` rows per table (enough for every rank's row shard); synthetic data from
the default benchmark's generator; ``PROBE_BATCH_PER_RANK`` samples per rank; fp32 codecs (the
codecs' rounding is not an error of the collectives; they are tested for determinism apart);
the tables in memory (the tiers are checked by the run's own ledger). It is the same code on
gloo and on NCCL. An HSTU run's probe is its ranker at probe sizes on generated event streams
(:func:`_hstu_probe`): its sequence tables' jagged all-to-alls and its uid table's, as planned.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

import torch
import torch.distributed as dist

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.profiles import MemoryTier, bare_cpu_profile
from harness.reference.distributed.sessions import open_distributed_session
from harness.reference.engine.run_config import ExtraLog, RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession
from harness.reference.planner import PlannerConfig, plan_tables
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.models import tables_for_benchmark
from harness.rules.specs import load_benchmark, spec_from_dict

STEPS = 3
BOUND = 1e-5
LEARNING_RATE = 0.001
PROBE_ROWS = 512
PROBE_BATCH_PER_RANK = 16
HSTU_PROBE_EVENTS = 16
PROBE_USERS = 512
HSTU_PROBE_HYPERPARAMETERS = {
    "opt_name": "adagrad", "opt_base_learning_rate": LEARNING_RATE, "opt_adagrad_learning_rate_decay": 0,
    "opt_weight_decay": 0, "opt_adagrad_initial_accumulator_value": 0, "opt_adagrad_epsilon": 1.0e-8,
    "opt_learning_rate_warmup_steps": 0, "opt_learning_rate_decay_start_step": 0,
    "opt_learning_rate_decay_steps": 0, "gradient_accumulation_steps": 1}


class _Losses(SessionHooks):
    """The global mean loss of every step (a collective on every rank of a sharded session)."""

    def __init__(self, world: int):
        self.world, self.losses = world, list[float]()

    def after_step(self, session: Any, loss: torch.Tensor) -> bool:
        total = loss.detach().double().reshape(1).cpu() / self.world
        if self.world > 1:
            dist.all_reduce(total)
        self.losses.append(float(total[0]))
        return False


def probe_configs(config: RunConfig) -> tuple[RunConfig, RunConfig]:
    """The sharded probe's run config and the single-process one of the same steps."""
    world = config.world_size
    plan = config.sharding_plan
    raw = copy.deepcopy(config.benchmark.raw)
    batch = PROBE_BATCH_PER_RANK * world
    raw["name"] = f"{raw.get('name', 'run')}_self_check"
    hstu = raw["model"].get("family") == "hstu"
    if hstu:
        raw = _hstu_probe(raw, world, batch)
    else:
        rows = [min(int(r), max(PROBE_ROWS, world)) for r in raw["dataset"]["table_rows"]]
        generator = copy.deepcopy(load_benchmark("dlrm_synthetic").raw["dataset"])
        generator.pop("formats", None)
        generator.pop("best_auc", None)
        raw["dataset"] = {**generator, "table_rows": rows, "pooling": list(raw["dataset"]["pooling"]),
                          "train_samples": batch * (STEPS + 1), "eval_samples": batch}
    spec = spec_from_dict(raw, what="the self-check's probe")
    types = list(plan.sharding_types) if plan is not None else []
    tables = tables_for_benchmark(spec)
    if plan is None or len(types) != len(tables):
        raise HarnessError("the self-check needs the run's sharding plan", ErrorCategory.BAD_INPUT)
    run_profile = config.profile
    # the probe checks the collectives, not the tiers: its tables in HBM, whatever the capacities
    unbounded = MemoryTier(1 << 50, run_profile.hbm.bandwidth_bytes_per_s or 1)
    profile = dataclasses.replace(run_profile, hbm=unbounded)
    planned = plan.config
    knobs = {k: planned[k] for k in ("column_block", "column_min_cols") if k in planned}  # the run's splits
    probe_plan = plan_tables(tables, profile, PlannerConfig(
        batch_size=batch, sharding_types=tuple((t.name, (st,)) for t, st in zip(tables, types)),
        **knobs))
    hp = {**(spec.reference_hyperparameters if hstu else config.hyperparameters), "global_batch_size": batch,
          "opt_base_learning_rate": LEARNING_RATE}
    for key in [k for k in hp if "warmup" in k or "decay_start" in k or "decay_steps" in k]:
        hp.pop(key)  # the probe trains at one rate
    sharded = dataclasses.replace(config, benchmark=spec, hyperparameters=hp, sharding_plan=probe_plan,
                                  comm=CommConfig(), embedding_tier=None, data=None, log_path=os.devnull,
                                  progress=False, extra_log=ExtraLog(), precision="fp32")
    # the probe proves the collectives and the plan's arithmetic in fp32, where its bound holds: in
    # bf16 the dense all-reduce's other order of additions sets the curves apart beyond it (measured:
    # docs/performance.md, "Figures behind the code's choices") within
    # its steps (the 16-bit tables' own path is proven bit for bit by tests/reference/distributed/test_sharded.py)
    single = dataclasses.replace(sharded, world_size=1, sharding_plan=None, emulated=True,
                                 profile=bare_cpu_profile("self-check"))
    return sharded, single


def _hstu_probe(raw: dict[str, Any], world: int, batch: int) -> dict[str, Any]:
    """The probe of an HSTU run: its architecture (dimension, layers, heads), sequences of at most
    ``HSTU_PROBE_EVENTS`` events, tables of at most ``PROBE_ROWS`` rows (enough for every rank's
    row shard), users' streams from ``dlrmv4_synthetic``'s generator; trained with elementwise
    Adagrad (tables and dense part), whose every value is its own: row-wise Adagrad's column shards
    keep their own accumulator per row (FBGEMM's behaviour, not a fault of the collectives), which
    would set a column-sharded probe apart from one process by more than the bound."""
    generator = copy.deepcopy(load_benchmark("dlrmv4_synthetic").raw["dataset"])
    dataset = raw["dataset"]
    events = min(int(raw["model"]["max_sequence_length"]), HSTU_PROBE_EVENTS)
    rows = {k: max(min(int(dataset[k]), PROBE_ROWS), world) for k in ("item_rows", "artist_rows", "album_rows")}
    rows["artist_rows"] = min(rows["artist_rows"], rows["album_rows"])
    model = {**raw["model"], "max_sequence_length": events, "embedding_optimizer": "adagrad"}
    return {**raw, "model": model,
            "dataset": {**generator, **rows, "users": max(PROBE_USERS, batch), "max_sequence_length": events,
                        "train_samples": batch * (STEPS + 1), "eval_samples": batch},
            "reference_hyperparameters": {**HSTU_PROBE_HYPERPARAMETERS, "global_batch_size": batch}}


def self_check(config: RunConfig) -> dict[str, Any]:
    """Run the probe sharded and in one process (every rank, inside the run's process group);
    its figures (``passed``: whether they agree; :func:`failure` is the error when not)."""
    sharded_config, single_config = probe_configs(config)
    world = dist.get_world_size()
    sharded = open_distributed_session(sharded_config)
    got = _Losses(world)
    try:
        sharded.train(got, eval_at=[], until=STEPS, stop_at_target=False)
    finally:
        sharded.close()
    one = TrainingSession(single_config)
    expected = _Losses(1)
    one.train(expected, eval_at=[], until=STEPS, stop_at_target=False)
    gaps = [abs(a - b) for a, b in zip(got.losses, expected.losses)]
    gap = max(gaps) if gaps else float("inf")
    plan = sharded_config.sharding_plan
    types = sorted({st.value for st in plan.sharding_types}) if plan is not None else []
    report = {"steps": STEPS, "world_size": world, "sharding_types": types, "max_loss_gap": gap, "bound": BOUND,
              "sharded_losses": got.losses, "one_process_losses": expected.losses, "passed": gap <= BOUND}
    return report


def failure(report: dict[str, Any]) -> HarnessError:
    """The one-line error of a failed self-check, with both figures."""
    gaps = [abs(a - b) for a, b in zip(report["sharded_losses"], report["one_process_losses"])]
    step = gaps.index(max(gaps)) if gaps else 0
    sharded = report["sharded_losses"][step] if gaps else float("nan")
    one = report["one_process_losses"][step] if gaps else float("nan")
    return HarnessError(
        f"self-check failed: the sharded probe's loss differs from one process's by {report['max_loss_gap']:.3g} "
        f"at step {step} (bound {report['bound']:g}): sharded {sharded:.8f}, one process {one:.8f}; this machine's "
        "collectives or the sharded executor do not compute what one process does", ErrorCategory.RUN_FAILED)
