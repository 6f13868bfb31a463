"""Inference as MLPerf Inference runs it, with the embedding tables in memory or on the SSD
tier behind a DRAM cache (Software Defined Memory), driven by MLPerf's LoadGen.

One benchmark's trained model is served as several *systems* (variants): ``memory`` (its
tables in memory), ``ssd`` (its rows in a file read row by row with ``pread``, O_DIRECT
where the file system takes it, behind a row cache of a fraction of the rows:
:mod:`harness.inference.storage`) and, with ``--storage-latency-us L``, ``ssd-<L>us`` (the
same, each read taking L microseconds more: NAND flash against 3D XPoint, as the Software
Defined Memory paper compares them). Caching does not change the arithmetic, so every
variant gives the same predictions, bit for bit (checked before timing).

Each (variant, scenario) is run as an MLPerf submission runs it (:mod:`harness.inference.mlperf`):
LoadGen's official settings (``mlperf.conf``, ``dlrm-v2``) with the variant's own
``user.conf`` (its target QPS, calibrated here or given), a PerformanceOnly run into
``<results>/<system>/<model>/<scenario>/performance/run_1`` and an AccuracyOnly run over the
whole eval split into ``.../accuracy``, scored (AUC) against the reference AUC: the same
model's AUC on the eval split computed directly, in memory, outside LoadGen. Each LoadGen
test runs in a process of its own (:mod:`harness.inference.worker`). ``--quick`` shortens
the minimum duration and query count, and every output then says "not a valid MLPerf result".

The steps, in order: :func:`trained_model`, the rows file and the variants,
:func:`check_identical`, :func:`reference_auc`, the calibration, then per scenario and
variant a performance and an accuracy test; :func:`run_inference` does them all.
"""

from __future__ import annotations

import enum
import io
import json
import pickle
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import EXIT_CODES, ErrorCategory, HarnessError, io_fault
from harness.files import replace_atomic, write_atomic
from harness.inference import mlperf
from harness.inference.storage import Layout, PreadRows, SdmEmbeddings, probe_device, write_rows
from harness.inference.worker import main as worker_main
from harness.reference.data import synthetic
from harness.reference.data.batches import NUM_DENSE
from harness.reference.models.from_spec import dlrm_config
from harness.reference.models.dlrm import DLRM
from harness.reference.engine.forked import ForkedProcess, start_server
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession
from harness.reference.tiered import CachePolicy, rowio
from harness.rules.auc import roc_auc
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import BenchmarkSpec

DEFAULT_RESULTS = Path("results")
DEFAULT_STORAGE_LATENCY_US = 100.0  # a NAND-flash read; 3D XPoint (Optane) is about 10 us
# reads in flight at once: an NVMe queue holds far more; this machine's virtio disk gave fio's
# io_uring 69.6k random reads/s at 16 and 90.1k at 64, and the device probe 67-87k and 98-120k
DEFAULT_STORAGE_QUEUE_DEPTH = 64
SYSTEM_PREFIX = "harness"
# The default Server rate of a variant: the highest that passed a short search over LoadGen
# Server runs in one worker (:func:`harness.inference.worker.search_server_qps`): from half the
# rate at which it answers one-user queries back to back, doubling while a run passes, bisecting
# once one fails, SERVER_SEARCH_PROBES runs of at least SERVER_SEARCH_QUERIES queries and
# SERVER_SEARCH_MS (with the official settings: ..._OFFICIAL), so that a rate the variant cannot
# keep up with builds a queue; a run passes when it keeps up, its p99 is within
# SERVER_SEARCH_MARGIN of the bound and its p99.9 within the bound. The target is SERVER_SEARCH_HEADROOM of the highest rate that
# passed: a short run's tail is an optimistic estimate of a long run's, which LoadGen's early
# stopping then judges (measured here, the SSD variant's runs of 600 queries after searches of
# 200: VALID at 24 and 36 QPS, INVALID at 37 and 46, where 0.85 of the rate found had put them). The search goes no lower than a rate at which the quick Server run's
# queries take SERVER_SEARCH_FLOOR_S: a variant whose largest users alone take most of the bound
# (+100 us a read: a p99 of 38-43 ms at any load) would otherwise halve its way to a run of minutes
SERVER_SEARCH_PROBES = 6
SERVER_SEARCH_QUERIES = 200
SERVER_SEARCH_QUERIES_OFFICIAL = 2000
SERVER_SEARCH_MS = 2000
SERVER_SEARCH_MS_OFFICIAL = 10000
SERVER_SEARCH_MARGIN = 0.8
SERVER_SEARCH_HEADROOM = 0.6
SERVER_SEARCH_FLOOR_S = 60.0
# ... of the rate of queries through the whole Server path: the model call plus LoadGen's
# issue and completion of the query in Python, about this long (measured here with one-row
# queries: at most 5,200 queries/s while the model call took 0.09 ms)
SERVER_QUERY_OVERHEAD_S = 1e-4
VARIANT_KINDS = ("memory", "ssd", "ssd-latency")
# --quick: LoadGen's minimum duration and query count instead of the official ones
QUICK_MIN_DURATION_MS = 2000
QUICK_MIN_QUERY_COUNT = 100
# ... but Server's: LoadGen's early stopping judges its p99 only from about 460 queries on (with
# none over the bound; 100 "would need 359 more"), so fewer make every quick Server run INVALID
QUICK_SERVER_MIN_QUERY_COUNT = 600
QUICK_ACCURACY_SAMPLES = 32  # the accuracy runs' samples, users (LoadGen's accuracy_sample_count_override)
# Offline: LoadGen issues one query of max(min_query_count, 1.1 x target QPS x min duration)
# samples; with LoadGen 6.0.17 and the SUT's lists of ids it holds about this many bytes per
# sample, whatever a sample holds (measured: 744 MB peak RSS for a query of 4M samples)
OFFLINE_BYTES_PER_SAMPLE = 190
# The default Offline target: this many times the calibrated rate (LoadGen issues 1.1 x target
# x min duration samples; a run is valid if it lasts at least the min duration, i.e. if LoadGen's
# rate stays under 1.1 x this x the calibrated rate)
OFFLINE_HEADROOM = 1.25
OFFLINE_MEMORY_SHARE = 0.4  # of the memory available when the run starts
# Calibrate every variant, then every variant again, keeping each one's faster round: the
# first reads of a file just written (and fsynced) ran at 0.8x here, and a shared machine's
# other jobs come and go
CALIBRATION_ROUNDS = 2
MODEL_FILE, META_FILE = "model.pt", "model.json"
# what the LoadGen workers' fork server imports once (harness.reference.engine.forked)
WORKER_PRELOAD = ["torch", "numpy", "harness.inference.worker", "harness.inference.run",
                  "harness.reference.engine.forkserver_last"]
LOADGEN_PACKAGE = "mlcommons-loadgen"
# what to do once an I/O fault's cause is gone: a model already trained and saved is reused
AGAIN = "run the same command again (a model already trained is reused)"
WORKER_IO_FAULT = "harness: error: "  # how a LoadGen worker that cannot write its result says why, on stderr


class Scenario(enum.Enum):
    OFFLINE = "offline"
    SERVER = "server"


@dataclass(frozen=True)
class Variant:
    """One system served: its tables in memory (``ssd`` False) or on the SSD tier, each read
    taking ``latency_us`` more."""

    name: str
    ssd: bool
    latency_us: float = 0.0

    @property
    def system(self) -> str:
        return f"{SYSTEM_PREFIX}-{self.name}"


