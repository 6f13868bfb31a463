"""Where a run set's embedding tables live: the planner's tier plan (one rank: each table on HBM,
DDR or SSD) or sharding plan (several ranks), made from the request's ``--embedding-tier``
settings, and what the trainer is told of the tables on the SSD tier."""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessError
from harness.hw_profiles import Profile
from harness.reference.engine.run_config import EmbeddingTier
from harness.reference.planner import (
    Plan,
    PlannerConfig,
    ShardingType,
    Tier,
    plan_tables,
)
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.models import tables_for_benchmark
from harness.rules.precision import Precision
from harness.rules.specs import BenchmarkSpec
from harness.runsets.request import EmbeddingTierChoice, RunSetRequest


def _tier_constraints(request: RunSetRequest, spec: BenchmarkSpec, world_size: int) -> dict[str, Any] | None:
    """The planner's settings for ``--embedding-tier ssd`` or ``auto``, and for ``memory`` on a
    sharded profile (None for ``memory`` on one rank): tables set to the SSD (``--ssd-tables``;
    with ``ssd`` and none given, all) may only go there; with ``ssd`` and ``memory`` the others
    may only stay in memory (HBM or DDR); with ``auto`` the planner places them, the hottest per
    stored byte in the fastest tier first. The caches of cached tiers' shards (the SSD's, and on
    a sharded profile DDR's under HBM: ``--cache-fraction`` of their rows, never fewer than one
    batch looks up) are counted in the fastest tier of their rank above them. One rank trains
    whole tables (table-wise: each table on one tier); a sharded run keeps the SSD tables off
    data-parallel (replicas are not cached)."""
    if request.embedding_tier is EmbeddingTierChoice.MEMORY:
        return _memory_constraints(request, spec, world_size)
    if not 0 < request.cache_fraction <= 1:
        raise HarnessError(f"--cache-fraction must be in (0, 1], not {request.cache_fraction}")
    tables = tables_for_benchmark(spec)
    on_ssd = _ssd_tables(request, len(tables))
    pinned_all = request.embedding_tier is EmbeddingTierChoice.SSD  # AUTO: the tables not set are the planner's
    tiers = tuple(
        (t.name, (Tier.SSD,) if i in on_ssd else (Tier.HBM, Tier.DDR)) for i, t in enumerate(tables)
        if i in on_ssd or pinned_all
    )
    if world_size == 1:
        types: tuple[tuple[str, tuple[ShardingType, ...]], ...] = tuple(
            (t.name, (ShardingType.TABLE_WISE,)) for t in tables)
    else:
        cached = tuple(st for st in ShardingType if st is not ShardingType.DATA_PARALLEL)
        types = tuple((t.name, cached) for i, t in enumerate(tables) if i in on_ssd)
    return {"tiers": tiers, "sharding_types": types, "ssd_cache_fraction": request.cache_fraction,
            "cache_policy": request.cache_policy,
            **({"ddr_cache_fraction": request.cache_fraction} if world_size > 1 else {})}


def _memory_constraints(request: RunSetRequest, spec: BenchmarkSpec, world_size: int) -> dict[str, Any] | None:
    """``--embedding-tier memory``: nothing for one rank; on a sharded profile HBM, and DDR under
    it behind caches in HBM (the executor runs every placement)."""
    if request.ssd_tables is not None:
        raise HarnessError("--ssd-tables needs --embedding-tier ssd or auto")
    if world_size == 1:
        return None
    return {"tiers": tuple((t.name, (Tier.HBM, Tier.DDR)) for t in tables_for_benchmark(spec)),
            "ddr_cache_fraction": request.cache_fraction, "cache_policy": request.cache_policy}


def _ssd_tables(request: RunSetRequest, table_count: int) -> set[int]:
    """The indices of the tables set to the SSD tier: ``--ssd-tables``, else all with ``ssd``."""
    chosen = request.ssd_tables
    if chosen is not None and (not chosen or any(not 0 <= t < table_count for t in chosen)):
        raise HarnessError(f"--ssd-tables takes table indices 0..{table_count - 1}, not {list(chosen)}")
    return set(range(table_count) if chosen is None and request.embedding_tier is EmbeddingTierChoice.SSD
               else chosen or ())


def tier_plan(request: RunSetRequest, spec: BenchmarkSpec, profile: Profile,
              hyperparameters: dict[str, Any], precision: Precision) -> Plan | None:
    """A one-rank run's placement of each table on HBM, DDR or SSD within the profile's
    capacities (see :func:`_tier_constraints`), its weights counted in ``precision``'s bytes;
    None for ``--embedding-tier memory``."""
    constraints = _tier_constraints(request, spec, 1)
    if constraints is None:
        return None
    config = PlannerConfig(batch_size=int(hyperparameters["global_batch_size"]),
                           param_bytes_per_element=precision.bytes_per_element, **constraints)
    return plan_tables(tables_for_benchmark(spec), profile, config)


def sharding_plan(spec: BenchmarkSpec, profile: Profile, hyperparameters: dict[str, Any],
                  comm: CommConfig, request: RunSetRequest, precision: Precision) -> Plan:
    """The plan the run's ranks execute: the planner's, for the (emulated) profile and the global
    batch (with ``--embedding-tier ssd|auto``, its tier settings and SSD caches counted), the
    tables' weights in ``precision``'s bytes."""
    gbs = int(hyperparameters["global_batch_size"])
    if gbs % profile.world_size:
        raise HarnessError(
            f"global_batch_size {gbs} is not divisible by the {profile.world_size} ranks of profile {profile.name}"
        )
    slowest = max((comm.forward, comm.backward), key=lambda c: c.bytes_per_element)
    constraints = _tier_constraints(request, spec, profile.world_size) or {}
    config = PlannerConfig(batch_size=gbs, comm_precision=slowest, param_bytes_per_element=precision.bytes_per_element,
                           **constraints)
    return plan_tables(tables_for_benchmark(spec), profile, config)


def embedding_tier(request: RunSetRequest, plan: Plan | None) -> EmbeddingTier | None:
    """What the run's trainer is told: the tables with shards on the SSD tier (per the plan) and
    their cache, the file's path left for each run to set; None when every table is in memory."""
    if plan is None or request.embedding_tier is EmbeddingTierChoice.MEMORY:
        return None
    ssd = [i for i, tiers in enumerate(plan.table_tiers()) if Tier.SSD in tiers]
    if not ssd:
        return None
    return EmbeddingTier(path="", cache_fraction=request.cache_fraction, policy=request.cache_policy.value,
                         ssd_tables=tuple(ssd), table_tiers=tuple(table_tiers(plan)), tier_plan=plan.fingerprint,
                         direct_io=request.direct_io)


def tier_identity(tier: EmbeddingTier) -> dict[str, Any]:
    """What a result depends on of the tier (the run set's fingerprint): its tables and cache, not
    where its file is nor how its rows move (the same values either way)."""
    return {"tier": tier.tier, "cache_fraction": tier.cache_fraction, "policy": tier.policy,
            "ssd_tables": list(tier.ssd_tables or ()), "table_tiers": list(tier.table_tiers or ()),
            "tier_plan": tier.tier_plan}


def table_tiers(plan: Plan) -> list[str]:
    """The tier of each table of a plan, in the tables' order, as the logs name it ("ddr+ssd"
    when its shards are on several)."""
    return ["+".join(t.value for t in tiers) for tiers in plan.table_tiers()]
