"""One LoadGen test in a process of its own: ``python -m harness.inference.worker JOB.json``.

LoadGen 6.0 applies its official settings (``mlperf.conf``) in the first
``TestSettings.FromConfig`` call of a process only, and logs an ``error_invalid_config``
for any later one; so, as MLPerf's reference harnesses do, every test (one variant, one
scenario, one mode) is one process that calls it once, with its system's ``user.conf``.

The job (JSON, written by :func:`harness.inference.pipeline.run_inference`) names the model, the
variant (``memory``, or ``ssd``: the rows file, its layout, the cache and the added
latency), the scenario, the mode, the ``user.conf``, the output directory and, with
``--quick``, the overrides of the minimum duration and query count. The process writes
the job's ``result`` JSON: the storage reads, bytes and misses, per table the lookups and
hits, the test's wall time, the tables' resident bytes and the process's peak RSS; or
``{"error": ...}`` and exits 1.

It builds the model (:mod:`harness.inference.model`), the samples (:mod:`harness.inference.qsl`)
and reads LoadGen's summary (:mod:`harness.inference.results`); the pipeline that starts it
(:mod:`harness.inference.pipeline`) is never imported here.
"""

from __future__ import annotations

import itertools
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError, io_fault
from harness.files import write_atomic
from harness.inference import mlperf
from harness.inference.config import AGAIN, Scenario
from harness.inference.model import memory_model, memory_tables, ssd_model
from harness.inference.qsl import SampleLibrary
from harness.inference.results import parse_summary
from harness.inference.storage import RowLayout, SdmEmbeddings
from harness.process import exit_now
from harness.reference.data.datasets import SyntheticDataset
from harness.reference.models.dlrm import DLRM
from harness.reference.planner.types import RowReader
from harness.reference.tiered import CachePolicy
from harness.rules.specs import load_benchmark

_STOP = object()
_AHEAD = 2  # model calls whose lookups may be done ahead of their dense part
SERVER_LOOKUP_ROWS = 16384  # Server: the most rows of queries that arrived together looked up in one call
# Server: lookup calls in flight at once, each on a thread of its own (the cache shared under a lock,
# each thread's reads through its own io_uring), so one large user's reads do not hold up the
# queries that arrive behind it
SERVER_LOOKUP_THREADS = 4
# Offline, an SSD variant: the lookups of this many consecutive model calls (of about --max-batch rows
# each) in one lookup call, so that a row several of their users look up is read once (one distinct
# set, one submission), each call's dense part still its own (the same sizes as the in-memory
# model's calls, so the same predictions); measured: docs/performance.md, "SDM levers"
OFFLINE_LOOKUP_CALLS = 4
WORKER_IO_FAULT = "harness: error: "  # how a LoadGen worker that cannot write its result says why, on stderr


