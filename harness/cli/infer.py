"""``harness infer``: a benchmark's trained model served from memory and from the SSD tier
(with and without an added per-read latency) as MLPerf Inference runs it: LoadGen with the
official ``mlperf.conf`` and each system's ``user.conf``, Offline and Server, a performance
and an accuracy run each, in the results layout of a submission; then the Software Defined
Memory table (storage reads and bytes per query, cache hit rates, p50/p99/p99.9 latency,
resident memory)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli.infer_dlrmv3 import (
    DLRM_V2,
    DLRM_V2_SPEC,
    DLRM_V3,
    DLRMV3_CACHE_FRACTION,
    DLRMV3_QUEUE_DEPTH,
    infer_dlrmv3,
)
from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.profiles import format_bytes
from harness.inference.config import (
    DEFAULT_PIN_FRACTION,
    DEFAULT_RESULTS,
    DEFAULT_STORAGE_LATENCY_US,
    DEFAULT_STORAGE_QUEUE_DEPTH,
    VARIANT_KINDS,
    InferConfig,
    Scenario,
)
from harness.inference.results import InferReport, LoadgenRun, SsdReads
from harness.process import interrupt_category, interrupt_reason
from harness.reference.planner.types import CachePolicy, RowReader
from harness.rules.precision import Precision

DEFAULT_BENCHMARK = "dlrm_synthetic"
DEFAULT_CACHE_FRACTION = 0.2
SCENARIOS = {"offline": (Scenario.OFFLINE,), "server": (Scenario.SERVER,), "both": (Scenario.OFFLINE, Scenario.SERVER)}


@click.command()
@click.option("--benchmark", "-b", default=DEFAULT_BENCHMARK, show_default=True,
              help="What to serve: dlrm-v3 (MLPerf Inference v6: the HSTU ranker, a twin trained here), dlrm-v2 (up to "
                   "v5.1: the dlrm_synthetic spec), or a DLRM benchmark spec's name.")
@click.option("--scenario", type=click.Choice(list(SCENARIOS)), default="both", show_default=True,
              help="LoadGen scenario(s) to run, each for every variant (a performance and an accuracy run).")
@click.option("--quick", is_flag=True,
              help="Short LoadGen runs instead of mlperf.conf's minimum duration and query count: "
                   "every output says 'not a valid MLPerf result'; VALID (and so the exit status) is LoadGen's "
                   "verdict on the short runs.")
@click.option("--results", "results", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_RESULTS,
              show_default=True, help="Results tree: <DIR>/<system>/<model>/<scenario>/{performance/run_1,accuracy}.")
@click.option("--storage-latency-us", type=click.FloatRange(0.0), default=DEFAULT_STORAGE_LATENCY_US,
              show_default=True,
              help="Added latency per storage read of the third variant (ssd-<L>us); about 100 for NAND flash, "
                   "10 for 3D XPoint; 0: no third variant.")
@click.option("--storage-queue-depth", type=click.IntRange(min=1), default=None,
              help="Storage reads in flight at once (one io_uring submission per lookup call, or threads issuing "
                   "pread where the compiled reader is missing); reads in flight together wait the added latency "
                   f"together. 1: one read after another [default: {DEFAULT_STORAGE_QUEUE_DEPTH}; dlrm-v3 "
                   f"{DLRMV3_QUEUE_DEPTH}].")
@click.option("--cache-fraction", type=click.FloatRange(0.0, 1.0, min_open=True), default=None,
              help=f"Rows of the SSD variants' DRAM cache, as a fraction of all table rows [default: "
                   f"{DEFAULT_CACHE_FRACTION}; dlrm-v3 {DLRMV3_CACHE_FRACTION}].")
@click.option("--cache-policy", type=click.Choice([p.value for p in CachePolicy]), default="lru", show_default=True,
              help="The cache's eviction policy.")
@click.option("--offline-qps", type=click.FloatRange(0.0, min_open=True), default=None,
              help="Offline target QPS (users per second) in every variant's user.conf [default: 1.25 x each "
                   "variant's calibrated rate, its fastest model call].")
@click.option("--server-qps", type=click.FloatRange(0.0, min_open=True), default=None,
              help="Server target QPS (one-user queries per second) in every variant's user.conf [default: 0.6 x "
                   "the highest rate a short search over LoadGen runs of each variant passed].")
@click.option("--user-conf", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A user.conf for every variant, instead of the generated ones.")
@click.option("--variant", "variant_kinds", type=click.Choice(list(VARIANT_KINDS)), multiple=True,
              help="Run only these variants (repeat the option) [default: all].")
@click.option("--warm-cache/--cold-cache", default=True, show_default=True,
              help="Start the SSD variants' caches with the rows the training data looks up most (as a deployment "
                   "loads its hot rows, the hottest pinned), or empty with nothing pinned.")
@click.option("--pin-fraction", type=click.FloatRange(0.0, 1.0), default=DEFAULT_PIN_FRACTION, show_default=True,
              help="Of a warm SSD cache, the share that holds the hottest rows for good (never evicted); the rest "
                   "follows --cache-policy (at 1, the default, the cache is static: nothing enters or leaves it).")
@click.option("--coalesce/--no-coalesce", default=True, show_default=True,
              help="A row missing in several lookup calls in flight at once is read once and shared, or read by "
                   "each.")
@click.option("--high-accuracy", is_flag=True, help="Check the 99.9% accuracy target (dlrm-v2-99.9), not 99%.")
@click.option("--buffered", is_flag=True, help="Read the rows file without O_DIRECT (through the page cache).")
@click.option("--row-reader", type=click.Choice([r.value for r in RowReader]), default=RowReader.AUTO.value,
              show_default=True, help="What reads the rows: auto (the compiled io_uring reader where it loads) "
                                      "or threads (Python threads, pread).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Training seed of the model.")
@click.option("--train-steps", type=click.IntRange(min=1), default=None,
              help="Train this many steps [default: until the target AUC, evaluating at the benchmark's cadence].")
@click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the trained model is kept and reused [default: <--results>/.harness/models/<benchmark>-seed<N>, "
                   "-bf16 or -fp16 appended for those precisions].")
@click.option("--max-batch", type=click.IntRange(min=1), default=16384, show_default=True,
              help="Rows per model call in Offline, about (whole users; Server answers each query, one user, "
                   "on its own).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Torch intra-op threads (training and inference); dlrm-v3 serves as many requests at once as "
                   "the usable cores divided by this.")
@click.option("--precision", type=click.Choice([p.value for p in Precision]), default=Precision.FP32.value,
              show_default=True,
              help="Train the served model in this precision, as harness run --precision does (the dense layers, the "
                   "tables' storage); the model is kept per precision. Serving computes in fp32.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def infer(
    benchmark: str, scenario: str, quick: bool, results: Path, storage_latency_us: float,
    storage_queue_depth: int | None,
    cache_fraction: float | None,
    cache_policy: str, offline_qps: float | None, server_qps: float | None, user_conf: Path | None,
    variant_kinds: tuple[str, ...], warm_cache: bool, pin_fraction: float, coalesce: bool, high_accuracy: bool,
    buffered: bool, row_reader: str, seed: int, train_steps: int | None, model_dir: Path | None,
    max_batch: int, threads: int, precision: str, as_json: bool,
) -> None:
    """Serve a trained model from memory and from the SSD tier as MLPerf Inference runs it.

    Exit status: 0 every LoadGen run VALID and accurate; 1 one was INVALID (or missed the accuracy
    target): one line names them and LoadGen's reason, after the report and the results are written.
    """
    if benchmark == DLRM_V3:  # MLPerf Inference v6's recommendation benchmark: its own pipeline
        infer_dlrmv3(scenarios=SCENARIOS[scenario], quick=quick, results=results, storage_latency_us=storage_latency_us,
                     storage_queue_depth=storage_queue_depth or DLRMV3_QUEUE_DEPTH,
                     cache_fraction=cache_fraction or DLRMV3_CACHE_FRACTION, cache_policy=cache_policy,
                     offline_qps=offline_qps, server_qps=server_qps, variant_kinds=variant_kinds or VARIANT_KINDS,
                     cold_cache=not warm_cache, buffered=buffered, row_reader=row_reader, seed=seed,
                     train_steps=train_steps, model_dir=model_dir, threads=threads, precision=precision,
                     as_json=as_json)
        return
    if benchmark == DLRM_V2:
        benchmark = DLRM_V2_SPEC
    storage_queue_depth = storage_queue_depth or DEFAULT_STORAGE_QUEUE_DEPTH
    cache_fraction = cache_fraction or DEFAULT_CACHE_FRACTION
    config = InferConfig(
        benchmark=benchmark, scenarios=SCENARIOS[scenario], cache_fraction=cache_fraction,
        cache_policy=CachePolicy(cache_policy), storage_latency_us=storage_latency_us,
        storage_queue_depth=storage_queue_depth, quick=quick, results=results,
        offline_qps=offline_qps, server_qps=server_qps, user_conf=user_conf, high_accuracy=high_accuracy,
        direct=not buffered, row_reader=RowReader(row_reader), variant_kinds=variant_kinds or VARIANT_KINDS, seed=seed, train_steps=train_steps, model_dir=model_dir, max_batch=max_batch,
        threads=threads, precision=precision, warm_cache=warm_cache, pin_fraction=pin_fraction, coalesce=coalesce,
    )
    try:  # here, not at the top: the pipeline loads torch, which `harness infer --help` must not
        from harness.inference.pipeline import run_inference
    except ModuleNotFoundError as err:  # as the command group says it when a command's module cannot load
        raise HarnessError(f"harness infer is not available: it needs the module {err.name or str(err)!r}, which is "
                           f"not installed", ErrorCategory.NOT_IMPLEMENTED) from None
    try:
        report = run_inference(config, progress=lambda message: click.echo(message, err=True))
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: the LoadGen worker has been stopped with it
        raise HarnessError(f"{interrupt_reason(err)}: a model already trained is kept and reused by the same "
                           f"command; the results of the LoadGen run it stopped are incomplete",
                           interrupt_category(err)) from None
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1))
    else:
        click.echo(render(report))
    failure = report.failure()
    if failure is not None:  # everything is written and printed: a CI gates on the exit status
        raise HarnessError(failure, ErrorCategory.RUN_FAILED)


def _ms(x: float) -> str:
    return f"{x:.2f}"


def _row(r: LoadgenRun) -> str:
    s, st = r.summary, r.storage
    server = r.scenario is Scenario.SERVER
    lat = [_ms(s.p50_latency_ms), _ms(s.p99_latency_ms), _ms(s.p999_latency_ms)] if server else ["-"] * 3
    reads = "-" if st is None else f"{st.reads_per_sample:.2f}"
    bound = "-" if st is None or st.device_bound_qps is None else f"{st.device_bound_qps:,.0f}"
    nbytes = "-" if st is None else f"{st.bytes_per_sample:,.0f}"
    hit = "-" if st is None or st.hit_rate is None else f"{st.hit_rate:.3f}"
    verdict = "VALID" if s.valid else "INVALID"
    return (f"{r.variant.system:<20} {r.scenario.value:<8} {verdict:<8} {r.target_qps:>10,.0f} {s.samples_per_s:>10,.0f} "
            f"{lat[0]:>8} {lat[1]:>8} {lat[2]:>8} {reads:>8} {bound:>7} {nbytes:>9} {hit:>6} "
            f"{format_bytes(r.resident_table_bytes):>10} {r.accuracy.auc:>8.5f} {'PASS' if r.accuracy.passed else 'FAIL':<4}")


def _admitted(st: SsdReads, cache_rows: int) -> str:
    """What the cache admitted of the run's lookup calls."""
    if st.pinned_rows >= cache_rows:
        return f"the whole cache pinned: {st.bypass_calls:,} of them read rows outside it, nothing admitted"
    slots = "unpinned slots" if st.pinned_rows else "slots"
    return f"{st.bypass_calls:,} larger than the cache's {slots}, which kept their hottest rows"


