"""Everything one training run depends on, as plain JSON: it crosses the process boundary from
the run set (``harness run``) to the worker processes (torch-free, so the run set's side can
build it without the training stack). The sharding plan travels typed (the planner's
:class:`~harness.reference.planner.Plan`) and is JSON only in the job file: :meth:`RunConfig.to_json`
writes ``Plan.to_dict()``, :meth:`RunConfig.from_json` reads it back with ``Plan.from_dict``."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harness.reference.planner.types import Plan


@dataclass(frozen=True)
class RunConfig:
    """Everything one run depends on, as plain JSON (it crosses a process boundary)."""

    benchmark: dict[str, Any]
    hyperparameters: dict[str, Any]
    profile: dict[str, Any]
    seed: int
    seed_source: str
    submitter: str
    division: str
    status: str
    platform: str
    log_path: str
    fingerprint: str
    config_filename: str
    emulated: bool = False
    run_index: int = 0
    progress: bool = False
    threads: int | None = None
    extra_log: dict[str, Any] = field(default_factory=dict)
    world_size: int = 1
    sharding_plan: Plan | None = None  # for world_size > 1, or one rank with its tables placed on tiers
    comm: dict[str, str] = field(default_factory=dict)  # codec per collective: forward, backward, allreduce
    # the tables' tier: {"tier": "ssd", "path": file, "cache_fraction": 0.05, "policy": "lru", "ssd_tables": [..]
    # or None (all), "rows_in_file": True when the file already holds the rows}; None: memory
    embedding_tier: dict[str, Any] | None = None
    # the dataset's manifest (harness.reference.data.datasets.dataset_manifest: its files, already
    # validated by the run set); None: the benchmark's own generator
    data: dict[str, Any] | None = None
    # overlap communication with computation (a sharded run): the dense all-reduce with the
    # backward pass, the pooled embeddings' all-to-alls with the bottom MLP and its backward
    overlap: bool = True
    # each step's time per phase, measured by the run (harness.reference.timing.phases): harness_step_phases
    step_phases: bool = True
    # where rank 0 writes the merged profiler trace of a few steps after the warm-up
    # (harness.reference.engine.trace); None: no trace
    trace_path: str | None = None
    # a sharded run proves its collectives at init (harness.reference.distributed.self_check)
    self_check: bool = True
    # the run's precision (harness.rules.precision.Precision's value): the dense layers' compute
    # type, the tables' storage type and the pooled embeddings' type on the wire
    precision: str = "fp32"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the plan as ``Plan.to_dict()``."""
        plan = self.sharding_plan
        return {**asdict(replace(self, sharding_plan=None)), "sharding_plan": plan.to_dict() if plan else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """The inverse of :meth:`to_dict` (the plan read with ``Plan.from_dict``)."""
        plan = data.get("sharding_plan")
        return cls(**{**data, "sharding_plan": Plan.from_dict(plan) if plan is not None else None})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.from_dict(json.loads(text))

    @classmethod
    def offline(cls, benchmark: dict[str, Any], hyperparameters: dict[str, Any], seed: int, *,
                who: str = "harness", **fields: Any) -> RunConfig:
        """A config for training outside a run set (``harness infer``, benches, tests): no log,
        the local CPU unless ``profile`` says otherwise, a chosen seed; ``fields`` set the rest."""
        return cls(**{
            "benchmark": benchmark, "hyperparameters": hyperparameters, "seed": seed, "seed_source": "user",
            "profile": {"name": "local", "device_type": "cpu"}, "submitter": who, "division": "closed",
            "status": "research", "platform": who, "log_path": os.devnull, "fingerprint": who,
            "config_filename": f"{who}.yaml", **fields,
        })