def variants_for(latency_us: float, kinds: Sequence[str] = VARIANT_KINDS) -> tuple[Variant, ...]:
    """The variants of ``kinds`` (``memory``, ``ssd``, ``ssd-latency``: the last only with a latency)."""
    out = [Variant("memory", False)] if "memory" in kinds else []
    if "ssd" in kinds:
        out.append(Variant("ssd", True))
    if latency_us > 0 and "ssd-latency" in kinds:
        out.append(Variant(f"ssd-{latency_us:g}us", True, latency_us))
    return tuple(out)


@dataclass(frozen=True)
class InferConfig:
    """What ``harness infer`` runs.

    Attributes:
        quick: shorter LoadGen runs (``QUICK_MIN_DURATION_MS``, ``QUICK_MIN_QUERY_COUNT``):
            not a valid MLPerf result, and every output says so.
        results: the results tree (``<results>/<system>/<model>/<scenario>/...``).
        storage_latency_us: the per-read latency of the third variant (0: no third variant).
        storage_queue_depth: the SSD variants' reads in flight at once (:class:`PreadRows`).
        offline_qps, server_qps: the target QPS written to every variant's ``user.conf``
            (``None``: each variant's calibrated rate; Server: the highest rate a short search over LoadGen runs passed).
        user_conf: one ``user.conf`` for every variant instead of the generated ones.
        high_accuracy: check the 99.9% target (``dlrm-v2-99.9``) instead of 99% (``dlrm-v2-99``).
        direct: read the rows file with O_DIRECT where the file system takes it.
        train_steps: train exactly this many steps; ``None``: as the benchmark's run does.
        model_dir: where the trained model is kept; ``None``: :func:`default_model_dir`.
        max_batch: the rows one Offline model call answers, about (whole users: a call ends with the
            user that reaches it); Server answers each query (one user) in a call of its own.
        threads: torch's intra-op threads.
        precision: the precision the served model is trained in (fp32, bf16, fp16: the dense
            layers, the tables' storage), as ``harness run --precision`` trains; fp32 by default,
            so the model served is the same on every machine (serving computes in fp32).
        warm_cache: the SSD variants' caches start holding the rows the training data looks up
            most (counted over its first :data:`WARM_SAMPLES` samples), as a deployment loads its
            hot rows at start; otherwise they start empty (cold).
    """

    benchmark: str = "dlrm_synthetic"
    scenarios: tuple[Scenario, ...] = (Scenario.OFFLINE, Scenario.SERVER)
    cache_fraction: float = 0.2
    cache_policy: CachePolicy = CachePolicy.LRU
    storage_latency_us: float = DEFAULT_STORAGE_LATENCY_US
    storage_queue_depth: int = DEFAULT_STORAGE_QUEUE_DEPTH
    quick: bool = False
    results: Path = DEFAULT_RESULTS
    offline_qps: float | None = None
    server_qps: float | None = None
    user_conf: Path | None = None
    high_accuracy: bool = False
    direct: bool = True
    variant_kinds: tuple[str, ...] = VARIANT_KINDS
    seed: int = 0
    train_steps: int | None = None
    model_dir: Path | None = None
    max_batch: int = 16384
    threads: int = 1
    precision: str = Precision.FP32.value
    # --quick's Server query count (the suite's shared run takes LoadGen's old 100, asserting no verdict)
    quick_server_queries: int = QUICK_SERVER_MIN_QUERY_COUNT
    warm_cache: bool = False

    def __post_init__(self) -> None:
        parse_precision(self.precision, what="--precision")
        checks = [
            (0.0 < self.cache_fraction <= 1.0, f"cache fraction {self.cache_fraction}: give a fraction in (0, 1]"),
            (self.storage_latency_us >= 0, f"storage latency {self.storage_latency_us} us: give 0 or more"),
            (self.storage_queue_depth >= 1, f"storage queue depth {self.storage_queue_depth}: give at least 1"),
            (self.offline_qps is None or self.offline_qps > 0, f"offline QPS {self.offline_qps}: give a positive rate"),
            (self.server_qps is None or self.server_qps > 0, f"server QPS {self.server_qps}: give a positive rate"),
            (self.train_steps is None or self.train_steps >= 1, f"train steps {self.train_steps}: give at least 1"),
            (self.max_batch >= 1, f"max batch {self.max_batch}: give at least 1"),
            (self.threads >= 1, f"threads {self.threads}: give at least 1"),
            (bool(self.scenarios), "no scenario to run"),
            (bool(variants_for(self.storage_latency_us, self.variant_kinds)),
             "no variant to run (ssd-latency needs a --storage-latency-us above 0)"),
            (self.user_conf is None or self.user_conf.is_file(), f"{self.user_conf}: no such user.conf"),
        ]
        for ok, message in checks:
            if not ok:
                raise HarnessError(message, ErrorCategory.NOT_FOUND if "no such" in message else ErrorCategory.BAD_INPUT)

    @property
    def model_name(self) -> str:
        """The benchmark's name in the results layout: ``dlrm-v2-99`` or ``dlrm-v2-99.9``."""
        return "dlrm-v2-99.9" if self.high_accuracy else "dlrm-v2-99"

    @property
    def label(self) -> str | None:
        """None for the official settings; else why this is not a valid MLPerf result."""
        if not self.quick:
            return None
        return (f"{mlperf.NOT_VALID} (--quick: min duration {QUICK_MIN_DURATION_MS / 1000:g} s and min query "
                f"count {QUICK_MIN_QUERY_COUNT} (Server {self.quick_server_queries}) instead of mlperf.conf's, "
                f"accuracy on {QUICK_ACCURACY_SAMPLES} "
                f"samples (users) of the eval split)")


def default_model_dir(benchmark: str, seed: int, train_steps: int | None,
                      precision: str = Precision.FP32.value, results: Path = DEFAULT_RESULTS) -> Path:
    """``<results>/.harness/models/<benchmark>-seed<N>[-steps<K>][-<precision>]`` (no suffix for
    fp32), under the run's ``--results`` (``results`` of the current directory by default)."""
    steps = f"-steps{train_steps}" if train_steps is not None else ""
    trained_in = f"-{precision}" if precision != Precision.FP32.value else ""
    return Path(results) / ".harness" / "models" / f"{benchmark}-seed{seed}{steps}{trained_in}"


# ---------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class TrainedModel:
    """The model served, and how it was trained."""

    path: Path
    benchmark: str
    seed: int
    train_steps_requested: int | None  # None: until the target AUC at the benchmark's cadence
    steps: int
    epochs: float
    auc: float
    target_auc: float
    train_s: float
    reused: bool = False
    precision: str = Precision.FP32.value  # what it was trained in (a model saved before it was kept: fp32)

    @property
    def reached_target(self) -> bool:
        return self.auc >= self.target_auc

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "reached_target": self.reached_target}


@dataclass(frozen=True)
class LoadgenSummary:
    """What LoadGen's ``mlperf_log_summary.txt`` says about one PerformanceOnly run."""

    scenario: Scenario
    samples_per_s: float  # Offline: samples per second; Server: completed samples per second
    scheduled_per_s: float | None  # Server: the rate LoadGen scheduled queries at
    p50_latency_ms: float
    p99_latency_ms: float
    p999_latency_ms: float
    valid: bool
    constraints: dict[str, str]  # "Min duration satisfied": "Yes", ...
    path: Path

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scenario": self.scenario.value, "path": str(self.path)}


