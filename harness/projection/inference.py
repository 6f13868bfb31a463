"""The Server QPS bound of an MLPerf Inference benchmark (``dlrm-v3``) on a plan of its tables: the most
requests a second the system could answer, from its peak FLOP rate and the bandwidths of the memories
its rows are read from. A projection and an upper bound, not a measurement.

Per request (:class:`~harness.reference.planner.models.InferenceRequest`: its contextual tokens, its
history's mean length, its candidates), each resource gives a rate it cannot be outrun by:

* **compute**: the STU layers' forward FLOPs over the request's tokens (:func:`stu_flops`), at the
  dense precision's peak of every rank: the dense model is data-parallel, each request runs whole on
  one rank (as the reference's batches go round-robin to its GPUs);
* **memory**, per rank and tier: the bytes of the rows each shard of the plan reads for the request
  (a row shard its share of the ids, a column shard its columns of every id, a data-parallel replica
  the requests of its own rank: ``1 / ranks`` of them) over the rank's share of the tier's bandwidth.
  A shard behind a cache (:meth:`~harness.reference.planner.ShardEstimator.placed_cache`) reads its
  hits from the cache's tier and its misses from its own, and writes each miss into the cache. The
  hit share is the cache's slots over the shard's rows: what any cache gets of uniform lookups.
  ``dlrm-v3``'s are: the generator draws an item uniformly among a category's first ids, by the
  inference timestamps nearly all of them (``gen:145-153``), and a request's history is its own user's;
  so no skew is credited;
* **links**: the plan's all-to-alls of a request (ids, then vectors), on the rank that sends most.

The bound is the least of them: each is the rate at which that one resource would be busy all the
time. They work at once, so a real system answers fewer (no kernel at peak, nothing perfectly
overlapped); the efficiencies of ``constants.yaml`` are fitted on training results, none of them
inference, and are not applied. Not counted: the layers outside the STU stack (the embedding MLPs,
the preprocessor, the positional encoder, the head: a few percent of the FLOPs at dlrm-v3's sizes),
elementwise work (norms, SiLU), the host-to-accelerator link (not in the profiles), and an SSD's IOPS
(not in the profiles: its rows are priced at its bandwidth).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass

from harness.projection.system import System
from harness.reference.planner import Plan, PlannerConfig, ShardEstimator, ShardingType, Tier, Topology
from harness.reference.planner.models import InferenceRequest


class Resource(enum.Enum):
    """What bounds the rate: the ranks' FLOPs, a memory tier's bandwidth, or the links."""

    COMPUTE = "compute"
    HBM = "hbm"
    DDR = "ddr"
    SSD = "ssd"
    LINKS = "links"

    @property
    def label(self) -> str:
        """``compute-bound``, ``memory-bound (HBM)``, ``memory-bound (DDR)``, ``ssd-bound``, ``link-bound``."""
        if self is Resource.COMPUTE:
            return "compute-bound"
        if self is Resource.SSD:
            return "ssd-bound"
        if self is Resource.LINKS:
            return "link-bound"
        return f"memory-bound ({self.value.upper()})"


_TIER_RESOURCE = {Tier.HBM: Resource.HBM, Tier.DDR: Resource.DDR, Tier.SSD: Resource.SSD}


@dataclass(frozen=True)
class HSTUShape:
    """The STU stack's sizes: layers, width ``d``, heads, and each head's q/k and u/v dimensions."""

    layers: int
    width: int
    heads: int
    attention_dim: int
    linear_dim: int


def stu_flops(shape: HSTUShape, *, contextual: float, history: float, candidates: float) -> float:
    """Forward FLOPs (a multiply-add is two) of the STU layers over one request's sequence of
    ``contextual + history + candidates`` tokens. Per layer and token: the uvqk projection (``d x
    heads (2 linear_dim + 2 attention_dim)``) and the output projection (``3 heads linear_dim x d``).
    Per layer, pair of tokens that attend and head: ``q . k`` (``2 attention_dim``) and the weight
    times ``v`` (``2 linear_dim``). Target-aware causal attention: the ``u`` contextual and history
    tokens attend causally among themselves (``u (u + 1) / 2`` pairs), each candidate to all of them
    and to itself (``u + 1``), never to another candidate."""
    s = shape
    tokens = contextual + history + candidates
    uvqk = 2 * s.width * s.heads * (2 * s.linear_dim + 2 * s.attention_dim)
    per_token = uvqk + 2 * 3 * s.heads * s.linear_dim * s.width  # the uvqk and the output projections
    u = contextual + history
    pairs = u * (u + 1) / 2 + candidates * (u + 1)
    return s.layers * (tokens * per_token + pairs * s.heads * 2 * (s.attention_dim + s.linear_dim))


@dataclass(frozen=True)
class ResourceBound:
    """One resource's rate: requests a second it could serve, busy all the time (``rank``: the rank
    whose share of it binds first; None for compute, which every rank shares alike)."""

    resource: Resource
    requests_per_s: float
    rank: int | None = None


@dataclass(frozen=True)
class InferenceBound:
    """The bound of a plan: every resource's rate, the least of which binds, and what it was priced from."""

    request: InferenceRequest
    shape: HSTUShape
    flops_per_request: float
    precision: str
    peak_flops_per_rank: float
    ranks: int
    rows_per_request: tuple[tuple[str, float, int], ...]  # per table: rows a request reads (ids looked up), row bytes
    bytes_per_request: tuple[tuple[Tier, float], ...]  # per tier, over all ranks: rows read (and cache fills)
    cached_hit_share: float | None  # the hit share of the cached shards' reads (None: nothing cached)
    bounds: tuple[ResourceBound, ...]
    batch: int  # requests one rank answers at once
    latency_bound_s: float  # the Server scenario's (at its percentile)

    @property
    def binding(self) -> ResourceBound:
        return min(self.bounds, key=lambda b: b.requests_per_s)

    @property
    def requests_per_s(self) -> float:
        return self.binding.requests_per_s

    def of(self, resource: Resource) -> ResourceBound | None:
        return next((b for b in self.bounds if b.resource is resource), None)

    @property
    def batch_seconds(self) -> float:
        """The least time one rank takes over a batch: its FLOPs at the rank's peak."""
        return self.batch * self.flops_per_request / self.peak_flops_per_rank


