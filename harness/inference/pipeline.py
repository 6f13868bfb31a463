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

The steps, in order: :func:`~harness.inference.model.trained_model`, the rows file and the
variants, :func:`~harness.inference.model.check_identical`,
:func:`~harness.inference.model.reference_auc`, the calibration
(:mod:`harness.inference.calibration`), then per scenario and variant a performance and an
accuracy test; :func:`run_inference` does them all. Only the command
(:mod:`harness.cli.infer`) imports this module.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import EXIT_CODES, ErrorCategory, HarnessError, io_fault
from harness.inference import mlperf
from harness.inference.calibration import (
    CALIBRATION_ROUNDS,
    OFFLINE_BYTES_PER_SAMPLE,
    OFFLINE_HEADROOM,
    OFFLINE_MEMORY_SHARE,
    calibrate,
    calibrate_user_query,
    offline_qps_cap,
    warm_cache,
)
from harness.inference.config import (
    AGAIN,
    QUICK_ACCURACY_SAMPLES,
    QUICK_MIN_DURATION_MS,
    QUICK_MIN_QUERY_COUNT,
    InferConfig,
    Scenario,
    Variant,
    default_model_dir,
    variants_for,
)
from harness.inference.model import (
    MODEL_FILE,
    TrainedModel,
    check_identical,
    hot_rows,
    memory_model,
    memory_tables,
    reference_auc,
    ssd_model,
    trained_model,
)
from harness.inference.qsl import SampleLibrary
from harness.inference.results import InferReport, LoadgenRun, SsdReads, parse_summary
from harness.inference.storage import RowLayout, SdmEmbeddings, probe_device, write_rows
from harness.inference.worker import OFFLINE_LOOKUP_CALLS, WORKER_IO_FAULT
from harness.inference.worker import main as worker_main
from harness.reference.data import synthetic
from harness.reference.data.datasets import SyntheticDataset
from harness.reference.forked import ForkedProcess, start_server
from harness.reference.models.dlrm import DLRM
from harness.reference.tiered import rowio
from harness.rules.specs import BenchmarkSpec, load_benchmark

# The default Server rate of a variant: the highest that passed a short search over LoadGen
# Server runs in one worker (:func:`harness.inference.worker.search_server_qps`): from half the
# rate at which it answers one-user queries back to back, doubling while a run passes, bisecting
# once one fails, SERVER_SEARCH_PROBES runs of at least SERVER_SEARCH_QUERIES queries (with --quick
# as many as its Server run) and SERVER_SEARCH_MS (with the official settings: ..._OFFICIAL), so
# that a rate the variant cannot keep up with builds a queue; a run passes when it keeps up, its p99 is within
# SERVER_SEARCH_MARGIN of the bound and its p99.9 within the bound. The target is SERVER_SEARCH_HEADROOM of the highest rate that
# passed: a short run's tail is an optimistic estimate of a long run's, which LoadGen's early
# stopping then judges (measured: docs/performance.md, "Figures behind the code's choices"). The search goes no lower than a rate at which the quick Server run's
# queries take SERVER_SEARCH_FLOOR_S: a variant whose largest users alone take most of the bound
# (the +100 us a read variant's, in the same records) would otherwise halve its way to a run of minutes
SERVER_SEARCH_PROBES = 6
SERVER_SEARCH_QUERIES = 200
SERVER_SEARCH_QUERIES_OFFICIAL = 2000
SERVER_SEARCH_MS = 2000
SERVER_SEARCH_MS_OFFICIAL = 10000
SERVER_SEARCH_MARGIN = 0.8
SERVER_SEARCH_HEADROOM = 0.6
SERVER_SEARCH_FLOOR_S = 60.0
# ... of the rate of queries through the whole Server path: the model call plus LoadGen's
# issue and completion of the query in Python, about this long (measured with one-row queries:
# docs/performance.md, "Figures behind the code's choices")
SERVER_QUERY_OVERHEAD_S = 1e-4
# what the LoadGen workers' fork server imports once (harness.reference.forked); the
# worker imports the model, the samples and the results modules itself
WORKER_PRELOAD = ["torch", "numpy", "harness.inference.worker", "harness.reference.forkserver_last"]
EFFECTIVE_KEYS = ("effective_scenario", "effective_test_mode", "requested_min_duration_ms", "requested_min_query_count",
                  "effective_min_duration_ms", "effective_min_query_count", "effective_min_sample_count",
                  "generated_samples_per_query", "result_validity", "early_stopping_met",
                  "effective_target_qps", "effective_target_latency_ns", "effective_target_latency_percentile",
                  "effective_performance_sample_count", "effective_sample_index_rng_seed", "generated_query_count",
                  "effective_accuracy_sample_count")