class FastSut:
    """LoadGen's SUT through ``ConstructFastSUT``: ``issue(ids, indices)`` gets two lists of
    ints (about half the memory of a list of ``QuerySample`` objects), kept as NumPy arrays;
    a worker thread answers whatever has arrived (Server: :data:`SERVER_LOOKUP_THREADS` of them,
    each taking what has arrived when it is free, their lookup calls in flight at once). A sample is a user (its eval rows:
    :class:`harness.inference.qsl.SampleLibrary`): consecutive users are answered together in
    calls of about ``max_rows`` rows (a call ends with the user that reaches it), for an SSD
    variant :data:`OFFLINE_LOOKUP_CALLS` such calls sharing one lookup call; with
    ``max_rows`` 0 (Server: a query is one user's ranking request) the queries that arrived
    together share one call's embedding lookups (one cache admission, one submission of their
    misses at the device's queue depth) and each has a dense call of its own. Each sample is
    completed with ``QuerySamplesComplete``, its data a float32 (prediction, label) pair per
    row, as the reference's post-processing writes it. Per lookup call it records the users, the
    rows and, for an SSD variant, the storage reads and misses.

    A model call runs in two stages on two threads, as a serving pipeline does: the embedding
    lookups (for an SSD variant the cache and the device reads, which hold no GIL while in
    flight) on the SUT's worker thread(s), then the dense part (bottom MLP, interaction, top MLP)
    and the completion on a second; the lookups of the next call proceed while the dense part of
    this one computes (at most ``_AHEAD`` calls ahead). The values are the same as one
    ``model(dense, sparse)`` call's: the same operations on the same inputs."""

    def __init__(self, lg: Any, model: DLRM, library: SampleLibrary, max_rows: int,
                 tables: SdmEmbeddings | None = None):
        self.lg, self.model, self.library, self.max_rows, self.tables = lg, model, library, max_rows, tables
        self._queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        # (users, rows, reads, misses, device latencies waited) per model call
        self.calls: list[tuple[int, int, int, int, int]] = []
        lookups = SERVER_LOOKUP_THREADS if max_rows == 0 else 1
        self._threads = [threading.Thread(target=self._work, name=f"harness-infer-sut-{k}", daemon=True)
                         for k in range(lookups)]
        # Offline on the SSD tier: a lookup call's dense calls queued while the next one's lookups run
        ahead = _AHEAD + lookups - 1 if max_rows == 0 or tables is None else OFFLINE_LOOKUP_CALLS
        self._stage: queue.Queue = queue.Queue(maxsize=ahead)
        self._dense_thread = threading.Thread(target=self._dense_stage, name="harness-infer-dense", daemon=True)

    def issue(self, ids: list[int], indices: list[int]) -> None:
        self._queue.put((np.array(ids, dtype=np.uint64), np.array(indices, dtype=np.int64)))

    def flush(self) -> None:
        """Nothing is held back."""

    def answer(self, ids: np.ndarray, users: np.ndarray, dense_calls: list[slice] | None = None) -> None:
        """The first stage of a lookup call: its embedding lookups, handed to the dense stage as
        ``dense_calls`` (slices of ``users``, consecutive; default: one call of them all)."""
        lib = self.library
        if self.error is None:
            try:
                rows = lib.rows_of(users)
                t = torch.from_numpy(rows)
                with torch.no_grad():
                    pooled = self.model.sparse_arch(lib.sparse.index_select(0, t))
                if self.tables is not None:
                    # this thread's call: its misses, the rows it read (the store's reads for this
                    # call, whatever other lookup threads read meanwhile) and the latencies waited
                    reads, misses, waits = self.tables.last_call
                    self.calls.append((users.size, rows.size, reads, misses, waits))
                else:
                    self.calls.append((users.size, rows.size, 0, 0, 0))
                if dense_calls is None or len(dense_calls) == 1:
                    self._stage.put((ids, users, rows, t, pooled))
                    return
                # the lookups of several dense calls went to the cache and the device at once (one
                # distinct set, one submission at the queue depth): Server's queries that arrived
                # together, Offline's OFFLINE_LOOKUP_CALLS calls; each dense part is its own call,
                # so its predictions do not depend on what was looked up with it (a row's pooled
                # vector does not: it is the sum of its own rows only)
                sizes = lib.sizes[users]
                starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
                for part in dense_calls:
                    lo, hi = starts[part.start], starts[part.stop]
                    self._stage.put((ids[part], users[part], rows[lo:hi], t[lo:hi], pooled[lo:hi]))
                return
            except Exception as err:  # noqa: BLE001 - LoadGen must still finish; raised after it returns
                self.error = err
        self._fail(ids)

    def _fail(self, ids: np.ndarray) -> None:
        self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(i, 0, 0) for i in ids.tolist()])

    def _dense_stage(self) -> None:
        lg, lib, model = self.lg, self.library, self.model
        while True:
            item = self._stage.get()
            if item is _STOP:
                return
            ids, users, rows, t, pooled = item
            if self.error is None:
                try:
                    with torch.no_grad():
                        d = model.dense_arch(lib.dense.index_select(0, t))
                        logits = model.over_arch(model.interaction(d, pooled))
                    out = np.empty((rows.size, 2), dtype=np.float32)
                    out[:, 0] = torch.sigmoid(logits).numpy()
                    out[:, 1] = lib.labels.index_select(0, t).numpy()
                    sizes = lib.sizes[users]
                    starts = (np.cumsum(sizes) - sizes).tolist()
                    base = out.ctypes.data
                    lg.QuerySamplesComplete([lg.QuerySampleResponse(i, base + 8 * lo, 8 * n)
                                             for i, lo, n in zip(ids.tolist(), starts, sizes.tolist())])
                    continue
                except Exception as err:  # noqa: BLE001 - LoadGen must still finish; raised after it returns
                    self.error = err
            self._fail(ids)

    def calls_of(self, users: np.ndarray) -> list[slice]:
        """``users`` cut into model calls of about ``max_rows`` rows (``max_rows`` 0, Server: lookup
        calls of about :data:`SERVER_LOOKUP_ROWS`, each user's dense part then a call of its own)."""
        limit = self.max_rows if self.max_rows > 0 else SERVER_LOOKUP_ROWS
        sizes = self.library.sizes[users]
        call = (np.cumsum(sizes) - sizes) // limit  # by the row each user starts at
        cuts = [0, *(np.flatnonzero(np.diff(call)) + 1).tolist(), users.size]
        return [slice(a, b) for a, b in itertools.pairwise(cuts)]

    def lookup_calls(self, users: np.ndarray) -> list[tuple[slice, list[slice]]]:
        """``users`` cut into lookup calls, each with its dense calls (slices of the lookup call's
        users): Offline, :meth:`calls_of`'s calls, :data:`OFFLINE_LOOKUP_CALLS` of them to a lookup
        call for an SSD variant (one for the in-memory one); Server, its lookup calls, one user a
        dense call."""
        calls = self.calls_of(users)
        if self.max_rows == 0:
            return [(c, [slice(k, k + 1) for k in range(c.stop - c.start)]) for c in calls]
        group = OFFLINE_LOOKUP_CALLS if self.tables is not None else 1
        out = []
        for k in range(0, len(calls), group):
            parts = calls[k : k + group]
            lo = parts[0].start
            out.append((slice(lo, parts[-1].stop), [slice(c.start - lo, c.stop - lo) for c in parts]))
        return out

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
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
            users = np.concatenate([p[1] for p in parts])
            for part, dense_calls in self.lookup_calls(users):
                self.answer(ids[part], users[part], dense_calls)
            if stop:
                return

    def __enter__(self) -> int:
        self._dense_thread.start()
        for thread in self._threads:
            thread.start()
        self.handle = self.lg.ConstructFastSUT(self.issue, self.flush)
        return self.handle

    def __exit__(self, *exc: object) -> None:
        self.lg.DestroyFastSUT(self.handle)
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()
        self._stage.put(_STOP)
        self._dense_thread.join()