def inference_bound(request: InferenceRequest, shape: HSTUShape, system: System, plan: Plan, config: PlannerConfig, *,
                    precision: str, batch: int, latency_bound_s: float) -> InferenceBound:
    """The bound of ``plan`` (planned with ``config``) on ``system`` (see the module)."""
    flops = stu_flops(shape, contextual=request.contextual, history=request.history, candidates=request.candidates)
    peak = system.peak_flops(precision)
    topology = Topology.from_profile(system.profile)
    loads, hits, cached = _memory_loads(plan, ShardEstimator(topology, config))
    bounds = [ResourceBound(Resource.COMPUTE, system.ranks * peak / flops)]
    for tier in (Tier.HBM, Tier.DDR, Tier.SSD):
        per_rank = {r: n for (r, t), n in loads.items() if t is tier and n > 0}
        if per_rank:
            rank = max(per_rank, key=lambda r: (per_rank[r], -r))
            bounds.append(ResourceBound(_TIER_RESOURCE[tier], topology.bandwidth(tier) / per_rank[rank], rank))
    comm = [p.fwd_comm for p in plan.rank_perf]
    if comm and max(comm) > 0:
        rank = comm.index(max(comm))
        bounds.append(ResourceBound(Resource.LINKS, plan.batch_size / comm[rank], rank))
    tiers = tuple((t, sum(n for (_, u), n in loads.items() if u is t)) for t in (Tier.HBM, Tier.DDR, Tier.SSD))
    rows = tuple((t.name, t.pooling, t.dim * config.param_bytes_per_element) for t in plan.tables)
    return InferenceBound(request, shape, flops, precision, peak, system.ranks, rows,
                          tuple((t, n) for t, n in tiers if n > 0), hits / cached if cached else None,
                          tuple(bounds), batch, latency_bound_s)


def _memory_loads(plan: Plan, estimator: ShardEstimator) -> tuple[dict[tuple[int, Tier], float], float, float]:
    """Bytes a request makes each rank move in each tier (rows read; a cache's hits read and misses
    written), and the cached shards' hit bytes and read bytes."""
    param_bytes = estimator.config.param_bytes_per_element
    tables = {t.name: (t, st) for t, st in zip(plan.tables, plan.sharding_types)}
    loads: dict[tuple[int, Tier], float] = defaultdict(float)
    hits = cached = 0.0
    for shard in plan.shards:
        table, sharding = tables[shard.table]
        replica = sharding is ShardingType.DATA_PARALLEL
        ids = table.pooling / plan.world_size if replica else table.pooling * shard.rows / table.rows
        nbytes = ids * shard.cols * param_bytes
        cache = estimator.placed_cache(table, shard, replica=replica)
        if cache is None:
            loads[shard.rank, shard.tier] += nbytes
            continue
        hit = min(1.0, cache.slots / shard.rows)
        loads[shard.rank, cache.tier] += nbytes * hit + nbytes * (1 - hit)  # hits read, misses written
        loads[shard.rank, shard.tier] += nbytes * (1 - hit)
        hits, cached = hits + nbytes * hit, cached + nbytes
    return loads, hits, cached
