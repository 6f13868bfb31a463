"""Everything one training run depends on, typed, and as JSON where it crosses the process boundary
from the run set (``harness run``) to the worker processes (torch-free, so the run set's side can
build it without the training stack): :meth:`RunConfig.to_json` writes each typed field in its own
JSON form (the spec's raw document, the profile's file layout, the plan's ``to_dict``, the codecs'
names), :meth:`RunConfig.from_json` reads them back, validated.

Three fields are JSON documents by nature, typed by their keys: the hyperparameters (MLPerf's names,
a closed vocabulary checked when the spec or config is loaded: :mod:`harness.rules.hyperparameters`),
the harness's extra log records (:class:`ExtraLog`) and the dataset's manifest, which each source
of data writes and checks itself (:class:`~harness.reference.data.datasets.DatasetManifest`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypedDict

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.profiles import Profile, bare_cpu_profile
from harness.reference.data.datasets import DatasetManifest
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.types import Plan, RowReader
from harness.rules.hyperparameters import Hyperparameters
from harness.rules.specs import BenchmarkSpec, spec_from_dict


@dataclass(frozen=True)
class EmbeddingTier:
    """Where the run's tables live when not in memory: a file on the SSD tier behind a row cache.

    Attributes:
        path: the tables' file (created, zero-filled, unless ``rows_in_file``).
        cache_fraction: the cache's share of each SSD table's rows (never fewer than a batch looks up).
        policy: which row the cache evicts (``lru``, ``lfu``).
        ssd_tables: the indices of the tables on the SSD (None: all); the others stay in memory.
        rows_in_file: resuming: the file already holds the rows.
        table_tiers: the planner's tier of each table, as the logs name it (when it planned them).
        tier_plan: the fingerprint of the planner's tier plan (when it planned them).
        direct_io: move rows with ``O_DIRECT`` where the file system takes it (the drive's speed);
            False: through the page cache (the same values; what tests of the tier's arithmetic want).
        row_reader: what moves the rows (:class:`RowReader`).
    """

    path: str
    cache_fraction: float = 0.05
    policy: str = "lru"
    ssd_tables: tuple[int, ...] | None = None
    rows_in_file: bool = False
    table_tiers: tuple[str, ...] | None = None
    tier_plan: str | None = None
    direct_io: bool = True
    row_reader: RowReader = RowReader.AUTO
    tier: str = "ssd"  # the only tier a run's tables leave memory for (HBM and DDR are memory)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "row_reader": self.row_reader.value}

    def placement(self) -> dict[str, Any]:
        """The planner's placement of the tables, as a cache report states it (empty when the
        run's tables were not planned)."""
        return {**({"table_tiers": list(self.table_tiers)} if self.table_tiers is not None else {}),
                **({"tier_plan": self.tier_plan} if self.tier_plan is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmbeddingTier:
        """The tier of ``data`` (:meth:`to_dict`'s layout; ``ssd_tables`` and ``table_tiers`` as lists)."""
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown or "path" not in data:
            raise HarnessError(f"embedding tier: unknown keys {unknown}" if unknown else "embedding tier: no path",
                               ErrorCategory.BAD_INPUT)
        d = dict(data)
        for key in ("ssd_tables", "table_tiers"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        if "row_reader" in d:
            d["row_reader"] = RowReader(d["row_reader"])
        return cls(**d)


class NodesRecord(TypedDict):
    """Where a sharded run's ranks ran (``harness_nodes``)."""

    nodes: int
    ranks_per_node: int
    launchers: int
    rendezvous: str


class ExtraLog(TypedDict, total=False):
    """The harness's own records of a run's log (:mod:`harness.mllog.keys`), each only when it applies."""

    harness_teacher_best_auc: float
    harness_borrowed_from: dict[str, str]  # the lender's submitter and system (harness.submitters)
    harness_emulation_scale: float
    harness_nodes: NodesRecord


@dataclass(frozen=True)
class RunConfig:
    """Everything one run depends on (see the module: it crosses a process boundary as JSON)."""

    benchmark: BenchmarkSpec
    hyperparameters: Hyperparameters
    profile: Profile
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
    extra_log: ExtraLog = field(default_factory=lambda: ExtraLog())
    world_size: int = 1
    sharding_plan: Plan | None = None  # for world_size > 1, or one rank with its tables placed on tiers
    comm: CommConfig = field(default_factory=CommConfig)  # the codec of each collective
    embedding_tier: EmbeddingTier | None = None  # None: the tables in memory
    # the dataset's manifest (its files, already validated by the run set); None: the benchmark's generator
    data: DatasetManifest | None = None
    # where a dataset that needs a cache of its own (Yambda's memory-mapped columns) keeps it;
    # None: the dataset's default (harness.reference.data.yambda_store.default_cache_dir)
    data_cache: str | None = None
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
        """Plain JSON: each typed field in its own JSON form."""
        plain = {f: getattr(self, f) for f in self.__dataclass_fields__}
        return {
            **plain,
            "benchmark": self.benchmark.raw,
            "hyperparameters": dict(self.hyperparameters),
            "profile": self.profile.to_dict(),
            "extra_log": dict(self.extra_log),
            "sharding_plan": self.sharding_plan.to_dict() if self.sharding_plan else None,
            "comm": self.comm.to_names(),
            "embedding_tier": self.embedding_tier.to_dict() if self.embedding_tier else None,
            "data": dict(self.data) if self.data is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        """The inverse of :meth:`to_dict` (the spec, profile and plan validated as they are read)."""
        plan, tier = data.get("sharding_plan"), data.get("embedding_tier")
        return cls(**{
            **data,
            "benchmark": spec_from_dict(data["benchmark"], what="benchmark of the run config"),
            "profile": Profile.from_dict(data["profile"], what="the run config's profile"),
            "sharding_plan": Plan.from_dict(plan) if plan is not None else None,
            "comm": CommConfig.from_names(data.get("comm")),
            "embedding_tier": EmbeddingTier.from_dict(tier) if tier is not None else None,
        })

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.from_dict(json.loads(text))

    @classmethod
    def offline(cls, benchmark: BenchmarkSpec | Mapping[str, Any], hyperparameters: Mapping[str, Any], seed: int, *,
                who: str = "harness", profile: Profile | None = None,
                embedding_tier: EmbeddingTier | Mapping[str, Any] | None = None,
                comm: CommConfig | Mapping[str, str] | None = None, **fields: Any) -> RunConfig:
        """A config for training outside a run set (``harness infer``, benches, tests): no log,
        this machine's CPU unless ``profile`` says otherwise, a chosen seed; ``fields`` set the
        rest. The benchmark, tier and codecs may be given in their JSON form."""
        spec = benchmark if isinstance(benchmark, BenchmarkSpec) else spec_from_dict(
            benchmark, what="benchmark of the run config")
        if embedding_tier is not None and not isinstance(embedding_tier, EmbeddingTier):
            embedding_tier = EmbeddingTier.from_dict(embedding_tier)
        return cls(
            benchmark=spec, hyperparameters=dict(hyperparameters), seed=seed, seed_source="user",
            profile=profile or bare_cpu_profile(), submitter=who, division="closed", status="research", platform=who,
            log_path=os.devnull, fingerprint=who, config_filename=f"{who}.yaml", embedding_tier=embedding_tier,
            comm=comm if isinstance(comm, CommConfig) else CommConfig.from_names(dict(comm) if comm else None),
            **fields,
        )

    def with_tier(self, **changes: Any) -> RunConfig:
        """This config with its embedding tier changed (``changes``: :class:`EmbeddingTier`'s fields)."""
        assert self.embedding_tier is not None, "a config without an embedding tier"
        return replace(self, embedding_tier=replace(self.embedding_tier, **changes))