def peak_rss_bytes() -> int:
    """This process's peak resident memory (``VmHWM``), or 0 where /proc is not there."""
    return mlperf.proc_bytes("/proc/self/status", "VmHWM") or 0


def build(job: dict[str, Any]) -> tuple[DLRM, SdmEmbeddings | None]:
    """The job's model (and its SSD tables, or None)."""
    spec = load_benchmark(job["benchmark"])
    state = torch.load(job["state"], weights_only=True)
    if job["variant"] == "memory":
        return memory_model(spec, state), None
    warm = np.load(job["warm_rows"]) if job.get("warm_rows") else None  # the hot rows a deployment loads at start
    return ssd_model(spec, state, Path(job["rows_file"]), RowLayout(**job["layout"]), cache_rows=int(job["cache_rows"]),
                     policy=CachePolicy(job["policy"]), latency_us=float(job["latency_us"]),
                     queue_depth=int(job.get("queue_depth", 1)), warm=warm, pin_rows=int(job.get("pin_rows", 0)),
                     reader=RowReader(job.get("row_reader", RowReader.AUTO.value)),
                     coalesce=bool(job.get("coalesce", True)))


def log_settings(lg: Any, out_dir: Path) -> Any:
    """LoadGen's log settings: its files in ``out_dir``, no summary on stdout, no trace."""
    output = lg.LogOutputSettings()
    output.outdir = str(out_dir)
    output.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = output
    log.enable_trace = False
    return log