@dataclass(frozen=True, eq=False)
class _SsdTier:
    """The SSD tier of this run: the tables' rows file in a temporary folder (which also holds
    the LoadGen workers' job files), the cache's size, what the device gave, how caches start."""

    work_dir: Path
    rows_file: Path
    layout: RowLayout
    table_rows: int
    cache_rows: int
    probe: rowio.DeviceProbe
    warm: np.ndarray | None  # the rows every SSD variant's cache holds at start, hottest first (None: cold)
    warm_file: Path | None  # ... saved for the workers
    pin_rows: int  # ... the first of them held for good
    warm_note: str


@dataclass
class _Served:
    """One variant in this process, with its calibration."""

    variant: Variant
    model: DLRM
    tables: SdmEmbeddings | None = None
    batch_s: float = 0.0  # one call answering max_batch rows
    single_query_s: float = 0.0  # one call answering one user's rows, the mean
    single_query_p99_s: float = 0.0  # ... the 99th percentile


# ---------------------------------------------------------------------------------- everything
def run_inference(config: InferConfig, *, progress: Callable[[str], None] = lambda _m: None) -> InferReport:
    """Train (or reuse) the benchmark's model, then run every variant in each scenario as an
    MLPerf submission does (performance, then accuracy), into ``config.results``."""
    t_start = time.perf_counter()
    mlperf.loadgen()
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


def _run_inference(config: InferConfig, spec: BenchmarkSpec, data: synthetic.SyntheticCriteo, model_dir: Path,
                   notes: list[str], t_start: float, progress: Callable[[str], None]) -> InferReport:
    model, state = trained_model(spec, seed=config.seed, train_steps=config.train_steps, model_dir=model_dir,
                                 progress=progress, precision=config.precision)
    start_server(WORKER_PRELOAD)  # the LoadGen workers' fork server imports torch while the variants are prepared
    memory_net = memory_model(spec, state)
    weight = memory_tables(memory_net).weight.detach()
    variants = variants_for(config.storage_latency_us, config.variant_kinds)
    with tempfile.TemporaryDirectory(dir=model_dir, prefix="ssd-tier-") as tier_dir:
        tier = _prepare_tier(config, Path(tier_dir), weight, data, memory_net, progress)

        def build_ssd(latency_us: float) -> tuple[DLRM, SdmEmbeddings]:
            return ssd_model(spec, state, tier.rows_file, tier.layout, cache_rows=tier.cache_rows,
                             policy=config.cache_policy, latency_us=latency_us,
                             queue_depth=config.storage_queue_depth, warm=tier.warm, pin_rows=tier.pin_rows,
                             reader=config.row_reader, coalesce=config.coalesce)

        served = [_Served(v, memory_net) if not v.ssd else _Served(v, *build_ssd(v.latency_us)) for v in variants]
        try:
            identical = _check_identical(config, memory_net, served, data, progress)
            ref_auc, labels, ref_probs = reference_auc(memory_net, data)
            progress(f"reference AUC (the in-memory model on the {labels.size} eval rows, directly): "
                     f"{ref_auc:.6f}")
            library = SampleLibrary(data)
            progress(f"samples: {library.count} users of {library.sizes.min()} to {library.sizes.max()} rows "
                     f"(mean {library.mean_rows:.0f}) over the {library.rows} eval rows, as MLPerf's DLRMv2 "
                     f"reference draws them")
            _calibrate(config, served, library, build_ssd, progress)
            results = [_run_variant(config, s, scenario, job=_job(config, spec, s, scenario, model_dir, tier),
                                    library=library, labels=labels, ref_probs=ref_probs, work_dir=tier.work_dir,
                                    probe_reads_per_s=tier.probe.reads_per_s, notes=notes, progress=progress)
                       for scenario in config.scenarios for s in served]
        finally:
            _close(served)
    return _report(config, model, variants, weight, tier, identical=identical, ref_auc=ref_auc, results=results,
                   notes=notes, t_start=t_start)


