"""Run sets: N timed runs of a benchmark on a profile, each in a fresh process, then the score.

Layout (the MLPerf submission layout, under ``--results``, default ``results/``)::

    <results>/<submitter>/systems/<system>.json
    <results>/<submitter>/results/<system>/<benchmark>/result_<i>.txt
    <results>/.harness/<submitter>/<system>/<benchmark>/     staging: run configs, logs
                                                            being written, interrupted logs,
                                                            runset.json (the set's manifest)

A run's log is written in the staging folder and moved into the results tree with one
``os.replace`` when the run has ended, so the results tree only ever holds finished logs.
An interrupted run's log ends with ``run_stop status=aborted`` and stays in staging as
``result_<i>.interrupted-<time>.txt``; ``--resume`` runs the missing indices of the set.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import (
    ErrorCategory,
    HarnessError,
    interrupt_category,
    interrupt_reason,
    io_fault,
    signal_of,
)
from harness.files import write_atomic
from harness.hw_profiles import (
    DetectedHardware,
    Profile,
    detect,
    emulated_profile,
    load_profile,
    native_precision,
    profile_present,
    system_description,
    system_name_for,
    write_system_description,
)
from harness.runsets.launch import NodeGroup, Nodes, worker_command, worker_env
from harness.reference.engine.mlperf_log import MLPerfLog, parse_records
from harness.reference.engine.forked import ForkedProcess, forked_run_worker, start_server
from harness.reference.engine.run_config import RunConfig
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.types import CachePolicy, Plan, Tier
from harness.rules.fingerprint import fingerprint
from harness.rules.precision import Precision, parse_precision
from harness.rules.results import RunSetStats, read_run_log, run_set_stats
from harness.rules.scoring import RunTime, Score
from harness.rules.seeds import Seed, SeedSource, seeds_for_runs
from harness.rules.specs import BenchmarkSpec, ModelFamily, load_benchmark
from harness.projection.render import duration
from harness.projection.system import system_for_profile
from harness.projection.train_time import project
from harness.submitters import borrowing_provenance, effective_hyperparameters, submitter_precision
from harness.mllog import keys

DEFAULT_SUBMITTER = "reference"
DEFAULT_STATUS = "Research, Development, or Internal (RDI)"
_LOG_STATUS = {
    "Available on-premise": "onprem",
    "Available cloud": "cloud",
    "Research, Development, or Internal (RDI)": "research",
    "Preview": "preview",
}
_INTERRUPT_GRACE_S = 60.0
FAILED_DONE_TIMEOUT_S = 5.0  # after a failed run, how long node 0 waits for its followers to hear of it
_PROGRESS = "HARNESS_PROGRESS "


class EmbeddingTierChoice(enum.Enum):
    """Where the user asks the embedding rows to live (``--embedding-tier``)."""

    MEMORY = "memory"  # HBM or DDR (on a sharded profile, the planner's choice between them)
    SSD = "ssd"  # the tables set to the SSD tier (all unless --ssd-tables) in a file, behind a cache in memory
    AUTO = "auto"  # the planner places each table within the profile's capacities (SSD ones behind the cache)


@dataclass(frozen=True)
class RunSetRequest:
    """What the user asked for (the options of ``harness run``)."""

    benchmark: str
    profile: str
    submitter: str = DEFAULT_SUBMITTER
    runs: int | None = None
    results_dir: Path = Path("results")
    seeds: tuple[int, ...] = ()
    resume: bool = False
    division: str = "closed"
    status: str = DEFAULT_STATUS
    threads: int | None = None
    emulate: bool = False
    comm: CommConfig = CommConfig()  # the codec of each collective: forward, backward, allreduce
    embedding_tier: EmbeddingTierChoice = EmbeddingTierChoice.MEMORY
    cache_fraction: float = 0.05
    cache_policy: CachePolicy = CachePolicy.LRU
    ssd_tables: tuple[int, ...] | None = None  # set to the SSD tier (indices); with SSD, None: all
    data: Path | None = None  # the dataset's files (--data); None: the benchmark's generator
    overlap: bool = True  # overlap a sharded run's communication with its computation (the same arithmetic)
    step_phases: bool = True  # each run measures where its steps' time goes (harness_step_phases)
    trace: bool = False  # each run writes a profiler trace of a few steps, every rank's, in its staging folder
    # --precision; None: the submitter config's choice for the profile, else the fastest precision
    # the hardware computes natively
    precision: Precision | None = None
    nodes: Nodes = field(default_factory=Nodes)  # the launchers: this node's rank among them (--nnodes, --node-rank, ...)


@dataclass(frozen=True)
class RunOutcome:
    index: int
    seed: Seed
    log_path: Path
    minutes: float
    converged: bool
    final_auc: float | None


@dataclass
class RunSetOutcome:
    runs: list[RunOutcome] = field(default_factory=list)
    score: Score | None = None
    score_error: str | None = None
    stats: RunSetStats | None = None
    system_json: Path | None = None
    results_dir: Path | None = None


class Reporter:
    """What a run set tells the user while it works; the CLI supplies a terminal one."""

    def run_started(self, index: int, total: int, seed: Seed, train_samples: int) -> None: ...

    def progress(self, index: int, event: dict[str, Any]) -> None: ...

    def run_finished(self, outcome: RunOutcome) -> None: ...

    def message(self, text: str) -> None: ...


def _fingerprint_profile(profile: Profile) -> dict[str, Any]:
    """The profile's figures that a result depends on (not its prose, nor the free disk space
    of ``local``, which drifts between runs of one set)."""
    d = profile.to_dict()
    d.pop("description", None)
    d.pop("sources", None)
    if profile.name == "local":
        d.get("ssd", {}).pop("capacity_bytes", None)
    return d


@dataclass(frozen=True)
class RunSetPlan:
    """A request resolved against the benchmark, the profile and the machine present."""

    request: RunSetRequest
    spec: BenchmarkSpec
    profile: Profile
    system: str
    hyperparameters: dict[str, Any]
    fingerprint: str
    runs: int
    emulated: bool
    borrowed_from: dict[str, str] | None = None
    world_size: int = 1
    sharding_plan: Plan | None = None  # the plan the ranks execute (typed; JSON in the job file and staging dir)
    comm: CommConfig = CommConfig()
    emulation_scale: float | None = None
    embedding_tier: dict[str, Any] | None = None  # {"tier", "cache_fraction", "policy", ...} when not in memory
    tier_plan: Plan | None = None  # the planner's placement of a one-rank run's tables on tiers
    data: dict[str, Any] | None = None  # the dataset's manifest (validated files); None: the generator
    data_description: dict[str, Any] | None = None  # what the data is (format, layout, days, samples)
    precision: Precision = Precision.FP32  # the dense compute, the tables' storage and the pooled wire
    precision_reason: str = "--precision"  # where it comes from, in a phrase: "native AVX512-BF16 on this CPU"

    @property
    def package_dir(self) -> Path:
        return self.request.results_dir / self.request.submitter

    @property
    def results_dir(self) -> Path:
        return self.package_dir / "results" / self.system / self.spec.name

    @property
    def system_json(self) -> Path:
        return self.package_dir / "systems" / f"{self.system}.json"

    @property
    def staging_dir(self) -> Path:
        return self.request.results_dir / ".harness" / self.request.submitter / self.system / self.spec.name

    @property
    def manifest_path(self) -> Path:
        return self.staging_dir / "runset.json"

    def result_path(self, index: int) -> Path:
        return self.results_dir / f"result_{index}.txt"


def projected_on(spec: BenchmarkSpec, profile: Profile) -> str:
    """What the projection gives for a benchmark on a profile's real hardware, in a phrase."""
    command = f"harness project --benchmark {spec.name} --profile {profile.name}"
    try:
        p = project(spec, system_for_profile(profile))
    except HarnessError as err:
        return f"{command} cannot project it ({err})"
    low, high = p.band_minutes
    return (f"projected on that hardware, a run takes {duration(p.minutes * 60)} (band {duration(low * 60)} to "
            f"{duration(high * 60)}; {command} shows where the time goes)")


