"""Planning a run set: the request resolved against the benchmark, the profile and the machine
present (:class:`RunSetPlan`), or refused in one line, before anything is written, when it
cannot be run honestly here (the refusal of a profile whose hardware is absent gives the
projection of a run on it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles import (
    DetectedHardware,
    Profile,
    detect,
    emulated_profile,
    load_profile,
    native_precision,
    profile_present,
    system_name_for,
)
from harness.projection.render import duration
from harness.projection.system import system_for_profile
from harness.projection.train_time import project
from harness.reference.data import open_dataset
from harness.reference.data.datasets import DatasetManifest, check_epoch, dataset_manifest
from harness.reference.engine.run_config import EmbeddingTier
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.types import Plan
from harness.rules.fingerprint import fingerprint
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import BenchmarkSpec, ModelFamily, load_benchmark
from harness.runsets.launch import Nodes
from harness.runsets.placement import embedding_tier, sharding_plan, tier_identity, tier_plan
from harness.runsets.request import RunSetRequest, check_request
from harness.submitters import borrowing_provenance, effective_hyperparameters, submitter_precision


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
    embedding_tier: EmbeddingTier | None = None  # the SSD tier's tables and cache (its path set per run); None: memory
    tier_plan: Plan | None = None  # the planner's placement of a one-rank run's tables on tiers
    data: DatasetManifest | None = None  # the dataset's manifest (validated files); None: the generator
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
    check_request(request)
    spec = load_benchmark(request.benchmark).for_training("harness run")
    detected = detect(results_dir=str(request.results_dir))
    profile, emulation_scale = _profile_here(request, spec, detected)
    # A multi-GPU profile whose GPUs are here runs on NCCL. That path has not run in this
    # project's CI (no GPUs there); what makes it safe to run is the self-check at init
    # (harness.reference.distributed.self_check): the sharded probe trains on the real NCCL
    # groups and in one process, and the run stops in one line unless they agree.
    _check_family(request, spec, profile)
    comm = _comm_codecs(request.comm, profile.world_size)
    hyperparameters = effective_hyperparameters(spec, request.submitter, request.division)
    precision, precision_reason = _precision(request, spec, profile, detected)
    data, data_description = _validated_dataset(spec, request, int(hyperparameters["global_batch_size"]),
                                                progress)
    runs = request.runs if request.runs is not None else spec.required_runs
    if runs < 1:
        raise HarnessError("--runs must be at least 1")
    sharded = (sharding_plan(spec, profile, hyperparameters, comm, request, precision)
               if profile.world_size > 1 else None)
    tiered = tier_plan(request, spec, profile, hyperparameters, precision) if profile.world_size == 1 else None
    tier = embedding_tier(request, tiered or sharded)
    fp = _set_fingerprint(request, spec, profile, hyperparameters, comm, sharded, tier, data, precision)
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
        sharding_plan=sharded,
        comm=comm,
        emulation_scale=emulation_scale,
        embedding_tier=tier,
        tier_plan=tiered,
        data=data,
        data_description=data_description,
        precision=precision,
        precision_reason=precision_reason,
    )


def _profile_here(request: RunSetRequest, spec: BenchmarkSpec,
                  detected: DetectedHardware) -> tuple[Profile, float | None]:
    """The profile the set runs on, and its emulation's capacity scale (None: not emulated).
    Refuses a profile whose hardware is absent (unless ``--emulate``) and launchers that do not
    match its nodes."""
    profile = load_profile(request.profile, detected=detected)
    present, why = profile_present(profile, detected)
    if not present and not request.emulate:
        raise HarnessError(
            f"profile {profile.name} needs hardware that is not here ({why}); add --emulate to run its "
            f"{profile.world_size} rank(s) as gloo processes on this CPU, labelled emulated (a run of the "
            f"software, not a measure of that hardware's speed); {projected_on(spec, profile)}",
            ErrorCategory.HARDWARE,
        )
    _check_nodes(request.nodes, profile)
    if request.emulate:
        return emulated_profile(profile, detected, hosts=request.nodes.count)
    return profile, None


def _check_nodes(nodes: Nodes, profile: Profile) -> None:
    """A multi-node launch needs one launcher per node of a profile of several ranks per node."""
    if nodes.multi and profile.nodes == 1:
        raise HarnessError(f"profile {profile.name} has one node; --nnodes {nodes.count} needs a profile of "
                           f"{nodes.count} nodes (e.g. zionex-2x8gpu)")
    if nodes.multi and nodes.count != profile.nodes:
        raise HarnessError(f"profile {profile.name} has {profile.nodes} nodes; --nnodes must be {profile.nodes} "
                           f"(one launcher per node) or 1 (every rank here), not {nodes.count}")
    if nodes.multi and profile.world_size == nodes.count:
        raise HarnessError(f"profile {profile.name} has one rank per node; a multi-node launch needs profiles "
                           "with accelerators_per_node >= 2", ErrorCategory.NOT_IMPLEMENTED)


def _check_family(request: RunSetRequest, spec: BenchmarkSpec, profile: Profile) -> None:
    """An HSTU benchmark runs as a DLRM does (any profile, its tables sharded and tiered as planned,
    its generator or ``--data``); its data's presence (dlrmv4 needs Yambda) and its architecture are
    checked here, before anything is written."""
    if spec.family is not ModelFamily.HSTU:
        return
    # here, not at the top: harness.reference.models imports torch, which `harness run`'s launcher must not
    from harness.reference.models.from_spec import hstu_config

    if spec.dataset["kind"] == "yambda":  # dlrmv4: what it needs (Yambda's folder), checked before anything is written
        open_dataset(spec, request.data, cache_dir=request.data_cache)
    hstu_config(spec)


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


def _validated_dataset(spec: BenchmarkSpec, request: RunSetRequest, batch_size: int,
                       progress: Callable[[str], None] | None) -> tuple[DatasetManifest | None, dict[str, Any]]:
    """Open and validate the run's data once, before any run starts and before anything is
    written: the files at ``--data`` (every TSV line parsed, every npy header read; a missing,
    short or malformed dataset is one line, exit 2), or the benchmark's generator. Returns the
    manifest the runs reopen it from (None: the generator) and its description."""
    dataset = open_dataset(spec, request.data, cache_dir=request.data_cache, progress=progress)
    if dataset.train_samples // batch_size < 1:
        raise HarnessError(f"global batch size {batch_size} exceeds the {dataset.train_samples} training samples")
    if spec.max_epochs > 1:
        check_epoch(dataset, 1)
    return dataset_manifest(dataset), dataset.describe()


def _comm_codecs(requested: CommConfig, world_size: int) -> CommConfig:
    """The codec of each collective (fp32 unless asked); refused for a one-rank run (nothing is sent)."""
    if world_size == 1 and requested != CommConfig():
        raise HarnessError("quantized communication needs more than one rank; this profile has one")
    return requested


def _set_fingerprint(request: RunSetRequest, spec: BenchmarkSpec, profile: Profile, hyperparameters: dict[str, Any],
                     comm: CommConfig, sharded: Plan | None, tier: EmbeddingTier | None,
                     data: DatasetManifest | None, precision: Precision) -> str:
    """The hash of what every run of the set depends on; a resume must find the same."""
    return fingerprint({
        "benchmark": spec.raw, "hyperparameters": hyperparameters, "profile": _fingerprint_profile(profile),
        **({"emulated": True} if request.emulate else {}),
        **({"comm": comm.to_names(), "sharding_plan": sharded.fingerprint} if sharded else {}),
        **({"embedding_tier": tier_identity(tier)} if tier else {}),
        **({"data": _data_identity(data)} if data else {}),
        **({"precision": precision.value} if precision.reduced else {}),  # fp32 sets keep their fingerprint
    })


def _fingerprint_profile(profile: Profile) -> dict[str, Any]:
    """The profile's figures that a result depends on (not its prose, nor the free disk space
    of ``local``, which drifts between runs of one set)."""
    d = profile.to_dict()
    d.pop("description", None)
    d.pop("sources", None)
    if profile.name == "local":
        d.get("ssd", {}).pop("capacity_bytes", None)
    return d


def _data_identity(manifest: DatasetManifest) -> dict[str, Any]:
    """What a result depends on of the data: its files and their sizes, not where they are."""
    return {k: v for k, v in manifest.items() if k not in ("root", "path")}