def _prepare_tier(config: InferConfig, tier_dir: Path, weight: torch.Tensor, data: synthetic.SyntheticCriteo,
                  memory_net: DLRM, progress: Callable[[str], None]) -> _SsdTier:
    """The tables written to the SSD tier's rows file, the device probed at the run's queue
    depth, and (unless ``--cold-cache``) the hot rows the caches start with, the hottest
    ``--pin-fraction`` of the cache pinned."""
    rows = int(weight.shape[0])
    cache_rows = max(1, round(rows * config.cache_fraction))
    rows_file = tier_dir / "tables.rows"
    try:
        layout = write_rows(rows_file, weight, direct=config.direct)
    except OSError as err:
        raise io_fault(err, rows_file, "writing the tables to the SSD tier", AGAIN) from None
    progress(f"tables on the SSD tier: {rows_file} ({rows} rows of {layout.row_bytes} bytes), "
             f"read {layout.mode} by {rowio.reader_name(config.row_reader)}")
    # the device's own limit at the run's queue depth, for the fraction every report prints
    probe = probe_device(rows_file, layout, depth=config.storage_queue_depth, reader=config.row_reader)
    progress(probe.describe())
    warm, warm_file, pin_rows, warm_note = None, None, 0, "cold at start, nothing pinned (--cold-cache)"
    if config.warm_cache:
        offsets = memory_tables(memory_net).column_offsets
        warm, counted = hot_rows(data, offsets, rows, cache_rows)
        warm_file = tier_dir / "warm-rows.npy"
        np.save(warm_file, warm)
        pin_rows = min(warm.size, round(config.pin_fraction * cache_rows))
        warm_note = (f"warm at start: the {warm.size:,} rows the first {counted:,} training samples look up most, "
                     f"the hottest {pin_rows:,} pinned ({config.pin_fraction:g} of the cache, never evicted)")
        progress(f"cache: {warm_note}")
    return _SsdTier(work_dir=tier_dir, rows_file=rows_file, layout=layout, table_rows=rows, cache_rows=cache_rows,
                    probe=probe, warm=warm, warm_file=warm_file, pin_rows=pin_rows, warm_note=warm_note)


def _check_identical(config: InferConfig, memory_net: DLRM, served: list[_Served], data: synthetic.SyntheticCriteo,
                     progress: Callable[[str], None]) -> int:
    """Every SSD variant's predictions against the in-memory model's, bit for bit; the eval rows compared."""
    identical = 0
    for s in (s for s in served if s.tables is not None):
        identical = check_identical(memory_net, s.model, data, sizes=_check_sizes(config.max_batch))
    if identical:
        progress(f"every SSD variant's predictions are identical to the in-memory model's, bit for "
                 f"bit, on {identical} eval rows")
    return identical


def _check_sizes(max_batch: int) -> list[int]:
    """Batches to compare the variants on: a full one (larger than a small cache: it bypasses
    it) and small ones that go through the cache, admitting and evicting rows."""
    return [max_batch, *([64] * 4), 1, 1]


def _calibrate(config: InferConfig, served: list[_Served], library: SampleLibrary,
               build_ssd: Callable[[float], tuple[DLRM, SdmEmbeddings]], progress: Callable[[str], None]) -> None:
    """Every variant's calibration (:data:`CALIBRATION_ROUNDS` rounds, each variant's fastest
    kept): an Offline batch's call and, where a Server target is to be searched, a one-user
    query's; each SSD variant with a fresh, cold cache each round, as the worker's, closed after."""
    # the one-user query time sizes only a calibrated Server target: not timed without one
    query_target_needed = Scenario.SERVER in config.scenarios and not config.server_qps \
        and config.user_conf is None
    for rnd in range(CALIBRATION_ROUNDS):  # every variant, then every variant again
        for s in served:
            if s.tables is not None:  # a fresh, cold cache, as the worker's
                s.tables.store.close()
                s.model, s.tables = build_ssd(s.variant.latency_us)
            batch_s = calibrate(s.model, library, config.max_batch,
                                lookup_calls=OFFLINE_LOOKUP_CALLS if s.tables is not None else 1)
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
        shared = f" (the lookups of {OFFLINE_LOOKUP_CALLS} at once)" if s.tables is not None else ""
        progress(f"calibration, {s.variant.name}: {config.max_batch / s.batch_s:,.0f} rows/s in "
                 f"batches of {config.max_batch} rows{shared}, {per_query}")
    _close(served)