def run(job: dict[str, Any]) -> dict[str, Any]:
    """The job's LoadGen test (or Server target search); its counts."""
    t_start = time.perf_counter()
    torch.set_num_threads(int(job["threads"]))
    lg = mlperf.loadgen()
    model, tables = build(job)
    data = SyntheticDataset(load_benchmark(job["benchmark"]).dataset).generator
    library = SampleLibrary(data)
    if job["mode"] == "search":
        result = search_server_qps(job, lg, model, tables, library)
        if tables is not None:
            tables.store.close()
        return {**result, "wall_s": time.perf_counter() - t_start}
    settings = loadgen_settings(lg, job)
    log = log_settings(lg, Path(job["out_dir"]))
    sut = FastSut(lg, model, library, int(job["max_batch"]), tables)
    qsl = lg.ConstructQSL(library.count, library.count, library.load, library.unload)
    try:
        t0 = time.perf_counter()
        with sut as handle:
            lg.StartTestWithLogSettings(handle, qsl, settings, log)
        test_s = time.perf_counter() - t0
    finally:
        lg.DestroyQSL(qsl)
    if sut.error is not None:
        raise HarnessError(f"the model failed during the LoadGen {job['scenario']} {job['mode']} run: "
                           f"{type(sut.error).__name__}: {sut.error}", ErrorCategory.RUN_FAILED)
    return run_counts(sut, model, tables, test_s=test_s, wall_s=time.perf_counter() - t_start)


def loadgen_settings(lg: Any, job: dict[str, Any]) -> Any:
    """LoadGen's settings for the job: the official ones and the job's ``user.conf`` (read by
    LoadGen, once in this process), its mode, and ``--quick``'s overrides."""
    scenario = mlperf.SCENARIO_NAMES[job["scenario"]]
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario)
    if settings.FromConfig(job["user_conf"], mlperf.LOADGEN_MODEL, scenario) != 0:
        raise HarnessError(f"LoadGen could not read {job['user_conf']}", ErrorCategory.BAD_INPUT)
    settings.mode = lg.TestMode.AccuracyOnly if job["mode"] == "accuracy" else lg.TestMode.PerformanceOnly
    if job.get("quick"):
        settings.min_duration_ms = int(job["quick_min_duration_ms"])
        settings.min_query_count = int(job["quick_min_query_count"])
        if job.get("quick_accuracy_samples"):
            settings.accuracy_sample_count_override = int(job["quick_accuracy_samples"])
    return settings


def run_counts(sut: FastSut, model: DLRM, tables: SdmEmbeddings | None, *, test_s: float,
               wall_s: float) -> dict[str, Any]:
    """What the test did: its samples, rows and model calls, the memory held, and for an SSD
    variant its reads, misses and cache hits (its store closed after)."""
    calls = np.array(sut.calls, dtype=np.int64).reshape(-1, 5)
    result: dict[str, Any] = {
        "test_s": test_s, "wall_s": wall_s,
        "samples": int(calls[:, 0].sum()), "rows": int(calls[:, 1].sum()), "model_calls": int(calls.shape[0]),
        "max_call_rows": int(calls[:, 1].max()) if calls.size else 0,
        "reads_per_call_equal_misses": bool((calls[:, 2] == calls[:, 3]).all()),
        "peak_rss_bytes": peak_rss_bytes(),
    }
    if tables is None:
        emb = memory_tables(model)
        result["resident_table_bytes"] = emb.weight.numel() * emb.weight.element_size()
    else:
        store = tables.store
        result.update({
            "resident_table_bytes": tables.resident_bytes(), "reads": store.reads, "bytes_read": store.bytes_read,
            "read_s": store.read_s, "misses": tables.misses, "bypass_calls": tables.bypass_batches,
            "coalesced": tables.coalesced, "pinned_rows": tables.pinned,
            "table_lookups": tables.table_lookups.tolist(), "table_hits": tables.table_hits.tolist(),
            "added_latency_us": store.added_latency_us, "storage_mode": store.layout.mode,
            # per model call, the device latencies it waited (a lower bound on its time: each is a
            # busy wait of at least the latency asked for)
            "call_latency_waits": calls[:, 4].tolist(),
            "call_users": calls[:, 0].tolist(),  # the queries (users) each lookup call answered
        })
        store.close()
    return result


