"""``harness infer --benchmark dlrm-v3``: the twin's HSTU ranker (:mod:`harness.inference.dlrmv3`) served
through MLPerf's LoadGen as ``dlrm-v3`` is, from memory and from the SSD tier (Software Defined Memory).

**Variants.** As for DLRMv2 (:mod:`harness.inference.pipeline`): ``memory`` (every table in memory),
``ssd`` (the per-event tables, item and category, in a rows file read row by row, O_DIRECT where the
file system takes it, through the io_uring reader, behind a row cache of ``--cache-fraction`` of the
rows: :class:`~harness.inference.storage.SdmEmbeddings`; the user table stays in memory, as the
reference keeps it on the host) and ``ssd-<L>us`` (each read ``L`` us longer). The SSD caches start
warm with the rows the training data looked up most (``--cold-cache``: empty); caching does not
change the arithmetic, so every variant's predictions equal the in-memory model's bit for bit
(checked before timing).

**A LoadGen test** runs in a process of its own (LoadGen applies ``mlperf.conf`` once per process)
with the model name ``dlrm-v3`` (``mlperf.conf``: Server p99 bound 80 ms, min duration 600 s;
``--quick`` shortens duration and query counts and every output says so). The SUT
(:class:`RequestSut`) answers LoadGen's samples with the requests in time order, whatever sample
index LoadGen drew (the reference's ``StreamingQuerySampler``), each response the reference's
``[ts_idx, query_idx, predictions, labels, weights, candidates]`` (float32). It works in two stages:
the embedding lookups of the requests that have arrived, on one thread (for an SSD variant: one cache
admission and one submission of their misses; Offline up to :data:`LOOKUP_GROUP` requests a call,
Server one), and then, per request, the dense part (:func:`~harness.inference.dlrmv3.score_request`:
the history once, every candidate against it), one request per dense worker (``V3Config.workers``).

**Per (scenario, variant)**: a performance run, an accuracy run over the first requests in time order
(``--quick``: :data:`QUICK_ACCURACY_REQUESTS`; else all), scored as the reference's ``accuracy.py``
scores it (NE, accuracy, grouped AUC: :mod:`harness.inference.dlrmv3_accuracy`) against the fp32
in-memory model's metrics on the same requests, computed directly; and TEST08 (a performance run with
the benchmark's ``audit.config``, its sampled responses matched to the accuracy run's by ``(ts_idx,
query_idx)``, per-request NE within 0.1%), laid out as the submission checker reads it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import EXIT_CODES, ErrorCategory, HarnessError, io_fault
from harness.files import write_atomic
from harness.hw_profiles.detection import usable_cpus
from harness.inference import dlrmv3_accuracy as acc
from harness.inference import mlperf
from harness.inference.config import AGAIN, DEFAULT_RESULTS, Scenario, Variant, variants_for
from harness.inference.dlrmv3 import (
    MLPERF_MODEL,
    TWIN_DATA,
    TWIN_MODEL,
    RequestCost,
    RequestLog,
    inference_model,
    mean_cost,
    model_config,
    official_cost,
    score_request,
    trained_model,
)
from harness.inference.results import LoadgenSummary, parse_summary
from harness.inference.storage import PreadRows, RowLayout, SdmEmbeddings, probe_device, write_rows
from harness.inference.worker import log_settings as worker_log_settings
from harness.process import exit_now
from harness.reference.data.dlrmv3_streams import StreamingSpec
from harness.reference.forked import ForkedProcess, start_server
from harness.reference.models.hstu import HSTUConfig, HSTURanker
from harness.reference.planner.types import CachePolicy, RowReader
from harness.reference.tiered import rowio

QUICK_MIN_DURATION_MS = 2000
QUICK_MIN_QUERY_COUNT = 100
# LoadGen's early stopping judges a p99 from about 460 queries on, with none over the bound; a few over
# it at 600 queries "would need 238 more": 800 leave room for a few
QUICK_SERVER_MIN_QUERY_COUNT = 800
QUICK_ACCURACY_REQUESTS = 96  # the first requests in time order, scored by every accuracy run under --quick
QUICK_TEST08_QUERIES = 64  # TEST08's performance run under --quick: within the requests the accuracy run scores
# Offline target, every variant's: this x the fastest variant's calibrated rate of one request after another.
# A run faster than its target ends before the minimum duration (INVALID), one slower only lasts longer; the
# SUT's two stages overlap lookups and dense parts, so a variant's Offline rate exceeds its sequential one
OFFLINE_HEADROOM = 2.0
# Server target: this x the rate of one request after another (queueing within the 80 ms bound; measured in
# docs/performance.md)
SERVER_LOAD = 0.2
SWITCH_INTERVAL_S = 0.0005
LOOKUP_GROUP = 8  # Offline: requests whose lookups go to the tables (the cache, the device) in one call
CALIBRATION_REQUESTS = 16
IDENTICAL_REQUESTS = 6
WORKER_PRELOAD = ["torch", "numpy", "harness.inference.dlrmv3_serve", "harness.reference.forkserver_last"]
_STOP = object()


@dataclass(frozen=True)
class V3Config:
    """What ``harness infer --benchmark dlrm-v3`` runs (the options of :mod:`harness.cli.infer`)."""

    scenarios: tuple[Scenario, ...] = (Scenario.OFFLINE, Scenario.SERVER)
    quick: bool = False
    results: Path = DEFAULT_RESULTS
    variant_kinds: tuple[str, ...] = ("memory", "ssd", "ssd-latency")
    storage_latency_us: float = 100.0
    storage_queue_depth: int = 256  # harness.cli.infer_dlrmv3.DLRMV3_QUEUE_DEPTH's measurement
    cache_fraction: float = 0.5  # harness.cli.infer_dlrmv3.DLRMV3_CACHE_FRACTION's measurement
    cache_policy: CachePolicy = CachePolicy.LRU
    warm_cache: bool = True
    offline_qps: float | None = None
    server_qps: float | None = None
    seed: int = 0
    train_steps: int | None = None
    model_dir: Path | None = None
    threads: int = 1
    dense_workers: int | None = None  # requests in the dense stage at once; None: usable cores // threads
    direct: bool = True
    row_reader: RowReader = RowReader.AUTO
    # the twin's sizes: TWIN_DATA and TWIN_MODEL (the suite serves a smaller one end to end)
    data: StreamingSpec = TWIN_DATA
    model: dict[str, Any] = dataclasses.field(default_factory=lambda: dict(TWIN_MODEL))

    @property
    def hstu(self) -> HSTUConfig:
        return model_config(self.data, self.model)

    @property
    def workers(self) -> int:
        """Requests in the dense stage at once, each on :attr:`threads` torch threads."""
        if self.dense_workers is not None:
            return self.dense_workers
        return max(1, usable_cpus() // self.threads)

    @property
    def label(self) -> str | None:
        if not self.quick:
            return None
        return (f"{mlperf.NOT_VALID} (--quick: min duration {QUICK_MIN_DURATION_MS / 1000:g} s, min query count "
                f"{QUICK_MIN_QUERY_COUNT} (Server {QUICK_SERVER_MIN_QUERY_COUNT}) instead of mlperf.conf's 600 s; "
                f"accuracy on the first {QUICK_ACCURACY_REQUESTS} requests, TEST08 on {QUICK_TEST08_QUERIES} queries; "
                f"the twin's sizes, not the official model's)")

    def default_model_dir(self) -> Path:
        steps = f"-steps{self.train_steps}" if self.train_steps is not None else ""
        return self.results / ".harness" / "models" / f"dlrm-v3-twin-seed{self.seed}{steps}"


# ---------------------------------------------------------------------------------- the SUT
class RequestSut:
    """LoadGen's SUT (``ConstructFastSUT``) serving the requests of ``log`` in time order: the n-th
    sample issued is answered with request ``n mod len(log)`` (see the module's docstring)."""

    def __init__(self, lg: Any, model: HSTURanker, log: RequestLog, tables: SdmEmbeddings | None = None, *,
                 accuracy: bool = False, pipelined: bool = True, dense_workers: int = 1,
                 lookup_group: int = LOOKUP_GROUP):
        self.lg, self.model, self.log, self.tables, self.accuracy = lg, model, log, tables, accuracy
        self.pipelined, self.dense_workers, self.lookup_group = pipelined, dense_workers, lookup_group
        self._next = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._stage: queue.Queue = queue.Queue(maxsize=2 * LOOKUP_GROUP)
        self.error: BaseException | None = None
        self.calls: list[tuple[int, int, int, int, int]] = []  # (requests, rows looked up, reads, misses, waits)
        self.answered: list[int] = []  # the requests answered, in completion order
        # per request answered: when LoadGen issued it, its lookups began and ended, its dense part began and
        # it completed (time.perf_counter())
        self.times: list[tuple[float, float, float, float, float]] = []
        self._threads = [threading.Thread(target=self._lookups, name="dlrmv3-lookups", daemon=True)]
        if pipelined:
            self._threads += [threading.Thread(target=self._dense, name=f"dlrmv3-dense-{k}", daemon=True)
                              for k in range(self.dense_workers)]

    def issue(self, ids: list[int], _indices: list[int]) -> None:
        with self._lock:
            first = self._next
            self._next += len(ids)
        order = (first + np.arange(len(ids), dtype=np.int64)) % len(self.log)
        self._queue.put((np.array(ids, dtype=np.uint64), order, time.perf_counter()))

    def flush(self) -> None:
        """Nothing is held back."""

    def _lookups(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                for _ in range(self.dense_workers):
                    self._stage.put(_STOP)
                return
            parts, stop = [item], False
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                parts.append(more)
            ids = np.concatenate([p[0] for p in parts])
            reqs = np.concatenate([p[1] for p in parts])
            issued = np.concatenate([np.full(p[1].size, p[2]) for p in parts])
            group = self.lookup_group
            for lo in range(0, reqs.size, group):
                self._lookup(ids[lo : lo + group], reqs[lo : lo + group], issued[lo : lo + group])
            if stop:
                for _ in range(self.dense_workers):
                    self._stage.put(_STOP)
                return

    def _lookup(self, ids: np.ndarray, reqs: np.ndarray, issued: np.ndarray) -> None:
        if self.error is None:
            try:
                t0 = time.perf_counter()
                batches = [self.log.batch(reqs[k : k + 1]) for k in range(reqs.size)]
                sequence = [self.model.sequence_ids(b) for b in batches]
                with torch.no_grad():
                    events = self.model.embeddings(torch.cat(sequence))
                t1 = time.perf_counter()
                reads, misses, waits = self.tables.last_call if self.tables is not None else (0, 0, 0)
                self.calls.append((reqs.size, sum(int(x.numel()) for x in sequence), reads, misses, waits))
                start = 0
                for k, (batch, ids_k) in enumerate(zip(batches, sequence)):
                    end = start + ids_k.shape[0]
                    item = (ids[k : k + 1], int(reqs[k]), batch, events[start:end], (float(issued[k]), t0, t1))
                    if self.pipelined:
                        self._stage.put(item)
                    else:
                        self._answer(item)
                    start = end
                return
            except Exception as err:  # noqa: BLE001 - LoadGen must still finish; raised after it returns
                self.error = err
        self._fail(ids)

    def _dense(self) -> None:
        while True:
            item = self._stage.get()
            if item is _STOP:
                return
            self._answer(item)

    def _answer(self, item: tuple[np.ndarray, int, Any, torch.Tensor, tuple[float, float, float]]) -> None:
        """The dense part of one request and its completion."""
        lg, log = self.lg, self.log
        ids, r, batch, events, stamps = item
        if self.error is None:
            try:
                t0 = time.perf_counter()
                probs = score_request(self.model, batch, events).numpy()
                if self.accuracy:  # the reference's layouts: labels and weights in accuracy mode only
                    labels = batch.labels.numpy()
                    data = acc.encode_response(int(log.ts[r]), int(log.query[r]), probs, labels,
                                               np.ones_like(labels))
                else:
                    data = acc.encode_perf_response(int(log.ts[r]), int(log.query[r]), probs)
                self.answered.append(r)
                lg.QuerySamplesComplete([lg.QuerySampleResponse(int(ids[0]), data.ctypes.data, data.nbytes)])
                self.times.append((*stamps, t0, time.perf_counter()))
                return
            except Exception as err:  # noqa: BLE001 - LoadGen must still finish; raised after it returns
                self.error = err
        self._fail(ids)

    def _fail(self, ids: np.ndarray) -> None:
        self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(i, 0, 0) for i in ids.tolist()])

    def __enter__(self) -> int:
        for thread in self._threads:
            thread.start()
        self.handle = self.lg.ConstructFastSUT(self.issue, self.flush)
        return self.handle

    def __exit__(self, *exc: object) -> None:
        self.lg.DestroyFastSUT(self.handle)
        self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()