def _close(served: list[_Served]) -> None:
    """Close the SSD variants' rows files (the workers open their own)."""
    for s in served:
        if s.tables is not None:
            s.tables.store.close()


def _report(config: InferConfig, model: TrainedModel, variants: tuple[Variant, ...], weight: torch.Tensor,
            tier: _SsdTier, *, identical: int, ref_auc: float, results: list[LoadgenRun], notes: list[str],
            t_start: float) -> InferReport:
    sha_ok = all(r.effective.get("mlperf_conf_sha1") == mlperf.MLPERF_CONF_SHA1 for r in results) \
        and mlperf.conf_sha1() == mlperf.MLPERF_CONF_SHA1
    return InferReport(
        config=config, model=model, variants=variants, table_rows=tier.table_rows, cache_rows=tier.cache_rows,
        memory_table_bytes=weight.numel() * weight.element_size(),
        ssd_file_bytes=tier.layout.rows * tier.layout.stride, storage_mode=tier.layout.mode,
        identical_samples=identical, reference_auc=ref_auc, results=results,
        loadgen_version=mlperf.loadgen_version(), mlperf_conf_sha1_matches=sha_ok,
        wall_s=time.perf_counter() - t_start, notes=notes, reader=rowio.reader_name(config.row_reader), device_probe=tier.probe,
        warm_note=tier.warm_note,
    )


# ---------------------------------------------------------------------------------- one variant, one scenario
def _job(config: InferConfig, spec: BenchmarkSpec, s: _Served, scenario: Scenario, model_dir: Path,
         tier: _SsdTier) -> dict[str, Any]:
    """What every LoadGen worker of this (variant, scenario) is given (:mod:`harness.inference.worker`)."""
    v = s.variant
    return {
        "benchmark": spec.name, "state": str(model_dir / MODEL_FILE), "variant": "ssd" if v.ssd else "memory",
        "variant_name": v.name, "rows_file": str(tier.rows_file), "layout": tier.layout.to_dict(),
        "latency_us": v.latency_us, "cache_rows": tier.cache_rows, "policy": config.cache_policy.value,
        "scenario": scenario.value, "queue_depth": config.storage_queue_depth, "row_reader": config.row_reader.value,
        "warm_rows": None if tier.warm_file is None else str(tier.warm_file), "pin_rows": tier.pin_rows,
        "coalesce": config.coalesce,
        "quick": config.quick, "quick_min_duration_ms": QUICK_MIN_DURATION_MS,
        "quick_min_query_count": config.quick_server_queries if scenario is Scenario.SERVER else QUICK_MIN_QUERY_COUNT,
        "quick_accuracy_samples": QUICK_ACCURACY_SAMPLES,
        # Server (0): the queries that arrived together share their lookups, each has a dense call of its
        # own, so that a user's predictions do not depend on which queries arrived with it (float32
        # sums differ in the last bits with the batch's size)
        "max_batch": config.max_batch if scenario is Scenario.OFFLINE else 0, "threads": config.threads,
    }


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
    # --quick: as many queries as the quick Server run, whose LoadGen verdict (early stopping at 600
    # queries) fails on one query over the bound: a search of fewer samples the largest users too rarely
    queries = max(SERVER_SEARCH_QUERIES, config.quick_server_queries) if config.quick else \
        SERVER_SEARCH_QUERIES_OFFICIAL
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


def _user_conf(config: InferConfig, v: Variant, scenario: Scenario, qps: float,
               source: str) -> tuple[Path, float, str]:
    """The variant's ``user.conf`` (written with ``qps``, or ``--user-conf``), its target QPS
    (NaN until LoadGen's detail log says, with ``--user-conf``) and where that comes from."""
    if config.user_conf is not None:
        return config.user_conf.resolve(), float("nan"), "--user-conf"
    note = f"{v.system} {scenario.value}: target QPS {source}"
    if config.label:
        note += f"; {config.label}"
    scen_dir = mlperf.scenario_dir(config.results, v.system, config.model_name, scenario.value)
    return mlperf.write_user_conf(scen_dir / "user.conf", scenario.value, target_qps=qps, note=note), qps, source


