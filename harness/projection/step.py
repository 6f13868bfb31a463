"""One training step (and one evaluation step) of a DLRM on a system, phase by phase.

Each phase is priced on the slowest rank from counted work and the device's peaks, at the
efficiencies of its device class (``constants.yaml``):

* **dense GEMMs** (forward; backward, two products per forward one): each GEMM of
  :class:`~harness.projection.workload.Workload` at ``M`` = the rank's samples is a roofline of its
  own: ``max(FLOPs / (peak x gemm_efficiency), bytes / (bandwidth x memory_efficiency))``, the bytes
  its operands and result (a thin layer, a 13-wide input or a 1-wide logit, is bound by memory);
* **activations**: the elementwise work's bytes (:data:`~harness.projection.workload.TRAINING_ACTIVATION_PASSES`
  passes of every activation) over the memory bandwidth;
* **embedding lookup** and **update**, per tier: the sharding planner's seconds for the slowest rank
  (rows read from their tier at its bandwidth, a cached tier's at the blend with its cache's, backward
  a multiple of it), over ``gather_efficiency``: rows at random addresses reach a smaller share of a
  memory's bandwidth than streams do;
* **id all-to-all** (lengths and ids) and **vector all-to-all** (pooled vectors, and their gradients
  back): the plan's traffic over the links, over ``link_efficiency``;
* **dense all-reduce**: the dense gradients at the communication precision, summed as NCCL does
  over several nodes: reduced inside each node over its links, then each rank's share across the
  nodes over its own NIC (one rail per rank), then gathered back;
* **operations**: the kernels or operator calls of a step, each ``seconds_per_op``.

What overlaps: the id all-to-all of the next batch runs under this step's dense work (as TorchRec's
and HugeCTR's pipelines prefetch it), and the all-reduce under the backward GEMMs (DDP's buckets);
each adds only what sticks out. Everything else is serial. A synthetic benchmark's data generated
on the rank's own cores (``harness run`` on a CPU: one prefetch thread beside the step) is the
**input** phase: the generator's seconds shared with the step's cores, and never less than the
generator alone: ``max(generation / cores, generation - step)``. An evaluation step is the forward pass
alone: the forward GEMMs, two passes of the activations, the lookup, both all-to-alls' forward halves
and a third of the operations.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.projection.constants import Efficiencies
from harness.projection.system import System, bytes_per_element
from harness.projection.workload import (
    EVAL_ACTIVATION_PASSES,
    EVAL_OPS_FRACTION,
    TRAINING_ACTIVATION_PASSES,
    Workload,
)
from harness.reference.planner import Plan, ShardingType, Tier, Topology
from harness.reference.planner.traffic import ID_BYTES
from harness.reference.planner.types import TIERS


@dataclass(frozen=True)
class Phase:
    """One phase: its seconds alone, and what it adds to the step once overlap is counted."""

    name: str
    seconds: float
    exposed: float

    def to_dict(self) -> dict[str, float | str]:
        return {"name": self.name, "seconds": self.seconds, "exposed_seconds": self.exposed}


@dataclass(frozen=True)
class StepProjection:
    """A projected step of ``batch_size`` samples over ``ranks`` ranks."""

    batch_size: int
    ranks: int
    precision: str
    phases: tuple[Phase, ...]

    @property
    def seconds(self) -> float:
        return sum(p.exposed for p in self.phases)

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.seconds if self.seconds > 0 else float("inf")

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)

    def to_dict(self) -> dict[str, object]:
        return {"batch_size": self.batch_size, "ranks": self.ranks, "precision": self.precision,
                "seconds": self.seconds, "samples_per_s": self.samples_per_s,
                "phases": [p.to_dict() for p in self.phases]}


@dataclass(frozen=True)
class EmbeddingCost:
    """The slowest rank's embedding work at the plan's batch, in seconds at peak bandwidths: its
    lookups and updates per tier its shards live on (a shard behind a cache at its blend of the two
    tiers' bandwidths, as the planner prices it), and its all-to-alls."""

    lookup: tuple[tuple[Tier, float], ...]
    update: tuple[tuple[Tier, float], ...]
    ids: float  # the input all-to-all's lengths and ids
    vectors: float  # the output all-to-all, forward and backward

    @property
    def gathers(self) -> float:
        return sum(v for _, v in self.lookup) + sum(v for _, v in self.update)


def embedding_cost(plan: Plan, system: System, eff: Efficiencies) -> EmbeddingCost:
    """The embedding cost of the rank that is slowest once the efficiencies are applied."""
    topology = Topology.from_profile(system.profile)
    ids = [0.0] * plan.world_size
    lookup = [dict.fromkeys(TIERS, 0.0) for _ in range(plan.world_size)]
    update = [dict.fromkeys(TIERS, 0.0) for _ in range(plan.world_size)]
    tables = {t.name: t for t in plan.tables}
    types = {t.name: st for t, st in zip(plan.tables, plan.sharding_types)}
    for shard in plan.shards:
        lookup[shard.rank][shard.tier] += shard.perf.fwd_compute
        update[shard.rank][shard.tier] += shard.perf.bwd_compute
        if types[shard.table] is ShardingType.DATA_PARALLEL:
            continue
        table = tables[shard.table]
        looked_up = plan.batch_size * table.pooling * shard.rows / table.rows
        ids[shard.rank] += topology.all_to_all_s((plan.batch_size + looked_up) * ID_BYTES)
    costs = []
    for rank, perf in enumerate(plan.rank_perf):
        comm = perf.fwd_comm + perf.bwd_comm
        cost = EmbeddingCost(tuple((t, v) for t, v in lookup[rank].items() if v > 0),
                             tuple((t, v) for t, v in update[rank].items() if v > 0),
                             min(ids[rank], comm), max(comm - ids[rank], 0.0))
        costs.append((cost.gathers / eff.gather_efficiency + (cost.ids + cost.vectors) / eff.link_efficiency, cost))
    return max(costs, key=lambda c: c[0])[1] if costs else EmbeddingCost((), (), 0.0, 0.0)


def _per_tier(name: str, seconds: tuple[tuple[Tier, float], ...], scale: float) -> tuple[Phase, ...]:
    """A phase per tier (``embedding lookup, HBM``), each at its seconds times ``scale``."""
    return tuple(Phase(f"{name}, {tier.value.upper()}", v * scale, v * scale) for tier, v in seconds)


def gemm_seconds(workload: Workload, rows: float, system: System, precision: str, eff: Efficiencies) -> float:
    """The forward GEMMs of ``rows`` samples on one rank, each at its own roofline."""
    flops_rate = system.peak_flops(precision) * eff.gemm_efficiency
    bw = system.memory_bw_bytes_per_s * eff.memory_efficiency
    b = bytes_per_element(precision)
    total = 0.0
    for g in workload.gemms:
        m = rows * g.m_per_sample
        flops = 2.0 * m * g.k * g.n
        moved = (m * g.k + g.k * g.n + m * g.n) * b
        total += max(flops / flops_rate, moved / bw)
    return total


def training_step(workload: Workload, system: System, plan: Plan, precision: str, eff: Efficiencies, *,
                  input_seconds_per_sample: float = 0.0) -> StepProjection:
    """The projected training step of the plan's global batch (see the module); with
    ``input_seconds_per_sample``, the input phase of data generated on the rank's cores."""
    ranks = system.ranks
    rows = plan.batch_size / ranks
    bw = system.memory_bw_bytes_per_s * eff.memory_efficiency
    forward = gemm_seconds(workload, rows, system, precision, eff)
    backward = 2 * forward
    activations = rows * workload.activation_elements * bytes_per_element(precision) * TRAINING_ACTIVATION_PASSES / bw
    emb = embedding_cost(plan, system, eff)
    ids = emb.ids / eff.link_efficiency
    all_reduce = all_reduce_seconds(workload.dense_parameters * bytes_per_element(comm_precision(precision)),
                                    system) / eff.link_efficiency
    dense = forward + backward + activations
    phases = (
        Phase("dense forward GEMMs", forward, forward),
        Phase("dense backward GEMMs", backward, backward),
        Phase("activations (elementwise)", activations, activations),
        *_per_tier("embedding lookup", emb.lookup, 1 / eff.gather_efficiency),
        *_per_tier("embedding update", emb.update, 1 / eff.gather_efficiency),
        Phase("id all-to-all (under the dense work)", ids, max(0.0, ids - dense)),
        Phase("vector all-to-all (forward and backward)", emb.vectors / eff.link_efficiency,
              emb.vectors / eff.link_efficiency),
        Phase("dense all-reduce (under the backward GEMMs)", all_reduce, max(0.0, all_reduce - backward)),
        Phase("operations (launch and dispatch)", workload.ops_per_step * eff.seconds_per_op,
              workload.ops_per_step * eff.seconds_per_op),
    )
    phases = _with_input(phases, rows * input_seconds_per_sample, system)
    return StepProjection(plan.batch_size, ranks, precision, phases)


def eval_step(workload: Workload, system: System, plan: Plan, precision: str, eff: Efficiencies,
              batch_size: int, *, input_seconds_per_sample: float = 0.0) -> StepProjection:
    """The projected forward-only step of ``batch_size`` evaluation samples (the plan's embedding
    costs scaled from its training batch; the input phase as a training step's)."""
    rows = batch_size / system.ranks
    scale = batch_size / plan.batch_size
    bw = system.memory_bw_bytes_per_s * eff.memory_efficiency
    forward = gemm_seconds(workload, rows, system, precision, eff)
    activations = rows * workload.activation_elements * bytes_per_element(precision) * EVAL_ACTIVATION_PASSES / bw
    emb = embedding_cost(plan, system, eff)
    vectors_forward = emb.vectors / 2 * scale / eff.link_efficiency
    ids = emb.ids * scale / eff.link_efficiency
    ops = workload.ops_per_step * EVAL_OPS_FRACTION * eff.seconds_per_op
    phases = (
        Phase("dense forward GEMMs", forward, forward),
        Phase("activations (elementwise)", activations, activations),
        *_per_tier("embedding lookup", emb.lookup, scale / eff.gather_efficiency),
        Phase("id all-to-all", ids, ids),
        Phase("vector all-to-all (forward)", vectors_forward, vectors_forward),
        Phase("operations (launch and dispatch)", ops, ops),
    )
    phases = _with_input(phases, rows * input_seconds_per_sample, system)
    return StepProjection(batch_size, system.ranks, precision, phases)


def _with_input(phases: tuple[Phase, ...], generation: float, system: System) -> tuple[Phase, ...]:
    """The phases and, when data is generated on the rank's cores, the input phase (see the module)."""
    if generation <= 0:
        return phases
    step = sum(p.exposed for p in phases)
    cores = max(system.device.cores * system.sockets_per_rank, 1)
    return (*phases, Phase("input (synthetic data generated alongside)", generation,
                           max(generation / cores, generation - step)))


def comm_precision(precision: str) -> str:
    """What the collectives send: the compute precision's width (fp32, or two-byte values)."""
    return "fp32" if bytes_per_element(precision) == 4 else precision


def all_reduce_seconds(nbytes: float, system: System) -> float:
    """An all-reduce of ``nbytes`` over every rank at peak link bandwidths: reduce-scatter and
    all-gather inside each node (each rank sends ``2 (a-1)/a`` of the bytes over its node links),
    and across nodes each rank's ``1/a`` share over its own NIC (``2 (n-1)/n`` of it), the two
    stages one after the other (``a`` ranks per node, ``n`` nodes)."""
    topology = Topology.from_profile(system.profile)
    a, n = topology.ranks_per_node, topology.nodes
    inside = 2 * (a - 1) / a * nbytes / topology.intra_bw_bytes_per_s if a > 1 else 0.0
    across = 2 * (n - 1) / n * nbytes / a / topology.scale_out_bw_bytes_per_s if n > 1 else 0.0
    return inside + across