def search_server_qps(job: dict[str, Any], lg: Any, model: DLRM, tables: SdmEmbeddings | None,
                      library: SampleLibrary) -> dict[str, Any]:
    """The Server target QPS by a short search over LoadGen runs in this one process (settings set
    directly: a search needs no ``mlperf.conf``, which LoadGen applies to a process's first test
    only): runs of at least ``search_queries`` one-user queries and ``search_ms``, from ``search_start_qps``, doubling while
    a run passes and bisecting once one fails, ``search_probes`` runs in all, never below
    ``search_floor_qps`` (a failure there ends the search). A run passes when
    its p99 latency is within ``search_margin`` of the bound, its p99.9 within the bound, and it
    kept up with the schedule
    (completed at least 0.95 of the queries per second LoadGen scheduled). The cache stays warm
    from one run to the next. Returns every run and the highest rate that passed (None if none)."""
    qsl = lg.ConstructQSL(library.count, library.count, library.load, library.unload)
    probes: list[dict[str, Any]] = []
    best = failed = None
    qps = float(job["search_start_qps"])
    floor = float(job.get("search_floor_qps") or 0.0)
    try:
        for k in range(int(job["search_probes"])):
            probe = server_probe(job, lg, qsl, Path(job["out_dir"]) / f"probe_{k}", qps,
                                 FastSut(lg, model, library, 0, tables))
            probes.append(probe)
            if probe["passed"]:
                best = qps
                qps = qps * 2 if failed is None else (qps + failed) / 2
            else:
                failed = qps
                if best is None and qps <= floor:
                    break  # nothing lower: the caller runs at the floor and says so
                qps = max(qps / 2, floor) if best is None else (best + qps) / 2
    finally:
        lg.DestroyQSL(qsl)
    return {"probes": probes, "best_qps": best}


def server_probe(job: dict[str, Any], lg: Any, qsl: Any, out_dir: Path, qps: float, sut: FastSut) -> dict[str, Any]:
    """One run of the Server target search at ``qps``, its logs in ``out_dir``: its rate, p99 and
    p99.9, and whether it passed."""
    bound_ns = int(job["search_bound_ns"])
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = qps
    settings.server_target_latency_ns = bound_ns
    settings.min_duration_ms = int(job["search_ms"])
    settings.min_query_count = int(job["search_queries"])
    out_dir.mkdir(parents=True, exist_ok=True)
    log = log_settings(lg, out_dir)
    with sut as handle:
        lg.StartTestWithLogSettings(handle, qsl, settings, log)
    if sut.error is not None:
        raise HarnessError(f"the model failed during the Server target search: {type(sut.error).__name__}: "
                           f"{sut.error}", ErrorCategory.RUN_FAILED)
    summary = parse_summary(out_dir / mlperf.SUMMARY, Scenario.SERVER)
    kept_up = summary.scheduled_per_s is None or summary.samples_per_s >= 0.95 * summary.scheduled_per_s
    # the p99.9 (of a few hundred queries, about the slowest) within the bound too: a
    # long run's early stopping fails on a handful of queries over it
    passed = kept_up and summary.p99_latency_ms * 1e6 <= float(job["search_margin"]) * bound_ns \
        and summary.p999_latency_ms * 1e6 <= bound_ns
    return {"qps": qps, "p99_ms": summary.p99_latency_ms, "p999_ms": summary.p999_latency_ms,
            "samples_per_s": summary.samples_per_s, "passed": passed}


def main(argv: list[str]) -> int:
    """Run the job of ``argv[0]`` and write its result (or its error); the exit status."""
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text())
    out = Path(job["result"])
    try:
        result = run(job)
    except HarnessError as err:
        result = {"error": err.message, "category": err.category.value}
    except OSError as err:  # the machine's: a full disk, a folder that cannot be written, an I/O error
        fault = io_fault(err, job.get("out_dir"), f"running LoadGen {job['scenario']} {job['mode']}", AGAIN)
        result = {"error": fault.message, "category": fault.category.value}
    except Exception as err:  # noqa: BLE001 - reported by the parent as one line
        result = {"error": f"{type(err).__name__}: {err}", "category": "run_failed"}
    try:
        write_atomic(out, json.dumps(result))
    except HarnessError as err:  # the result cannot be written either: said on stderr, exit 5
        print(f"{WORKER_IO_FAULT}{result.get('error', err.message)}", file=sys.stderr, flush=True)
        return err.exit_code
    return 1 if "error" in result else 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