@dataclass(frozen=True)
class Storage:
    """The SSD variant's reads during one run (from the worker's counts)."""

    mode: str  # direct (O_DIRECT ...) or buffered (why)
    reads: int
    bytes_read: int
    misses: int  # distinct rows of a model call that were not resident, summed
    samples: int  # LoadGen's samples answered: users
    rows: int  # their rows (user-item pairs)
    model_calls: int
    bypass_calls: int  # calls with more distinct rows than the cache holds (it keeps their hottest rows)
    reads_equal_misses_per_call: bool
    table_lookups: list[int]
    table_hits: list[int]
    added_latency_us: float  # the busy-wait of one latency, its median, measured at start
    read_s: float = 0.0  # time in the reads during the run (the added waits included)

    @property
    def read_us(self) -> float:
        """Time in the reads per read during the run: the device's, Python's and the added latency,
        divided by the reads in flight at once (at queue depth 1, each read's own time)."""
        return self.read_s / self.reads * 1e6 if self.reads else 0.0

    @property
    def reads_per_s(self) -> float:
        """Reads per second of time in the reads: what the device gave this run's calls."""
        return self.reads / self.read_s if self.read_s > 0 else 0.0

    @property
    def reads_per_sample(self) -> float:
        return self.reads / self.samples if self.samples else 0.0

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes_read / self.samples if self.samples else 0.0

    @property
    def table_hit_rates(self) -> list[float | None]:
        return [h / n if n else None for h, n in zip(self.table_hits, self.table_lookups)]

    @property
    def hit_rate(self) -> float | None:
        n = sum(self.table_lookups)
        return sum(self.table_hits) / n if n else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reads_per_sample": round(self.reads_per_sample, 4),
                "bytes_per_sample": round(self.bytes_per_sample, 1),
                "hit_rate": None if self.hit_rate is None else round(self.hit_rate, 6), "read_us": round(self.read_us, 2),
                "reads_per_s": round(self.reads_per_s, 1),
                "table_hit_rates": [None if r is None else round(r, 4) for r in self.table_hit_rates]}


@dataclass(frozen=True)
class RunResult:
    """One (variant, scenario): its performance run and its accuracy run."""

    variant: Variant
    scenario: Scenario
    target_qps: float
    qps_source: str  # calibrated, --offline-qps/--server-qps, --user-conf, or capped (why)
    user_conf: Path
    summary: LoadgenSummary
    storage: Storage | None
    accuracy: mlperf.AccuracyScore
    resident_table_bytes: int
    peak_rss_bytes: int
    performance_s: float  # the LoadGen test's wall time
    accuracy_s: float
    effective: dict[str, Any]  # LoadGen's effective settings, from its detail log
    loadgen_errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant.name, "system": self.variant.system, "scenario": self.scenario.value,
            "storage_latency_us": self.variant.latency_us, "target_qps": round(self.target_qps, 1),
            "qps_source": self.qps_source, "user_conf": str(self.user_conf), **self.summary.to_dict(),
            "storage": None if self.storage is None else self.storage.to_dict(),
            "accuracy": self.accuracy.to_dict(), "resident_table_bytes": self.resident_table_bytes,
            "peak_rss_bytes": self.peak_rss_bytes, "performance_s": round(self.performance_s, 2),
            "accuracy_s": round(self.accuracy_s, 2), "effective_settings": self.effective,
            "loadgen_errors": self.loadgen_errors,
        }


@dataclass(frozen=True)
class InferReport:
    config: InferConfig
    model: TrainedModel
    variants: tuple[Variant, ...]
    table_rows: int
    cache_rows: int
    memory_table_bytes: int
    ssd_file_bytes: int
    storage_mode: str
    identical_samples: int
    reference_auc: float
    results: list[RunResult]
    loadgen_version: str
    mlperf_conf_sha1_matches: bool
    wall_s: float
    notes: list[str] = field(default_factory=list)
    reader: str = ""  # what read the SSD tier's rows (rowio.reader_name())
    device_probe: rowio.DeviceProbe | None = None  # the device's random reads/s at the run's queue depth
    warm_note: str = "cold at start"  # how the SSD variants' caches started

    @property
    def label(self) -> str | None:
        return self.config.label

    @property
    def all_valid(self) -> bool:
        return all(r.summary.valid for r in self.results)

    @property
    def accuracy_passed(self) -> bool:
        return all(r.accuracy.passed for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "label": self.label,
            "valid_mlperf_result": self.label is None and self.all_valid and self.accuracy_passed,
            "benchmark": c.benchmark,
            "model_name": c.model_name,
            "results_dir": str(c.results),
            "settings": {
                "scenarios": [s.value for s in c.scenarios], "cache_fraction": c.cache_fraction,
                "cache_policy": c.cache_policy.value, "storage_latency_us": c.storage_latency_us,
                "storage_queue_depth": c.storage_queue_depth, "warm_cache": c.warm_cache,
                "quick": c.quick, "max_batch": c.max_batch, "threads": c.threads, "precision": c.precision,
                "user_conf": None if c.user_conf is None else str(c.user_conf),
                "mlperf_conf": str(mlperf.MLPERF_CONF), "mlperf_conf_sha1": mlperf.MLPERF_CONF_SHA1,
                "mlperf_conf_sha1_matches_loadgen": self.mlperf_conf_sha1_matches,
            },
            "loadgen_version": self.loadgen_version,
            "model": self.model.to_dict(),
            "identical_predictions_samples": self.identical_samples,
            "reference_auc": self.reference_auc,
            "tables": {"rows": self.table_rows, "cache_rows": self.cache_rows,
                       "memory_table_bytes": self.memory_table_bytes, "ssd_file_bytes": self.ssd_file_bytes,
                       "storage_mode": self.storage_mode, "reader": self.reader},
            "device_probe": None if self.device_probe is None else {
                "reads": self.device_probe.reads, "seconds": round(self.device_probe.seconds, 4),
                "queue_depth": self.device_probe.depth, "slot_bytes": self.device_probe.slot_bytes,
                "reader": self.device_probe.reader, "reads_per_s": round(self.device_probe.reads_per_s, 1)},
            "results": [r.to_dict() for r in self.results],
            "all_valid": self.all_valid,
            "accuracy_passed": self.accuracy_passed,
            "notes": self.notes,
            "wall_s": round(self.wall_s, 2),
        }


# ---------------------------------------------------------------------------------- loadgen
def loadgen() -> Any:
    """The ``mlperf_loadgen`` module, or a one-line error saying how to install it."""
    try:
        import mlperf_loadgen
    except ImportError as err:
        raise HarnessError(
            f"MLPerf's LoadGen is not installed ({err}): pip install '{LOADGEN_PACKAGE}>=6.0,<7'",
            ErrorCategory.NOT_FOUND,
        ) from err
    return mlperf_loadgen


def loadgen_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(LOADGEN_PACKAGE)
    except PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------------------------- training
