"""Embedding sharding planner: enumerate -> estimate -> propose -> partition -> plan."""

from harness.reference.planner.estimators import PlannerConfig, ShardEstimator, Topology
from harness.reference.planner.planners import (
    CheapestFitProposer,
    EmbeddingShardingPlanner,
    plan_tables,
)
from harness.reference.planner.types import (
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
