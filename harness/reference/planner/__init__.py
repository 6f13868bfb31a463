"""Embedding sharding planner: enumerate -> estimate -> propose -> partition -> balance -> plan."""

from harness.reference.planner.estimators import PlannerConfig, ShardEstimator, Topology
from harness.reference.planner.planners import EmbeddingShardingPlanner, plan_tables
from harness.reference.planner.proposers import BalancingProposer, CheapestFitProposer
from harness.reference.planner.types import (
    CachePolicy,
    CommPrecision,
    Perf,
    Plan,
    PlannerError,
    PlannerErrorType,
    Shard,
    ShardingOption,
    ShardingType,
    Storage,
    TableSpec,
    Tier,
)

__all__ = [
    "BalancingProposer",
    "CachePolicy",
    "CheapestFitProposer",
    "CommPrecision",
    "EmbeddingShardingPlanner",
    "Perf",
    "Plan",
    "PlannerConfig",
    "PlannerError",
    "PlannerErrorType",
    "Shard",
    "ShardEstimator",
    "ShardingOption",
    "ShardingType",
    "Storage",
    "TableSpec",
    "Tier",
    "Topology",
    "plan_tables",
]