# ---------------------------------------------------------------------------------- models served
def ssd_model(state: dict[str, torch.Tensor], rows_file: Path, layout: RowLayout, *, cache_rows: int,
              policy: CachePolicy, latency_us: float, queue_depth: int, reader: RowReader,
              warm: np.ndarray | None, config: HSTUConfig | None = None) -> tuple[HSTURanker, SdmEmbeddings]:
    """The model with its per-event tables served from ``rows_file`` through a cache of ``cache_rows``
    rows (warm with ``warm``'s rows, hottest first, or empty)."""
    model = inference_model(state, config)
    full = model.embeddings
    store = PreadRows(rows_file, layout, latency_us=latency_us, queue_depth=queue_depth, reader=reader)
    tables = SdmEmbeddings(full.table_rows, full.dim, full.pooling, store, cache_rows, policy)
    if warm is not None:
        tables.warm(torch.from_numpy(warm))
    model.embeddings = tables
    return model.eval(), tables


def hot_rows(uses: np.ndarray, count: int, data: StreamingSpec = TWIN_DATA) -> np.ndarray:
    """The ``count`` rows of the fused per-event table (items, then the categories, then the album row)
    that training looked up most, hottest first: the item ids' uses, each category's the sum of its
    items', the album row every event's."""
    per_category = uses[: data.items_per_category * data.num_categories].reshape(data.num_categories, -1).sum(axis=1)
    fused = np.concatenate([uses, per_category, [uses.sum()]])
    used = int(np.count_nonzero(fused))
    return np.argsort(-fused, kind="stable")[: min(count, used)].astype(np.int64)