def plan_run_set(request: RunSetRequest, *, progress: Callable[[str], None] | None = None) -> RunSetPlan:
    """Resolve the request; refuse what cannot be run honestly here. ``progress`` hears of the
    dataset's files as they are validated."""
    if request.division not in ("closed", "open"):
        raise HarnessError(f"division must be closed or open, not {request.division!r}")
    if request.status not in _LOG_STATUS:
        raise HarnessError(f"status must be one of {', '.join(map(repr, _LOG_STATUS))}")
    if not request.submitter or "/" in request.submitter or request.submitter.startswith("."):
        raise HarnessError(f"submitter name {request.submitter!r} cannot be a directory name")
    _check_request_types(request)
    spec = load_benchmark(request.benchmark)
    detected = detect(results_dir=str(request.results_dir))
    profile = load_profile(request.profile, detected=detected)
    present, why = profile_present(profile, detected)
    if not present and not request.emulate:
        raise HarnessError(
            f"profile {profile.name} needs hardware that is not here ({why}); add --emulate to run its "
            f"{profile.world_size} rank(s) as gloo processes on this CPU, labelled emulated (a run of the "
            f"software, not a measure of that hardware's speed); {projected_on(spec, profile)}",
            ErrorCategory.HARDWARE,
        )
    nodes = request.nodes
    if nodes.multi and profile.nodes == 1:
        raise HarnessError(f"profile {profile.name} has one node; --nnodes {nodes.count} needs a profile of "
                           f"{nodes.count} nodes (e.g. zionex-2x8gpu)")
    if nodes.multi and nodes.count != profile.nodes:
        raise HarnessError(f"profile {profile.name} has {profile.nodes} nodes; --nnodes must be {profile.nodes} "
                           f"(one launcher per node) or 1 (every rank here), not {nodes.count}")
    if nodes.multi and profile.world_size == nodes.count:
        raise HarnessError(f"profile {profile.name} has one rank per node; a multi-node launch needs profiles "
                           "with accelerators_per_node >= 2", ErrorCategory.NOT_IMPLEMENTED)
    emulation_scale = None
    if request.emulate:
        profile, emulation_scale = emulated_profile(profile, detected, hosts=nodes.count)
    # A multi-GPU profile whose GPUs are here runs on NCCL. That path has not run in this
    # project's CI (no GPUs there); what makes it safe to run is the self-check at init
    # (harness.reference.distributed.self_check): the sharded probe trains on the real NCCL
    # groups and in one process, and the run stops in one line unless they agree.
    _check_family(request, spec, profile)
    comm = _comm_codecs(request.comm, profile.world_size)
    hyperparameters = effective_hyperparameters(spec, request.submitter, request.division)
    precision, precision_reason = _precision(request, spec, profile, detected)
    data, data_description = _validated_dataset(spec, request.data, int(hyperparameters["global_batch_size"]),
                                                progress)
    runs = request.runs if request.runs is not None else spec.required_runs
    if runs < 1:
        raise HarnessError("--runs must be at least 1")
    sharding_plan = (_sharding_plan(spec, profile, hyperparameters, comm, request, precision)
                     if profile.world_size > 1 else None)
    tier_plan = _tier_plan(request, spec, profile, hyperparameters, precision) if profile.world_size == 1 else None
    embedding_tier = _embedding_tier(request, tier_plan or sharding_plan)
    fp = fingerprint({
        "benchmark": spec.raw, "hyperparameters": hyperparameters, "profile": _fingerprint_profile(profile),
        **({"emulated": True} if request.emulate else {}),
        **({"comm": comm.to_names(), "sharding_plan": sharding_plan.fingerprint} if sharding_plan else {}),
        **({"embedding_tier": embedding_tier} if embedding_tier else {}),
        **({"data": _data_identity(data)} if data else {}),
        **({"precision": precision.value} if precision.reduced else {}),  # fp32 sets keep their fingerprint
    })
    return RunSetPlan(
        request=request,
        spec=spec,
        profile=profile,
        system=system_name_for(profile, request.emulate),
        hyperparameters=hyperparameters,
        fingerprint=fp,
        runs=runs,
        emulated=request.emulate,
        borrowed_from=borrowing_provenance(request.submitter, spec.name),
        world_size=profile.world_size,
        sharding_plan=sharding_plan,
        comm=comm,
        emulation_scale=emulation_scale,
        embedding_tier=embedding_tier,
        tier_plan=tier_plan,
        data=data,
        data_description=data_description,
        precision=precision,
        precision_reason=precision_reason,
    )