def render(report: InferReport) -> str:
    """The report as text: the model and settings, the SDM table, per-table hit rates, accuracy."""
    m, c = report.model, report.config
    how = "reused" if m.reused else f"trained in {m.train_s:.1f} s"
    target = "reached" if m.reached_target else "NOT reached"
    lines = []
    if report.label:
        lines += [f"*** {report.label} ***", ""]
    lines += [
        (f"model: {m.benchmark} seed {m.seed}, {m.steps} steps ({m.epochs:.3f} epoch) in {m.precision}, AUC {m.auc:.5f} "
         f"(training target {m.target_auc} {target}); {how}: {m.path}"),
        f"predictions identical (memory vs every ssd variant), bit for bit, on {report.identical_samples} eval rows",
        (f"loadgen {report.loadgen_version}; mlperf.conf {'= LoadGen' if report.mlperf_conf_sha1_matches else '!= LoadGen'}"
         f"'s (sha1 {report.to_dict()['settings']['mlperf_conf_sha1'][:12]}); a sample is a user (100 to 700 "
         f"eval rows, as MLPerf's DLRMv2 reference aggregates them); Offline calls of about {c.max_batch} rows, "
         f"Server: the lookups of the queries that arrived together in one call, a dense call per query; "
         f"{c.threads} torch thread(s)"),
        (f"ssd tier: {report.table_rows} rows, {format_bytes(report.ssd_file_bytes)} file, read {report.storage_mode} "
         f"by {report.reader or 'pread'} at queue depth {c.storage_queue_depth}; "
         f"cache {report.cache_rows} rows ({c.cache_fraction:g}, {c.cache_policy.value}; {report.warm_note}); "
         f"misses of lookup calls in flight together {'coalesced' if c.coalesce else 'not coalesced (--no-coalesce)'}"),
        *([report.device_probe.describe()] if report.device_probe is not None else []),
        (f"accuracy: {c.model_name}, AUC >= {100 * (0.999 if c.high_accuracy else 0.99):g}% of the reference AUC: "
         f"the in-memory model's on the same eval rows, computed directly (on the whole eval split: "
         f"{report.reference_auc:.6f})"),
        "",
        (f"{'SYSTEM':<20} {'SCENARIO':<8} {'RESULT':<8} {'TARGET QPS':>10} {'SAMPLES/S':>10} {'P50 ms':>8} "
         f"{'P99 ms':>8} {'P99.9 ms':>8} {'READS/Q':>8} {'DEV QPS':>7} {'BYTES/Q':>9} {'HIT':>6} {'RESIDENT':>10} "
         f"{'AUC':>8} ACC"),
    ]
    lines += [_row(r) for r in report.results]
    lines += [
        "SAMPLES/S: users per second (LoadGen's samples). READS/Q, BYTES/Q: storage reads (one pread per row) and",
        "  bytes read per query; a Server query is one user, Offline's one query holds every user, so its figures",
        "  are per user. DEV QPS: the users per second the device allows at those reads (the device probe's",
        "  reads/s / READS/Q). HIT: cache hit rate over every id looked up. RESIDENT: the tables' bytes in memory",
        "  (all rows, or the cache). Offline latencies: not shown (its one query's latency is the whole run).",
    ]
    if report.label:
        lines.append(f"RESULT is LoadGen's verdict on the --quick settings: {report.label}")
    ssd = [(r, st) for r in report.results if (st := r.storage) is not None]
    if ssd:
        lines += ["", "cache hit rate per table:"]
        for r, st in ssd:
            rates = " ".join("-" if x is None else f"{x:.2f}" for x in st.table_hit_rates)
            lines.append(f"  {r.variant.system} {r.scenario.value}: {rates}")
        lines += ["", "storage:"]
        for r, st in ssd:
            lat = f", {st.read_us:.1f} us in the reads per read (queue depth {c.storage_queue_depth})"
            probe = report.device_probe
            if probe is not None and probe.reads_per_s > 0 and st.reads:
                lat += (f"; {st.reads_per_s:,.0f} reads/s while reading = {st.reads_per_s / probe.reads_per_s:.2f} "
                        f"of the device probe's {probe.reads_per_s:,.0f}")
            if r.variant.latency_us:
                lat += f" (added {st.added_latency_us:.1f} us: the busy-wait's median, measured at start)"
            same = "= misses" if st.reads == st.misses and st.reads_equal_misses_per_call else "!= misses"
            lines.append(f"  {r.variant.system} {r.scenario.value}: {st.reads:,} reads {same}, {st.coalesced:,} "
                         f"coalesced (missed while another call was reading them: shared, not read again), "
                         f"{format_bytes(st.bytes_read)} over {st.samples:,} users ({st.rows:,} rows) in "
                         f"{st.model_calls:,} lookup calls ({_admitted(st, report.cache_rows)}){lat}")
    lines += ["", "runs (LoadGen test wall time, performance + accuracy):"]
    for r in report.results:
        lines.append(f"  {r.variant.system} {r.scenario.value}: {r.performance_s:.0f} s + {r.accuracy_s:.0f} s; "
                     f"target QPS {r.qps_source}; peak RSS {format_bytes(r.peak_rss_bytes)}; "
                     f"accuracy.txt: {r.accuracy.official_line()}")
        for e in r.loadgen_errors:
            lines.append(f"    LoadGen error: {e}")
    for n in report.notes:
        lines.append(f"note: {n}")
    lines += [
        "",
        f"results: {c.results}/<system>/{c.model_name}/<scenario>/{{performance/run_1,accuracy}}",
        (f"all runs VALID: {'yes' if report.all_valid else 'no'}; accuracy target met by every run: "
         f"{'yes' if report.accuracy_passed else 'NO'}"),
        f"wall time: {report.wall_s:.1f} s",
    ]
    if report.label:
        lines.append(f"*** {report.label} ***")
    return "\n".join(lines)