def build(job: dict[str, Any]) -> tuple[HSTURanker, SdmEmbeddings | None, RequestLog]:
    model_dir = Path(job["model_dir"])
    state = torch.load(model_dir / "model.pt", weights_only=True)
    log = RequestLog.load(model_dir / "requests.npz")
    config = model_config(StreamingSpec.from_section(job["data"]), job["model"])
    if job["variant"] == "memory":
        return inference_model(state, config), None, log
    warm = np.load(job["warm_rows"]) if job.get("warm_rows") else None
    model, tables = ssd_model(state, Path(job["rows_file"]), RowLayout(**job["layout"]),
                              cache_rows=int(job["cache_rows"]), policy=CachePolicy(job["policy"]),
                              latency_us=float(job["latency_us"]), queue_depth=int(job["queue_depth"]),
                              reader=RowReader(job["row_reader"]), warm=warm, config=config)
    return model, tables, log


# ---------------------------------------------------------------------------------- one LoadGen test (worker)
def run_test(job: dict[str, Any]) -> dict[str, Any]:
    """The job's LoadGen test in this process: its counts."""
    torch.set_num_threads(int(job["threads"]))
    # the GIL handed over every 0.5 ms, not Python's 5: LoadGen's issue thread, the SUT's and torch's ops
    # (which release it) take turns (the Server's tail: docs/infer-dlrmv3.md)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    lg = mlperf.loadgen()
    model, tables, log = build(job)
    out_dir = Path(job["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    scenario = mlperf.SCENARIO_NAMES[job["scenario"]]
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario)
    if settings.FromConfig(job["user_conf"], MLPERF_MODEL, scenario) != 0:
        raise HarnessError(f"LoadGen could not read {job['user_conf']}", ErrorCategory.BAD_INPUT)
    mode = job["mode"]
    settings.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
    if job["quick"]:
        settings.min_duration_ms = QUICK_MIN_DURATION_MS
        settings.min_query_count = QUICK_SERVER_MIN_QUERY_COUNT if job["scenario"] == "server" else \
            QUICK_MIN_QUERY_COUNT
        if mode == "test08":
            settings.min_duration_ms = 0
            settings.min_query_count = settings.max_query_count = QUICK_TEST08_QUERIES
            if job["scenario"] == "offline":
                settings.offline_expected_qps = QUICK_TEST08_QUERIES / 1.1 / 1  # one query of about that many
        if mode == "accuracy":
            settings.accuracy_sample_count_override = QUICK_ACCURACY_REQUESTS
    log_settings = worker_log_settings(lg, out_dir)
    cwd = os.getcwd()
    if mode == "test08":  # LoadGen reads audit.config from the working directory
        acc.write_audit_config(out_dir)
        os.chdir(out_dir)
    # two stages in both scenarios: a Server query's reads proceed while the one before computes; requests
    # in the dense stage side by side, one per worker (each on its torch threads): the Server's bursts
    # wait less than behind one request at a time on every core, with the cores' threads in step
    # (docs/infer-dlrmv3.md); a Server request's lookups on their own, not with those of the requests
    # behind it: its dense part starts sooner
    server = job["scenario"] == "server"
    sut = RequestSut(lg, model, log, tables, accuracy=mode == "accuracy", dense_workers=int(job["dense_workers"]),
                     lookup_group=1 if server else LOOKUP_GROUP)
    qsl = lg.ConstructQSL(len(log), len(log), lambda _s: None, lambda _s: None)
    try:
        t0 = time.perf_counter()
        with sut as handle:
            lg.StartTestWithLogSettings(handle, qsl, settings, log_settings)
        test_s = time.perf_counter() - t0
    finally:
        lg.DestroyQSL(qsl)
        os.chdir(cwd)
    if sut.error is not None:
        raise HarnessError(f"the model failed during the LoadGen {job['scenario']} {mode} run: "
                           f"{type(sut.error).__name__}: {sut.error}", ErrorCategory.RUN_FAILED)
    calls = np.array(sut.calls, dtype=np.int64).reshape(-1, 5)
    result: dict[str, Any] = {"test_s": test_s, "requests": int(calls[:, 0].sum()), "rows": int(calls[:, 1].sum()),
                              "calls": int(calls.shape[0]), "answered": len(sut.answered),
                              "stages_ms": stage_times(np.array(sut.times))}
    if tables is not None:
        store = tables.store
        result.update({"reads": store.reads, "bytes_read": store.bytes_read, "read_s": store.read_s,
                       "misses": tables.misses, "table_lookups": tables.table_lookups.tolist(),
                       "table_hits": tables.table_hits.tolist(), "resident_bytes": tables.resident_bytes()})
        store.close()
    return result


STAGES = ("queued", "lookups", "staged", "dense", "total")


def stage_times(times: np.ndarray) -> dict[str, list[float]]:
    """Where the requests' time went, from :attr:`RequestSut.times`: per stage (waiting for the lookup
    thread, the lookups, waiting for a dense worker, the dense part and completion, issue to completion)
    its p50, p99 and maximum in ms."""
    if times.size == 0:
        return {}
    spans = np.diff(times, axis=1) * 1e3
    spans = np.column_stack([spans, (times[:, -1] - times[:, 0]) * 1e3])
    return {name: [float(np.percentile(col, 50)), float(np.percentile(col, 99)), float(col.max())]
            for name, col in zip(STAGES, spans.T)}


def worker_main(argv: list[str]) -> int:
    """Run the job of ``argv[0]`` and write its result (or its error); the exit status."""
    job = json.loads(Path(argv[0]).read_text())
    try:
        result = run_test(job)
    except HarnessError as err:
        result = {"error": err.message, "category": err.category.value}
    except OSError as err:
        fault = io_fault(err, job.get("out_dir"), f"running LoadGen {job['scenario']} {job['mode']}", AGAIN)
        result = {"error": fault.message, "category": fault.category.value}
    except Exception as err:  # noqa: BLE001 - reported by the parent as one line
        result = {"error": f"{type(err).__name__}: {err}", "category": "run_failed"}
    write_atomic(Path(job["result"]), json.dumps(result))
    return 1 if "error" in result else 0


def run_worker(job: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    name = f"{job['variant_name']}-{job['scenario']}-{job['mode']}"
    job_path, result_path, output = (work_dir / f"{name}.{x}" for x in ("job.json", "result.json", "output.txt"))
    job = {**job, "result": str(result_path)}
    job_path.write_text(json.dumps(job, indent=1))
    result_path.unlink(missing_ok=True)
    output.write_bytes(b"")
    proc = ForkedProcess(worker_main, ([str(job_path)],), stderr_path=output, stdout_path=output,
                         name=f"harness dlrm-v3 LoadGen worker {name}", preload=WORKER_PRELOAD)
    try:
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if not result_path.is_file():
        tail = (output.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
        category = ErrorCategory.IO_FAULT if code == EXIT_CODES[ErrorCategory.IO_FAULT] else ErrorCategory.RUN_FAILED
        raise HarnessError(f"the LoadGen worker for {name} exited {code} without a result: {tail}", category)
    result = json.loads(result_path.read_text())
    if "error" in result:
        raise HarnessError(result["error"], ErrorCategory(result.get("category", "run_failed")))
    return result


# ---------------------------------------------------------------------------------- the report
@dataclass
class V3Run:
    """One variant in one scenario: LoadGen's verdict, the accuracy and TEST08, the reads."""

    variant: Variant
    scenario: Scenario
    target_qps: float
    summary: LoadgenSummary
    metrics: acc.Dlrmv3Metrics
    accuracy_passed: bool
    test08: acc.Test08Result
    perf: dict[str, Any]

    @property
    def reads_per_request(self) -> float | None:
        return None if "reads" not in self.perf else self.perf["reads"] / max(self.perf["requests"], 1)

    @property
    def hit_rate(self) -> float | None:
        if "table_lookups" not in self.perf:
            return None
        return sum(self.perf["table_hits"]) / max(sum(self.perf["table_lookups"]), 1)


@dataclass
class V3Report:
    config: V3Config
    model: Any
    runs: list[V3Run]
    reference: acc.Dlrmv3Metrics
    twin_cost: RequestCost
    official: RequestCost
    probe: rowio.DeviceProbe | None
    cache_rows: int
    table_rows: int
    warm_note: str
    identical_requests: int
    calibration: dict[str, float]
    wall_s: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "benchmark": MLPERF_MODEL, "label": c.label, "model": self.model.to_dict(),
            "cost": {"twin": dataclasses.asdict(self.twin_cost), "official": dataclasses.asdict(self.official)},
            "reference": self.reference.values(), "calibration_s": self.calibration,
            "device_probe_reads_per_s": None if self.probe is None else self.probe.reads_per_s,
            "cache_rows": self.cache_rows, "table_rows": self.table_rows, "warm": self.warm_note,
            "identical_requests": self.identical_requests, "wall_s": self.wall_s, "notes": self.notes,
            "results": [{"system": r.variant.system, "scenario": r.scenario.value, "target_qps": r.target_qps,
                         "summary": r.summary.to_dict(), "accuracy": r.metrics.values(),
                         "accuracy_passed": r.accuracy_passed, "test08_passed": r.test08.passed,
                         "reads_per_request": r.reads_per_request, "hit_rate": r.hit_rate, "counts": r.perf}
                        for r in self.runs],
        }

    def failure(self) -> str | None:
        bad = [f"{r.variant.system} {r.scenario.value}: " + ", ".join(
            w for w, ok in (("INVALID (" + r.summary.invalid_reason + ")", r.summary.valid),
                            ("accuracy below 99.9% of fp32", r.accuracy_passed), ("TEST08 failed", r.test08.passed))
            if not ok) for r in self.runs if not (r.summary.valid and r.accuracy_passed and r.test08.passed)]
        return None if not bad else "dlrm-v3: " + "; ".join(bad)

    def render(self) -> str:
        c, m = self.config, self.model
        lines = [f"*** {c.label} ***", ""] if c.label else []
        how = "reused" if m.reused else f"trained in {m.train_s:.0f} s"
        lines += [
            (f"model: the dlrm-v3 twin (HSTU ranker, {c.data.num_users:,} users, {c.data.num_items:,} items; "
             f"official: 5M users, 1e9 items), seed {m.seed}, {m.steps} steps ({m.samples:,} samples), eval AUC "
             f"{m.auc:.5f}; {how}: {m.path}"),
            self.twin_cost.describe(f"cost (twin, rows of {c.hstu.embedding_dim} fp32)"),
            self.official.describe("cost (official sizes, rows of 512 fp16, history of ~6.7k items)"),
            ("calibration: " + ", ".join(f"{k} {v * 1e3:.1f} ms per request" for k, v in self.calibration.items())
             + f"; served in fp32, {c.workers} request(s) at once in the dense stage, {c.threads} torch thread(s) "
               f"each; requests in time order"),
            (f"predictions identical (memory vs every ssd variant), bit for bit, on {self.identical_requests} "
             f"requests"),
            (f"ssd tier: {self.table_rows:,} rows (item, category, album tables); cache {self.cache_rows:,} rows "
             f"({c.cache_fraction:g}, {c.cache_policy.value}; {self.warm_note})"),
            *([self.probe.describe()] if self.probe is not None else []),
            (f"accuracy reference (fp32, in memory, directly, on the requests the accuracy runs score): "
             f"{self.reference.summary()}"),
            "",
            (f"{'SYSTEM':<18} {'SCENARIO':<8} {'RESULT':<8} {'TARGET QPS':>10} {'REQ/S':>8} {'P99 ms':>8} "
             f"{'READS/Q':>8} {'HIT':>6} {'DEV QPS':>8} {'ACCURACY':<9} TEST08"),
        ]
        for r in self.runs:
            reads = r.reads_per_request
            dev = "-" if reads is None or self.probe is None or reads == 0 else \
                f"{self.probe.reads_per_s / reads:,.0f}"
            p99 = f"{r.summary.p99_latency_ms:.1f}" if r.scenario is Scenario.SERVER else "-"
            lines.append(
                f"{r.variant.system:<18} {r.scenario.value:<8} {'VALID' if r.summary.valid else 'INVALID':<8} "
                f"{r.target_qps:>10,.1f} {r.summary.samples_per_s:>8,.1f} {p99:>8} "
                f"{'-' if reads is None else f'{reads:,.0f}':>8} "
                f"{'-' if r.hit_rate is None else f'{r.hit_rate:.3f}':>6} {dev:>8} "
                f"{'PASS' if r.accuracy_passed else 'FAIL':<9} {'PASS' if r.test08.passed else 'FAIL'}")
        lines += [
            "REQ/S: requests (LoadGen's samples) per second. READS/Q: device reads per request; HIT: the cache's hit",
            "  rate over every row looked up; DEV QPS: the device probe's reads/s / READS/Q, the requests/s the device",
            "  alone allows. ACCURACY: NE, accuracy and GAUC each within 99.9% of the fp32 reference's.",
            "  A Server request's time: queued (for the lookup thread), lookups, staged (for a dense worker), dense",
            "  (and its completion), total (issued to completed).",
        ]
        ssd = [r for r in self.runs if "reads" in r.perf]
        mem = {r.scenario: r for r in self.runs if not r.variant.ssd}
        for r in ssd:
            base = mem.get(r.scenario)
            if base is not None and r.scenario is Scenario.OFFLINE:
                lines.append(f"{r.variant.system} offline: {r.summary.samples_per_s / base.summary.samples_per_s:.2f}x "
                             f"memory's requests/s")
        for r in self.runs:
            lines.append(f"  {r.variant.system} {r.scenario.value}: {r.metrics.summary()}; TEST08: {r.test08.brief()}")
        for r in self.runs:
            stages = r.perf.get("stages_ms") or {}
            if r.scenario is Scenario.SERVER and stages:
                lines.append(f"  {r.variant.system} server, a request's time (p50 / p99 / max ms): " + ", ".join(
                    f"{name} {' / '.join(f'{x:.1f}' for x in stages[name])}" for name in STAGES))
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"results: {c.results} ({self.wall_s:.0f} s)")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- everything
def run_dlrmv3(config: V3Config, *, progress: Callable[[str], None] = lambda _m: None) -> V3Report:
    """Train (or reuse) the twin, then serve every variant in each scenario as ``dlrm-v3`` is served."""
    t_start = time.perf_counter()
    mlperf.loadgen()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    if config.label:
        progress(f"*** {config.label} ***")
    try:
        return _run(config, t_start, progress)
    except OSError as err:
        raise io_fault(err, config.results, "serving dlrm-v3", AGAIN) from None
    finally:
        torch.set_num_threads(threads)


def _run(config: V3Config, t_start: float, progress: Callable[[str], None]) -> V3Report:
    model_dir = config.model_dir or config.default_model_dir()
    model_dir.mkdir(parents=True, exist_ok=True)
    hstu = config.hstu
    trained, state, uses = trained_model(model_dir, seed=config.seed, steps=config.train_steps, progress=progress,
                                         data=config.data, config=hstu)
    start_server(WORKER_PRELOAD)
    log = RequestLog.kept(model_dir, config.data)
    twin_cost = mean_cost(log, hstu, row_bytes=4 * hstu.embedding_dim)
    progress(f"requests: {len(log):,} at inference timestamps {config.data.train_timestamps}-"
             f"{config.data.num_timestamps - 1}, in time order")
    progress(twin_cost.describe("cost (twin)"))
    memory = inference_model(state, hstu)
    accuracy_requests = QUICK_ACCURACY_REQUESTS if config.quick else len(log)
    reference = _direct_metrics(memory, log, accuracy_requests)
    progress(f"accuracy reference (fp32, in memory, first {accuracy_requests} requests): {reference.summary()}")
    variants = variants_for(config.storage_latency_us, config.variant_kinds)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(dir=model_dir, prefix="ssd-tier-") as tmp:
        work = Path(tmp)
        weight = memory.embeddings.weight.detach()
        rows = int(weight.shape[0])
        cache_rows = max(1, round(rows * config.cache_fraction))
        rows_file = work / "tables.rows"
        layout = write_rows(rows_file, weight, direct=config.direct)
        probe = probe_device(rows_file, layout, depth=config.storage_queue_depth, reader=config.row_reader) \
            if any(v.ssd for v in variants) else None
        if probe is not None:
            progress(probe.describe())
        warm_file, warm_note = None, "cold at start"
        if config.warm_cache:
            warm = hot_rows(uses, cache_rows, config.data)
            warm_file = work / "warm-rows.npy"
            np.save(warm_file, warm)
            warm_note = (f"warm at start with the {warm.size:,} rows the {trained.samples:,} training samples "
                         f"looked up most")
        progress(f"ssd tier: {rows:,} rows of {layout.row_bytes} bytes, read {layout.mode}; cache {cache_rows:,} "
                 f"rows, {warm_note}")

        def build_ssd(latency_us: float) -> tuple[HSTURanker, SdmEmbeddings]:
            return ssd_model(state, rows_file, layout, cache_rows=cache_rows, policy=config.cache_policy,
                             latency_us=latency_us, queue_depth=config.storage_queue_depth, reader=config.row_reader,
                             warm=None if warm_file is None else np.load(warm_file), config=hstu)

        identical = _check_identical(memory, [v for v in variants if v.ssd], build_ssd, log)
        if identical:
            progress(f"every SSD variant's predictions equal the in-memory model's, bit for bit, on {identical} "
                     f"requests")
        calibration = {v.name: _calibrate(memory if not v.ssd else build_ssd(v.latency_us), log) for v in variants}
        # a variant whose reads wait longer is no faster than the one whose reads do not (16 timed requests are
        # noisy: a faster figure set a Server target the variant missed)
        plain = [calibration[v.name] for v in variants if v.ssd and not v.latency_us]
        for v in variants:
            if v.latency_us and plain:
                calibration[v.name] = max(calibration[v.name], plain[0])
        progress("calibration: " + ", ".join(f"{k} {s * 1e3:.1f} ms per request" for k, s in calibration.items()))
        base_job = {"model_dir": str(model_dir), "rows_file": str(rows_file), "layout": layout.to_dict(),
                    "cache_rows": cache_rows, "policy": config.cache_policy.value,
                    "queue_depth": config.storage_queue_depth, "row_reader": config.row_reader.value,
                    "warm_rows": None if warm_file is None else str(warm_file), "quick": config.quick,
                    "threads": config.threads, "dense_workers": config.workers,
                    "data": dataclasses.asdict(config.data), "model": config.model}
        runs = [_run_variant(config, v, scenario, calibration[v.name] if scenario is Scenario.SERVER
                             else min(calibration.values()), base_job, work, log, reference, notes,
                             progress)
                for scenario in config.scenarios for v in variants]
    return V3Report(config=config, model=trained, runs=runs, reference=reference, twin_cost=twin_cost,
                    official=official_cost(), probe=probe, cache_rows=cache_rows, table_rows=rows, warm_note=warm_note,
                    identical_requests=identical, calibration=calibration, wall_s=time.perf_counter() - t_start,
                    notes=notes)


def _responses(model: HSTURanker, log: RequestLog, count: int) -> list[acc.Response]:
    out = []
    for r in range(min(count, len(log))):
        batch = log.batch(np.array([r]))
        probs = score_request(model, batch).numpy()
        labels = batch.labels.numpy()
        out.append(acc.decode_response(acc.encode_response(int(log.ts[r]), int(log.query[r]), probs, labels,
                                                           np.ones_like(labels))))
    return out


def _direct_metrics(model: HSTURanker, log: RequestLog, count: int) -> acc.Dlrmv3Metrics:
    """The model's metrics on the first ``count`` requests, computed directly (no LoadGen)."""
    return acc.score(_responses(model, log, count))


def _check_identical(memory: HSTURanker, ssd: list[Variant],
                     build_ssd: Callable[[float], tuple[HSTURanker, SdmEmbeddings]], log: RequestLog) -> int:
    """Every SSD variant's predictions against the in-memory model's, bit for bit; the requests compared."""
    if not ssd:
        return 0
    expected = [score_request(memory, log.batch(np.array([r]))) for r in range(IDENTICAL_REQUESTS)]
    for v in ssd:
        model, tables = build_ssd(v.latency_us)
        try:
            for r in range(IDENTICAL_REQUESTS):
                got = score_request(model, log.batch(np.array([r])))
                if not torch.equal(got, expected[r]):
                    raise HarnessError(
                        f"the {v.system} model's predictions differ from the in-memory model's on request {r} "
                        f"(largest difference {float((got - expected[r]).abs().max()):.3g}): the cache changed the "
                        f"arithmetic", ErrorCategory.RUN_FAILED)
        finally:
            tables.store.close()
    return IDENTICAL_REQUESTS


def _calibrate(served: HSTURanker | tuple[HSTURanker, SdmEmbeddings], log: RequestLog) -> float:
    """Seconds per request, one after another (lookups and dense part), the median of
    :data:`CALIBRATION_REQUESTS` after one pass to warm up."""
    model, tables = served if isinstance(served, tuple) else (served, None)
    times = []
    try:
        for r in range(-2, CALIBRATION_REQUESTS):
            batch = log.batch(np.array([r % len(log)]))
            t0 = time.perf_counter()
            score_request(model, batch)
            times.append(time.perf_counter() - t0)
    finally:
        if tables is not None:
            tables.store.close()
    return float(np.median(times[2:]))


def _user_conf(path: Path, scenario: Scenario, qps: float, note: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {note}\n{MLPERF_MODEL}.{mlperf.SCENARIO_NAMES[scenario.value]}.target_qps = {qps:.2f}\n")
    return path


def _run_variant(config: V3Config, v: Variant, scenario: Scenario, seconds: float, base_job: dict[str, Any],
                 work: Path, log: RequestLog, reference: acc.Dlrmv3Metrics, notes: list[str],
                 progress: Callable[[str], None]) -> V3Run:
    if scenario is Scenario.SERVER:
        qps, source = (config.server_qps, "--server-qps") if config.server_qps else \
            (SERVER_LOAD / seconds, f"{SERVER_LOAD:g} x the calibrated rate of one request after another")
    else:
        qps, source = (config.offline_qps, "--offline-qps") if config.offline_qps else \
            (OFFLINE_HEADROOM / seconds, f"{OFFLINE_HEADROOM:g} x the fastest variant's calibrated rate")
    scen_dir = mlperf.scenario_dir(config.results, v.system, MLPERF_MODEL, scenario.value)
    note = f"{v.system} {scenario.value}: target QPS {source}" + (f"; {config.label}" if config.label else "")
    user_conf = _user_conf(scen_dir / "user.conf", scenario, qps, note)
    job = {**base_job, "variant": "ssd" if v.ssd else "memory", "variant_name": v.name, "latency_us": v.latency_us,
           "scenario": scenario.value, "user_conf": str(user_conf)}
    perf_dir = mlperf.performance_dir(config.results, v.system, MLPERF_MODEL, scenario.value)
    acc_dir = mlperf.accuracy_dir(config.results, v.system, MLPERF_MODEL, scenario.value)
    test08_run = acc.scenario_test08_dir(config.results, v.system, scenario.value) / "performance" / "run_1"
    outcomes = {}
    for mode, out_dir in (("performance", perf_dir), ("accuracy", acc_dir), ("test08", test08_run)):
        mlperf.clear_run_dir(out_dir)
        progress(f"LoadGen {scenario.value} {mode}, {v.system}, target {qps:,.1f} QPS ...")
        outcomes[mode] = run_worker({**job, "mode": mode, "out_dir": str(out_dir)}, work)
        if config.label:
            mlperf.label_not_valid(out_dir, config.label)
    summary = parse_summary(perf_dir / mlperf.SUMMARY, scenario)
    metrics = acc.score_log(acc_dir / mlperf.ACCURACY_LOG)
    check = acc.check_targets(metrics, reference)
    (acc_dir / mlperf.ACCURACY_TXT).write_text(metrics.text() + (f"# {config.label}\n" if config.label else ""))
    test08 = acc.write_test08(config.results, v.system, scenario.value, test08_run / mlperf.ACCURACY_LOG,
                              acc_dir / mlperf.ACCURACY_LOG)
    p99 = f", p99 {summary.p99_latency_ms:.1f} ms" if scenario is Scenario.SERVER else ""
    progress(f"  {summary.samples_per_s:,.1f} requests/s{p99}, {'VALID' if summary.valid else 'INVALID'}; "
             f"accuracy {metrics.summary()} {'PASS' if check.passed else 'FAIL'}; TEST08 "
             f"{'PASS' if test08.passed else 'FAIL'}")
    return V3Run(variant=v, scenario=scenario, target_qps=qps, summary=summary, metrics=metrics,
                 accuracy_passed=check.passed, test08=test08, perf=outcomes["performance"])


if __name__ == "__main__":
    exit_now(worker_main(sys.argv[1:]))