def _check_family(request: RunSetRequest, spec: BenchmarkSpec, profile: Profile) -> None:
    """An HSTU benchmark runs as a DLRM does (any profile, its tables sharded and tiered as planned,
    its generator or ``--data``); its data's presence (dlrmv4 needs Yambda) and its architecture are
    checked here, before anything is written."""
    if spec.family is not ModelFamily.HSTU:
        return
    from harness.reference.data import open_dataset
    from harness.reference.models.from_spec import hstu_config

    if spec.dataset["kind"] == "yambda":  # dlrmv4: what it needs (Yambda's folder), checked before anything is written
        open_dataset(spec, request.data)
    hstu_config(spec)


_REQUEST_TYPES = {"comm": CommConfig, "embedding_tier": EmbeddingTierChoice, "cache_policy": CachePolicy,
                  "precision": (Precision, type(None))}


def _check_request_types(request: RunSetRequest) -> None:
    """The request's closed choices are enums (the CLI converts its options): a name where a
    member belongs is a caller's slip, said in one line rather than compared wrongly later."""
    for name, types in _REQUEST_TYPES.items():
        value = getattr(request, name)
        if not isinstance(value, types):
            wanted = types.__name__ if isinstance(types, type) else types[0].__name__
            raise HarnessError(f"RunSetRequest.{name} must be a {wanted}, not {type(value).__name__} {value!r}",
                               ErrorCategory.BAD_INPUT)


def _precision(request: RunSetRequest, spec: BenchmarkSpec, profile: Profile,
               detected: DetectedHardware) -> tuple[Precision, str]:
    """The run set's precision and where it comes from:
    ``--precision``, else the submitter config's choice for the profile, else the fastest
    precision the hardware computes natively (this CPU's for ``--emulate``). The same command
    on the same machine resolves the same, so a plain ``--resume`` keeps the set's precision."""
    if request.precision is not None:
        return request.precision, "--precision"
    chosen = submitter_precision(request.submitter, spec.name, profile.name)
    if chosen is not None:
        return chosen
    name, reason = native_precision(profile, detected, emulated=request.emulate)
    return parse_precision(name), reason