def trained_model(spec: BenchmarkSpec, *, seed: int, train_steps: int | None, model_dir: Path,
                  progress: Callable[[str], None],
                  precision: str = Precision.FP32.value) -> tuple[TrainedModel, dict[str, torch.Tensor]]:
    """The benchmark's model trained from ``seed`` in ``precision``: loaded from ``model_dir``
    when it is there, else trained now and saved there (``model.pt``: the state dict;
    ``model.json``, written last: how it was trained)."""
    meta_path, model_path = model_dir / META_FILE, model_dir / MODEL_FILE
    if meta_path.is_file():
        model = _read_meta(meta_path, model_path)
        if (model.benchmark, model.seed, model.train_steps_requested, model.precision) != (
                spec.name, seed, train_steps, precision):
            raise HarnessError(
                f"{model_dir} holds a model of {model.benchmark} seed {model.seed} "
                f"({_training_words(model.train_steps_requested, model.precision)}), not of {spec.name} seed {seed} "
                f"({_training_words(train_steps, precision)}): give another --model-dir, or remove that one",
                ErrorCategory.BAD_INPUT,
            )
        state = _read_state(model_path)
        progress(f"reusing the model in {model_dir}: {model.steps} steps ({model.epochs:.3f} epoch), AUC {model.auc:.5f}")
        return model, state
    progress(f"training {spec.name} seed {seed} ({_training_words(train_steps, precision)}) ...")
    t0 = time.perf_counter()
    state, steps, epochs, auc = _train(spec, seed, train_steps, progress, precision)
    model = TrainedModel(path=model_path, benchmark=spec.name, seed=seed, train_steps_requested=train_steps,
                         steps=steps, epochs=epochs, auc=auc, target_auc=spec.target_auc,
                         train_s=time.perf_counter() - t0, precision=precision)
    # serialised in memory first: torch's zip writer reports a full disk as a RuntimeError
    buffer = io.BytesIO()
    torch.save(state, buffer)
    replace_atomic(model_path, lambda tmp: tmp.write_bytes(buffer.getbuffer()), doing="saving the trained model",
                   then=AGAIN)
    meta = {k: v for k, v in model.to_dict().items() if k not in ("path", "reused")}
    write_atomic(meta_path, json.dumps(meta, indent=1) + "\n", then=AGAIN)
    return model, state


def _training_words(train_steps: int | None, precision: str) -> str:
    return ("until the target AUC" if train_steps is None else f"{train_steps} steps") + f" in {precision}"


def _not_a_model(where: Path, err: Exception) -> HarnessError:
    first = (str(err).strip().splitlines() or [""])[0]
    return HarnessError(f"{where}: not a saved model ({type(err).__name__}: {first}); remove it to train again",
                        ErrorCategory.BAD_INPUT)


def _read_meta(meta_path: Path, model_path: Path) -> TrainedModel:
    try:
        meta = json.loads(meta_path.read_text())
        steps = meta["train_steps_requested"]
        return TrainedModel(path=model_path, benchmark=str(meta["benchmark"]), seed=int(meta["seed"]),
                            train_steps_requested=None if steps is None else int(steps), steps=int(meta["steps"]),
                            epochs=float(meta["epochs"]), auc=float(meta["auc"]),
                            target_auc=float(meta["target_auc"]), train_s=float(meta["train_s"]), reused=True,
                            precision=parse_precision(meta.get("precision", Precision.FP32.value)).value)
    except (OSError, ValueError, KeyError, TypeError, HarnessError) as err:
        raise _not_a_model(meta_path, err) from err