def _run_variant(config: InferConfig, s: _Served, scenario: Scenario, *, job: dict[str, Any],
                 library: SampleLibrary, labels: np.ndarray, ref_probs: np.ndarray, work_dir: Path,
                 probe_reads_per_s: float, notes: list[str], progress: Callable[[str], None]) -> LoadgenRun:
    """One variant in one scenario: its user.conf, a performance run, an accuracy run, scored."""
    v, model_name = s.variant, config.model_name
    perf_dir = mlperf.performance_dir(config.results, v.system, model_name, scenario.value)
    acc_dir = mlperf.accuracy_dir(config.results, v.system, model_name, scenario.value)
    if scenario is Scenario.SERVER and not config.server_qps and config.user_conf is None:
        qps, source = _search_server_qps(config, s, job, work_dir, notes, progress)
    else:
        qps, source = _target(config, s, scenario, notes, library.mean_rows)
    user_conf, qps, source = _user_conf(config, v, scenario, qps, source)
    job = {**job, "user_conf": str(user_conf)}
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
    score = _score_accuracy(config, v, scenario, acc_dir, library, labels, ref_probs)
    detail = mlperf.detail_values(perf_dir / mlperf.DETAIL)
    effective = {k: detail[k] for k in EFFECTIVE_KEYS if k in detail}
    effective["mlperf_conf_sha1"] = (detail.get("loadgen_file_sha1") or {}).get("/mlperf.conf")
    if config.user_conf is not None:
        qps = float(effective.get("effective_target_qps", "nan"))
    perf = outcomes["performance"]
    errors = detail["errors"] + mlperf.detail_values(acc_dir / mlperf.DETAIL)["errors"]
    p99 = f"p99 {summary.p99_latency_ms:.2f} ms, " if scenario is Scenario.SERVER else ""
    storage = SsdReads.from_worker(perf, probe_reads_per_s=probe_reads_per_s) if v.ssd else None
    reads = "" if storage is None else (f"{storage.reads_per_sample:,.0f} reads a user (device-bound "
                                        f"{storage.device_bound_qps or 0:,.0f}/s), {storage.coalesced:,} coalesced, ")
    progress(f"  {summary.samples_per_s:,.0f} samples/s, {p99}{reads}"
             f"{'VALID' if summary.valid else 'INVALID'} ({perf['test_s']:.0f} s); accuracy {score.official_line()} "
             f"{'PASS' if score.passed else 'FAIL'} ({outcomes['accuracy']['test_s']:.0f} s)")
    return LoadgenRun(
        variant=v, scenario=scenario, target_qps=qps, qps_source=source, user_conf=user_conf, summary=summary,
        storage=storage, accuracy=score,
        resident_table_bytes=perf["resident_table_bytes"], peak_rss_bytes=perf["peak_rss_bytes"],
        performance_s=perf["test_s"], accuracy_s=outcomes["accuracy"]["test_s"], effective=effective,
        loadgen_errors=errors,
    )


def _score_accuracy(config: InferConfig, v: Variant, scenario: Scenario, acc_dir: Path, library: SampleLibrary,
                    labels: np.ndarray, ref_probs: np.ndarray) -> mlperf.AccuracyScore:
    """The accuracy run's log scored against the reference, written as ``accuracy.txt`` with the
    samples' trace; refused unless it logged every sample asked for."""
    score = mlperf.score_accuracy_log(acc_dir / mlperf.ACCURACY_LOG, library.offsets, labels, reference=ref_probs,
                                      model=config.model_name)
    mlperf.write_aggregation_trace(acc_dir / mlperf.AGGREGATION_TRACE, library.offsets)
    text = score.official_line() + "\n"
    if config.label:
        text += f"# {config.label}\n"
    (acc_dir / mlperf.ACCURACY_TXT).write_text(text)
    asked = min(QUICK_ACCURACY_SAMPLES, library.count) if config.quick else library.count
    if score.queries != asked:
        raise HarnessError(f"the accuracy run of {v.system} {scenario.value} logged {score.queries} samples, not "
                           f"the {asked} asked for", ErrorCategory.RUN_FAILED)
    return score


# ---------------------------------------------------------------------------------- one LoadGen test
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
    # harness.reference.forked): still one process per test, as LoadGen needs
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