def _validated_dataset(spec: BenchmarkSpec, path: Path | None, batch_size: int,
                       progress: Callable[[str], None] | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Open and validate the run's data once, before any run starts and before anything is
    written: the files at ``path`` (every TSV line parsed, every npy header read; a missing,
    short or malformed dataset is one line, exit 2), or the benchmark's generator. Returns the
    manifest the runs reopen it from (None: the generator) and its description."""
    from harness.reference.data import open_dataset
    from harness.reference.data.datasets import check_epoch, dataset_manifest

    dataset = open_dataset(spec, path, progress=progress)
    if dataset.train_samples // batch_size < 1:
        raise HarnessError(f"global batch size {batch_size} exceeds the {dataset.train_samples} training samples")
    if spec.max_epochs > 1:
        check_epoch(dataset, 1)
    return dataset_manifest(dataset), dataset.describe()


def _data_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a result depends on of the data: its files and their sizes, not where they are."""
    return {k: v for k, v in manifest.items() if k not in ("root", "path")}


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
        if request.ssd_tables is not None:
            raise HarnessError("--ssd-tables needs --embedding-tier ssd or auto")
        if world_size == 1:
            return None
        from harness.reference.planner import Tier
        from harness.reference.planner.models import tables_for_benchmark

        # in memory: HBM, and DDR under it behind caches in HBM (the executor runs every placement)
        return {"tiers": tuple((t.name, (Tier.HBM, Tier.DDR)) for t in tables_for_benchmark(spec)),
                "ddr_cache_fraction": request.cache_fraction, "cache_policy": request.cache_policy}
    if not 0 < request.cache_fraction <= 1:
        raise HarnessError(f"--cache-fraction must be in (0, 1], not {request.cache_fraction}")
    from harness.reference.planner import ShardingType, Tier
    from harness.reference.planner.models import tables_for_benchmark

    tables = tables_for_benchmark(spec)
    chosen = request.ssd_tables
    if chosen is not None and (not chosen or any(not 0 <= t < len(tables) for t in chosen)):
        raise HarnessError(f"--ssd-tables takes table indices 0..{len(tables) - 1}, not {list(chosen)}")
    on_ssd = set(range(len(tables)) if chosen is None and request.embedding_tier is EmbeddingTierChoice.SSD
                 else chosen or ())
    pinned_all = request.embedding_tier is EmbeddingTierChoice.SSD  # AUTO: the tables not set are the planner's
    tiers = tuple(
        (t.name, (Tier.SSD,) if i in on_ssd else (Tier.HBM, Tier.DDR)) for i, t in enumerate(tables)
        if i in on_ssd or pinned_all
    )
    if world_size == 1:
        types = tuple((t.name, (ShardingType.TABLE_WISE,)) for t in tables)
    else:
        cached = tuple(st for st in ShardingType if st is not ShardingType.DATA_PARALLEL)
        types = tuple((t.name, cached) for i, t in enumerate(tables) if i in on_ssd)
    return {"tiers": tiers, "sharding_types": types, "ssd_cache_fraction": request.cache_fraction,
            "cache_policy": request.cache_policy,
            **({"ddr_cache_fraction": request.cache_fraction} if world_size > 1 else {})}


def _tier_plan(request: RunSetRequest, spec: BenchmarkSpec, profile: Profile,
               hyperparameters: dict[str, Any], precision: Precision) -> Plan | None:
    """A one-rank run's placement of each table on HBM, DDR or SSD within the profile's
    capacities (see :func:`_tier_constraints`), its weights counted in ``precision``'s bytes;
    None for ``--embedding-tier memory``."""
    constraints = _tier_constraints(request, spec, 1)
    if constraints is None:
        return None
    from harness.reference.planner import PlannerConfig, plan_tables
    from harness.reference.planner.models import tables_for_benchmark

    config = PlannerConfig(batch_size=int(hyperparameters["global_batch_size"]),
                           param_bytes_per_element=precision.bytes_per_element, **constraints)
    return plan_tables(tables_for_benchmark(spec), profile, config)


def _embedding_tier(request: RunSetRequest, plan: Plan | None) -> dict[str, Any] | None:
    """What the run's trainer is told (JSON, in the run config): the tables with shards on the SSD
    tier (per the plan) and their cache; None when every table is in memory."""
    if plan is None or request.embedding_tier is EmbeddingTierChoice.MEMORY:
        return None
    ssd = [i for i, tiers in enumerate(plan.table_tiers()) if Tier.SSD in tiers]
    if not ssd:
        return None
    return {"tier": Tier.SSD.value, "cache_fraction": request.cache_fraction, "policy": request.cache_policy.value,
            "ssd_tables": ssd, "table_tiers": table_tiers(plan), "tier_plan": plan.fingerprint}


def table_tiers(plan: Plan) -> list[str]:
    """The tier of each table of a plan, in the tables' order, as the logs name it ("ddr+ssd"
    when its shards are on several)."""
    return ["+".join(t.value for t in tiers) for tiers in plan.table_tiers()]


def _comm_codecs(requested: CommConfig, world_size: int) -> CommConfig:
    """The codec of each collective (fp32 unless asked); refused for a one-rank run (nothing is sent)."""
    if world_size == 1 and requested != CommConfig():
        raise HarnessError("quantized communication needs more than one rank; this profile has one")
    return requested


def _sharding_plan(spec: BenchmarkSpec, profile: Profile, hyperparameters: dict[str, Any],
                   comm: CommConfig, request: RunSetRequest, precision: Precision) -> Plan:
    """The plan the run's ranks execute: the planner's, for the (emulated) profile and the global
    batch (with ``--embedding-tier ssd|auto``, its tier settings and SSD caches counted), the
    tables' weights in ``precision``'s bytes."""
    from harness.reference.planner import PlannerConfig, plan_tables
    from harness.reference.planner.models import tables_for_benchmark

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


# --------------------------------------------------------------------------- manifest
def _read_manifest(plan: RunSetPlan) -> dict[str, Any] | None:
    try:
        return json.loads(plan.manifest_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as err:
        raise HarnessError(f"{plan.manifest_path}: unreadable run-set manifest ({err})") from None


_RESUME = "run the same command with --resume"
IO_FAULT_EXIT = 5  # the worker's exit status for an I/O fault (harness.reference.engine.worker)


def _write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically; a fault is one line that says to resume (:func:`write_atomic`)."""
    write_atomic(path, text, then=_RESUME)


def _pending_indices(plan: RunSetPlan) -> list[int]:
    """The run indices still to do; refuses to mix with or overwrite results already there."""
    existing = sorted(plan.results_dir.glob("result_*.txt")) if plan.results_dir.is_dir() else []
    manifest = _read_manifest(plan)
    if not plan.request.resume:
        if existing:
            raise HarnessError(
                f"{plan.results_dir} already holds {len(existing)} result file(s); use --resume to complete "
                "that set, or another --results directory (nothing was changed)"
            )
        return list(range(plan.runs))
    if manifest is None:
        if existing:
            raise HarnessError(f"{plan.results_dir} has results but no run-set manifest to resume from")
        return list(range(plan.runs))
    _check_resume_settings(manifest.get("settings"), set_settings(plan))  # first: it names the setting
    if manifest.get("fingerprint") != plan.fingerprint:
        raise HarnessError(
            "--resume: the benchmark, hyperparameters, profile, plan or data changed since the set began "
            f"(fingerprint {manifest.get('fingerprint')} -> {plan.fingerprint}); start a new set instead"
        )
    done = {i for i in range(plan.runs) if plan.result_path(i).is_file()}
    return [i for i in range(plan.runs) if i not in done]


def run_name(index: int) -> str:
    """How every message names run ``index``: counted from 1, with its file (counted from 0,
    as MLPerf names result files): ``run 2 (result_1.txt)``."""
    return f"run {index + 1} (result_{index}.txt)"


def set_settings(plan: RunSetPlan) -> dict[str, Any]:
    """What every run of a set must share beyond the fingerprint (the benchmark, hyperparameters,
    profile, plan, codecs, tiers and data): the settings its logs and system description state or
    its runs are made with. Kept in the manifest; a resume that changes one is refused. What
    only measures a run (``--no-step-phases``, ``--trace``) is not among them: a set may be
    resumed with or without it."""
    r = plan.request
    return {
        "division": r.division,
        "status": r.status,
        "submitter": r.submitter,
        "seeds": list(r.seeds) if r.seeds else "drawn",
        "communication codecs": plan.comm.to_names(),
        "embedding tier": {"tier": r.embedding_tier.value, "cache_fraction": r.cache_fraction,
                           "cache_policy": r.cache_policy.value,
                           "ssd_tables": list(r.ssd_tables) if r.ssd_tables is not None else None},
        "threads": r.threads,
        "overlap": r.overlap,
        "emulate": r.emulate,
        "precision": plan.precision.value,
    }


# What a set begun before a setting was kept in its manifest ran with.
_SETTINGS_BEFORE_THEY_WERE_KEPT = {"precision": Precision.FP32.value}


def _show_setting(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "default" if value is None else str(value)


def _check_resume_settings(began: dict[str, Any] | None, now: dict[str, Any]) -> None:
    """Refuse, in one line naming the setting, a resume whose settings differ from the set's."""
    if began is None:  # a set begun before the settings were kept: the fingerprint alone decides
        return
    began = {**_SETTINGS_BEFORE_THEY_WERE_KEPT, **began}
    for name, value in now.items():
        if name in began and began[name] != value:
            raise HarnessError(
                f"--resume: the set began with {name} {_show_setting(began[name])}, this command has "
                f"{_show_setting(value)}; resume with the set's settings or start a new set (nothing was changed)"
            )


# --------------------------------------------------------------------------- one run
def _ensure_aborted(log_path: Path, reason: str) -> None:
    """Make the log end with ``run_stop status=aborted`` if the worker could not write it."""
    try:
        records = parse_records(log_path) if log_path.exists() else []
    except HarnessError:
        records = []
    if any(r.get("key") == keys.RUN_STOP for r in records):
        return
    if log_path.exists() and log_path.stat().st_size:
        with open(log_path, "rb+") as f:  # a worker killed mid-line: finish that line first
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
    log = MLPerfLog(log_path)
    try:
        log.end(keys.RUN_STOP, metadata={keys.STATUS: keys.ABORTED, keys.REASON: reason})
    finally:
        log.close()


def _worker_failure(stderr_path: Path) -> str:
    """The worker's one-line error (a rank's, under torchrun, whose own report follows it)."""
    try:
        lines = [line for line in stderr_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    ours = [line for line in lines if line.lstrip("[rank0123456789]: ").startswith("harness worker:")]
    return (ours or lines or ["no message"])[-1].strip()


def _worker_config(plan: RunSetPlan, index: int, seed: Seed, log_path: Path, best_auc: float | None) -> RunConfig:
    return RunConfig(
        benchmark=plan.spec.raw,
        hyperparameters=plan.hyperparameters,
        profile=plan.profile.to_dict(),
        seed=seed.value,
        seed_source=seed.source.value,
        submitter=plan.request.submitter,
        division=plan.request.division,
        status=_LOG_STATUS[plan.request.status],
        platform=plan.system,
        log_path=str(log_path.resolve()),
        fingerprint=plan.fingerprint,
        config_filename=f"{plan.spec.name}.yaml",
        emulated=plan.emulated,
        run_index=index,
        progress=True,
        threads=plan.request.threads,
        extra_log={
            **({keys.HARNESS_TEACHER_BEST_AUC: best_auc} if best_auc is not None else {}),
            **({keys.HARNESS_BORROWED_FROM: plan.borrowed_from} if plan.borrowed_from else {}),
            **({keys.HARNESS_EMULATION_SCALE: plan.emulation_scale} if plan.emulation_scale is not None else {}),
            **({keys.HARNESS_NODES: _nodes_record(plan)} if plan.world_size > 1 else {}),
        },
        world_size=plan.world_size,
        # one rank with its tables placed on tiers: the sharded collection runs that plan (one code path)
        sharding_plan=plan.sharding_plan if plan.world_size > 1 else plan.tier_plan,
        comm=plan.comm.to_names(),
        embedding_tier=(
            {**plan.embedding_tier, "path": str((plan.staging_dir / f"result_{index}.tables.bin").resolve())}
            if plan.embedding_tier else None
        ),
        data=plan.data,
        overlap=plan.request.overlap,
        step_phases=plan.request.step_phases,
        trace_path=str((plan.staging_dir / f"result_{index}.trace.json").resolve()) if plan.request.trace else None,
        precision=plan.precision.value,
    )


def _nodes_record(plan: RunSetPlan) -> dict[str, Any]:
    """Where the run's ranks ran: the profile's nodes, and how many launchers started them."""
    nodes = plan.request.nodes
    return {"nodes": plan.profile.nodes, "ranks_per_node": max(plan.profile.accelerators_per_node, 1),
            "launchers": nodes.count, "rendezvous": "c10d" if nodes.multi else "standalone"}


def _follow_worker(config_path: Path, plan: RunSetPlan, job: int, stderr_path: Path,
                   on_progress: Callable[[dict], None]) -> int:
    """Start the run's worker process(es) on this node, relay its progress lines, return its exit
    status: one rank forked from the set's fork server (:mod:`harness.reference.engine.forked`), more
    through torchrun (:func:`harness.runsets.launch.worker_command`).

    On KeyboardInterrupt the worker is asked to stop and has ended before this re-raises
    (torchrun passes the SIGINT on to its ranks).
    """
    nodes = plan.request.nodes
    with open(stderr_path, "wb") as err_file:
        proc: subprocess.Popen | ForkedProcess
        if plan.world_size == 1:
            proc = forked_run_worker(config_path, stderr_path)
        else:
            proc = subprocess.Popen(
                worker_command(str(config_path), plan.world_size, nodes, job), stdout=subprocess.PIPE,
                stderr=err_file, stdin=subprocess.DEVNULL, text=True, bufsize=1, env=worker_env(nodes),
            )
        try:
            for line in proc.stdout or ():
                if line.startswith(_PROGRESS):
                    try:
                        on_progress(json.loads(line[len(_PROGRESS) :]))
                    except json.JSONDecodeError:
                        pass
            return proc.wait()
        except KeyboardInterrupt as err:
            _stop_worker(proc, signal_of(err))
            raise


def _run_one(plan: RunSetPlan, index: int, config: RunConfig, reporter: Reporter, job: int = 0) -> Path:
    """Run one training process (this node's share of it); return its finished log, moved into
    the results tree."""
    staged = plan.staging_dir / f"result_{index}.txt"
    stderr_path = plan.staging_dir / f"result_{index}.stderr.txt"
    config_path = plan.staging_dir / f"result_{index}.config.json"
    try:
        plan.staging_dir.mkdir(parents=True, exist_ok=True)
        staged.unlink(missing_ok=True)
    except OSError as err:
        raise io_fault(err, plan.staging_dir, "preparing the run's staging folder", _RESUME) from None
    _write_atomic(config_path, config.to_json())
    stamp = time.strftime("%Y%m%dT%H%M%S")
    def remove_tables() -> None:  # the SSD tier of this run, if any: one file, or one per shard of each rank
        for path in plan.staging_dir.glob(f"result_{index}.tables.bin*"):
            path.unlink(missing_ok=True)

    def keep(name: str, reason: str) -> Path:
        """The staged log under ``name``, ending run_stop aborted (where the disk still takes a line)."""
        kept = plan.staging_dir / name
        with contextlib.suppress(OSError):  # a full disk: the log keeps what it has
            _ensure_aborted(staged, reason)
        with contextlib.suppress(OSError):
            os.replace(staged, kept)
        return kept

    def finished_runs() -> str:
        finished = sorted(plan.results_dir.glob("result_*.txt")) if plan.results_dir.is_dir() else []
        return (f"the {len(finished)} finished run(s) are in {plan.results_dir}; complete the set with the same "
                "command and --resume" if finished else "no run of the set had finished; the same command starts it again")

    faults: list[str] = []  # an I/O fault the worker reported on its pipe (its stderr file may be on a full disk)

    def on_progress(event: dict) -> None:
        if "io_fault" in event:
            faults.append(str(event["io_fault"]))
        else:
            reporter.progress(index, event)

    try:
        code = _follow_worker(config_path, plan, job, stderr_path, on_progress)
    except KeyboardInterrupt as err:
        remove_tables()
        kept = keep(f"result_{index}.interrupted-{stamp}.txt", interrupt_reason(err))
        raise HarnessError(
            f"{interrupt_reason(err)} during {run_name(index)}: its log ends run_stop status=aborted and is kept at "
            f"{kept}; {finished_runs()}", interrupt_category(err),
        ) from None
    except OSError as err:  # the worker's stderr file could not be made
        raise io_fault(err, stderr_path, f"starting {run_name(index)}", _RESUME) from None
    remove_tables()
    if code == IO_FAULT_EXIT or faults:  # the worker met an I/O fault (a full disk...): its message names the file
        kept = keep(f"result_{index}.failed-{stamp}.txt", "I/O fault")
        message = faults[-1] if faults else _worker_failure(stderr_path).removeprefix("harness worker: I/O fault: ")
        raise HarnessError(
            f"{run_name(index)} stopped by an I/O fault: {message} (its log, incomplete, is kept at {kept}); free "
            f"space or fix the folder, then: {finished_runs()}",
            ErrorCategory.IO_FAULT,
        )
    if code != 0:
        failed = keep(f"result_{index}.failed-{stamp}.txt", f"worker exited with status {code}")
        raise HarnessError(
            f"{run_name(index)} failed: {_worker_failure(stderr_path)} (log kept at {failed})", ErrorCategory.RUN_FAILED
        )
    if not staged.is_file():  # global rank 0 is this node's: it must have written the log
        raise HarnessError(f"{run_name(index)}: the ranks ended without an error but wrote no log at {staged}",
                           ErrorCategory.RUN_FAILED)
    final = plan.result_path(index)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, final)
    except OSError as err:
        raise io_fault(err, final, f"moving {run_name(index)}'s finished log into the results", _RESUME) from None
    return final


def _stop_worker(proc: subprocess.Popen | ForkedProcess, signum: int = signal.SIGINT) -> None:
    """Pass the signal that stopped us (SIGINT or SIGTERM) on to the worker (torchrun passes it to
    its ranks), give it time to end its log, then make sure it is gone."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if proc.poll() is None:
            proc.send_signal(signum)
        try:
            proc.wait(timeout=_INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# --------------------------------------------------------------------------- results
def run_time_from_log(path: Path, target_auc: float) -> tuple[RunTime, float | None]:
    """The run's clock and convergence from its log, as the result summarizer reads them."""
    log = read_run_log(path)
    if log.run_start_ms is None or log.run_stop_ms is None:
        raise HarnessError(f"{path}: the log lacks run_start or run_stop")
    final = log.eval_accuracies[-1][1] if log.eval_accuracies else None
    return log.run_time(target_auc), final


def teacher_best_auc(spec: BenchmarkSpec) -> float | None:
    """The synthetic data's best achievable eval AUC (samples or event streams), computed here,
    outside any timed run."""
    if spec.dataset["kind"] not in ("synthetic", "event_streams"):
        return None
    from harness.reference.data import open_dataset  # the benchmark's generator, whichever kind

    return open_dataset(spec, None).best_auc()


def execute_run_set(plan: RunSetPlan, reporter: Reporter | None = None) -> RunSetOutcome:
    """Run the pending runs of the set, then score every finished run in the results tree.

    With several nodes, node 0 does this (its launchers' followers run :func:`follow_run_set`):
    the followers are admitted before anything is written (see :mod:`harness.runsets.launch`)."""
    reporter = reporter or Reporter()
    nodes = plan.request.nodes
    if nodes.multi and nodes.rank != 0:
        raise HarnessError("execute_run_set runs on node 0; a follower runs follow_run_set")
    group = NodeGroup(nodes) if nodes.multi else None
    try:
        return _execute(plan, reporter, group)
    finally:
        if group is not None:
            group.close()


def _execute(plan: RunSetPlan, reporter: Reporter, group: NodeGroup | None) -> RunSetOutcome:
    try:
        pending = _pending_indices(plan)
        seeds = seeds_for_runs(pending, plan.request.seeds)
        best_auc = teacher_best_auc(plan.spec) if pending else None
    except HarnessError as err:
        if group is not None:
            group.admit(plan.fingerprint, None, refusal=str(err))
        raise
    if pending and plan.world_size == 1:  # the workers' fork server imports torch while the set is prepared
        start_server()
    staged = {index: plan.staging_dir / f"result_{index}.txt" for index in pending}
    configs = {index: _worker_config(plan, index, seeds[index], staged[index], best_auc) for index in pending}
    if group is not None:  # every follower planned this same set; they train exactly these runs
        group.admit(plan.fingerprint, [{"index": i, "config": configs[i].to_json()} for i in pending])
    manifest = _read_manifest(plan) if plan.request.resume else None
    manifest = manifest or {"fingerprint": plan.fingerprint, "benchmark": plan.spec.name, "runs": {}}
    manifest.setdefault("settings", set_settings(plan))
    manifest["planned_runs"] = plan.runs
    detected = detect(results_dir=str(plan.request.results_dir))
    desc = system_description(
        profile=plan.profile,
        detected=detected,
        submitter=plan.request.submitter,
        division=plan.request.division,
        status=plan.request.status,
        emulated=plan.emulated,
        system_name=plan.system,
    )
    write_system_description(desc, plan.system_json)
    if plan.sharding_plan is not None:  # the plan the ranks execute; its fingerprint is in every log
        _write_atomic(plan.staging_dir / "sharding_plan.json",
                      json.dumps(plan.sharding_plan.to_dict(), indent=1, sort_keys=True))
    if plan.tier_plan is not None:  # where the tables live; its fingerprint is in every log
        _write_atomic(plan.staging_dir / "tier_plan.json", json.dumps(plan.tier_plan.to_dict(), indent=1, sort_keys=True))
    if best_auc is not None:
        reporter.message(
            f"the planted teacher's AUC on the eval split is {best_auc:.5f}: the best any model can expect; "
            f"the target is {plan.spec.target_auc}"
        )
    if not pending:
        reporter.message(f"all {plan.runs} runs of the set are already in {plan.results_dir}")
    job = 0
    try:
        for job, index in enumerate(pending):
            seed = seeds[index]
            reporter.run_started(index, plan.runs, seed, int(plan.spec.dataset["train_samples"]))
            final = _run_one(plan, index, configs[index], reporter, job)
            if group is not None:
                group.report(job, True)
            manifest["runs"][str(index)] = {"seed": seed.value, "seed_source": seed.source.value}
            _write_atomic(plan.manifest_path, json.dumps(manifest, indent=1, sort_keys=True))
            run_time, auc = run_time_from_log(final, plan.spec.target_auc)
            reporter.run_finished(RunOutcome(index, seed, final, run_time.minutes, run_time.converged, auc))
            if plan.embedding_tier:
                _report_cache(final, reporter)
    except (HarnessError, KeyboardInterrupt) as err:
        if group is not None:
            group.report(job, False, str(err) if isinstance(err, HarnessError) else interrupt_reason(err))
            group.wait_done(FAILED_DONE_TIMEOUT_S)
        raise
    if group is not None:
        group.wait_done()
    return score_results(plan, manifest)


@dataclass(frozen=True)
class FollowerOutcome:
    """What a follower node did: the runs it took part in (their indices)."""

    runs: list[int]
    node: int
    nodes: int


def follow_run_set(plan: RunSetPlan, reporter: Reporter | None = None) -> FollowerOutcome:
    """A follower node's part of a multi-node run set: after node 0 admits it, its share of the
    ranks of every run node 0 hands out. It writes nothing into the results tree: the run
    configs and any SSD shard files live in a temporary folder, removed at the end."""
    reporter = reporter or Reporter()
    nodes = plan.request.nodes
    group = NodeGroup(nodes)
    done: list[int] = []
    index: int | None = None
    try:
        jobs = group.join(plan.fingerprint)
        reporter.message(f"node {nodes.rank} of {nodes.count}: admitted by node 0 at {nodes.endpoint}; "
                         f"{len(jobs)} run(s) to take part in")
        with tempfile.TemporaryDirectory(prefix=f"harness-node{nodes.rank}-") as tmp:
            for job, item in enumerate(jobs):
                index = int(item["index"])
                config = _follower_config(plan, RunConfig.from_json(item["config"]), Path(tmp), index)
                config_path = Path(tmp) / f"result_{index}.config.json"
                stderr_path = Path(tmp) / f"result_{index}.stderr.txt"
                _write_atomic(config_path, config.to_json())
                reporter.message(f"{run_name(index)}: seed {config.seed}, ranks {nodes.rank * (plan.world_size // nodes.count)}"
                                 f"..{(nodes.rank + 1) * (plan.world_size // nodes.count) - 1} here")
                code = _follow_worker(config_path, plan, job, stderr_path, lambda event: None)
                for path in Path(tmp).glob(f"result_{index}.tables.bin*"):
                    path.unlink(missing_ok=True)
                if code != 0:
                    raise HarnessError(f"{run_name(index)} failed on node {nodes.rank}: {_worker_failure(stderr_path)}",
                                       ErrorCategory.RUN_FAILED)
                verdict = group.verdict(job)
                if not verdict["ok"]:
                    raise HarnessError(f"{run_name(index)}: node 0 reports: {verdict['message']}", ErrorCategory.RUN_FAILED)
                done.append(index)
                reporter.message(f"{run_name(index)}: done on node {nodes.rank} (node 0 holds its log)")
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: this node's ranks have ended with it
        where = f"during {run_name(index)} on node {nodes.rank}" if index is not None else f"on node {nodes.rank}"
        raise HarnessError(f"{interrupt_reason(err)} {where}: its ranks here have stopped, node 0 keeps the run's "
                           f"log (this node writes none)", interrupt_category(err)) from None
    finally:
        group.done()
        group.close()
    return FollowerOutcome(done, nodes.rank, nodes.count)


def _follower_config(plan: RunSetPlan, config: RunConfig, tmp: Path, index: int) -> RunConfig:
    """Node 0's config of a run, with this node's own paths: no log (global rank 0 writes it),
    SSD shard files in ``tmp``, the data where this node has it (the same files: the run sets'
    fingerprints agree)."""
    import dataclasses

    tier = config.embedding_tier
    if tier is not None:
        tier = {**tier, "path": str((tmp / f"result_{index}.tables.bin").resolve())}
    return dataclasses.replace(config, log_path=os.devnull, progress=False, embedding_tier=tier, data=plan.data)


def _report_cache(log_path: Path, reporter: Reporter) -> None:
    """The run's embedding cache figures, as its log records them."""
    reports = [r["value"] for r in parse_records(log_path) if r.get("key") == keys.HARNESS_EMBEDDING_CACHE]
    if not reports:
        return
    c = reports[-1]
    tier = c["tier"]
    in_memory = f" ({c['memory_rows']:,} rows of {len(c['memory_tables'])} tables kept in memory)" if c.get(
        "memory_rows") else ""
    reporter.message(
        f"  {c['policy']} cache of {c['cache_rows']:,} of {c['rows']:,} {tier.upper()} rows{in_memory}: "
        f"hit rate {c['hit_rate']:.3f} (distinct rows {c['unique_hit_rate']:.3f}); "
        f"{tier.upper()} read {c[f'{tier}_bytes_read_per_step'] / 1e6:.2f} MB/step, "
        f"written {c[f'{tier}_bytes_written_per_step'] / 1e6:.2f} MB/step"
        + (f"; rows moved {c['ssd_io']}" if c.get("ssd_io") else "")
    )


def score_results(plan: RunSetPlan, manifest: dict[str, Any]) -> RunSetOutcome:
    """Score the set's runs ``0 .. runs-1`` from their logs in the results tree."""
    outcome = RunSetOutcome(system_json=plan.system_json, results_dir=plan.results_dir)
    logs = [read_run_log(plan.result_path(index)) for index in range(plan.runs)]
    for index, log in enumerate(logs):
        info = manifest["runs"].get(str(index), {})
        seed = Seed(int(info.get("seed", -1)), SeedSource(info.get("seed_source", SeedSource.OS.value)))
        run_time = log.run_time(plan.spec.target_auc)
        final = log.eval_accuracies[-1][1] if log.eval_accuracies else None
        outcome.runs.append(RunOutcome(index, seed, log.path, run_time.minutes, run_time.converged, final))
    outcome.stats = run_set_stats(logs, target=plan.spec.target_auc, max_dropped=plan.spec.max_non_converged_runs)
    outcome.score, outcome.score_error = outcome.stats.score, outcome.stats.score_error
    return outcome