def _read_state(model_path: Path) -> dict[str, torch.Tensor]:
    try:
        return torch.load(model_path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as err:
        raise _not_a_model(model_path, err) from err


class _Progress(SessionHooks):
    def __init__(self, progress: Callable[[str], None]):
        self.progress = progress

    def after_eval(self, session: TrainingSession, auc: float) -> bool:
        self.progress(f"  step {session.step_count} (epoch {session.epoch_num:.3f}): AUC {auc:.5f}")
        return False


def _train(spec: BenchmarkSpec, seed: int, train_steps: int | None, progress: Callable[[str], None],
           precision: str) -> tuple[dict[str, torch.Tensor], int, float, float]:
    """Train as the reference run does (the same session: model, data order, optimizers,
    schedule, precision); return the inference state dict (no optimizer state), the steps
    taken, the epochs and the last AUC."""
    session = TrainingSession(RunConfig.offline(spec.raw, dict(spec.reference_hyperparameters), seed,
                                                who="harness-infer", precision=precision))
    limit = session.step_limit()
    if train_steps is not None and train_steps > limit:
        raise HarnessError(f"--train-steps {train_steps}: {spec.name} trains at most {limit} steps "
                           f"({spec.max_epochs:g} epoch of batch {session.global_batch_size})", ErrorCategory.BAD_INPUT)
    if train_steps is None:
        outcome = session.train(_Progress(progress))
    else:
        outcome = session.train(_Progress(progress), eval_at=[train_steps], until=train_steps, stop_at_target=False)
    auc = outcome.eval_accuracies[-1][1] if outcome.eval_accuracies else float("nan")
    state = {k: v.detach().clone() for k, v in session.model.state_dict().items()}
    state["sparse_arch.embeddings.optimizer_state"] = torch.empty(0)  # inference tables carry none
    session.close()
    return state, session.step_count, session.epoch_num, auc


# ---------------------------------------------------------------------------------- the variants
def memory_model(spec: BenchmarkSpec, state: dict[str, torch.Tensor]) -> DLRM:
    """The trained model for inference (no sparse optimizer), tables in memory."""
    model = DLRM(dlrm_config(spec))
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as err:
        first = str(err).strip().splitlines()[0]
        raise HarnessError(f"the saved model does not fit {spec.name}'s model ({first}); remove it to train again",
                           ErrorCategory.BAD_INPUT) from err
    return model.eval()



@torch.no_grad()
def check_identical(memory: DLRM, ssd: DLRM, data: synthetic.SyntheticCriteo, *, sizes: Sequence[int]) -> int:
    """Compare the two variants' logits on consecutive eval batches of ``sizes`` samples,
    bit for bit; raise if any differ. Returns the samples compared."""
    idx = data.eval_indices()
    lo = 0
    for size in sizes:
        batch = data.samples(idx[lo : lo + size])
        lo += size
        a, b = memory(batch.dense, batch.sparse), ssd(batch.dense, batch.sparse)
        if not torch.equal(a, b):
            worst = float((a - b).abs().max())
            raise HarnessError(
                f"the SSD-tier model's predictions differ from the in-memory model's on a batch of {size} "
                f"(largest difference {worst:.3g}): the cache changed the arithmetic", ErrorCategory.RUN_FAILED,
            )
    return lo


# ---------------------------------------------------------------------------------- QSL and SUT
class SampleLibrary:
    """LoadGen's query sample library over the eval split, as MLPerf's DLRMv2 reference keeps
    it: QSL index ``i`` is a user, eval rows ``offsets[i]:offsets[i + 1]`` (100 to 700 of
    them: :func:`harness.inference.mlperf.user_offsets`).

    Loading generates the rows of the users LoadGen asks for (``dense`` ``rows x 13``,
    ``sparse`` ``rows x L``, ``labels``), before LoadGen starts timing; unloading forgets them.
    """

    def __init__(self, data: synthetic.SyntheticCriteo):
        self.data = data
        self.indices = data.eval_indices()
        n, width = self.indices.size, sum(data.pooling)
        self.offsets = mlperf.user_offsets(int(n))
        self.sizes = np.diff(self.offsets)
        self.dense = torch.zeros(n, NUM_DENSE)
        self.sparse = torch.zeros(n, width, dtype=torch.int64)
        self.labels = torch.zeros(n)
        self.loaded = torch.zeros(n, dtype=torch.bool)

    @property
    def count(self) -> int:
        """The samples (users)."""
        return int(self.sizes.size)

    @property
    def rows(self) -> int:
        return int(self.indices.size)

    @property
    def mean_rows(self) -> float:
        return self.rows / self.count

    def rows_of(self, users: np.ndarray) -> np.ndarray:
        """The eval rows of ``users``, one user after another."""
        sizes = self.sizes[users]
        starts = np.repeat(self.offsets[users] - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
        return starts + np.arange(int(sizes.sum()), dtype=np.int64)

    def load(self, users: Sequence[int]) -> None:
        rows = self.rows_of(np.asarray(users, dtype=np.int64))
        for lo in range(0, rows.size, 65536):
            part = rows[lo : lo + 65536]
            batch = self.data.samples(self.indices[part])
            t = torch.from_numpy(part)
            self.dense[t], self.sparse[t], self.labels[t] = batch.dense, batch.sparse, batch.labels.float()
            self.loaded[t] = True

    def load_all(self) -> None:
        """Every user's rows, generated once (the calibration's calls need them all)."""
        if not bool(self.loaded.all()):
            self.load(range(self.count))

    def unload(self, users: Sequence[int]) -> None:
        self.loaded[torch.from_numpy(self.rows_of(np.asarray(users, dtype=np.int64)))] = False



# ---------------------------------------------------------------------------------- the SSD variants
def ssd_model(spec: BenchmarkSpec, state: dict[str, torch.Tensor], rows_file: Path, layout: Layout, *,
              cache_rows: int, policy: CachePolicy, latency_us: float,
              queue_depth: int = 1, warm: np.ndarray | None = None) -> tuple[DLRM, SdmEmbeddings]:
    """The trained model with its tables served from ``rows_file`` through a cache of
    ``cache_rows`` rows, each read taking ``latency_us`` more, ``queue_depth`` reads in flight;
    the cache holding ``warm``'s rows (:func:`hot_rows`) at start, or empty."""
    model = memory_model(spec, state)
    full = model.sparse_arch.embeddings
    store = PreadRows(rows_file, layout, latency_us=latency_us, queue_depth=queue_depth)
    tables = SdmEmbeddings(full.table_rows, full.dim, full.pooling, store, cache_rows, policy)
    if warm is not None:
        tables.warm(torch.from_numpy(warm))
    model.sparse_arch.embeddings = tables
    return model.eval(), tables


WARM_SAMPLES = 1 << 18  # the training samples whose ids --warm-cache counts


def hot_rows(data: synthetic.SyntheticCriteo, column_offsets: torch.Tensor, table_rows: int, count: int, *,
             samples: int = WARM_SAMPLES, chunk: int = 1 << 15) -> tuple[np.ndarray, int]:
    """The ``count`` rows (of the fused table of ``table_rows`` rows) that the first ``samples``
    training samples look up most, hottest first (ties: the lower row first), and the samples
    counted: what a deployment would load into its cache at start."""
    n = min(int(samples), int(data.spec.train_samples))
    uses = np.zeros(table_rows, dtype=np.int64)
    offsets = column_offsets.numpy()
    for lo in range(0, n, chunk):
        ids = data._all_ids(np.arange(lo, min(lo + chunk, n), dtype=np.int64)) + offsets
        uses += np.bincount(ids.reshape(-1), minlength=table_rows)
    order = np.argsort(-uses, kind="stable")[: min(int(count), int(np.count_nonzero(uses)))]
    return order.astype(np.int64), n


@torch.no_grad()
def reference_auc(model: DLRM, data: synthetic.SyntheticCriteo, *,
                  batch: int = 8192) -> tuple[float, np.ndarray, np.ndarray]:
    """The model's AUC on the whole eval split, computed directly (no LoadGen): the reference
    the accuracy runs are checked against; the eval labels and the model's probabilities, by QSL index."""
    idx = data.eval_indices()
    probs, labels = [], []
    for lo in range(0, idx.size, batch):
        b = data.samples(idx[lo : lo + batch])
        probs.append(torch.sigmoid(model(b.dense, b.sparse)).numpy())
        labels.append(b.labels.numpy())
    y, p = np.concatenate(labels), np.concatenate(probs)
    return roc_auc(y, p), y, p


# ---------------------------------------------------------------------------------- calibration
@torch.no_grad()
def calibrate(model: DLRM, library: SampleLibrary, batch: int, *, min_s: float = 0.5, max_calls: int = 400) -> float:
    """Seconds per model call on ``batch`` rows (sigmoid included) as the SUT's pipeline spends
    them (its slower stage: the embedding lookups, or the dense part), the fastest of at least 5
    consecutive, different batches of the eval split (so an SSD variant's cache sees new rows):
    the Offline target is sized from it, and the asymmetry decides the statistic: a target
    under the run's rate ends the run before the minimum duration (INVALID), one over it only
    makes the run longer; on a shared machine the median of a half-second sample can be far
    under the rate of a 600 s run."""
    n = library.rows
    library.load_all()
    times: list[float] = []
    lo = 0
    t_end = time.perf_counter() + min_s
    while (time.perf_counter() < t_end or len(times) < 5) and len(times) < max_calls:
        idx = torch.arange(lo, lo + batch) % n
        lo = (lo + batch) % n
        t0 = time.perf_counter()
        pooled = model.sparse_arch(library.sparse.index_select(0, idx))
        t1 = time.perf_counter()
        torch.sigmoid(model.over_arch(model.interaction(model.dense_arch(library.dense.index_select(0, idx)),
                                                        pooled))).numpy()
        # the SUT's two stages overlap (lookups of the next call during this one's dense part):
        # a call's share of the run is its slower stage
        times.append(max(t1 - t0, time.perf_counter() - t1))
    return float(np.min(times))


@torch.no_grad()
def calibrate_user_query(model: DLRM, library: SampleLibrary, *, max_s: float = 10.0) -> tuple[float, float]:
    """Seconds per Server query: one model call on one user's rows, the mean and the 99th
    percentile over every user once, in a random order (as LoadGen draws them; a fixed seed),
    or as many as ``max_s`` allows (users differ in size, so the tail needs all of them)."""
    library.load_all()
    times: list[float] = []
    t_end = time.perf_counter() + max_s
    for user in np.random.default_rng(0).permutation(library.count):
        if len(times) >= 3 and time.perf_counter() > t_end:
            break
        idx = torch.from_numpy(library.rows_of(np.array([user])))
        t0 = time.perf_counter()
        torch.sigmoid(model(library.dense.index_select(0, idx), library.sparse.index_select(0, idx))).numpy()
        times.append(time.perf_counter() - t0)
    return float(np.mean(times)), float(np.percentile(times, 99))


@torch.no_grad()
def warm_cache(model: DLRM, library: SampleLibrary, *, max_s: float = 1.0, max_calls: int = 50) -> None:
    """Model calls on one user each (they go through the cache, admitting rows), from the
    first users of the eval split, for up to ``max_s`` seconds."""
    library.load_all()
    t_end = time.perf_counter() + max_s
    for user in range(min(max_calls, library.count)):
        if time.perf_counter() > t_end:
            break
        idx = torch.from_numpy(library.rows_of(np.array([user])))
        model(library.dense.index_select(0, idx), library.sparse.index_select(0, idx))


def memory_available_bytes() -> int | None:
    return mlperf.proc_bytes("/proc/meminfo", "MemAvailable")


def offline_qps_cap(min_duration_s: float, min_query_count: float) -> float | None:
    """The largest Offline target QPS whose one query fits :data:`OFFLINE_MEMORY_SHARE` of the
    memory available now (None: unknown)."""
    available = memory_available_bytes()
    if available is None:
        return None
    samples = OFFLINE_MEMORY_SHARE * available / OFFLINE_BYTES_PER_SAMPLE
    if samples <= min_query_count:
        return None
    return samples / (1.1 * min_duration_s)


# ---------------------------------------------------------------------------------- one LoadGen test
_LINE = re.compile(r"^\s*([^:]+?)\s*:\s*(.+?)\s*$")


def parse_summary(path: Path, scenario: Scenario) -> LoadgenSummary:
    """Read a LoadGen ``mlperf_log_summary.txt``: throughput, p50/p99/p99.9 latency, VALID or
    not, and the constraints it checked."""
    if not path.is_file():
        raise HarnessError(f"LoadGen wrote no summary at {path}", ErrorCategory.RUN_FAILED)
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2)
    try:
        rate_key = "Samples per second" if scenario is Scenario.OFFLINE else "Completed samples per second"
        return LoadgenSummary(
            scenario=scenario,
            samples_per_s=float(fields[rate_key]),
            scheduled_per_s=float(fields["Scheduled samples per second"]) if scenario is Scenario.SERVER else None,
            p50_latency_ms=float(fields["50.00 percentile latency (ns)"]) / 1e6,
            p99_latency_ms=float(fields["99.00 percentile latency (ns)"]) / 1e6,
            p999_latency_ms=float(fields["99.90 percentile latency (ns)"]) / 1e6,
            valid=fields["Result is"] == "VALID",
            constraints={k: v for k, v in fields.items() if k.endswith("satisfied")},
            path=path,
        )
    except (KeyError, ValueError) as err:
        raise HarnessError(f"{path}: not a LoadGen summary of a {scenario.value} run (missing or bad {err})",
                           ErrorCategory.RUN_FAILED) from err


def run_worker(job: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    """One LoadGen test in its own process (:mod:`harness.inference.worker`); its result."""
    name = f"{job['variant_name']}-{job['scenario']}-{job['mode']}"
    job_path, result_path = work_dir / f"{name}.job.json", work_dir / f"{name}.result.json"
    job = {**job, "result": str(result_path)}
    job_path.write_text(json.dumps(job, indent=1))
    if result_path.exists():
        result_path.unlink()
    output = work_dir / f"{name}.output.txt"  # the worker's stdout and stderr
    output.write_bytes(b"")
    # forked from a server that has imported torch once for all of this command's tests (see
    # harness.reference.engine.forked): still one process per test, as LoadGen needs
    proc = ForkedProcess(worker_main, ([str(job_path)],), stderr_path=output, stdout_path=output,
                         name=f"harness LoadGen worker {name}", preload=WORKER_PRELOAD)
    try:
        code = proc.wait()
    except BaseException:  # Ctrl-C, SIGTERM: the worker goes with this process
        proc.kill()
        proc.wait()
        raise
    if not result_path.is_file():
        tail = (output.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
        if code == EXIT_CODES[ErrorCategory.IO_FAULT] and tail.startswith(WORKER_IO_FAULT):
            raise HarnessError(tail.removeprefix(WORKER_IO_FAULT), ErrorCategory.IO_FAULT)
        raise HarnessError(f"the LoadGen worker for {name} exited {code} without a result: {tail}",
                           ErrorCategory.RUN_FAILED)
    result = json.loads(result_path.read_text())
    if "error" in result:
        raise HarnessError(result["error"], ErrorCategory(result.get("category", "run_failed")))
    return result


# ---------------------------------------------------------------------------------- everything
@dataclass
class _Served:
    """One variant in this process, with its calibration."""

    variant: Variant
    model: DLRM
    tables: SdmEmbeddings | None = None
    batch_s: float = 0.0  # one call answering max_batch rows
    single_query_s: float = 0.0  # one call answering one user's rows, the mean
    single_query_p99_s: float = 0.0  # ... the 99th percentile


EFFECTIVE_KEYS = ("effective_scenario", "effective_test_mode", "requested_min_duration_ms", "requested_min_query_count",
                  "effective_min_duration_ms", "effective_min_query_count", "effective_min_sample_count",
                  "generated_samples_per_query", "result_validity", "early_stopping_met",
                  "effective_target_qps", "effective_target_latency_ns", "effective_target_latency_percentile",
                  "effective_performance_sample_count", "effective_sample_index_rng_seed", "generated_query_count",
                  "effective_accuracy_sample_count")


def run_inference(config: InferConfig, *, progress: Callable[[str], None] = lambda _m: None) -> InferReport:
    """Train (or reuse) the benchmark's model, then run every variant in each scenario as an
    MLPerf submission does (performance, then accuracy), into ``config.results``."""
    from harness.reference.data.datasets import SyntheticDataset
    from harness.rules.specs import load_benchmark

    t_start = time.perf_counter()
    loadgen()
    spec = load_benchmark(config.benchmark)
    data = SyntheticDataset(spec.dataset).generator
    model_dir = config.model_dir or default_model_dir(spec.name, config.seed, config.train_steps, config.precision,
                                                      config.results)
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    notes: list[str] = []
    if config.label:
        progress(f"*** {config.label} ***")
    try:
        return _run_inference(config, spec, data, model_dir, notes, t_start, progress)
    except OSError as err:  # the machine's: a full disk, a folder that cannot be written, an I/O error
        raise io_fault(err, config.results, "serving", AGAIN) from None
    finally:
        torch.set_num_threads(threads)


def _run_inference(config: InferConfig, spec: BenchmarkSpec, data: Any, model_dir: Path, notes: list[str],
                   t_start: float, progress: Callable[[str], None]) -> InferReport:
    model, state = trained_model(spec, seed=config.seed, train_steps=config.train_steps, model_dir=model_dir,
                                 progress=progress, precision=config.precision)
    start_server(WORKER_PRELOAD)  # the LoadGen workers' fork server imports torch while the variants are prepared
    memory_net = memory_model(spec, state)
    weight = memory_net.sparse_arch.embeddings.weight.detach()
    rows = int(weight.shape[0])
    cache_rows = max(1, round(rows * config.cache_fraction))
    variants = variants_for(config.storage_latency_us, config.variant_kinds)
    with tempfile.TemporaryDirectory(dir=model_dir, prefix="ssd-tier-") as tier:
        tier_dir = Path(tier)
        rows_file = tier_dir / "tables.rows"
        try:
            layout = write_rows(rows_file, weight, direct=config.direct)
        except OSError as err:
            raise io_fault(err, rows_file, "writing the tables to the SSD tier", AGAIN) from None
        progress(f"tables on the SSD tier: {rows_file} ({rows} rows of {layout.row_bytes} bytes), "
                 f"read {layout.mode} by {rowio.reader_name()}")
        # the device's own limit at the run's queue depth, for the fraction every report prints
        probe = probe_device(rows_file, layout, depth=config.storage_queue_depth)
        progress(probe.describe())
        warm, warm_file, warm_note = None, None, "cold at start"
        if config.warm_cache:
            warm, counted = hot_rows(data, memory_net.sparse_arch.embeddings.column_offsets, rows, cache_rows)
            warm_file = tier_dir / "warm-rows.npy"
            np.save(warm_file, warm)
            warm_note = f"warmed at start with the {warm.size:,} rows the first {counted:,} training samples look up most"
            progress(f"cache: {warm_note}")
        served = [_Served(v, memory_net) if not v.ssd else _Served(v, *ssd_model(
            spec, state, rows_file, layout, cache_rows=cache_rows, policy=config.cache_policy,
            latency_us=v.latency_us, queue_depth=config.storage_queue_depth, warm=warm)) for v in variants]
        try:
            identical = 0
            for s in (s for s in served if s.tables is not None):
                identical = check_identical(memory_net, s.model, data, sizes=_check_sizes(config.max_batch))
            if identical:
                progress(f"every SSD variant's predictions are identical to the in-memory model's, bit for "
                         f"bit, on {identical} eval rows")
            ref_auc, labels, ref_probs = reference_auc(memory_net, data)
            progress(f"reference AUC (the in-memory model on the {labels.size} eval rows, directly): "
                     f"{ref_auc:.6f}")
            library = SampleLibrary(data)
            progress(f"samples: {library.count} users of {library.sizes.min()} to {library.sizes.max()} rows "
                     f"(mean {library.mean_rows:.0f}) over the {library.rows} eval rows, as MLPerf's DLRMv2 "
                     f"reference draws them")
            # the one-user query time sizes only a calibrated Server target: not timed without one
            query_target_needed = Scenario.SERVER in config.scenarios and not config.server_qps \
                and config.user_conf is None
            for rnd in range(CALIBRATION_ROUNDS):  # every variant, then every variant again
                for s in served:
                    if s.tables is not None:  # a fresh, cold cache, as the worker's
                        s.tables.store.close()
                        s.model, s.tables = ssd_model(spec, state, rows_file, layout, cache_rows=cache_rows,
                                                      policy=config.cache_policy, latency_us=s.variant.latency_us,
                                                      queue_depth=config.storage_queue_depth, warm=warm)
                    batch_s = calibrate(s.model, library, config.max_batch)
                    s.batch_s = batch_s if rnd == 0 else min(s.batch_s, batch_s)
                    if not query_target_needed:
                        continue
                    if s.tables is not None:  # one-user queries meet a warm cache in a run
                        warm_cache(s.model, library)
                    mean_s, p99_s = calibrate_user_query(s.model, library)
                    if rnd == 0 or mean_s < s.single_query_s:
                        s.single_query_s, s.single_query_p99_s = mean_s, p99_s
            for s in served:
                per_query = (f"{s.single_query_s * 1e3:.3f} ms per one-user query (p99 "
                             f"{s.single_query_p99_s * 1e3:.3f} ms)") if query_target_needed else \
                    "one-user queries not timed (the Server target is given)"
                progress(f"calibration, {s.variant.name}: {config.max_batch / s.batch_s:,.0f} rows/s in "
                         f"batches of {config.max_batch} rows, {per_query}")
            for s in served:
                if s.tables is not None:
                    s.tables.store.close()
            results = []
            for scenario in config.scenarios:
                for s in served:
                    results.append(_run_variant(config, spec, s, scenario, model_dir=model_dir, rows_file=rows_file,
                                                layout=layout, cache_rows=cache_rows, library=library, labels=labels,
                                                ref_probs=ref_probs, work_dir=tier_dir, notes=notes,
                                                progress=progress, warm_file=warm_file))
        finally:
            for s in served:
                if s.tables is not None:
                    s.tables.store.close()
    sha_ok = all(r.effective.get("mlperf_conf_sha1") == mlperf.MLPERF_CONF_SHA1 for r in results) \
        and mlperf.conf_sha1() == mlperf.MLPERF_CONF_SHA1
    return InferReport(
        config=config, model=model, variants=variants, table_rows=rows, cache_rows=cache_rows,
        memory_table_bytes=weight.numel() * weight.element_size(), ssd_file_bytes=layout.rows * layout.stride,
        storage_mode=layout.mode, identical_samples=identical, reference_auc=ref_auc, results=results,
        loadgen_version=loadgen_version(), mlperf_conf_sha1_matches=sha_ok, wall_s=time.perf_counter() - t_start,
        notes=notes, reader=rowio.reader_name(), device_probe=probe, warm_note=warm_note,
    )


def _check_sizes(max_batch: int) -> list[int]:
    """Batches to compare the variants on: a full one (larger than a small cache: it bypasses
    it) and small ones that go through the cache, admitting and evicting rows."""
    return [max_batch, *([64] * 4), 1, 1]


def _target(config: InferConfig, s: _Served, scenario: Scenario, notes: list[str],
            mean_rows: float) -> tuple[float, str]:
    """The variant's target QPS (users per second) for ``scenario`` and where it comes from."""
    if scenario is Scenario.SERVER:
        if config.server_qps:
            return config.server_qps, "--server-qps"
        raise AssertionError("a Server target without --server-qps is searched (_search_server_qps)")
    qps, source = (config.offline_qps, "--offline-qps") if config.offline_qps else \
        (config.max_batch / s.batch_s / mean_rows * OFFLINE_HEADROOM,
         f"calibrated ({OFFLINE_HEADROOM:g} x calibrated rate)")
    if not config.quick:
        min_s = (mlperf.official("Offline", "min_duration") or 0) / 1000
        cap = offline_qps_cap(min_s, mlperf.official("Offline", "min_query_count") or 0)
        if cap is not None and qps > cap:
            notes.append(
                f"{s.variant.system} offline: target QPS {qps:,.0f} capped at {cap:,.0f}: LoadGen's one query of "
                f"1.1 x QPS x {min_s:g} s samples (about {OFFLINE_BYTES_PER_SAMPLE} bytes each) must fit "
                f"{OFFLINE_MEMORY_SHARE:.0%} of the memory available; the run is then shorter than the minimum "
                f"duration and LoadGen may call it INVALID")
            return cap, f"capped to fit memory (calibrated {qps:,.0f})"
    return qps, source


def _search_server_qps(config: InferConfig, s: _Served, job: dict[str, Any], work_dir: Path, notes: list[str],
                       progress: Callable[[str], None]) -> tuple[float, str]:
    """The variant's Server target: the highest rate that passed a short search over LoadGen runs
    (:data:`SERVER_SEARCH_PROBES`), its runs' logs in ``work_dir`` (not in the results tree)."""
    bound_ms = mlperf.official("Server", "target_latency") or 60
    start = 0.5 / (s.single_query_s + SERVER_QUERY_OVERHEAD_S)
    queries = SERVER_SEARCH_QUERIES if config.quick else SERVER_SEARCH_QUERIES_OFFICIAL
    progress(f"Server target search, {s.variant.system}: {SERVER_SEARCH_PROBES} LoadGen runs of {queries} queries "
             f"from {start:,.1f} QPS (p99 within {SERVER_SEARCH_MARGIN:g} of {bound_ms:g} ms, p99.9 within it) ...")
    result = run_worker({**job, "mode": "search", "out_dir": str(work_dir / f"search-{s.variant.name}"),
                         "search_start_qps": start, "search_bound_ns": int(bound_ms * 1e6),
                         "search_margin": SERVER_SEARCH_MARGIN, "search_queries": queries,
                         "search_ms": SERVER_SEARCH_MS if config.quick else SERVER_SEARCH_MS_OFFICIAL,
                         "search_probes": SERVER_SEARCH_PROBES,
                         "search_floor_qps": config.quick_server_queries / SERVER_SEARCH_FLOOR_S if config.quick else 0.0},
                        work_dir)
    runs = ", ".join(f"{p['qps']:,.1f} ({p['p99_ms']:.1f}/{p['p999_ms']:.1f} ms{'' if p['passed'] else ', failed'})"
                     for p in result["probes"])
    progress(f"  QPS (p99/p99.9): {runs}")
    best = result["best_qps"]
    if best is None:
        lowest = min(p["qps"] for p in result["probes"])
        notes.append(f"{s.variant.system} server: no rate passed the target search (down to {lowest:,.1f} QPS, "
                     f"p99 within {SERVER_SEARCH_MARGIN:g} of the {bound_ms:g} ms bound); its run at that rate may "
                     f"be INVALID (--server-qps chooses another)")
        return lowest, f"searched ({len(result['probes'])} LoadGen runs, none passed)"
    return SERVER_SEARCH_HEADROOM * best, (f"searched: {SERVER_SEARCH_HEADROOM:g} x {best:,.1f}, the highest of "
                                           f"{len(result['probes'])} LoadGen runs that passed: {runs}")


def _run_variant(config: InferConfig, spec: BenchmarkSpec, s: _Served, scenario: Scenario, *, model_dir: Path,
                 rows_file: Path, layout: Layout, cache_rows: int, library: SampleLibrary, labels: np.ndarray,
                 ref_probs: np.ndarray,
                 work_dir: Path, notes: list[str], progress: Callable[[str], None],
                 warm_file: Path | None = None) -> RunResult:
    """One variant in one scenario: its user.conf, a performance run, an accuracy run, scored."""
    v, model_name = s.variant, config.model_name
    scen_dir = mlperf.scenario_dir(config.results, v.system, model_name, scenario.value)
    perf_dir = mlperf.performance_dir(config.results, v.system, model_name, scenario.value)
    acc_dir = mlperf.accuracy_dir(config.results, v.system, model_name, scenario.value)
    job = {
        "benchmark": spec.name, "state": str(model_dir / MODEL_FILE), "variant": "ssd" if v.ssd else "memory",
        "variant_name": v.name, "rows_file": str(rows_file), "layout": layout.to_dict(), "latency_us": v.latency_us,
        "cache_rows": cache_rows, "policy": config.cache_policy.value, "scenario": scenario.value,
        "queue_depth": config.storage_queue_depth, "warm_rows": None if warm_file is None else str(warm_file),
        "quick": config.quick, "quick_min_duration_ms": QUICK_MIN_DURATION_MS,
        "quick_min_query_count": config.quick_server_queries if scenario is Scenario.SERVER else QUICK_MIN_QUERY_COUNT,
        "quick_accuracy_samples": QUICK_ACCURACY_SAMPLES,
        # Server (0): the queries that arrived together share their lookups, each has a dense call of its
        # own, so that a user's predictions do not depend on which queries arrived with it (float32
        # sums differ in the last bits with the batch's size)
        "max_batch": config.max_batch if scenario is Scenario.OFFLINE else 0, "threads": config.threads,
    }
    if scenario is Scenario.SERVER and not config.server_qps and config.user_conf is None:
        qps, source = _search_server_qps(config, s, job, work_dir, notes, progress)
    else:
        qps, source = _target(config, s, scenario, notes, library.mean_rows)
    if config.user_conf is not None:
        user_conf, source = config.user_conf.resolve(), "--user-conf"
        qps = float("nan")
    else:
        note = f"{v.system} {scenario.value}: target QPS {source}"
        if config.label:
            note += f"; {config.label}"
        user_conf = mlperf.write_user_conf(scen_dir / "user.conf", scenario.value, target_qps=qps, note=note)
    job["user_conf"] = str(user_conf)
    shown = "from --user-conf" if config.user_conf is not None else f"{qps:,.0f} QPS"
    outcomes = {}
    for mode, out_dir in (("performance", perf_dir), ("accuracy", acc_dir)):
        mlperf.clear_run_dir(out_dir)
        progress(f"LoadGen {scenario.value} {mode}, {v.system}, target {shown} ...")
        t0 = time.perf_counter()
        outcomes[mode] = run_worker({**job, "mode": mode, "out_dir": str(out_dir)}, work_dir)
        outcomes[mode]["elapsed_s"] = time.perf_counter() - t0
        if config.label:
            mlperf.label_not_valid(out_dir, config.label)
    summary = parse_summary(perf_dir / mlperf.SUMMARY, scenario)
    score = mlperf.score_accuracy_log(acc_dir / mlperf.ACCURACY_LOG, library.offsets, labels, reference=ref_probs,
                                      model=model_name)
    mlperf.write_aggregation_trace(acc_dir / mlperf.AGGREGATION_TRACE, library.offsets)
    text = score.official_line() + "\n"
    if config.label:
        text += f"# {config.label}\n"
    (acc_dir / mlperf.ACCURACY_TXT).write_text(text)
    asked = min(QUICK_ACCURACY_SAMPLES, library.count) if config.quick else library.count
    if score.queries != asked:
        raise HarnessError(f"the accuracy run of {v.system} {scenario.value} logged {score.queries} samples, not "
                           f"the {asked} asked for", ErrorCategory.RUN_FAILED)
    detail = mlperf.detail_values(perf_dir / mlperf.DETAIL)
    effective = {k: detail[k] for k in EFFECTIVE_KEYS if k in detail}
    effective["mlperf_conf_sha1"] = (detail.get("loadgen_file_sha1") or {}).get("/mlperf.conf")
    if config.user_conf is not None:
        qps = float(effective.get("effective_target_qps", "nan"))
    perf = outcomes["performance"]
    storage = None
    if v.ssd:
        storage = Storage(
            mode=perf["storage_mode"], reads=perf["reads"], bytes_read=perf["bytes_read"], misses=perf["misses"],
            samples=perf["samples"], rows=perf["rows"], model_calls=perf["model_calls"], bypass_calls=perf["bypass_calls"],
            reads_equal_misses_per_call=perf["reads_per_call_equal_misses"], table_lookups=perf["table_lookups"],
            table_hits=perf["table_hits"], added_latency_us=perf["added_latency_us"], read_s=perf["read_s"])
    errors = detail["errors"] + mlperf.detail_values(acc_dir / mlperf.DETAIL)["errors"]
    p99 = f"p99 {summary.p99_latency_ms:.2f} ms, " if scenario is Scenario.SERVER else ""
    progress(f"  {summary.samples_per_s:,.0f} samples/s, {p99}"
             f"{'VALID' if summary.valid else 'INVALID'} ({perf['test_s']:.0f} s); accuracy {score.official_line()} "
             f"{'PASS' if score.passed else 'FAIL'} ({outcomes['accuracy']['test_s']:.0f} s)")
    return RunResult(
        variant=v, scenario=scenario, target_qps=qps, qps_source=source, user_conf=user_conf, summary=summary,
        storage=storage, accuracy=score, resident_table_bytes=perf["resident_table_bytes"],
        peak_rss_bytes=perf["peak_rss_bytes"], performance_s=perf["test_s"],
        accuracy_s=outcomes["accuracy"]["test_s"], effective=effective, loadgen_errors=errors,
    )
